"""The saved-memory tools: remember, recall, search_memory, recall_context, forget.

Two tool surfaces: `public` exposes the parameters the product documents list, and `recall_context`
answers with text only (no structured content, no output schema), as its document says; `full` (default)
adds the bucket/project/team/type/tags filters to recall and recall_context, and recall_context's
structured pack.
"""

# No `from __future__ import annotations`: parameter descriptions are built from the settings when the
# tools are registered, so the annotations must be evaluated then, where those values are in scope.

from typing import Annotated, Any, Callable

from fastmcp import FastMCP
from pydantic import BaseModel, Field

from server.ranking import context
from server.auth.core import Principal
from server.api.mcp.log_tools import size_text
from server.memories.rows import MAX_TAGS, check_query, check_tags, check_word
from server.memories.service import Filters, MemoryService
from server.logs.store import check_bound
from server.settings import Settings
from server.api.mcp.tools import NULL_IS_DEFAULT, WHOLE_NUMBER, ok_result, text_result, tool

WORD_RULE = "1-64 characters of [A-Za-z0-9_.:-], starting with a letter or digit"
Query = Annotated[str, Field(strict=True, description="Natural-language question or topic (not empty or "
                             "whitespace only; at most 4096 characters).")]
RecallQuery = Annotated[str, Field(strict=True, description="Natural-language question or topic to recall "
                                   "(not empty or whitespace only; at most 4096 characters).")]
Project = Annotated[str | None, Field(strict=True, description=f"Only memories of exactly this project ({WORD_RULE}).")]
Team = Annotated[str | None, Field(strict=True, description=f"Only memories of exactly this team ({WORD_RULE}).")]
Kind = Annotated[str | None, Field(strict=True, description=f"Only memories of exactly this type, e.g. decision "
                                   f"({WORD_RULE}).")]
Tags = Annotated[list[str] | None, Field(strict=True, description="Only memories carrying every one of these "
                                         "tags: a JSON array of strings, e.g. [\"docs\"].")]
Bucket = Annotated[str | None, Field(strict=True, description="Only memories in this bucket; leave it out to "
                                     f"search every bucket ({WORD_RULE}).")]
RecallLimit = Annotated[int, Field(ge=1, le=50, strict=True, description="Small result count: 1-50, default 5; "
                                   "keep it small for a quick lookup."), WHOLE_NUMBER, NULL_IS_DEFAULT]
MaxItems = Annotated[int, Field(ge=1, le=50, strict=True, description="Maximum number of memories in the pack: "
                                "1-50, default 8."), WHOLE_NUMBER, NULL_IS_DEFAULT]
MaxTokens = Annotated[int, Field(ge=1, le=12000, strict=True, description="Maximum length of the rendered "
                                 "context body in tokens (the bundled model's tokenizer): 1-12000, default 1500."),
                      WHOLE_NUMBER, NULL_IS_DEFAULT]

# Shared by the descriptions of the read tools.
HIT_SHAPE = ("Each hit carries its reference (an opaque id such as mem_3f2a..., the one remember returned; "
             "forget takes it), score, type, location, content and attribution (project, team, bucket, "
             "tags, metadata, provenance, occurred_at).")
SCORES = "Scores rank the hits of one answer; never compare them across answers."
READ_SCOPE = ("Needs memory:read (a token without it gets forbidden); a token bounded to teams, projects or "
              "buckets only ever sees memories inside them.")
RETRY_RULE = ("Errors other than unavailable (invalid_parameters, forbidden, not_found, payload_too_large) "
              "are permanent: fix the call rather than retry it; unavailable is safe to retry.")


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
    min_score = settings.search_min_score
    content_limit = size_text(settings.max_content_bytes)

    @tool(mcp, annotations={"destructiveHint": False, "idempotentHint": True}, description=(
        "Save one fact, decision, note, preference or event worth finding later by meaning: it is embedded "
        "and found again with recall, search_memory and recall_context. Not for the turn-by-turn record of "
        "a conversation: that is append_memory, whose log items are never searched. File it with type, "
        "location, project, team, bucket and tags so strict searches can find it. Returns {reference, "
        "created}: the reference is an opaque id (mem_...) that hits carry and forget takes. Remembering "
        "the same content with the same type, location, project, team and bucket again returns the "
        "existing reference with created=false, so a retry never duplicates it. Needs memory:write (a "
        "read-only token gets forbidden); a bounded token writes only inside its teams, projects and "
        f"buckets. {RETRY_RULE}"))
    async def remember(
        content: Annotated[str, Field(strict=True, description=f"The fact, decision or note to keep, as "
                                      f"self-contained text: 1 character to {content_limit} (UTF-8); larger "
                                      f"is payload_too_large.")],
        type: Annotated[str | None, Field(strict=True, description="fact, decision, note, preference, event, "
                                          f"or another short word ({WORD_RULE}). Default note.")] = None,
        location: Annotated[str | None, Field(strict=True, description="Path-like filing place, 1-512 "
                                              "characters, e.g. projects/memory-os/decisions.")] = None,
        project: Annotated[str | None, Field(strict=True, description=f"The project it belongs to "
                                             f"({WORD_RULE}).")] = None,
        team: Annotated[str | None, Field(strict=True, description=f"The team it belongs to ({WORD_RULE}).")] = None,
        bucket: Annotated[str | None, Field(strict=True, description=f"The bucket to keep it in ({WORD_RULE}). "
                                            "Default default.")] = None,
        tags: Annotated[list[str] | None, Field(strict=True, description=f"Up to {MAX_TAGS} short labels "
                                                f"({WORD_RULE} each): a JSON array of strings, e.g. "
                                                "[\"release\"].")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(strict=True, description="Any JSON object, kept and "
                                                         "returned as given (at most 64 KiB serialized).")] = None,
        provenance: Annotated[dict[str, Any] | None, Field(strict=True, description="Where it came from, as a "
                                                           "JSON object: source, agent, conversation_id and seq "
                                                           "of the log item it was taken from...")] = None,
        occurred_at: Annotated[str | None, Field(strict=True, description="RFC3339 timestamp of when the "
                                                 "remembered thing happened, e.g. 2026-05-08T14:00:00Z. "
                                                 "Default now.")] = None,
    ) -> Remembered:
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

    recall_doc = (
        "Best-effort lookup: the few saved memories most relevant to a question, ranked best first, for a "
        "quick answer before you respond. " + (
            "Searches every bucket unless bucket (or another filter) narrows it. " if full else
            "Searches all your memories. ") +
        "Weak matches are allowed: the result is empty only when nothing visible exists, and an empty "
        "result is a valid no-match answer, not a failure. Use it when weak-but-useful relevance is "
        "acceptable and a small ranked set is wanted, e.g. a task-start check of recent working context. Do not use it when a weak match must not be "
        "presented as the answer (search_memory is strict), to assemble several memories into a prompt "
        "within a token budget (recall_context), or to read a conversation's log (recall_memory). "
        f"{HIT_SHAPE} {SCORES} {READ_SCOPE} {RETRY_RULE}")

    if full:
        @tool(mcp, name="recall", description=recall_doc, annotations={"readOnlyHint": True})
        async def recall_full(query: RecallQuery, limit: RecallLimit = 5, bucket: Bucket = None,
                              project: Project = None, team: Team = None, type: Kind = None,
                              tags: Tags = None) -> Results:
            return await _recall(query, limit, filters(project=project, team=team, bucket=bucket, type=type,
                                                       tags=tags))
    else:
        @tool(mcp, name="recall", description=recall_doc, annotations={"readOnlyHint": True})
        async def recall_public(query: RecallQuery, limit: RecallLimit = 5) -> Results:
            return await _recall(query, limit, Filters())

    @tool(mcp, annotations={"readOnlyHint": True}, description=(
        "Strict targeted search: only memories that match every filter given (project, team, bucket, type, "
        "tags) exactly and whose score, the cosine similarity between query and memory (0-1), is at least "
        f"min_score (default {min_score}, calibrated so unrelated memories rarely pass). It returns nothing "
        "rather than a weak match: use it when a wrong answer is worse than none. An empty result is an "
        "answer, not a failure: to look wider, lower min_score (e.g. 0.3), drop a filter, or use recall for "
        "a best-effort lookup. For several memories packed into a prompt-sized budget use recall_context. "
        f"{HIT_SHAPE} {SCORES} {READ_SCOPE} {RETRY_RULE}"))
    async def search_memory(
        query: Query,
        limit: Annotated[int, Field(ge=1, le=100, strict=True, description="At most this many hits: 1-100, "
                                    "default 10."), WHOLE_NUMBER, NULL_IS_DEFAULT] = 10,
        project: Project = None,
        team: Team = None,
        bucket: Bucket = None,
        type: Kind = None,
        tags: Tags = None,
        min_score: Annotated[float | None, Field(ge=0.0, le=1.0, strict=True, description=(
            f"Lowest cosine similarity a hit may have, 0-1; default {min_score}. Lower it for broader "
            "strict search, raise it for fewer, closer hits."))] = None,
    ) -> Results:
        principal = current()
        service = memory()
        query = check_query(query)
        limit = check_bound("limit", limit, 1, 100)
        threshold = settings.search_min_score if min_score is None else float(min_score)
        found = filters(project=project, team=team, bucket=bucket, type=type, tags=tags)
        hits = await service.search(principal, query, limit, found, threshold)
        return ok_result({"results": hits}, render_hits(hits))  # type: ignore[return-value]

    async def _context(query: Any, max_items: Any, max_tokens: Any, found: Filters) -> dict[str, Any]:
        principal = current()
        service = memory()
        query = check_query(query)
        max_items = check_bound("max_items", max_items, 1, 50)
        max_tokens = check_bound("max_tokens", max_tokens, 1, 12000)
        hits = await service.recall(principal, query, max_items, found)
        counter = tokens()
        packed = context.pack(hits, max_items=max_items, max_tokens=max_tokens, tokens=counter)
        plan = {"ranking": "recall", "candidates": len(hits), "filters": _filter_dict(found)}
        return context.structured(packed, tokens=counter, plan=plan)

    context_doc = (
        "Restore the context needed to continue work across sessions: a bounded pack of several saved "
        "memories for a prompt, ranked as recall and packed in rank order while max_items and max_tokens "
        "hold (the memory that would cross the token budget is shortened to fit or dropped). Use it at the "
        "start of a session or task when one quick answer is not enough. Do not use it for a quick lookup "
        "(recall) or when only a strict match is acceptable (search_memory), and do not ask for an "
        "unbounded dump: max_items and max_tokens are safety and quality limits. Read-only. The text "
        f"answer: a line '{settings.context_header}', then 'Items: <n>', then 'Budget: used_items=... "
        "used_tokens=... dropped=<d> shortened=<s>' only when something was dropped or shortened (so a "
        "small answer can be told from a truncated one), one line 'Reference: <id> | Type: <type> | "
        "Location: <path>' per memory (the reference is an opaque id), then 'Context:' and the bounded "
        "body. " + ("Structured content carries {version, retrieval_plan, budget, items, context_text}. "
                    f"{SCORES} " if full else "") + f"{READ_SCOPE} {RETRY_RULE}")

    if full:
        @tool(mcp, name="recall_context", description=context_doc, annotations={"readOnlyHint": True})
        async def recall_context_full(query: Query, max_items: MaxItems = 8, max_tokens: MaxTokens = 1500,
                                      bucket: Bucket = None, project: Project = None, team: Team = None,
                                      type: Kind = None, tags: Tags = None) -> ContextPack:
            pack_json = await _context(query, max_items, max_tokens,
                                       filters(project=project, team=team, bucket=bucket, type=type, tags=tags))
            return ok_result(pack_json, context.render(pack_json, header=settings.context_header))  # type: ignore
    else:
        # The public document: "devuelve texto, no un objeto estructurado". No output schema, so clients that
        # validate structured content (TypeScript SDK) expect none.
        @tool(mcp, name="recall_context", description=context_doc, annotations={"readOnlyHint": True},
              output_schema=None)
        async def recall_context_public(query: Query, max_items: MaxItems = 8, max_tokens: MaxTokens = 1500) -> Any:
            pack_json = await _context(query, max_items, max_tokens, Filters())
            return text_result(context.render(pack_json, header=settings.context_header))

    @tool(mcp, annotations={"destructiveHint": True, "idempotentHint": False}, description=(
        "Delete one saved memory for good, from storage and the index, by its reference: the opaque id "
        "(mem_...) that remember returned and that every recall, search_memory and recall_context hit "
        "carries. An unknown reference, or one outside the token's bounds, is not_found. Returns "
        "{reference, forgotten: true}. Conversation logs are append-only and are not deleted here. "
        "Needs memory:write (a read-only token gets forbidden)."))
    async def forget(reference: Annotated[str, Field(strict=True, description="The memory's reference, as "
                                                     "remember returned it or a hit carries it, e.g. "
                                                     "mem_3f2a9c....")]) -> Forgotten:
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
