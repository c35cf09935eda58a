"""The four conversation-log tools: append_memory, recall_memory, replay_memory, list_conversations.

Basic credentials only: a token session does not list them (memory_server.api.mcp.listing), and a token that calls
one gets unprocessable_parameters. Over HTTP a plain call of one of
these is answered by the fast path (memory_server.api.mcp.fast_path) with the same operations and byte-for-byte
the same response.
"""

from __future__ import annotations

from collections.abc import Callable

from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult

from memory_server.api.mcp.descriptions import LOGS, PARAMETERS
from memory_server.api.mcp.registry import register
from memory_server.api.mcp.results import ok_result
from memory_server.auth.principal import Principal
from memory_server.logs.params import AppendParams, ListConversationsParams, ReplayParams, TailParams
from memory_server.operations.logs import LogOperations, items_answer
from memory_server.settings import Settings

READ_ONLY = {"readOnlyHint": True}


def register_log_tools(
    mcp: FastMCP, ops: LogOperations, current: Callable[[], Principal], *, settings: Settings
) -> None:
    async def append_memory(params: AppendParams) -> ToolResult:
        return ok_result(dict(await ops.append(current(), params)))

    async def recall_memory(params: TailParams) -> ToolResult:
        return ok_result(items_answer(await ops.tail(current(), params)))

    async def replay_memory(params: ReplayParams) -> ToolResult:
        return ok_result(items_answer(await ops.replay(current(), params)))

    async def list_conversations(params: ListConversationsParams) -> ToolResult:
        return ok_result(dict(await ops.conversations(current(), params)))

    register(
        mcp,
        settings,
        name="append_memory",
        params=AppendParams,
        run=append_memory,
        description=LOGS["append_memory"],
        notes=PARAMETERS["append_memory"],
        annotations={"destructiveHint": False, "idempotentHint": False},
    )
    register(
        mcp,
        settings,
        name="recall_memory",
        params=TailParams,
        run=recall_memory,
        description=LOGS["recall_memory"],
        notes=PARAMETERS["recall_memory"],
        annotations=READ_ONLY,
    )
    register(
        mcp,
        settings,
        name="replay_memory",
        params=ReplayParams,
        run=replay_memory,
        description=LOGS["replay_memory"],
        notes=PARAMETERS["replay_memory"],
        annotations=READ_ONLY,
    )
    register(
        mcp,
        settings,
        name="list_conversations",
        params=ListConversationsParams,
        run=list_conversations,
        description=LOGS["list_conversations"],
        notes=PARAMETERS["list_conversations"],
        annotations=READ_ONLY,
    )
