"""The four conversation-log tools. Basic credentials only: a Bearer caller gets unprocessable_parameters.

They are served twice over: as fastmcp tools (stdio, and every MCP request over HTTP that is not a plain
call), and by `LogToolsFastPath`, which answers a plain JSON-RPC `tools/call` POST of a log tool itself.
The MCP SDK's stateless transport costs ~2 ms of CPU per request (a transport, memory streams, tasks and a
dispatcher per POST, then fastmcp's middleware chain and pydantic models), which capped appends at ~3k
items/s on 2 cores; the fast path does the same work in a fraction of that and writes byte-for-byte the
response the SDK would (tests/test_log_fast_path.py sends every kind of call through both and compares).
"""

# No `from __future__ import annotations`: parameter descriptions are built from the settings when the
# tools are registered, so the annotations must be evaluated then, where those values are in scope.

import json
import logging
import re
import time
from types import SimpleNamespace
from typing import Annotated, Any, Awaitable, Callable

import anyio
import pydantic_core
from fastmcp import FastMCP
from mcp.server.streamable_http import check_accept_headers
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from server.auth.core import Principal
from server.storage.sqlite.db import StorageHealth
from server.errors import AppError, UnprocessableParameters
from server.api.failures import unexpected
from server.logs.store import MAX_SQLITE_INT, LogStore, RawItem, check_bound, check_conversation_id, decode_cursor
from server.settings import Settings
from server.api.mcp.tools import NULL_IS_DEFAULT, WHOLE_NUMBER, ok_result, tool

log = logging.getLogger("memory_server.tools")

ConversationId = Annotated[
    str,
    Field(
        strict=True,
        description="The pseudonymous handle of the conversation, minted by the client: 8-64 characters from "
        "[A-Za-z0-9_-] (UUIDs and nanoids fit), stable for one conversation, never derived from personal "
        "data such as names, e-mail addresses or account ids. A malformed id is rejected outright "
        "(invalid_parameters); an unknown one reads as an empty list.",
    ),
]

# What every log tool's description ends with: who may call it and what to do when a call fails.
BASIC_ONLY = ("Needs the site's Basic credential: a Bearer token gets unprocessable_parameters "
              "(saved memories take tokens; conversation logs do not).")
CLIENT_RULE = ("Memory calls must never block the conversation. Validation errors (invalid_parameters, "
               "payload_too_large, unprocessable_parameters) are permanent: fix the call, do not retry it. "
               "Other failures (unavailable) are safe to retry after buffering the batch; duplicates from "
               "retries are tolerated.")


class McpMemoryItem(BaseModel):
    seq: int = Field(ge=0, description="Sequence number of the item: per conversation, 0-based, gapless, in "
                     "append order.")
    recorded_at: str = Field(description="Server-side commit time of the item's batch, as an RFC3339 "
                             "timestamp; all items appended in one batch share it.")
    payload: dict[str, Any] = Field(description="The JSON object exactly as it was appended: stored verbatim, "
                                    "never interpreted.")


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


def size_text(size: int) -> str:
    """262144 -> "256 KiB": a configured byte limit as a person reads it."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def register_log_tools(mcp: FastMCP, logs: LogStore, current: Callable[[], Principal], *,
                       settings: Settings) -> None:
    payload_limit, batch_limit = size_text(settings.max_payload_bytes), size_text(settings.max_batch_bytes)

    @tool(mcp, annotations={"destructiveHint": False, "idempotentHint": False}, description=(
        "Append items to this conversation's own log: durable, ordered, append-only, one log per "
        "conversation_id. Use it to record the conversation itself (turns, tool calls, events) so that "
        "recall_memory and replay_memory can bring it back later. Log items are never searched: a fact, "
        "decision or preference worth finding later by meaning belongs in remember instead. "
        "The acknowledgement means durable (the items survive a crash); a batch is all-or-nothing. "
        "Returns {conversation_id, first_seq, last_seq, count, recorded_at, duplicate}. "
        f"{BASIC_ONLY} {CLIENT_RULE} Pass an idempotency_key to make a retry append nothing."))
    async def append_memory(
        conversation_id: ConversationId,
        items: Annotated[
            list[dict[str, Any]],
            Field(strict=True, description=f"1-1000 JSON objects, appended in order as one all-or-nothing "
                  f"batch (each at most {payload_limit} serialized, the batch at most {batch_limit}; larger "
                  "is payload_too_large). Each payload is stored verbatim and comes back unchanged."),
        ],
        idempotency_key: Annotated[
            str | None,
            Field(strict=True, description="Optional, 1-128 characters. A retry of the batch with the same "
                  "key on the same conversation appends nothing and returns the original acknowledgement "
                  "with duplicate=true. Without a key a retry appends again."),
        ] = None,
    ) -> AppendResult:
        principal = current()
        _require_basic(principal)
        cid, payloads, key = logs.prepare_append(conversation_id, items, idempotency_key)
        return ok_result(await logs.append(principal.site_id, cid, payloads, key))  # type: ignore[return-value]

    @tool(mcp, annotations={"readOnlyHint": True}, description=(
        "Return the last `count` items of a conversation's log in ascending sequence order (the oldest of "
        "the tail first): the everyday way to rehydrate recent context at the start of a session or after a "
        "gap. Fewer items if the log holds fewer; a conversation with no items, including one never "
        "appended to, reads as an empty list, not an error, so a fresh conversation_id needs no special "
        "handling. To read the whole log or from a position, use replay_memory; to find conversations, "
        "list_conversations. Saved memories (remember) are not here: use recall, search_memory or "
        f"recall_context for them. Returns {{items: [{{seq, recorded_at, payload}}]}}. {BASIC_ONLY} "
        f"{CLIENT_RULE}"))
    async def recall_memory(
        conversation_id: ConversationId,
        count: Annotated[
            int, Field(ge=0, le=1000, strict=True, description="How many items to return, counted from the "
                       "end of the log: the last count items in ascending sequence order, fewer if the log "
                       "holds fewer, none for 0. Default 50, maximum 1000."), WHOLE_NUMBER, NULL_IS_DEFAULT,
        ] = 50,
    ) -> ItemsResult:
        principal = current()
        _require_basic(principal)
        cid = check_conversation_id(conversation_id)
        count = check_bound("count", count, 0, 1000)
        items = await anyio.to_thread.run_sync(logs.recall, principal.site_id, cid, count)
        return ok_result({"items": items})  # type: ignore[return-value]

    @tool(mcp, annotations={"readOnlyHint": True}, description=(
        "Positional read of a conversation's log: up to `limit` items starting at sequence number "
        "`offset`, ascending. To restore a whole conversation, start at offset 0; after each page set "
        "offset to the last returned item's seq + 1; stop when a page is shorter than limit (including an "
        "empty one): that is the end of the log. Sequence numbers are per conversation, 0-based and "
        "gapless, so offset is a position; there is no cursor. An unknown conversation or an offset past "
        "the end yields an empty list, not an error. For only the latest items use recall_memory. "
        f"Returns {{items: [{{seq, recorded_at, payload}}]}}. {BASIC_ONLY} {CLIENT_RULE}"))
    async def replay_memory(
        conversation_id: ConversationId,
        limit: Annotated[
            int,
            Field(ge=0, le=1000, strict=True, description="Maximum number of items to return (0-1000, "
                  "required), in ascending sequence order starting at offset. A page shorter than limit, "
                  "including an empty one, means the end of the log was reached."), WHOLE_NUMBER,
        ],
        offset: Annotated[
            int, Field(ge=0, strict=True, description="Sequence number to start reading from (>= 0, default "
                       "0); sequence numbers are per conversation, 0-based and gapless, so this is also the "
                       "position in the log."), WHOLE_NUMBER, NULL_IS_DEFAULT,
        ] = 0,
    ) -> ItemsResult:
        principal = current()
        _require_basic(principal)
        cid = check_conversation_id(conversation_id)
        limit = check_bound("limit", limit, 0, 1000)
        offset = check_bound("offset", offset, 0, None)
        items = await anyio.to_thread.run_sync(logs.replay, principal.site_id, cid, offset, limit)
        return ok_result({"items": items})  # type: ignore[return-value]

    @tool(mcp, annotations={"readOnlyHint": True}, description=(
        "List the site's conversations, newest activity first, each with its item_count and first and "
        "last recorded_at. Page with next_cursor: pass it back as cursor; it is null on the last page. "
        "Read one conversation with recall_memory or replay_memory. "
        f"Returns {{conversations, next_cursor}}. {BASIC_ONLY} {CLIENT_RULE}"))
    async def list_conversations(
        limit: Annotated[int, Field(ge=1, le=1000, strict=True, description="Page size: 1-1000, default 100."),
                         WHOLE_NUMBER, NULL_IS_DEFAULT] = 100,
        cursor: Annotated[
            str | None, Field(strict=True, description="Opaque: the next_cursor of the previous page. Leave "
                              "it out for the first page.")
        ] = None,
    ) -> ConversationsResult:
        principal = current()
        _require_basic(principal)
        limit = check_bound("limit", limit, 1, 1000)
        if cursor is not None:
            decode_cursor(cursor)
        page = await anyio.to_thread.run_sync(logs.list, principal.site_id, limit, cursor)
        return ok_result(page)  # type: ignore[return-value]


# --- the fast path --------------------------------------------------------------------------------------

MCP_PATH = "/mcp"
_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAMS_KEYS = frozenset({"name", "arguments"})
_ARGUMENTS = {
    "append_memory": frozenset({"conversation_id", "items", "idempotency_key"}),
    "recall_memory": frozenset({"conversation_id", "count"}),
    "replay_memory": frozenset({"conversation_id", "limit", "offset"}),
    "list_conversations": frozenset({"limit", "cursor"}),
}
# A digit followed by one of these starts a JSON number's fraction or exponent; without one, a payload
# holds no float.
_FLOAT = re.compile(r"[0-9][.eE]")

Send = Callable[[dict], Awaitable[None]]
Work = Callable[[], Awaitable[tuple[str, bytes]]]  # runs the call: (text content, structured content JSON)


class LogToolsFastPath:
    """ASGI app in front of the MCP SDK's app, behind the auth and observability middlewares.

    It answers a POST to /mcp only when it is one plain JSON-RPC `tools/call` of a log tool that the SDK
    path would also accept and run: the same header checks, a Basic principal, arguments of exactly the
    declared types and ranges, and ids and cursors that pass the tool's own checks. Anything else —
    initialize, notifications, batches, other methods and tools, `_meta`, and every request the SDK would
    answer with an error before running the tool — goes to the SDK untouched, so those answers stay the
    SDK's own. Failures while running (storage unavailable) are rendered as ErrorMiddleware renders them.
    """

    def __init__(self, app: Any, *, logs: LogStore, metrics: Any = None, health: StorageHealth | None = None) -> None:
        self.app = app
        self._logs = logs
        self._metrics = metrics
        self._health = health
        self.enabled = True  # tests switch it off to compare with the SDK path

    async def __call__(self, scope: dict, receive: Any, send: Send) -> None:
        if not (self.enabled and scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] == MCP_PATH and not scope.get("root_path")):
            await self.app(scope, receive, send)
            return
        messages, body = await _buffer(receive)
        planned = _plan(scope, body, self._logs) if body is not None else None
        if planned is None:
            await self.app(scope, _replaying(messages, receive), send)
            return
        request_id, tool, work = planned
        start = time.perf_counter()
        structured: bytes | None
        try:
            text, structured = await work()
            is_error, outcome = False, "ok"
        except Exception as exc:
            error = exc if isinstance(exc, AppError) else unexpected(exc, health=self._health, where=f"tool {tool!r}")
            text, structured = str(error), None  # as server.api.mcp.tools.error_result: the text only
            is_error, outcome = True, error.code
        if self._metrics is not None:
            self._metrics.observe_tool(tool, outcome, time.perf_counter() - start)
        await _respond(send, _tool_response(request_id, text, structured, is_error))


async def _buffer(receive: Any) -> tuple[list[dict], bytes | None]:
    """Read the request body (the auth middleware has it in memory already); keep the messages so the SDK
    can be handed them again. None as body: the stream ended some other way (a disconnect)."""
    messages, chunks = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return messages, b"".join(chunks)


def _replaying(messages: list[dict], receive: Any) -> Any:
    pending = list(messages)

    async def replay() -> dict:
        return pending.pop(0) if pending else await receive()

    return replay


def _plan(scope: dict, body: bytes, logs: LogStore) -> tuple[Any, str, Work] | None:
    """(JSON-RPC id, tool name, the work) for a call the fast path answers, else None (the SDK answers)."""
    accept = content_type = version = None
    for key, value in scope["headers"]:  # the first of each, as Starlette's Headers.get reads them
        if key == b"accept" and accept is None:
            accept = value.decode("latin-1")
        elif key == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
        elif key == b"mcp-protocol-version" and version is None:
            version = value.decode("latin-1")
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None  # the SDK's newer protocol path
    if content_type is None or content_type.split(";")[0] != "application/json":
        return None
    if not check_accept_headers(SimpleNamespace(headers={"accept": accept or ""}))[0]:  # type: ignore[arg-type]
        return None
    principal = (scope.get("state") or {}).get("principal")
    if not isinstance(principal, Principal) or not principal.is_basic:
        return None
    try:
        message = pydantic_core.from_json(body)  # the SDK's parser: the tool sees the same values
    except ValueError:
        return None
    if not isinstance(message, dict) or message.keys() != _ENVELOPE_KEYS or message["jsonrpc"] != "2.0":
        return None
    request_id, params = message["id"], message["params"]
    if not (isinstance(request_id, str) or _is_int(request_id, -MAX_SQLITE_INT - 1, MAX_SQLITE_INT)):
        return None
    if message["method"] != "tools/call" or not isinstance(params, dict) or params.keys() != _PARAMS_KEYS:
        return None
    tool, arguments = params["name"], params["arguments"]
    if not isinstance(tool, str) or tool not in _ARGUMENTS or not isinstance(arguments, dict):
        return None
    if not arguments.keys() <= _ARGUMENTS[tool]:
        return None
    try:
        work = _WORK[tool](logs, principal.site_id, arguments)
    except Exception:  # invalid arguments: the SDK path runs the same checks and answers with the error
        return None
    return (request_id, tool, work) if work is not None else None


def _is_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _whole(value: object, low: int, high: int, *, default: int | None = None) -> int | None:
    """An integer argument as the tools read it, if within bounds: 5.0 is 5 (server.api.mcp.tools.WHOLE_NUMBER) and
    null is the default, if there is one (NULL_IS_DEFAULT)."""
    if value is None and default is not None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if _is_int(value, low, high) else None  # type: ignore[return-value]


def _conversation(arguments: dict) -> str | None:
    value = arguments.get("conversation_id")
    return check_conversation_id(value) if isinstance(value, str) else None


def _append_work(logs: LogStore, site_id: int, arguments: dict) -> Work | None:
    items, key = arguments.get("items"), arguments.get("idempotency_key")
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        return None
    if (key is not None and not isinstance(key, str)) or _conversation(arguments) is None:
        return None
    cid, payloads, key = logs.prepare_append(arguments["conversation_id"], items, key)

    async def work() -> tuple[str, bytes]:
        return _render(await logs.append(site_id, cid, payloads, key))

    return work


def _recall_work(logs: LogStore, site_id: int, arguments: dict) -> Work | None:
    count = _whole(arguments.get("count"), 0, 1000, default=50)
    cid = _conversation(arguments)
    if cid is None or count is None:
        return None

    async def work() -> tuple[str, bytes]:
        return _render_items(await anyio.to_thread.run_sync(logs.recall_rows, site_id, cid, count))

    return work


def _replay_work(logs: LogStore, site_id: int, arguments: dict) -> Work | None:
    limit = _whole(arguments.get("limit"), 0, 1000)
    offset = _whole(arguments.get("offset"), 0, MAX_SQLITE_INT, default=0)
    cid = _conversation(arguments)
    if cid is None or limit is None or offset is None:
        return None

    async def work() -> tuple[str, bytes]:
        return _render_items(await anyio.to_thread.run_sync(logs.replay_rows, site_id, cid, offset, limit))

    return work


def _list_work(logs: LogStore, site_id: int, arguments: dict) -> Work | None:
    limit, cursor = _whole(arguments.get("limit"), 1, 1000, default=100), arguments.get("cursor")
    if limit is None or not (cursor is None or isinstance(cursor, str)):
        return None
    if cursor is not None:
        decode_cursor(cursor)

    async def work() -> tuple[str, bytes]:
        return _render(await anyio.to_thread.run_sync(logs.list, site_id, limit, cursor))

    return work


_WORK: dict[str, Callable[[LogStore, int, dict], Work | None]] = {
    "append_memory": _append_work,
    "recall_memory": _recall_work,
    "replay_memory": _replay_work,
    "list_conversations": _list_work,
}


def _render(structured: dict[str, Any]) -> tuple[str, bytes]:
    """The text content as `ok_result` writes it; the structured content as the SDK's pydantic does."""
    return json.dumps(structured, ensure_ascii=False, separators=(",", ":")), pydantic_core.to_json(structured)


def _render_items(rows: list[RawItem]) -> tuple[str, bytes]:
    """`{"items": [...]}` with each stored payload text spliced in rather than parsed and re-serialized.

    Stored payloads are `serialize_items` output, which is exactly what `ok_result`'s json.dumps writes
    for the parsed value, so the text content is the same. pydantic writes floats its own way (1.5e-7,
    not 1.5e-07), so a payload with a float is parsed and written by pydantic for the structured content.
    """
    quoted: dict[str, str] = {}  # a batch's items share their recorded_at
    texts, floats = [], []
    for seq, recorded_at, payload in rows:
        at = quoted.get(recorded_at)
        if at is None:
            at = quoted[recorded_at] = json.dumps(recorded_at, ensure_ascii=False)
        texts.append(f'{{"seq":{seq},"recorded_at":{at},"payload":{payload}}}')
        if _FLOAT.search(payload):
            floats.append(len(texts) - 1)
    text = '{"items":[' + ",".join(texts) + "]}"
    if not floats:
        return text, text.encode()
    for i in floats:
        seq, recorded_at, payload = rows[i]
        texts[i] = f'{{"seq":{seq},"recorded_at":{quoted[recorded_at]},"payload":' \
                   f'{pydantic_core.to_json(json.loads(payload)).decode()}}}'
    return text, ('{"items":[' + ",".join(texts) + "]}").encode()


def _tool_response(request_id: Any, text: str, structured: bytes | None, is_error: bool) -> bytes:
    """The JSON-RPC response body the SDK writes for a CallToolResult with one text content (and structured
    content unless it is None: the SDK leaves out fields that are None)."""
    return b"".join((
        b'{"jsonrpc":"2.0","id":', pydantic_core.to_json(request_id),
        b',"result":{"content":[{"text":', pydantic_core.to_json(text),
        b',"type":"text"}],"isError":', b"true" if is_error else b"false",
        *((b',"structuredContent":', structured) if structured is not None else ()), b"}}",
    ))


async def _respond(send: Send, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
