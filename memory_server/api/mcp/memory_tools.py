"""The saved-memory tools: remember, recall, search_memory, recall_context, forget.

Two tool profiles (docs/spec.md, "Tool profiles"): `public` exposes the original public parameters, and
`recall_context` answers with text only (no structured content, no output schema); `full` (default) adds the
filters, time windows and supersede links, and recall_context's structured pack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult

from memory_server.api.mcp.registry import register
from memory_server.api.mcp.results import ok_result, public_hits, render_hits, text_result
from memory_server.api.schemas import ContextPack, Forgotten, PublicResults, Remembered, Results
from memory_server.auth.principal import Principal
from memory_server.memories.params import ContextParams, RecallParams, ReferenceParams, RememberParams, SearchParams
from memory_server.operations.memories import MemoryOperations
from memory_server.retrieval import context
from memory_server.settings import Settings

# Shared by the descriptions of the read tools.
HIT_SHAPE = (
    "Each hit carries its reference (an opaque id such as mem_3f2a..., the one remember returned; "
    "forget takes it), score, type, location, content and attribution (project, team, bucket, "
    "tags, metadata, provenance, occurred_at)."
)
LINKS = (
    "A memory another one replaced (remember with supersedes) carries superseded_by and valid_to, and its "
    "text ends with a 'Superseded by:' line; include_superseded=true asks for replaced memories too. "
)
SCORES = "Scores rank the hits of one answer; never compare them across answers."
READ_SCOPE = (
    "Needs memory:read (a token without it gets forbidden); a token bounded to teams, projects or "
    "buckets only ever sees memories inside them."
)
RETRY_RULE = (
    "Errors other than unavailable (invalid_parameters, forbidden, not_found, payload_too_large) "
    "are permanent: fix the call rather than retry it; unavailable is safe to retry."
)
READ_ONLY = {"readOnlyHint": True}
PUBLIC_RECALL = ("query", "limit")
PUBLIC_CONTEXT = ("query", "max_items", "max_tokens")
# The public profile's parameters of the other read and write tools: later additions are on the full profile only.
PUBLIC_SEARCH = ("query", "limit", "project", "team", "bucket", "type", "tags", "min_score")
PUBLIC_REMEMBER = (
    "content",
    "type",
    "location",
    "project",
    "team",
    "bucket",
    "tags",
    "metadata",
    "provenance",
    "occurred_at",
)

REMEMBER = (
    "Save one fact, decision, note, preference or event worth finding later by meaning: it is embedded "
    "and found again with recall, search_memory and recall_context. Not for the turn-by-turn record of "
    "a conversation: that is append_memory, whose log items recall finds only where logs are indexed. File it "
    "with type, "
    "location, project, team, bucket and tags so strict searches can find it. Returns {reference, "
    "created}: the reference is an opaque id (mem_...) that hits carry and forget takes. Remembering "
    "the same content with the same type, location, project, team and bucket again returns the "
    "existing reference with created=false, so a retry never duplicates it. Needs memory:write (a "
    "read-only token gets forbidden); a bounded token writes only inside its teams, projects and "
    f"buckets. {RETRY_RULE}"
)
WINDOW = (
    "occurred_after / occurred_before (RFC3339) keep only memories whose occurred_at lies in "
    "[occurred_after, occurred_before), e.g. what was decided last week. "
)
SEARCH = (
    "Strict targeted search: only memories that match every filter given (project, team, bucket, type, "
    "tags) exactly and whose score, the cosine similarity between query and memory (0-1), is at least "
    "min_score (default {min_score}, calibrated so unrelated memories rarely pass). It returns nothing "
    "rather than a weak match: use it when a wrong answer is worse than none. An empty result is an "
    "answer, not a failure: to look wider, lower min_score (e.g. 0.3), drop a filter, or use recall for "
    "a best-effort lookup. For several memories packed into a prompt-sized budget use recall_context. "
    f"{HIT_SHAPE} {SCORES} {READ_SCOPE} {RETRY_RULE}"
)
FORGET = (
    "Delete one saved memory for good, from storage and the index, by its reference: the opaque id "
    "(mem_...) that remember returned and that every recall, search_memory and recall_context hit "
    "carries. An unknown reference, or one outside the token's bounds, is not_found. Returns "
    "{reference, forgotten: true}. Conversation logs are append-only and are not deleted here. "
    "Needs memory:write (a read-only token gets forbidden)."
)


def recall_description(full: bool) -> str:
    return (
        "Best-effort lookup: the few saved memories most relevant to a question, ranked best first, for a "
        "quick answer before you respond. "
        + (
            "Searches every bucket unless bucket (or another filter) narrows it. " + WINDOW + LINKS
            if full
            else "Searches all your memories. "
        )
        + "Weak matches are allowed: the result is empty only when nothing visible exists, and an empty "
        "result is a valid no-match answer, not a failure. Use it when weak-but-useful relevance is "
        "acceptable and a small ranked set is wanted, e.g. a task-start check of recent working context. Do "
        "not use it when a weak match must not be presented as the answer (search_memory is strict), to "
        "assemble several memories into a prompt within a token budget (recall_context), or to read a "
        f"conversation's log (recall_memory). {HIT_SHAPE} {SCORES} {READ_SCOPE} {RETRY_RULE}"
    )


def search_description(full: bool) -> str:
    return SEARCH if not full else SEARCH.replace(" It returns nothing", f" {WINDOW}{LINKS}It returns nothing", 1)


def remember_description(full: bool) -> str:
    if not full:
        return REMEMBER
    return REMEMBER.replace(
        " Needs memory:write",
        (
            " When it replaces an earlier memory (a changed decision, a new value), pass that one's reference as "
            "supersedes: the old one is kept, marked superseded, and left out of search_memory and recall_context. "
            "Needs memory:write"
        ),
        1,
    )


def context_description(full: bool) -> str:
    return (
        "Restore the context needed to continue work across sessions: a bounded pack of several saved "
        "memories for a prompt, ranked as recall and packed in rank order while max_items and max_tokens "
        "hold (the memory that would cross the token budget is shortened to fit or dropped). "
        + (WINDOW + LINKS if full else "")
        + "Use it at the "
        "start of a session or task when one quick answer is not enough. Do not use it for a quick lookup "
        "(recall) or when only a strict match is acceptable (search_memory), and do not ask for an "
        "unbounded dump: max_items and max_tokens are safety and quality limits. Read-only. The text "
        "answer: a line '{context_header}', then 'Items: <n>', then 'Budget: used_items=... "
        "used_tokens=... dropped=<d> shortened=<s>' only when something was dropped or shortened (so a "
        "small answer can be told from a truncated one), one line 'Reference: <id> | Type: <type> | "
        "Location: <path>' per memory (the reference is an opaque id), then 'Context:' and the bounded "
        "body. "
        + (
            f"Structured content carries {{version, retrieval_plan, budget, items, context_text}}. {SCORES} "
            if full
            else ""
        )
        + f"{READ_SCOPE} {RETRY_RULE}"
    )


def register_memory_tools(
    mcp: FastMCP, ops: MemoryOperations, current: Callable[[], Principal], settings: Settings
) -> None:
    full = settings.tool_profile == "full"

    async def remember(params: RememberParams) -> ToolResult:
        return ok_result(await ops.remember(current(), params))

    # The public profile answers with the original hit fields (no supersede links, no mark in the text).
    shown = (lambda hits: hits) if full else public_hits

    def answered(hits: list[dict[str, Any]]) -> ToolResult:
        answer = ops.answer(hits)
        text = render_hits(hits)
        if "notice" in answer:
            text = f"Note: {answer['notice']}\n{text}"
        return ok_result(answer if full else {"results": hits}, text)

    async def recall(params: RecallParams) -> ToolResult:
        return answered(shown(await ops.recall(current(), params)))

    async def search_memory(params: SearchParams) -> ToolResult:
        return answered(shown(await ops.search(current(), params)))

    async def recall_context(params: ContextParams) -> ToolResult:
        pack = await ops.context(current(), params)
        text = context.render(pack, header=settings.context_header)
        # Public profile: the text alone, as clients written for the original tool list read it; with no output
        # schema, clients that validate structured content have nothing to check.
        return ok_result(pack, text) if full else text_result(text)

    async def forget(params: ReferenceParams) -> ToolResult:
        return ok_result(await ops.forget(current(), params))

    register(
        mcp,
        settings,
        name="remember",
        params=RememberParams,
        run=remember,
        result=Remembered,
        description=remember_description(full),
        annotations={"destructiveHint": False, "idempotentHint": True},
        only=None if full else PUBLIC_REMEMBER,
    )
    results = Results if full else PublicResults
    register(
        mcp,
        settings,
        name="recall",
        params=RecallParams,
        run=recall,
        result=results,
        description=recall_description(full),
        annotations=READ_ONLY,
        only=None if full else PUBLIC_RECALL,
    )
    register(
        mcp,
        settings,
        name="search_memory",
        params=SearchParams,
        run=search_memory,
        result=results,
        description=search_description(full),
        annotations=READ_ONLY,
        only=None if full else PUBLIC_SEARCH,
    )
    if full:
        register(
            mcp,
            settings,
            name="recall_context",
            params=ContextParams,
            run=recall_context,
            result=ContextPack,
            description=context_description(True),
            annotations=READ_ONLY,
        )
    else:  # no output schema, so clients that validate structured content (TypeScript SDK) expect none
        register(
            mcp,
            settings,
            name="recall_context",
            params=ContextParams,
            run=recall_context,
            description=context_description(False),
            annotations=READ_ONLY,
            only=PUBLIC_CONTEXT,
            output_schema=None,
        )
    register(
        mcp,
        settings,
        name="forget",
        params=ReferenceParams,
        run=forget,
        result=Forgotten,
        description=FORGET,
        annotations={"destructiveHint": True, "idempotentHint": False},
    )
