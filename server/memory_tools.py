"""The saved-memory tools: remember, recall, search_memory, recall_context, forget.

Two tool surfaces: `public` exposes the parameters the product documents list; `full` (default) adds the
bucket/project/team/type/tags filters to recall and recall_context.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable

from fastmcp import FastMCP
from pydantic import BaseModel, Field

from server import context
from server.auth import Principal
from server.memories import check_query, check_tags, check_word
from server.memory_service import Filters, MemoryService
from server.logs import check_bound
from server.settings import Settings
from server.tools import ok_result

Query = Annotated[str, Field(description="Natural-language question or topic.")]
Word = Annotated[str | None, Field(description="Exact value to match (1-64 chars of [A-Za-z0-9_.:-]).")]
Tags = Annotated[list[str] | None, Field(description="Only memories carrying every one of these tags.")]
Bucket = Annotated[str | None, Field(description="Only memories in this bucket (default: all buckets).")]
RecallLimit = Annotated[int, Field(ge=1, le=50, strict=True, description="How many (default 5).")]
MaxItems = Annotated[int, Field(ge=1, le=50, strict=True, description="At most this many memories (1-50, default 8).")]
MaxTokens = Annotated[
    int, Field(ge=1, le=12000, strict=True, description="Token budget of the context body (1-12000, default 1500).")
]


class MemoryFields(BaseModel):
    """The attributes of a saved memory, as every answer that returns one carries them."""

    reference: str
    type: str
    location: str | None
    content: str
    project: str | None
    team: str | None
    bucket: str
    tags: list[str]
    metadata: dict[str, Any]
    provenance: dict[str, Any]
    occurred_at: str
    created_at: str


class Hit(MemoryFields):
    score: float


class Results(BaseModel):
    results: list[Hit]


class Remembered(BaseModel):
    reference: str
    created: bool


class Forgotten(BaseModel):
    reference: str
    forgotten: bool


class Budget(BaseModel):
    max_items: int
    max_tokens: int
    used_items: int
    used_tokens: int
    dropped: int
    shortened: int


class ContextItem(BaseModel):
    reference: str
    type: str
    location: str | None
    score: float
    occurred_at: str
    content: str
    shortened: bool


class ContextPack(BaseModel):
    version: str
    retrieval_plan: dict[str, Any]
    budget: Budget
    items: list[ContextItem]
    context_text: str


def render_hits(hits: list[dict[str, Any]]) -> str:
    if not hits:
        return "No matching memories."
    blocks = []
    for n, hit in enumerate(hits, start=1):
        blocks.append(
            f"[{n}] Reference: {hit['reference']} | Type: {hit['type']} | Location: {hit['location'] or '-'}"
            f" | Score: {hit['score']:.4f}\n{hit['content']}\n"
            f"Attribution: project={hit['project'] or '-'} team={hit['team'] or '-'} bucket={hit['bucket']}"
            f" occurred_at={hit['occurred_at']}"
        )
    return "\n\n".join(blocks)


def filters(*, project: object = None, team: object = None, bucket: object = None, type: object = None,
            tags: object = None) -> Filters:
    return Filters(
        project=check_word("project", project),
        team=check_word("team", team),
        bucket=check_word("bucket", bucket),
        type=check_word("type", type),
        tags=check_tags(tags),
    )


def register_memory_tools(
    mcp: FastMCP, memory: Callable[[], MemoryService], current: Callable[[], Principal], settings: Settings,
    tokens: Callable[[], context.Tokens],
) -> None:
    full = settings.tool_profile == "full"

    @mcp.tool(annotations={"destructiveHint": False, "idempotentHint": True})
    async def remember(
        content: Annotated[str, Field(description="The fact, decision or note to keep (1 char - 32 KiB).")],
        type: Annotated[str | None, Field(description="fact, decision, note (default), preference, event, "
                                          "or another short word.")] = None,
        location: Annotated[str | None, Field(description="Path-like filing place, e.g. "
                                              "projects/memory-os/decisions.")] = None,
        project: Word = None,
        team: Word = None,
        bucket: Annotated[str | None, Field(description="Bucket (default 'default').")] = None,
        tags: Annotated[list[str] | None, Field(description="Short labels.")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="Any JSON object.")] = None,
        provenance: Annotated[dict[str, Any] | None, Field(description="Where it came from: source, agent, "
                                                           "conversation_id, seq...")] = None,
        occurred_at: Annotated[str | None, Field(description="RFC3339: when the remembered thing "
                                                 "happened (default now).")] = None,
    ) -> Remembered:
        """Persist a durable fact or decision. Remembering identical content with identical filing again
        returns the existing reference with created=false."""
        principal = current()
        service = memory()
        new = service.validate(content=content, type=type, location=location, project=project, team=team,
                               bucket=bucket, tags=tags, metadata=metadata, provenance=provenance,
                               occurred_at=occurred_at)
        return ok_result(await service.remember(principal, new))  # type: ignore[return-value]

    async def _recall(query: Any, limit: Any, found: Filters) -> Results:
        principal = current()
        service = memory()
        query = check_query(query)
        limit = check_bound("limit", limit, 1, 50)
        hits = await service.recall(principal, query, limit, found)
        return ok_result({"results": hits}, render_hits(hits))  # type: ignore[return-value]

    recall_doc = ("Best-effort lookup: the few most relevant saved memories, best first. Weak matches are "
                  "allowed; an empty result means nothing visible exists. Use search_memory for strict "
                  "matching, recall_context for a prompt-sized pack.")

    if full:
        @mcp.tool(name="recall", description=recall_doc, annotations={"readOnlyHint": True})
        async def recall_full(query: Query, limit: RecallLimit = 5, bucket: Bucket = None, project: Word = None,
                              team: Word = None, type: Word = None, tags: Tags = None) -> Results:
            return await _recall(query, limit, filters(project=project, team=team, bucket=bucket, type=type,
                                                       tags=tags))
    else:
        @mcp.tool(name="recall", description=recall_doc, annotations={"readOnlyHint": True})
        async def recall_public(query: Query, limit: RecallLimit = 5) -> Results:
            return await _recall(query, limit, Filters())

    @mcp.tool(annotations={"readOnlyHint": True})
    async def search_memory(
        query: Query,
        limit: Annotated[int, Field(ge=1, le=100, strict=True, description="How many at most (default 10).")] = 10,
        project: Word = None,
        team: Word = None,
        bucket: Bucket = None,
        type: Word = None,
        tags: Tags = None,
        min_score: Annotated[float | None, Field(ge=0.0, le=1.0, description="Cosine similarity threshold "
                                                 "(default from the server's calibration).")] = None,
    ) -> Results:
        """Strict targeted search: only memories matching every filter exactly and scoring at or above the
        threshold. Returns nothing rather than a weak match."""
        principal = current()
        service = memory()
        query = check_query(query)
        limit = check_bound("limit", limit, 1, 100)
        threshold = settings.search_min_score if min_score is None else float(min_score)
        found = filters(project=project, team=team, bucket=bucket, type=type, tags=tags)
        hits = await service.search(principal, query, limit, found, threshold)
        return ok_result({"results": hits}, render_hits(hits))  # type: ignore[return-value]

    async def _context(query: Any, max_items: Any, max_tokens: Any, found: Filters) -> ContextPack:
        principal = current()
        service = memory()
        query = check_query(query)
        max_items = check_bound("max_items", max_items, 1, 50)
        max_tokens = check_bound("max_tokens", max_tokens, 1, 12000)
        hits = await service.recall(principal, query, max_items, found)
        counter = tokens()
        packed = context.pack(hits, max_items=max_items, max_tokens=max_tokens, tokens=counter)
        plan = {"ranking": "recall", "candidates": len(hits), "filters": _filter_dict(found)}
        pack_json = context.structured(packed, tokens=counter, plan=plan)
        return ok_result(pack_json, context.render(pack_json, header=settings.context_header))  # type: ignore

    context_doc = ("A bounded multi-memory context pack for a prompt: ranked as recall, packed under "
                   "max_items and max_tokens; reports used_items and used_tokens.")

    if full:
        @mcp.tool(name="recall_context", description=context_doc, annotations={"readOnlyHint": True})
        async def recall_context_full(query: Query, max_items: MaxItems = 8, max_tokens: MaxTokens = 1500,
                                      bucket: Bucket = None, project: Word = None, team: Word = None,
                                      type: Word = None, tags: Tags = None) -> ContextPack:
            return await _context(query, max_items, max_tokens,
                                  filters(project=project, team=team, bucket=bucket, type=type, tags=tags))
    else:
        @mcp.tool(name="recall_context", description=context_doc, annotations={"readOnlyHint": True})
        async def recall_context_public(query: Query, max_items: MaxItems = 8,
                                        max_tokens: MaxTokens = 1500) -> ContextPack:
            return await _context(query, max_items, max_tokens, Filters())

    @mcp.tool(annotations={"destructiveHint": True, "idempotentHint": False})
    async def forget(reference: Annotated[str, Field(description="The memory's reference.")]) -> Forgotten:
        """Delete a saved memory from storage and the index."""
        principal = current()
        return ok_result(await memory().forget(principal, reference))  # type: ignore[return-value]


def _filter_dict(found: Filters) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("project", "team", "bucket", "type"):
        value = getattr(found, name)
        if value is not None:
            out[name] = value
    if found.tags:
        out["tags"] = list(found.tags)
    return out
