"""The conversation-log routes under /v1: each is one operation of memory_server.operations.logs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Header, Path, Query
from fastapi.responses import JSONResponse

from memory_server.api.rest.errors import COMMON, documented
from memory_server.api.rest.params import AppendBody, ItemsQuery, bounds
from memory_server.api.rest.security import BasicCaller, valid_unicode
from memory_server.api.schemas import AppendResult, ConversationDeleted, ConversationsResult, ItemsResult
from memory_server.errors import InvalidParameters
from memory_server.logs.params import (
    REST_REPLAY_LIMIT,
    AppendParams,
    DeleteConversationParams,
    IdempotencyKey,
    ListConversationsParams,
    ReplayParams,
    TailParams,
)
from memory_server.logs.validation import CONVERSATION_ID, CONVERSATION_ID_RULE, MAX_ITEMS
from memory_server.operations.logs import LogOperations, items_answer

PREFIX = "/v1"
ConversationId = Annotated[
    str,
    Path(
        pattern=CONVERSATION_ID.pattern,
        description=f"{CONVERSATION_ID_RULE}, minted by the client. An unknown one reads as empty.",
    ),
]


class ListQuery(ListConversationsParams):
    model_config = ItemsQuery.model_config  # read from a query string


def log_routes(ops: LogOperations) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=["conversation logs"], dependencies=[Depends(valid_unicode)])

    @router.post(
        "/conversations/{conversation_id}/items",
        status_code=201,
        response_model=AppendResult,
        responses={
            200: {
                "model": AppendResult,
                "description": "A retry with a known idempotency key: "
                "the original acknowledgement, duplicate=true, nothing appended.",
            },
            **documented(*COMMON, 404),
        },
        summary="Append to a conversation log (Basic only)",
        description=f"Append one all-or-nothing batch of at least one and at most {MAX_ITEMS} JSON objects (each "
        "at most {max_payload} serialized, the batch at most {max_batch}; larger is payload_too_large); the "
        "acknowledgement means durable. 201 when appended; 200 with duplicate=true for a retry with an idempotency "
        "key already used on this conversation (the key in the body or the `Idempotency-Key` header; with both, "
        "they must be equal). Same as the `append_memory` tool.",
    )
    async def append(
        conversation_id: ConversationId,
        principal: BasicCaller,
        body: Annotated[AppendBody, Body()],
        idempotency_header: Annotated[
            IdempotencyKey,
            Header(
                alias="Idempotency-Key",
                description=("Same as the body's idempotency_key (if both are given they must be equal)."),
            ),
        ] = None,
    ) -> JSONResponse:
        key = body.idempotency_key
        if idempotency_header is not None:
            if key is not None and key != idempotency_header:
                raise InvalidParameters("the Idempotency-Key header and the body's idempotency_key differ")
            key = idempotency_header
        params = AppendParams(
            conversation_id=conversation_id, items=body.items, idempotency_key=key, index=body.index, bucket=body.bucket
        )
        ack = await ops.append(principal, params)
        return JSONResponse(dict(ack), status_code=200 if ack["duplicate"] else 201)

    @router.get(
        "/conversations/{conversation_id}/items",
        response_model=ItemsResult,
        responses=documented(*COMMON, 404),
        summary="Read a conversation log (Basic only)",
        description="Two modes. Replay (like `replay_memory`) when `offset` or `limit` is given: up to "
        f"{bounds(ReplayParams, 'limit', REST_REPLAY_LIMIT)} items from {bounds(ReplayParams, 'offset')}; page on "
        f"with offset = last seq + 1 until a short page. Tail (like `recall_memory`) otherwise: the last "
        f"{bounds(TailParams, 'count')} items. `count` together with `offset` or `limit` is invalid_parameters. "
        "Items are ascending by seq; an unknown conversation reads as empty.",
    )
    async def read_items(
        conversation_id: ConversationId, principal: BasicCaller, query: Annotated[ItemsQuery, Query()]
    ) -> JSONResponse:
        if query.count is not None and (query.offset is not None or query.limit is not None):
            raise InvalidParameters("give either count (tail) or offset/limit (replay), not both")
        if query.offset is None and query.limit is None:
            tail = TailParams.model_validate({"conversation_id": conversation_id, "count": query.count})
            return JSONResponse(items_answer(await ops.tail(principal, tail)))
        replay = ReplayParams.model_validate(
            {
                "conversation_id": conversation_id,
                "offset": query.offset,
                "limit": REST_REPLAY_LIMIT if query.limit is None else query.limit,
            }
        )
        return JSONResponse(items_answer(await ops.replay(principal, replay)))

    @router.delete(
        "/conversations/{conversation_id}",
        response_model=ConversationDeleted,
        responses=documented(*COMMON, 404),
        summary="Delete a conversation log (Basic only)",
        description="Remove the conversation for good: its items, its idempotency keys, and the link "
        "of every saved memory whose provenance names it (the memories stay, without "
        "provenance.conversation_id and provenance.seq). It disappears from every read at once; the "
        "answer comes once nothing of it is left. An append to it while it is being deleted waits, "
        "then starts a new log at seq 0. Answers `{conversation_id, deleted: true, item_count, memories_unlinked}` "
        "(memories_unlinked counts the memories it unlinked); 404 not_found if the site has no such conversation.",
    )
    async def delete_conversation(
        conversation_id: Annotated[str, Path(pattern=CONVERSATION_ID.pattern, description=f"{CONVERSATION_ID_RULE}.")],
        principal: BasicCaller,
    ) -> JSONResponse:
        params = DeleteConversationParams(conversation_id=conversation_id)
        return JSONResponse(dict(await ops.delete_conversation(principal, params)))

    @router.get(
        "/conversations",
        response_model=ConversationsResult,
        responses=documented(*COMMON),
        summary="List conversations (Basic only)",
        description="The site's conversations with their item counts, newest activity (the last append or "
        f"import) first, {bounds(ListQuery, 'limit')} per page. Follow `next_cursor` until it is "
        "null; a cursor this server did not issue is invalid_parameters. Same as the `list_conversations` tool.",
    )
    async def list_conversations(principal: BasicCaller, query: Annotated[ListQuery, Query()]) -> JSONResponse:
        return JSONResponse(dict(await ops.conversations(principal, query)))

    return router
