"""The log tools' fast path (memory_server.api.mcp.fast_path.LogToolsFastPath) answers exactly as the MCP SDK path does.

Every request is sent twice over real HTTP to one server: once with the fast path on, once with it off
(the SDK and fastmcp answer), and the two responses are compared: status, headers and body bytes.
Successes, every error kind, and requests the fast path must leave to the SDK (initialize, notifications,
batches, other methods, odd headers) are all sent. Appends change the log, so each path appends to its
own site, and only the commit timestamps are masked before comparing them; reads are compared raw.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from memory_server.api.app import create_app
from memory_server.auth import admin as auth
from memory_server.auth.principal import READ, WRITE
from memory_server.services import open_services
from memory_server.storage.factory import open_storage

from conftest import ThreadedServer, admin, free_port, make_settings, wait_ready

pytestmark = pytest.mark.backends

TIMESTAMP = re.compile(rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+Z")
CONV = "conversation-fast-1"
JSON_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


class Both:
    """One live server; `send` posts a body through the fast path and through the SDK path."""

    def __init__(self, app: Any, base: str, headers: dict[str, dict[str, str]]) -> None:
        self.app, self.url, self.auth = app, f"{base}/mcp", headers
        self.http = httpx2.Client(timeout=30)
        self.last_body = b""  # named in a failure message

    def post(self, fast: bool, body: bytes, headers: dict[str, str]) -> httpx2.Response:
        self.app.state.log_fast_path.enabled = fast
        try:
            return self.http.post(self.url, content=body, headers=headers)
        finally:
            self.app.state.log_fast_path.enabled = True

    @property
    def answered(self) -> int:
        """Responses the fast path wrote itself."""
        return int(self.app.state.log_fast_path.answered)

    def check(self, fast_answered: bool | None, before: int) -> None:
        if fast_answered is not None:
            assert self.answered - before == (1 if fast_answered else 0), f"fast path taken? {self.last_body!r}"

    def same(
        self,
        message: Any,
        *,
        who: str = "a",
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        fast_answers: bool | None = False,
    ) -> bytes:
        """Send a read (or anything that changes nothing) both ways; the responses must be identical.
        `fast_answers`: whether the fast path must answer itself (True) or leave it to the SDK (False)."""
        body = raw if raw is not None else json.dumps(message).encode()
        sent = {**JSON_HEADERS, **self.auth[who], **(headers or {})}
        before = self.answered
        self.last_body = body
        fast = self.post(True, body, sent)
        self.check(fast_answers, before)
        sdk = self.post(False, body, sent)
        assert_same(fast, sdk)
        return fast.content

    def same_append(self, arguments: dict[str, Any], *, request_id: Any = 1, fast_answers: bool = False) -> bytes:
        """An append changes the log: the fast path appends for site a, the SDK path for site b, which
        start from the same state; responses must match but for the commit time."""
        body = json.dumps(call("append_memory", arguments, request_id=request_id)).encode()
        before = self.answered
        fast = self.post(True, body, {**JSON_HEADERS, **self.auth["a"]})
        self.check(fast_answers, before)
        sdk = self.post(False, body, {**JSON_HEADERS, **self.auth["b"]})
        assert_same(fast, sdk, mask=TIMESTAMP)
        return fast.content


def assert_same(fast: httpx2.Response, sdk: httpx2.Response, *, mask: re.Pattern[bytes] | None = None) -> None:
    a, b = fast.content, sdk.content
    if mask is not None:
        a, b = mask.sub(b"<ts>", a), mask.sub(b"<ts>", b)
    assert (fast.status_code, a) == (sdk.status_code, b)
    assert headers_of(fast) == headers_of(sdk), a


def headers_of(response: httpx2.Response) -> list[tuple[str, str]]:
    skip = {"x-request-id", "date", "server"}
    return [(k.lower(), v) for k, v in response.headers.multi_items() if k.lower() not in skip]


def call(tool: str, arguments: Any, *, request_id: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def basic(site: str, secret: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()}


class UnreadableLogs:
    """The real log store, whose reads fail with the error a failing disk gives while `failing` is set."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.failing = inner, False

    def _read(self, name: str) -> Any:
        def read(*args: Any) -> Any:
            if self.failing:
                raise sqlite3.OperationalError("disk I/O error")
            return getattr(self.inner, name)(*args)

        return read

    def __getattr__(self, name: str) -> Any:
        if name in ("tail", "replay", "conversations"):
            return self._read(name)
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, embedder: Any, storage_backend: str) -> Iterator[Both]:
    # Small limits, so payload_too_large is cheap to reach.
    settings = make_settings(tmp_path_factory.mktemp("fast") / "data", max_payload_bytes=2048, max_batch_bytes=8192)
    secrets = {name: admin(settings, lambda sites, name=name: auth.create_site(sites, name)) for name in ("a", "b")}
    _, token = admin(settings, lambda sites: auth.create_token(sites, "a", scopes=[READ, WRITE]))
    storage = open_storage(settings)
    storage.logs = UnreadableLogs(storage.logs)
    app = create_app(settings, services=open_services(settings, storage=storage), embedder=embedder)
    port = free_port()
    with ThreadedServer(app, port):
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        headers = {name: basic(name, secret) for name, secret in secrets.items()}
        headers["bearer"] = {"authorization": f"Bearer {token}"}
        yield Both(app, base, headers)


PAYLOADS = [
    {"role": "user", "text": "plain"},
    {"f": 1.5e-7, "g": 1e16, "h": 0.1, "i": -0.0, "j": 12345678901234567890123, "k": 2.5},
    {"s": 'é ü \u2028 \u2029 \x7f \x01 \n \t " \\ / 😀 \u0000', "nested": {"a": [1, [2, {"b": None}]], "t": True}},
    {"3.5": "a key with a dot after a digit", "v": "version 3.5e"},
    {},
]


def test_appends_answer_alike(both: Both) -> None:
    first = both.same_append({"conversation_id": CONV, "items": PAYLOADS}, fast_answers=True)
    assert b'"isError":false' in first
    key = {"conversation_id": CONV, "items": PAYLOADS[:2], "idempotency_key": "k-1"}
    both.same_append(key, request_id="str-id", fast_answers=True)
    assert b'"duplicate":true' in both.same_append(key, request_id=-7, fast_answers=True)
    both.same_append(
        {"conversation_id": CONV, "items": [{}] * 999 + [{"n": 1}], "idempotency_key": None}, fast_answers=True
    )
    both.same_append(
        {"conversation_id": "x" * 64, "items": [{"edge": "longest id"}]}, request_id=2**63 - 1, fast_answers=True
    )


def test_reads_answer_alike(both: Both) -> None:
    both.same_append({"conversation_id": "conversation-reads", "items": PAYLOADS * 3}, fast_answers=True)
    for arguments in (
        {"conversation_id": "conversation-reads"},
        {"conversation_id": "conversation-reads", "count": 4},
        {"conversation_id": "conversation-reads", "count": 0},
        {"conversation_id": "conversation-reads", "count": 1000},
        {"conversation_id": "never-written-1"},
    ):
        assert b'"isError":false' in both.same(call("recall_memory", arguments), fast_answers=True)
    for arguments in (
        {"conversation_id": "conversation-reads", "limit": 1000},
        {"conversation_id": "conversation-reads", "limit": 3, "offset": 5},
        {"conversation_id": "conversation-reads", "limit": 0},
        {"conversation_id": "conversation-reads", "limit": 5, "offset": 2**63 - 1},
        {"conversation_id": "never-written-1", "limit": 10},
    ):
        assert b'"isError":false' in both.same(call("replay_memory", arguments), fast_answers=True)
    page = json.loads(both.same(call("list_conversations", {"limit": 1}), fast_answers=True))
    cursor = page["result"]["structuredContent"]["next_cursor"]
    both.same(call("list_conversations", {"limit": 1, "cursor": cursor}), fast_answers=True)
    both.same(call("list_conversations", {}), fast_answers=True)
    both.same(call("list_conversations", {"cursor": None}), fast_answers=True)
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        both.same(
            call("recall_memory", {"conversation_id": "conversation-reads", "count": 2}),
            headers={"mcp-protocol-version": version},
            fast_answers=True,
        )
    both.same(
        call("recall_memory", {"conversation_id": "conversation-reads", "count": 2}),
        headers={"mcp-protocol-version": "2099-01-01"},
    )
    both.same(
        call("replay_memory", {"conversation_id": "conversation-reads", "limit": 2}, request_id="7"), fast_answers=True
    )
    # A number with no fractional part is an integer (memory_server.arguments): both paths read 5.0 as 5.
    both.same(call("recall_memory", {"conversation_id": "conversation-reads", "count": 5.0}), fast_answers=True)
    both.same(
        call("replay_memory", {"conversation_id": "conversation-reads", "limit": 3.0, "offset": 2.0}), fast_answers=True
    )
    both.same(call("list_conversations", {"limit": 1e0}), fast_answers=True)
    # null for a parameter with a default is the default, on both paths.
    both.same(call("recall_memory", {"conversation_id": "conversation-reads", "count": None}), fast_answers=True)
    both.same(
        call("replay_memory", {"conversation_id": "conversation-reads", "limit": 4, "offset": None}), fast_answers=True
    )
    both.same(call("list_conversations", {"limit": None, "cursor": None}), fast_answers=True)


BAD_APPENDS = [
    {"conversation_id": "short", "items": [{}]},
    {"conversation_id": "conversation\n1", "items": [{}]},
    {"conversation_id": 12345678, "items": [{}]},
    {"conversation_id": CONV},
    {"conversation_id": CONV, "items": []},
    {"conversation_id": CONV, "items": {"not": "a list"}},
    {"conversation_id": CONV, "items": [1, 2]},
    {"conversation_id": CONV, "items": [{}] * 1001},
    {"conversation_id": CONV, "items": [{"big": "x" * 4096}]},
    {"conversation_id": CONV, "items": [{"n": "x" * 1500}] * 8},
    {"conversation_id": CONV, "items": [{}], "idempotency_key": ""},
    {"conversation_id": CONV, "items": [{}], "idempotency_key": "k" * 129},
    {"conversation_id": CONV, "items": [{}], "idempotency_key": 5},
    {"conversation_id": CONV, "items": [{}], "unexpected": 1},
    {"conversation_id": CONV, "items": [{"deep": json.loads("[" * 80 + "]" * 80)}]},
]

BAD_READS = [
    call("recall_memory", {"conversation_id": CONV, "count": 1001}),
    call("recall_memory", {"conversation_id": CONV, "count": -1}),
    call("recall_memory", {"conversation_id": CONV, "count": True}),
    call("recall_memory", {"conversation_id": CONV, "count": "5"}),
    call("recall_memory", {"conversation_id": CONV, "count": 5.5}),
    call("recall_memory", {"conversation_id": CONV, "count": 1001.0}),
    call("replay_memory", {"conversation_id": CONV, "limit": "10"}),
    call("replay_memory", {"conversation_id": CONV, "limit": None}),
    call("recall_memory", {"conversation_id": None}),
    call("replay_memory", {"conversation_id": CONV, "limit": 10, "offset": 0.5}),
    call("list_conversations", {"limit": "5"}),
    call("list_conversations", {"limit": False}),
    call("list_conversations", {"cursor": ["a"]}),
    call("append_memory", {"conversation_id": CONV, "items": "[{}]"}),
    call("recall_memory", {"conversation_id": "bad id!"}),
    call("recall_memory", {}),
    call("recall_memory", None),
    call("replay_memory", {"conversation_id": CONV}),
    call("replay_memory", {"conversation_id": CONV, "limit": 10, "offset": -1}),
    call("replay_memory", {"conversation_id": CONV, "limit": 1001}),
    call("replay_memory", {"conversation_id": CONV, "limit": 10, "extra": True}),
    call("list_conversations", {"limit": 0}),
    call("list_conversations", {"cursor": "not-a-cursor"}),
    call("list_conversations", {"cursor": 5}),
    call("no_such_tool", {"conversation_id": CONV}),
    call("recall", {"query": "plain"}),
]

ODD_MESSAGES = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    },
    {"jsonrpc": "2.0", "id": 1, "method": "ping"},
    {"jsonrpc": "1.0", **{k: v for k, v in call("recall_memory", {"conversation_id": CONV}).items() if k != "jsonrpc"}},
    {**call("recall_memory", {"conversation_id": CONV}), "id": None},
    {**call("recall_memory", {"conversation_id": CONV}), "id": 1.0},
    {**call("recall_memory", {"conversation_id": CONV}), "id": True},
    {**call("recall_memory", {"conversation_id": CONV}), "extra": 1},
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "recall_memory", "arguments": {"conversation_id": CONV}, "_meta": {"progressToken": 3}},
    },
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall_memory"}},
    [call("recall_memory", {"conversation_id": CONV})],
    "just a string",
]


def test_errors_answer_alike(both: Both) -> None:
    for arguments in BAD_APPENDS:
        both.same_append(arguments)
    error_results = 0
    for message in BAD_READS + ODD_MESSAGES:
        answer = json.loads(both.same(message) or b"null")
        result = answer.get("result") if isinstance(answer, dict) else None
        if result and result.get("isError"):  # an error result is `code: message` alone
            assert "structuredContent" not in result, (message, answer)
            assert result["content"][0]["text"].startswith("invalid_parameters: "), (message, answer)
            error_results += 1
    assert error_results >= 20
    both.same(call("append_memory", {"conversation_id": CONV, "items": [{}]}), who="bearer")  # unprocessable
    both.same(call("recall_memory", {"conversation_id": CONV}), who="bearer")


def test_offsets_past_any_log_read_as_an_empty_page(both: Both) -> None:
    for offset in (1e19, 2**63, 2**70):
        body = both.same(
            call("replay_memory", {"conversation_id": CONV, "limit": 10, "offset": offset}), fast_answers=True
        )
        assert json.loads(body)["result"]["structuredContent"] == {"items": []}


def test_odd_requests_answer_alike(both: Both) -> None:
    message = call("recall_memory", {"conversation_id": CONV})
    both.same(None, raw=b"{not json")
    both.same(None, raw=b"")
    both.same(
        None,
        raw=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall_memory",'
        b' "arguments": {"conversation_id": "\\ud800 lone surrogate"}}}',
    )
    for headers in (
        {"content-type": "text/plain"},
        {"content-type": "Application/JSON"},
        {"content-type": "application/jsonx"},
        {"accept": "text/event-stream"},
        {"accept": ""},
        {"mcp-protocol-version": "1999-01-01"},
    ):
        both.same(message, headers=headers)
    for headers in (
        {"content-type": "application/json; charset=utf-8"},
        {"accept": "*/*"},
        {"accept": "application/*"},
        {"accept": "application/json"},
    ):
        both.same(message, headers=headers, fast_answers=True)


def test_storage_failures_answer_alike(both: Both) -> None:
    logs = both.app.state.services.storage.logs
    logs.failing = True
    try:
        body = both.same(call("replay_memory", {"conversation_id": CONV, "limit": 5}), fast_answers=True)
        assert b'"isError":true' in body and b"unavailable" in body
        assert b"structuredContent" not in body  # an error is its text only, on both paths
        both.same(call("recall_memory", {"conversation_id": CONV}), fast_answers=True)
        both.same(call("list_conversations", {}), fast_answers=True)
    finally:
        logs.failing = False


def test_fast_path_calls_are_counted(both: Both) -> None:
    def tool_calls() -> float:
        text = both.http.get(both.url.removesuffix("/mcp") + "/metrics").text
        line = next(
            line
            for line in text.splitlines()
            if line.startswith("memory_server_tool_calls_total{")
            and 'tool="recall_memory"' in line
            and 'outcome="ok"' in line
        )
        return float(line.rsplit(" ", 1)[1])

    before = tool_calls()
    both.same(call("recall_memory", {"conversation_id": CONV, "count": 1}), fast_answers=True)
    assert tool_calls() == before + 2  # once per path


async def test_concurrent_fast_path_appends_stay_gapless(both: Both) -> None:
    """Many concurrent appends to one conversation through the fast path: every seq once, no gap, and each
    batch contiguous and in order (the same single writer as the SDK path)."""
    conversation, writers, batches = "conversation-hot-fast", 16, 5
    headers = {**JSON_HEADERS, **both.auth["a"]}
    before = both.answered

    async def writer(http: httpx2.AsyncClient, w: int) -> None:
        for b in range(batches):
            items = [{"w": w, "b": b, "i": i} for i in range(3)]
            response = await http.post(
                both.url, headers=headers, json=call("append_memory", {"conversation_id": conversation, "items": items})
            )
            assert json.loads(response.content)["result"]["isError"] is False

    async with httpx2.AsyncClient(timeout=30) as http:
        await asyncio.gather(*(writer(http, w) for w in range(writers)))
    assert both.answered - before == writers * batches
    page = json.loads(
        both.same(call("replay_memory", {"conversation_id": conversation, "limit": 1000}), fast_answers=True)
    )
    items = page["result"]["structuredContent"]["items"]
    assert [item["seq"] for item in items] == list(range(writers * batches * 3))
    for start in range(0, len(items), 3):
        batch = [item["payload"] for item in items[start : start + 3]]
        assert [p["i"] for p in batch] == [0, 1, 2] and len({(p["w"], p["b"]) for p in batch}) == 1


# On PostgreSQL the sign-in check before either path reads the closed authority: the call never reaches a tool.
@pytest.mark.sqlite_only
def test_shutting_down_answers_alike(both: Both) -> None:
    """Last: closes the storage. A call that reaches it after that is `unavailable` on both paths."""
    both.app.state.services.storage.close()
    body = both.same_append({"conversation_id": CONV, "items": [{}]}, fast_answers=True)
    assert b'"isError":true' in body and b"shutting down" in body
    assert b"structuredContent" not in body
