"""Authentication, tenancy and the HTTP edge, over real HTTP on 127.0.0.1.

Header-level checks use raw httpx2 POSTs to /mcp (the fastmcp client wraps HTTP errors); tool-level checks
use the fastmcp Client. Administrative changes go through the real CLI against the running server's data
directory and must take effect without a restart.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client

from memory_server.auth.principal import READ, WRITE

from conftest import LiveServer, admin, make_settings, query, serve
from procs import parse_fields, run_cli

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LOG_TOOLS = ["append_memory", "recall_memory", "replay_memory", "list_conversations"]


def rpc(name: str, arguments: dict[str, Any], id: int = 1) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    ).encode()


def tool_args(tool: str, conversation_id: str) -> dict[str, Any]:
    return {
        "append_memory": {"conversation_id": conversation_id, "items": [{"by": "intruder"}]},
        "recall_memory": {"conversation_id": conversation_id},
        "replay_memory": {"conversation_id": conversation_id, "limit": 10},
        "list_conversations": {},
    }[tool]


async def post(url: str, body: bytes, authorization: str | bytes | None = None, **kwargs: Any) -> httpx2.Response:
    headers: dict[str, Any] = dict(MCP_HEADERS)
    if authorization is not None:
        headers["Authorization"] = authorization
    headers.update(kwargs.pop("headers", {}))
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(url, content=body, headers=headers, **kwargs)


def assert_401(response: httpx2.Response) -> None:
    assert response.status_code == 401, response.text
    challenge = response.headers.get("www-authenticate", "")
    assert "Basic" in challenge and "Bearer" in challenge
    assert response.json()["error"]["code"] == "unauthorized"


async def call(client: Client, tool: str, args: dict[str, Any]) -> Any:
    return await client.call_tool(tool, args, raise_on_error=False)


async def items_of(client: Client, conversation_id: str) -> list[dict[str, Any]]:
    result = await call(client, "replay_memory", {"conversation_id": conversation_id, "limit": 1000})
    assert not result.is_error, result.content[0].text
    return result.structured_content["items"]


async def conversations_of(client: Client) -> list[str]:
    result = await call(client, "list_conversations", {"limit": 1000})
    assert not result.is_error, result.content[0].text
    return [c["conversation_id"] for c in result.structured_content["conversations"]]


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


# --- credentials at the HTTP edge ---------------------------------------------------------------------


pytestmark = pytest.mark.backends


@pytest.fixture(scope="module")
def edge(storage_backend: str, tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[LiveServer]:
    """One server for the many read-mostly checks below (each writes nothing, or only to its own ids). They
    send dozens of bad credentials on purpose, so failed sign-ins are not limited here (tests/test_sign_in.py
    covers the limit)."""
    settings = make_settings(tmp_path_factory.mktemp("edge") / "data", sign_in_failures_per_minute=100_000)
    with serve(settings, embedder) as server:
        yield server


async def test_health_endpoints_need_no_credentials(edge: LiveServer) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        assert (await http.get(f"{edge.base}/healthz")).status_code == 200
        assert (await http.get(f"{edge.base}/readyz")).status_code == 200


async def test_basic_credentials_work(live: LiveServer) -> None:
    async with live.client() as client:
        ack = await client.call_tool("append_memory", {"conversation_id": "conv-basic-01", "items": [{"a": 1}]})
        assert ack.structured_content["first_seq"] == 0
    response = await post(live.url, rpc("recall_memory", {"conversation_id": "conv-basic-01"}), live.basic_header())
    assert response.status_code == 200
    assert response.json()["result"]["structuredContent"]["items"][0]["payload"] == {"a": 1}
    # The scheme name is case-insensitive (RFC 7235).
    lower = "basic " + live.basic_header().split(" ", 1)[1]
    assert (await post(live.url, rpc("list_conversations", {}), lower)).status_code == 200


def _valid(live: LiveServer) -> str:
    return live.basic_header().split(" ", 1)[1]


BAD_AUTHORIZATIONS: dict[str, Callable[[LiveServer], str | bytes | None]] = {
    "missing": lambda live: None,
    "empty": lambda live: "",
    "wrong secret": lambda live: live.basic_header(secret="not-the-secret"),
    "unknown user": lambda live: live.basic_header(site="nobody-here"),
    "truncated base64": lambda live: "Basic " + _valid(live)[:-3],
    "garbled base64": lambda live: "Basic !!not*base64!!",
    "base64 of binary": lambda live: "Basic " + b64(b"\xff\xfe\xfd:\x00"),
    "no value": lambda live: "Basic",
    "no colon": lambda live: "Basic " + b64(live.site),
    "empty secret": lambda live: "Basic " + b64(f"{live.site}:"),
    "empty user": lambda live: "Basic " + b64(f":{live.secret}"),
    "secret with extra suffix": lambda live: live.basic_header(secret=live.secret + "x"),
    "secret of another case": lambda live: live.basic_header(secret=live.secret.swapcase()),
    "digest scheme": lambda live: "Digest x",
    "token scheme": lambda live: "Token x",
    "basic credentials under the bearer scheme": lambda live: "Bearer " + _valid(live),
    "bearer without value": lambda live: "Bearer",
    "bearer garbage": lambda live: "Bearer garbage",
    "bearer with prefix but unknown": lambda live: "Bearer mst_" + "A" * 43,
    "bearer too long": lambda live: "Bearer mst_" + "A" * 500,
    "non-ascii header bytes": lambda live: b"Basic \xe9\xe8\xff",
}


@pytest.mark.parametrize("case", list(BAD_AUTHORIZATIONS))
async def test_bad_credentials_get_401_before_any_tool_runs(edge: LiveServer, case: str) -> None:
    authorization = BAD_AUTHORIZATIONS[case](edge)
    response = await post(
        edge.url, rpc("append_memory", {"conversation_id": "conv-intrude-1", "items": [{"x": 1}]}), authorization
    )
    assert_401(response)
    async with edge.client() as client:
        assert await items_of(client, "conv-intrude-1") == []


async def test_401_does_not_tell_unknown_users_from_wrong_secrets(edge: LiveServer) -> None:
    body = rpc("list_conversations", {})
    unknown = await post(edge.url, body, edge.basic_header(site="nobody-here"))
    wrong = await post(edge.url, body, edge.basic_header(secret="wrong"))
    assert_401(unknown)
    assert_401(wrong)
    assert unknown.json() == wrong.json()


async def test_every_mcp_method_needs_credentials(edge: LiveServer) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        for method in ("GET", "POST", "DELETE", "PUT"):
            assert_401(await http.request(method, edge.url, headers=MCP_HEADERS))
        assert_401(await http.post(f"{edge.url}/", headers=MCP_HEADERS, content=b"{}"))


# --- Bearer tokens on Basic-only tools -------------------------------------------------------------------


@pytest.mark.parametrize(
    "scopes, bounds",
    [
        ([READ], {}),
        ([WRITE], {}),
        ([READ, WRITE], {}),
        ([READ, WRITE], {"teams": ["t1"], "projects": ["p1"], "buckets": ["b1"]}),
    ],
    ids=["read", "write", "read+write", "read+write bounded"],
)
async def test_bearer_token_on_log_tools_gets_unprocessable_parameters(
    live: LiveServer, scopes: list[str], bounds: dict[str, list[str]]
) -> None:
    async with live.client() as basic:
        await basic.call_tool("append_memory", {"conversation_id": "conv-basic-02", "items": [{"a": 1}]})
    _, token = live.create_token(scopes=scopes, **bounds)
    async with live.client(auth=token) as bearer:
        for tool in LOG_TOOLS:
            result = await call(bearer, tool, tool_args(tool, "conv-basic-02"))
            text = result.content[0].text
            assert result.is_error and text.startswith("unprocessable_parameters: "), text
            assert "Basic" in text
            assert result.structured_content is None  # an error result is its `code: message` text alone
            assert text.split(": ", 1)[1] == (
                "this operation requires the site's Basic authentication (conversation logs take no tokens)"
            )
    async with live.client() as basic:
        assert [i["payload"] for i in await items_of(basic, "conv-basic-02")] == [{"a": 1}]


async def test_revoked_token_is_rejected_by_the_running_server(live: LiveServer) -> None:
    created = run_cli(
        "token", "create", "--site", live.site, "--scope", READ, "--scope", WRITE, data_dir=live.settings.data_dir
    )
    assert created.returncode == 0, created.stderr
    fields = parse_fields(created.stdout)
    token, token_id = fields["token"], fields["id"]
    body = rpc("list_conversations", {})
    accepted = await post(live.url, body, f"Bearer {token}")
    assert accepted.status_code == 200  # authenticated; the tool itself says Basic is required
    assert accepted.json()["result"]["content"][0]["text"].startswith("unprocessable_parameters: ")

    revoked = run_cli("token", "revoke", token_id, data_dir=live.settings.data_dir)
    assert revoked.returncode == 0, revoked.stderr
    assert_401(await post(live.url, body, f"Bearer {token}"))


# --- tenancy ----------------------------------------------------------------------------------------


async def test_sites_never_see_each_other(live: LiveServer) -> None:
    other_secret = live.create_site("globex")
    shared_id = "conv-shared-0001"
    async with live.client() as a, live.client(auth=httpx2.BasicAuth("globex", other_secret)) as b:
        await a.call_tool("append_memory", {"conversation_id": shared_id, "items": [{"site": "acme", "n": 0}]})
        await a.call_tool("append_memory", {"conversation_id": "conv-acme-only", "items": [{"secret": "a"}]})

        assert await items_of(b, shared_id) == []
        assert await items_of(b, "conv-acme-only") == []
        recalled = await call(b, "recall_memory", {"conversation_id": "conv-acme-only", "count": 1000})
        assert recalled.structured_content["items"] == []
        assert await conversations_of(b) == []

        # The same conversation id in another site is another log: its seq starts at 0.
        ack = await b.call_tool("append_memory", {"conversation_id": shared_id, "items": [{"site": "globex"}]})
        assert ack.structured_content["first_seq"] == 0
        assert [i["payload"] for i in await items_of(a, shared_id)] == [{"site": "acme", "n": 0}]
        assert [i["payload"] for i in await items_of(b, shared_id)] == [{"site": "globex"}]
        assert sorted(await conversations_of(a)) == ["conv-acme-only", shared_id]
        assert await conversations_of(b) == [shared_id]
        # Idempotency keys are per site too.
        first = await a.call_tool(
            "append_memory", {"conversation_id": shared_id, "items": [{"k": 1}], "idempotency_key": "same"}
        )
        second = await b.call_tool(
            "append_memory", {"conversation_id": shared_id, "items": [{"k": 1}], "idempotency_key": "same"}
        )
        assert first.structured_content["duplicate"] is False and second.structured_content["duplicate"] is False


async def test_site_rotate_takes_effect_without_restart(live: LiveServer) -> None:
    async with live.client() as client:
        await client.call_tool("append_memory", {"conversation_id": "conv-rotate-01", "items": [{"kept": True}]})
    old_header = live.basic_header()
    assert (await post(live.url, rpc("list_conversations", {}), old_header)).status_code == 200

    rotated = run_cli("site", "rotate", live.site, data_dir=live.settings.data_dir)
    assert rotated.returncode == 0, rotated.stderr
    fields = parse_fields(rotated.stdout)
    assert fields["username"] == live.site and fields["secret"] != live.secret

    assert_401(await post(live.url, rpc("list_conversations", {}), old_header))
    async with Client(live.url, auth=httpx2.BasicAuth(live.site, fields["secret"])) as client:
        assert [i["payload"] for i in await items_of(client, "conv-rotate-01")] == [{"kept": True}]


async def test_site_delete_removes_its_data(live: LiveServer) -> None:
    other_secret = live.create_site("globex")
    async with live.client() as a, live.client(auth=httpx2.BasicAuth("globex", other_secret)) as b:
        await a.call_tool("append_memory", {"conversation_id": "conv-doomed-01", "items": [{"n": 1}, {"n": 2}]})
        await a.call_tool(
            "append_memory", {"conversation_id": "conv-doomed-01", "items": [{"n": 3}], "idempotency_key": "key-1"}
        )
        await b.call_tool("append_memory", {"conversation_id": "conv-survivor", "items": [{"n": 1}]})
    old_id = admin(live.settings, lambda sites: sites.site_id(live.site))

    deleted = run_cli("site", "delete", live.site, data_dir=live.settings.data_dir)
    assert deleted.returncode == 0, deleted.stderr
    assert_401(await post(live.url, rpc("list_conversations", {}), live.basic_header()))

    for table in ("log_items", "conversations", "append_keys", "tokens"):
        assert query(live.settings, f"SELECT COUNT(*) FROM {table} WHERE site_id = ?", old_id) == [(0,)]

    # A site re-created under the same name is a new, empty tenant.
    recreated = parse_fields(run_cli("site", "create", live.site, data_dir=live.settings.data_dir).stdout)
    async with Client(live.url, auth=httpx2.BasicAuth(live.site, recreated["secret"])) as a:
        assert await conversations_of(a) == []
        assert await items_of(a, "conv-doomed-01") == []
        ack = await a.call_tool(
            "append_memory", {"conversation_id": "conv-doomed-01", "items": [{"n": 3}], "idempotency_key": "key-1"}
        )
        assert ack.structured_content["first_seq"] == 0 and ack.structured_content["duplicate"] is False
    async with live.client(auth=httpx2.BasicAuth("globex", other_secret)) as b:
        assert [i["payload"] for i in await items_of(b, "conv-survivor")] == [{"n": 1}]


# --- the HTTP edge: body size and malformed requests ---------------------------------------------------

SMALL_LIMIT = 64 * 1024


@pytest.fixture
def small(tmp_path: Path, embedder: Any) -> Iterator[LiveServer]:
    """A server whose request-body limit is 64 KiB."""
    with serve(make_settings(tmp_path / "data", max_request_bytes=SMALL_LIMIT), embedder) as server:
        yield server


def padded_append(total: int) -> bytes:
    """An append request of about `total` bytes."""
    return rpc("append_memory", {"conversation_id": "conv-bigbody-1", "items": [{"pad": "x" * total}]})


async def test_oversized_body_with_content_length_gets_413(small: LiveServer) -> None:
    response = await post(small.url, padded_append(SMALL_LIMIT + 1024), small.basic_header())
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    async with small.client() as client:
        assert await items_of(client, "conv-bigbody-1") == []


async def test_oversized_chunked_body_gets_413(small: LiveServer) -> None:
    body = padded_append(SMALL_LIMIT + 1024)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    response = await post(small.url, chunks(), small.basic_header())  # type: ignore[arg-type]
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    async with small.client() as client:
        assert await items_of(client, "conv-bigbody-1") == []


async def test_body_under_the_limit_is_accepted_chunked_or_not(small: LiveServer) -> None:
    body = padded_append(SMALL_LIMIT - 1024)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    for content in (body, chunks()):
        response = await post(small.url, content, small.basic_header())  # type: ignore[arg-type]
        assert response.status_code == 200, response.text
        assert response.json()["result"]["isError"] is False
    async with small.client() as client:
        assert [i["seq"] for i in await items_of(client, "conv-bigbody-1")] == [0, 1]


async def test_oversized_body_without_credentials_gets_401(small: LiveServer) -> None:
    assert_401(await post(small.url, padded_append(SMALL_LIMIT + 1024)))


MALFORMED_BODIES = {
    "truncated object": b"{",
    "not json": b"not json",
    "empty": b"",
    "array": b"[]",
    "empty object": b"{}",
    "jsonrpc only": b'{"jsonrpc":"2.0"}',
    "binary": b"\xff\xfe\x00\x01",
    "number": b"42",
    "null": b"null",
    "unknown method": b'{"jsonrpc":"2.0","id":1,"method":"no/such"}',
    "tools/call without params": b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}',
    "unknown tool": rpc("no_such_tool", {}),
    "arguments not an object": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"recall_memory",'
    b'"arguments":[1,2]}}',
    "NaN literal": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"append_memory",'
    b'"arguments":{"conversation_id":"conv-malformed","items":[{"x":NaN}]}}}',
    "huge number": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"append_memory",'
    b'"arguments":{"conversation_id":"conv-malformed","items":[{"x":1e999}]}}}',
    "lone surrogate": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"append_memory",'
    b'"arguments":{"conversation_id":"conv-malformed","items":[{"x":"\\ud800"}]}}}',
}


async def test_malformed_bodies_never_get_a_5xx(edge: LiveServer) -> None:
    statuses = {}
    for name, body in MALFORMED_BODIES.items():
        response = await post(edge.url, body, edge.basic_header())
        statuses[name] = response.status_code
        assert response.status_code < 500, (name, response.status_code, response.text)
        assert "Traceback" not in response.text
        if response.status_code == 200:  # a JSON-RPC answer: an error, or an MCP tool error result
            answer = response.json()
            if "error" not in answer:  # a tool error result; nothing here is a transient failure
                assert answer["result"]["content"][0]["text"].startswith("invalid_parameters: "), (name, answer)
    # Content type and Accept the MCP transport does not speak: still a clean 4xx.
    for headers in ({"Content-Type": "text/plain"}, {"Accept": "text/html"}):
        response = await post(edge.url, rpc("list_conversations", {}), edge.basic_header(), headers=headers)
        statuses[str(headers)] = response.status_code
        assert 400 <= response.status_code < 500, (headers, response.status_code, response.text)
    print("statuses for malformed requests:", statuses)
    async with edge.client() as client:
        assert await items_of(client, "conv-malformed") == []
