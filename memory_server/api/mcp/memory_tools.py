"""The saved-memory tools: remember, recall, search_memory, recall_context, forget.

Two tool profiles (docs/spec.md, "Tool profiles"): `public` exposes the original public parameters, and
`recall_context` answers with text only (no structured content); `full` (default) adds the
filters, time windows and supersede links, and recall_context's structured pack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult

from memory_server.api.mcp import descriptions
from memory_server.api.mcp.registry import register
from memory_server.api.mcp.results import ok_result, public_hits, render_hits, text_result
from memory_server.auth.principal import Principal
from memory_server.memories.params import ContextParams, RecallParams, ReferenceParams, RememberParams, SearchParams
from memory_server.operations.memories import MemoryOperations
from memory_server.retrieval import context
from memory_server.settings import Settings

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
        # Public profile: the text alone, as clients written for the original tool list read it.
        return ok_result(pack, text) if full else text_result(text)

    async def forget(params: ReferenceParams) -> ToolResult:
        return ok_result(await ops.forget(current(), params))

    register(
        mcp,
        settings,
        name="remember",
        params=RememberParams,
        run=remember,
        description=descriptions.MEMORIES["remember"](full),
        notes=descriptions.PARAMETERS["remember"],
        annotations={"destructiveHint": False, "idempotentHint": True},
        only=None if full else PUBLIC_REMEMBER,
    )
    register(
        mcp,
        settings,
        name="recall",
        params=RecallParams,
        run=recall,
        description=descriptions.MEMORIES["recall"](full),
        notes=descriptions.PARAMETERS["recall"],
        annotations=READ_ONLY,
        only=None if full else PUBLIC_RECALL,
    )
    register(
        mcp,
        settings,
        name="search_memory",
        params=SearchParams,
        run=search_memory,
        description=descriptions.MEMORIES["search_memory"](full),
        notes=descriptions.PARAMETERS["search_memory"],
        annotations=READ_ONLY,
        only=None if full else PUBLIC_SEARCH,
    )
    register(
        mcp,
        settings,
        name="recall_context",
        params=ContextParams,
        run=recall_context,
        description=descriptions.MEMORIES["recall_context"](full),
        notes=descriptions.PARAMETERS["recall_context"],
        annotations=READ_ONLY,
        only=None if full else PUBLIC_CONTEXT,
    )
    register(
        mcp,
        settings,
        name="forget",
        params=ReferenceParams,
        run=forget,
        description=descriptions.MEMORIES["forget"](full),
        notes=descriptions.PARAMETERS["forget"],
        annotations={"destructiveHint": True, "idempotentHint": False},
    )
