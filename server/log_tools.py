"""The four conversation-log tools. Basic credentials only: a Bearer caller gets unprocessable_parameters."""

from __future__ import annotations

from typing import Annotated, Any, Callable

import anyio
from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from pydantic import BaseModel, Field

from server.auth import Principal
from server.errors import UnprocessableParameters
from server.logs import LogStore, check_bound, check_conversation_id, decode_cursor
from server.tools import ok_result

ConversationId = Annotated[
    str,
    Field(
        description="The pseudonymous handle of the conversation, minted by the client: 8-64 characters from "
        "[A-Za-z0-9_-], stable for one conversation, never derived from personal data. A malformed id is "
        "rejected; an unknown one reads as empty."
    ),
]


class McpMemoryItem(BaseModel):
    seq: int = Field(ge=0, description="Per conversation, 0-based, gapless, in append order.")
    recorded_at: str = Field(description="Commit time of the item's batch (RFC3339); shared by the batch.")
    payload: dict[str, Any] = Field(description="The JSON object exactly as it was appended.")


class AppendResult(BaseModel):
    conversation_id: str
    first_seq: int
    last_seq: int
    count: int
    recorded_at: str
    duplicate: bool


class ItemsResult(BaseModel):
    items: list[McpMemoryItem]


class ConversationSummary(BaseModel):
    conversation_id: str
    item_count: int
    first_recorded_at: str
    last_recorded_at: str


class ConversationsResult(BaseModel):
    conversations: list[ConversationSummary]
    next_cursor: str | None


def _require_basic(principal: Principal) -> None:
    if not principal.is_basic:
        raise UnprocessableParameters("this tool requires the site's Basic authentication")


def register_log_tools(mcp: FastMCP, logs: LogStore, current: Callable[[], Principal]) -> None:
    @mcp.tool(annotations={"destructiveHint": False, "idempotentHint": False})
    async def append_memory(
        conversation_id: ConversationId,
        items: Annotated[
            list[dict[str, Any]],
            Field(description="1-1000 JSON objects, appended in order as one all-or-nothing batch."),
        ],
        idempotency_key: Annotated[
            str | None,
            Field(description="Optional 1-128 chars: a retry with the same key appends nothing and returns "
                  "the original acknowledgement with duplicate=true."),
        ] = None,
    ) -> AppendResult:
        """Append items to a conversation's durable, ordered log. The acknowledgement means durable."""
        principal = current()
        _require_basic(principal)
        cid, payloads, key = logs.prepare_append(conversation_id, items, idempotency_key)
        return ok_result(await logs.append(principal.site_id, cid, payloads, key))  # type: ignore[return-value]

    @mcp.tool(annotations={"readOnlyHint": True})
    async def recall_memory(
        conversation_id: ConversationId,
        count: Annotated[
            int, Field(ge=0, le=1000, strict=True, description="How many items from the end (default 50).")
        ] = 50,
    ) -> ItemsResult:
        """Return the last `count` items of a conversation's log, in ascending sequence order."""
        principal = current()
        _require_basic(principal)
        cid = check_conversation_id(conversation_id)
        count = check_bound("count", count, 0, 1000)
        items = await anyio.to_thread.run_sync(logs.recall, principal.site_id, cid, count)
        return ok_result({"items": items})  # type: ignore[return-value]

    @mcp.tool(annotations={"readOnlyHint": True})
    async def replay_memory(
        conversation_id: ConversationId,
        limit: Annotated[
            int,
            Field(ge=0, le=1000, strict=True, description="Maximum items to return, max 1000. A shorter page "
                  "(including an empty one) means the end of the log."),
        ],
        offset: Annotated[
            int, Field(ge=0, strict=True, description="Sequence number to start from (default 0).")
        ] = 0,
    ) -> ItemsResult:
        """Read a conversation's log from `offset`, ascending. Page with offset = last seq + 1."""
        principal = current()
        _require_basic(principal)
        cid = check_conversation_id(conversation_id)
        limit = check_bound("limit", limit, 0, 1000)
        offset = check_bound("offset", offset, 0, None)
        items = await anyio.to_thread.run_sync(logs.replay, principal.site_id, cid, offset, limit)
        return ok_result({"items": items})  # type: ignore[return-value]

    @mcp.tool(annotations={"readOnlyHint": True})
    async def list_conversations(
        limit: Annotated[int, Field(ge=1, le=1000, strict=True, description="Page size (default 100).")] = 100,
        cursor: Annotated[
            str | None, Field(description="Opaque cursor from a previous page's next_cursor.")
        ] = None,
    ) -> ConversationsResult:
        """List the site's conversations, newest activity first."""
        principal = current()
        _require_basic(principal)
        limit = check_bound("limit", limit, 1, 1000)
        if cursor is not None:
            decode_cursor(cursor)
        page = await anyio.to_thread.run_sync(logs.list, principal.site_id, limit, cursor)
        return ok_result(page)  # type: ignore[return-value]
