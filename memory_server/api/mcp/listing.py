"""A session lists only the tools its credential may call, and its instructions name only those.

The site's Basic credential and stdio (the local principal) may call every tool; a token (Bearer or OAuth) never
the conversation-log tools, and only the saved-memory tools its scopes allow. This filters `tools/list` and
rewrites the instructions of `initialize` (and `server/discover`); it never refuses a call: a call of a tool the
session does not list still reaches the tool, whose operation answers it with its usual error
(`unprocessable_parameters` for a log tool, `forbidden` for a missing scope).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mcp_types as mt
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import Tool

from memory_server.api.mcp.descriptions import LOG_TOOLS, READ_TOOLS, WRITE_TOOLS, instructions
from memory_server.auth.principal import READ, WRITE, Principal

BASIC = "basic"  # the site's Basic credential, or stdio
NEEDS: dict[str, str] = (
    {name: BASIC for name in LOG_TOOLS} | {name: READ for name in READ_TOOLS} | {name: WRITE for name in WRITE_TOOLS}
)


def may_call(principal: Principal, tool: str) -> bool:
    """Whether `principal` may call `tool`: as its operation decides (a tool not in NEEDS: Basic only)."""
    need = NEEDS.get(tool, BASIC)
    return principal.is_basic if need == BASIC else principal.is_basic or need in principal.scopes


def listed(principal: Principal, tools: Sequence[str]) -> list[str]:
    return [name for name in tools if may_call(principal, name)]


class ToolListing(Middleware):
    """Filters tools/list by the caller's principal and gives initialize the instructions that match."""

    def __init__(self, current: Callable[[], Principal]) -> None:
        self._current = current

    async def on_list_tools(
        self, context: MiddlewareContext[mt.ListToolsRequest], call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]]
    ) -> Sequence[Tool]:
        tools = await call_next(context)
        principal = self._current()
        return [tool for tool in tools if may_call(principal, tool.name)]

    async def on_initialize(
        self,
        context: MiddlewareContext[mt.InitializeRequest],
        call_next: CallNext[mt.InitializeRequest, mt.InitializeResult | None],
    ) -> mt.InitializeResult | None:
        result = await call_next(context)
        if result is None:
            return None
        return result.model_copy(update={"instructions": self._instructions()})

    async def on_discover(
        self,
        context: MiddlewareContext[mt.DiscoverRequest],
        call_next: CallNext[mt.DiscoverRequest, mt.DiscoverResult | dict[str, Any]],
    ) -> mt.DiscoverResult | dict[str, Any]:
        result = await call_next(context)
        if isinstance(result, mt.DiscoverResult):
            return result.model_copy(update={"instructions": self._instructions()})
        return {**result, "instructions": self._instructions()} if "instructions" in result else result

    def _instructions(self) -> str:
        return instructions(listed(self._current(), list(NEEDS)))
