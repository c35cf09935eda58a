"""DNS rebinding and cross-site requests, against a real server process on 127.0.0.1: a foreign `Origin` on
/mcp or /v1 and a non-loopback `Host` get 403 before anything runs, even with valid credentials; clients
that send no Origin (every non-browser client) are unaffected; MEMORY_ALLOWED_ORIGINS lets named origins in."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx2
import pytest

from procs import ServerProcess, parse_fields, run_cli, server_env

ALLOWED = "https://app.example.com"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
APPEND = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "append_memory",
            "arguments": {"conversation_id": "conv-origin-01", "items": [{"from": "page"}]},
        },
    }
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, tuple[str, str]]]:
    data = tmp_path_factory.mktemp("origin") / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    process = ServerProcess(data, env=server_env(MEMORY_ALLOWED_ORIGINS=f"{ALLOWED}, http://localhost:3000"))
    process.start()
    try:
        yield process, ("acme", secret)
    finally:
        process.kill()


def item_count(process: ServerProcess, auth: tuple[str, str]) -> int:
    response = httpx2.get(f"{process.base}/v1/conversations/conv-origin-01/items", auth=auth, timeout=30)
    return len(response.json()["items"])


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "null",
        "http://127.0.0.1.evil.example",
        "https://app.example.com.evil.example",
        "http://localhost:3001",
    ],
)
def test_a_foreign_origin_is_refused_before_anything_runs(
    server: tuple[ServerProcess, tuple[str, str]], origin: str
) -> None:
    process, auth = server
    before = item_count(process, auth)
    headers = {**MCP_HEADERS, "Origin": origin}
    for response in (
        httpx2.post(process.url, content=APPEND, headers=headers, auth=auth, timeout=30),
        httpx2.post(
            f"{process.base}/v1/conversations/conv-origin-01/items",
            json={"items": [{}]},
            headers={"Origin": origin},
            auth=auth,
            timeout=30,
        ),
        httpx2.get(f"{process.base}/v1/memories", headers={"Origin": origin}, auth=auth, timeout=30),
    ):
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["code"] == "forbidden" and "MEMORY_ALLOWED_ORIGINS" in error["message"]
    assert item_count(process, auth) == before


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "10.0.0.5", "127.0.0.1.nip.io"])
def test_a_foreign_host_is_refused_on_a_loopback_server(
    server: tuple[ServerProcess, tuple[str, str]], host: str
) -> None:
    process, auth = server
    before = item_count(process, auth)
    response = httpx2.post(process.url, content=APPEND, headers={**MCP_HEADERS, "Host": host}, auth=auth, timeout=30)
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert "loopback" in response.json()["error"]["message"]
    assert httpx2.get(f"{process.base}/readyz", headers={"Host": host}, timeout=30).status_code == 403
    assert item_count(process, auth) == before


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": ALLOWED},
        {"Origin": "http://localhost:3000"},
        {"Origin": "HTTPS://APP.EXAMPLE.COM/"},
        {"Host": "localhost"},
        {"Host": "[::1]:8765"},
    ],
)
def test_clients_without_origin_and_allowed_origins_are_served(
    server: tuple[ServerProcess, tuple[str, str]], headers: dict[str, str]
) -> None:
    process, auth = server
    before = item_count(process, auth)
    response = httpx2.post(process.url, content=APPEND, headers={**MCP_HEADERS, **headers}, auth=auth, timeout=30)
    assert response.status_code == 200, response.text
    assert item_count(process, auth) == before + 1
