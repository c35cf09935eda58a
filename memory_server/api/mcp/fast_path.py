"""The MCP fast path: a plain JSON-RPC `tools/call` POST of a log tool, answered without the SDK.

The MCP SDK's stateless transport costs ~2 ms of CPU per request (a transport, memory streams, tasks and a
dispatcher per POST, then fastmcp's middleware chain), which capped appends at ~3k items/s on 2 cores. This
app answers such a call itself, through the same parameter models and the same operations as the tools,
and writes byte-for-byte the response the SDK would (tests/test_log_fast_path.py sends every kind of call
through both and compares).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pydantic
import pydantic_core
from mcp.server.streamable_http import check_accept_headers
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_server.api.failures import unexpected
from memory_server.api.metrics import Metrics
from memory_server.api.principal import principal_of
from memory_server.arguments import Params
from memory_server.auth.principal import Principal
from memory_server.errors import AppError
from memory_server.logs.params import AppendParams, ListConversationsParams, ReplayParams, TailParams
from memory_server.operations.logs import LogOperations
from memory_server.storage.health import StorageHealth
from memory_server.storage.records import RawItem

log = logging.getLogger("memory_server.tools")

MCP_PATH = "/mcp"
MAX_JSON_RPC_ID = 2**63 - 1
_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAMS_KEYS = frozenset({"name", "arguments"})
_TOOLS: dict[str, type[Params]] = {
    "append_memory": AppendParams,
    "recall_memory": TailParams,
    "replay_memory": ReplayParams,
    "list_conversations": ListConversationsParams,
}
# A digit followed by one of these starts a JSON number's fraction or exponent; without one, a payload
# holds no float.
_FLOAT = re.compile(r"[0-9][.eE]")

Work = Callable[[], Awaitable[tuple[str, bytes]]]  # runs the call: (text content, structured content JSON)


class LogToolsFastPath:
    """ASGI app in front of the MCP SDK's app, behind the auth and observability middlewares.

    It answers a POST to /mcp only when it is one plain JSON-RPC `tools/call` of a log tool that the SDK
    path would also accept and run: the same header checks, a Basic principal, arguments that validate
    into the tool's parameter model and pass the operation's own checks. Anything else — initialize,
    notifications, batches, other methods and tools, `_meta`, and every request the SDK would answer with an
    error before running the tool — goes to the SDK untouched, so those answers stay the SDK's own. Failures
    while running (storage unavailable) are rendered as the tools' error middleware renders them.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        ops: LogOperations,
        metrics: Metrics | None = None,
        health: StorageHealth | None = None,
        enabled: bool = True,
    ) -> None:
        self.app = app
        self._ops = ops
        self._metrics = metrics
        self._health = health
        self.enabled = enabled  # off: every call goes through the SDK (tests compare the two)
        self.answered = 0  # calls answered here rather than by the SDK

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            self.enabled
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] == MCP_PATH
            and not scope.get("root_path")
        ):
            await self.app(scope, receive, send)
            return
        messages, body = await _buffer(receive)
        planned = self._plan(scope, body) if body is not None else None
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
            text, structured = str(error), None  # as memory_server.api.mcp.results.error_result: the text only
            is_error, outcome = True, error.code
        if self._metrics is not None:
            self._metrics.observe_tool(tool, outcome, time.perf_counter() - start)
        self.answered += 1
        await _respond(send, _tool_response(request_id, text, structured, is_error))

    def _plan(self, scope: Scope, body: bytes) -> tuple[str | int, str, Work] | None:
        """(JSON-RPC id, tool name, the work) for a call the fast path answers, else None (the SDK answers)."""
        principal = principal_of(scope)
        if principal is None or not principal.is_basic or not _sdk_would_accept(scope):
            return None
        try:
            message = pydantic_core.from_json(body)  # the SDK's parser: the tool sees the same values
        except ValueError:
            return None
        if not isinstance(message, dict) or message.keys() != _ENVELOPE_KEYS or message["jsonrpc"] != "2.0":
            return None
        request_id, call = message["id"], message["params"]
        if not (isinstance(request_id, str) or _is_int(request_id, -MAX_JSON_RPC_ID - 1, MAX_JSON_RPC_ID)):
            return None
        if message["method"] != "tools/call" or not isinstance(call, dict) or call.keys() != _PARAMS_KEYS:
            return None
        tool, arguments = call["name"], call["arguments"]
        model = _TOOLS.get(tool) if isinstance(tool, str) else None
        if model is None or not isinstance(arguments, dict) or not arguments.keys() <= model.model_fields.keys():
            return None
        try:
            return request_id, tool, self._work(principal, model.model_validate(arguments))
        except (pydantic.ValidationError, AppError):  # the SDK path runs the same checks and answers the error
            return None

    def _work(self, principal: Principal, params: Params) -> Work:
        ops = self._ops
        if isinstance(params, AppendParams):
            prepared = ops.prepare(principal, params)  # a bad batch is the SDK's to answer, before anything runs

            async def append() -> tuple[str, bytes]:
                return _render(dict(await ops.append(principal, params, prepared)))

            return append
        if isinstance(params, TailParams):

            async def tail() -> tuple[str, bytes]:
                return _render_items(await ops.tail(principal, params))

            return tail
        if isinstance(params, ReplayParams):

            async def replay() -> tuple[str, bytes]:
                return _render_items(await ops.replay(principal, params))

            return replay
        if isinstance(params, ListConversationsParams):
            ops.list_prepare(principal, params)

            async def conversations() -> tuple[str, bytes]:
                return _render(dict(await ops.conversations(principal, params)))

            return conversations
        raise TypeError(f"no fast path for {type(params).__name__}")


def _sdk_would_accept(scope: Scope) -> bool:
    """The SDK's own header checks for a JSON POST (else it answers, with its own error)."""
    accept = content_type = version = None
    for key, value in scope["headers"]:  # the first of each, as Starlette's Headers.get reads them
        if key == b"accept" and accept is None:
            accept = value.decode("latin-1")
        elif key == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
        elif key == b"mcp-protocol-version" and version is None:
            version = value.decode("latin-1")
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return False  # the SDK's newer protocol path
    if content_type is None or content_type.split(";")[0] != "application/json":
        return False
    request = SimpleNamespace(headers={"accept": accept or ""})
    return bool(check_accept_headers(request)[0])  # type: ignore[arg-type]  # reads .headers only


async def _buffer(receive: Receive) -> tuple[list[Message], bytes | None]:
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


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


def _is_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


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
        texts[i] = (
            f'{{"seq":{seq},"recorded_at":{quoted[recorded_at]},"payload":'
            f"{pydantic_core.to_json(json.loads(payload)).decode()}}}"
        )
    return text, ('{"items":[' + ",".join(texts) + "]}").encode()


def _tool_response(request_id: str | int, text: str, structured: bytes | None, is_error: bool) -> bytes:
    """The JSON-RPC response body the SDK writes for a CallToolResult with one text content (and structured
    content unless it is None: the SDK leaves out fields that are None)."""
    return b"".join(
        (
            b'{"jsonrpc":"2.0","id":',
            pydantic_core.to_json(request_id),
            b',"result":{"content":[{"text":',
            pydantic_core.to_json(text),
            b',"type":"text"}],"isError":',
            b"true" if is_error else b"false",
            *((b',"structuredContent":', structured) if structured is not None else ()),
            b"}}",
        )
    )


async def _respond(send: Send, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
