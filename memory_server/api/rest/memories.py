"""The saved-memory routes under /v1: each is one operation of memory_server.operations.memories."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse

from memory_server.api.rest.errors import COMMON, documented
from memory_server.api.rest.params import ListMemoriesQuery, bounds
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
from memory_server.memories.validation import MAX_TAGS
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
        description="Save a fact, decision or note; the body is the parameters of the `remember` tool, full set "
        f"(`content` not blank and at most {{max_content}} of UTF-8, larger is payload_too_large; at most {MAX_TAGS} "
        "`tags`). 201 with `created: true` and a `Location` header; 200 with the existing reference and `created: "
        "false` when the site already has this filing (content, type, location, project, team and bucket), so a "
        "retry never duplicates. A bounded token writes only inside its bounds. `supersedes` names the memory this "
        "one replaces: not_found if unknown, forbidden if outside the caller's bounds.",
    )
    async def remember(body: RememberParams, principal: AnyCaller) -> JSONResponse:
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
        description="Page through the memories visible to the caller (a bounded token sees only its bounds), "
        "newest first by when they were saved (`order=created`, the default) or by when they happened "
        f"(`order=occurred`), {bounds(ListMemoriesQuery, 'limit')} per page. The filters are exact; `tag` is "
        "repeatable and every one must be carried. Follow `next_cursor` until it is null: every memory present "
        "throughout is listed once. A cursor of one order does not continue another.",
    )
    async def list_memories(principal: AnyCaller, query: Annotated[ListMemoriesQuery, Query()]) -> JSONResponse:
        return JSONResponse(await ops.list(principal, query))

    @router.get(
        "/memories/{reference}",
        response_model=Memory,
        responses=documented(*COMMON, 404),
        summary="Read one memory (memory:read)",
        description="Every attribute of one memory: the fields of a hit without `score`, with `updated_at` and "
        "the lifecycle fields (supersedes, superseded_by, valid_to, expires_at). 404 not_found for a reference the "
        "caller cannot see (unknown, outside its bounds, expired).",
    )
    async def get_memory(reference: Reference, principal: AnyCaller) -> JSONResponse:
        return JSONResponse(await ops.get(principal, ReferenceParams(reference=reference)))

    @router.patch(
        "/memories/{reference}",
        response_model=Memory,
        responses=documented(*COMMON, 404),
        summary="Change a memory (memory:write)",
        description="Change some attributes: only the fields present in the body change; null resets a field to "
        "what `remember` gives it when left out (content and occurred_at cannot be null). The result is validated "
        "as `remember` validates it; a bounded token cannot move a memory out of its bounds (forbidden), and a "
        "change that would give the memory the filing of another (content, type, location, project, team, bucket) "
        "is invalid_parameters. Changing content or occurred_at embeds the memory again; `supersedes: null` makes "
        "the memory it replaced current again; a change that changes nothing writes nothing (`updated_at` stays). "
        "Returns the changed memory.",
    )
    async def patch_memory(reference: Reference, body: UpdateParams, principal: AnyCaller) -> JSONResponse:
        return JSONResponse(await ops.update(principal, reference, body))

    @router.delete(
        "/memories/{reference}",
        response_model=Forgotten,
        responses=documented(*COMMON, 404),
        summary="Forget a memory (memory:write)",
        description="Delete a memory for good, from storage and the vector index; a supersede chain it belonged to "
        "is joined around it. 404 not_found for a reference the caller cannot see (unknown, outside its bounds, "
        "expired), so forgetting twice is not_found the second time. Same as the `forget` tool.",
    )
    async def forget(reference: Reference, principal: AnyCaller) -> JSONResponse:
        return JSONResponse(await ops.forget(principal, ReferenceParams(reference=reference)))


def _add_retrieval_routes(router: APIRouter, ops: MemoryOperations) -> None:
    """recall, search_memory and recall_context."""

    @router.post(
        "/recall",
        response_model=Results,
        responses=documented(*COMMON),
        summary="Recall memories, best effort (memory:read)",
        description="The visible memories most relevant to `query`, best first, up to "
        f"{bounds(RecallParams, 'limit')}, ranked by meaning and words together. Weak matches are allowed: the "
        "answer is empty only when the caller can see no memory within its filters. A superseded memory ranks "
        "below the newest memory of its chain unless `include_superseded`. Same as the `recall` tool.",
    )
    async def recall(body: RecallParams, principal: AnyCaller) -> JSONResponse:
        return JSONResponse(ops.answer(await ops.recall(principal, body)))

    @router.post(
        "/search",
        response_model=Results,
        responses=documented(*COMMON),
        summary="Search memories strictly (memory:read)",
        description="Only memories matching every filter given exactly and whose score, the cosine similarity of "
        f"query and memory, is at least {bounds(SearchParams, 'min_score', '{min_score}')}; up to "
        f"{bounds(SearchParams, 'limit')} hits, best first. Nothing rather than a weak match: an empty answer is "
        "an answer, not a failure. Superseded memories are left out unless `include_superseded`. Same as the "
        "`search_memory` tool.",
    )
    async def search(body: SearchParams, principal: AnyCaller) -> JSONResponse:
        return JSONResponse(ops.answer(await ops.search(principal, body)))

    @router.post(
        "/context",
        response_model=ContextPack,
        responses=documented(*COMMON),
        summary="Pack memories into a bounded context (memory:read)",
        description="Memories ranked as `recall` ranks them (superseded ones left out unless `include_superseded`), "
        f"the first {bounds(ContextParams, 'max_items')} packed in rank order while the body stays within "
        f"{bounds(ContextParams, 'max_tokens')}: the first memory that would cross the budget is shortened or "
        "dropped, and every one after it dropped. `budget.used_tokens`, the token count of `context_text`, never "
        "exceeds max_tokens. The structured content of the `recall_context` tool.",
    )
    async def recall_context(body: ContextParams, principal: AnyCaller) -> JSONResponse:
        return JSONResponse(await ops.context(principal, body))
