"""The saved-memory routes under /v1: each is one operation of memory_server.operations.memories."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse

from memory_server.api.rest.errors import COMMON, documented
from memory_server.api.rest.params import ListMemoriesQuery
from memory_server.api.rest.security import AnyCaller, valid_unicode
from memory_server.api.schemas import ContextPack, Forgotten, Memory, MemoryPage, Remembered, Results
from memory_server.memories.params import (
    ContextParams,
    RecallParams,
    ReferenceParams,
    RememberParams,
    SearchParams,
    UpdateParams,
)
from memory_server.operations.memories import MemoryOperations

PREFIX = "/v1"
Reference = Annotated[str, Path(description="The memory's reference (as `remember` returned it).")]


def memory_routes(ops: MemoryOperations) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=["saved memories"], dependencies=[Depends(valid_unicode)])
    _add_memory_routes(router, ops)
    _add_retrieval_routes(router, ops)
    return router


def _add_memory_routes(router: APIRouter, ops: MemoryOperations) -> None:
    """The memories as resources: create, list, read, change, delete."""

    @router.post(
        "/memories",
        status_code=201,
        response_model=Remembered,
        responses={
            200: {
                "model": Remembered,
                "description": "Already remembered: the same content "
                "with the same type, location, project, team and bucket (created=false).",
            },
            **documented(*COMMON, 404),
        },  # 404: the memory it supersedes is unknown
        summary="Remember a memory (memory:write)",
    )
    async def remember(body: RememberParams, principal: AnyCaller) -> JSONResponse:
        """Persist a fact, decision or note: 201 with `created: true`, or 200 with the existing reference and
        `created: false` when identical content is already filed identically. Same as the `remember` tool."""
        result = await ops.remember(principal, body)
        return JSONResponse(
            result,
            status_code=201 if result["created"] else 200,
            headers={"Location": f"{PREFIX}/memories/{result['reference']}"},
        )

    @router.get(
        "/memories",
        response_model=MemoryPage,
        responses=documented(*COMMON),
        summary="List memories, newest first (memory:read)",
    )
    async def list_memories(principal: AnyCaller, query: Annotated[ListMemoriesQuery, Query()]) -> JSONResponse:
        """Page through the memories visible to the caller (a bounded token sees only its bounds), newest
        first. Follow `next_cursor` until it is null: every memory present throughout is listed once."""
        return JSONResponse(await ops.list(principal, query))

    @router.get(
        "/memories/{reference}",
        response_model=Memory,
        responses=documented(*COMMON, 404),
        summary="Read one memory (memory:read)",
    )
    async def get_memory(reference: Reference, principal: AnyCaller) -> JSONResponse:
        """Every attribute of one memory visible to the caller; 404 if there is none."""
        return JSONResponse(await ops.get(principal, ReferenceParams(reference=reference)))

    @router.patch(
        "/memories/{reference}",
        response_model=Memory,
        responses=documented(*COMMON, 404),
        summary="Change a memory (memory:write)",
    )
    async def patch_memory(reference: Reference, body: UpdateParams, principal: AnyCaller) -> JSONResponse:
        """Change some attributes; only the fields present in the body change (null resets a field to its
        `remember` default; content and occurred_at cannot be null). Validated as `remember` validates; a
        bounded token cannot move a memory out of its bounds (403). Changing content or occurred_at
        re-embeds the memory. Making it identical (content, type, location, project, team, bucket) to
        another memory is rejected with invalid_parameters. Returns the updated memory."""
        return JSONResponse(await ops.update(principal, reference, body))

    @router.delete(
        "/memories/{reference}",
        response_model=Forgotten,
        responses=documented(*COMMON, 404),
        summary="Forget a memory (memory:write)",
    )
    async def forget(reference: Reference, principal: AnyCaller) -> JSONResponse:
        """Delete a memory from storage and the vector index; 404 for an unknown (or invisible) reference."""
        return JSONResponse(await ops.forget(principal, ReferenceParams(reference=reference)))


def _add_retrieval_routes(router: APIRouter, ops: MemoryOperations) -> None:
    """recall, search_memory and recall_context."""

    @router.post("/recall", response_model=Results, responses=documented(*COMMON), summary="Recall (memory:read)")
    async def recall(body: RecallParams, principal: AnyCaller) -> JSONResponse:
        """Best-effort lookup: the most relevant visible memories, best first; weak matches are allowed, and
        the result is empty only if nothing visible exists. Same as the `recall` tool."""
        return JSONResponse(ops.answer(await ops.recall(principal, body)))

    @router.post(
        "/search", response_model=Results, responses=documented(*COMMON), summary="Strict search (memory:read)"
    )
    async def search(body: SearchParams, principal: AnyCaller) -> JSONResponse:
        """Only memories matching every filter exactly and scoring at or above `min_score`; nothing rather
        than a weak match. Same as the `search_memory` tool."""
        return JSONResponse(ops.answer(await ops.search(principal, body)))

    @router.post(
        "/context",
        response_model=ContextPack,
        responses=documented(*COMMON),
        summary="A bounded context pack (memory:read)",
    )
    async def recall_context(body: ContextParams, principal: AnyCaller) -> JSONResponse:
        """Ranked as recall, packed in rank order under max_items and max_tokens (used_tokens <= max_tokens
        always holds for context_text). The structured content of the `recall_context` tool."""
        return JSONResponse(await ops.context(principal, body))
