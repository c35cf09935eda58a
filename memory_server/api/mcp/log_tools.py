"""The four conversation-log tools: append_memory, recall_memory, replay_memory, list_conversations.

Basic credentials only: a Bearer caller gets unprocessable_parameters. Over HTTP a plain call of one of
these is answered by the fast path (memory_server.api.mcp.fast_path) with the same operations and byte-for-byte
the same response.
"""

from __future__ import annotations

from collections.abc import Callable

from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult

from memory_server.api.mcp.registry import register
from memory_server.api.mcp.results import ok_result
from memory_server.api.schemas import AppendResult, ConversationsResult, ItemsResult
from memory_server.auth.principal import Principal
from memory_server.logs.params import AppendParams, ListConversationsParams, ReplayParams, TailParams
from memory_server.operations.logs import LogOperations, items_answer
from memory_server.settings import Settings

# What every log tool's description ends with: who may call it and what to do when a call fails.
BASIC_ONLY = (
    "Needs the site's Basic credential: a Bearer token gets unprocessable_parameters "
    "(saved memories take tokens; conversation logs do not)."
)
CLIENT_RULE = (
    "Memory calls must never block the conversation. Validation errors (invalid_parameters, "
    "payload_too_large, unprocessable_parameters) are permanent: fix the call, do not retry it. "
    "Other failures (unavailable) are safe to retry after buffering the batch; duplicates from "
    "retries are tolerated."
)

DESCRIPTIONS = {
    "append_memory": (
        "Append items to this conversation's own log: durable, ordered, append-only, one log per "
        "conversation_id. Use it to record the conversation itself (turns, tool calls, events) so that "
        "recall_memory and replay_memory can bring it back later. Log items are found by recall only where the "
        "site indexes its logs or the conversation asks for it (index=true); a fact, decision or preference "
        "worth finding later by meaning belongs in remember. "
        "The acknowledgement means durable (the items survive a crash); a batch is all-or-nothing. "
        "Returns {conversation_id, first_seq, last_seq, count, recorded_at, duplicate}. "
        f"{BASIC_ONLY} {CLIENT_RULE} Pass an idempotency_key to make a retry append nothing."
    ),
    "recall_memory": (
        "Return the last `count` items of a conversation's log in ascending sequence order (the oldest of "
        "the tail first): the everyday way to rehydrate recent context at the start of a session or after a "
        "gap. Fewer items if the log holds fewer; a conversation with no items, including one never "
        "appended to, reads as an empty list, not an error, so a fresh conversation_id needs no special "
        "handling. To read the whole log or from a position, use replay_memory; to find conversations, "
        "list_conversations. Saved memories (remember) are not here: use recall, search_memory or "
        f"recall_context for them. Returns {{items: [{{seq, recorded_at, payload}}]}}. {BASIC_ONLY} "
        f"{CLIENT_RULE}"
    ),
    "replay_memory": (
        "Positional read of a conversation's log: up to `limit` items starting at sequence number "
        "`offset`, ascending. To restore a whole conversation, start at offset 0; after each page set "
        "offset to the last returned item's seq + 1; stop when a page is shorter than limit (including an "
        "empty one): that is the end of the log. Sequence numbers are per conversation, 0-based and "
        "gapless, so offset is a position; there is no cursor. An unknown conversation or an offset past "
        "the end yields an empty list, not an error. For only the latest items use recall_memory. "
        f"Returns {{items: [{{seq, recorded_at, payload}}]}}. {BASIC_ONLY} {CLIENT_RULE}"
    ),
    "list_conversations": (
        "List the site's conversations, newest activity first, each with its item_count and first and "
        "last recorded_at. Page with next_cursor: pass it back as cursor; it is null on the last page. "
        "Read one conversation with recall_memory or replay_memory. "
        f"Returns {{conversations, next_cursor}}. {BASIC_ONLY} {CLIENT_RULE}"
    ),
}
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
        result=AppendResult,
        description=DESCRIPTIONS["append_memory"],
        annotations={"destructiveHint": False, "idempotentHint": False},
    )
    register(
        mcp,
        settings,
        name="recall_memory",
        params=TailParams,
        run=recall_memory,
        result=ItemsResult,
        description=DESCRIPTIONS["recall_memory"],
        annotations=READ_ONLY,
    )
    register(
        mcp,
        settings,
        name="replay_memory",
        params=ReplayParams,
        run=replay_memory,
        result=ItemsResult,
        description=DESCRIPTIONS["replay_memory"],
        annotations=READ_ONLY,
    )
    register(
        mcp,
        settings,
        name="list_conversations",
        params=ListConversationsParams,
        run=list_conversations,
        result=ConversationsResult,
        description=DESCRIPTIONS["list_conversations"],
        annotations=READ_ONLY,
    )
