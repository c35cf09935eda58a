"""Text no backend can store is refused alike on SQLite and PostgreSQL, through REST and MCP, by a real server.

PostgreSQL's text cannot hold NUL (U+0000), nor its jsonb even escaped, and no store can encode a lone
surrogate: both are `invalid_parameters` (422) in every string a memory holds (content, attributes, every key
and string of metadata and provenance), in every reference, query, filter, cursor and idempotency key, on both
backends, and nothing is written. A log payload is JSON text stored as appended, escapes and all: there a NUL
(in a key or a nested string) is kept and comes back unchanged on both.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from procs import ServerProcess, parse_fields, run_cli

pytestmark = pytest.mark.backends

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
NUL = "\x00"
LONE = "\ud83d"
TARGET = "The target memory of every change in this module."


def memory_fields(bad: str) -> dict[str, dict[str, Any]]:
    """A remember/PATCH body per place a bad character can hide in a memory."""
    return {
        "content": {"content": f"a fact {bad} with a bad character"},
        "location": {"location": f"projects/{bad}"},
        "type": {"type": f"note{bad}"},
        "project": {"project": f"p{bad}"},
        "team": {"team": f"t{bad}"},
        "bucket": {"bucket": f"b{bad}"},
        "tags": {"tags": ["fine", f"t{bad}"]},
        "occurred_at": {"occurred_at": f"2024-01-01T00:00:00Z{bad}"},
        "expires_at": {"expires_at": f"2999-01-01T00:00:00Z{bad}"},
        "supersedes": {"supersedes": f"mem_{bad}"},
        "metadata value": {"metadata": {"note": f"x{bad}y"}},
        "metadata key": {"metadata": {f"k{bad}": 1}},
        "metadata nested": {"metadata": {"a": [{"b": ["ok", {"c": bad}]}]}},
        "provenance value": {"provenance": {"source": f"chat{bad}"}},
        "provenance key": {"provenance": {f"agent{bad}": "x"}},
        "provenance conversation_id": {"provenance": {"conversation_id": f"conv{bad}", "seq": 1}},
        "provenance nested": {"provenance": {"trail": [{"step": [bad]}]}},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, storage_backend: str) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp(f"nul-{storage_backend}") / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    process = ServerProcess(data)
    process.start()
    try:
        process.wait_ready()
        auth = ("acme", secret)
        with httpx2.Client(base_url=process.base, auth=auth, timeout=60) as http:
            created = http.post("/v1/memories", json={"content": TARGET, "metadata": {"kept": True}})
            assert created.status_code == 201, created.text
            yield {"process": process, "auth": auth, "http": http, "target": created.json()["reference"]}
        assert "Traceback" not in process.log(), process.log()[-3000:]
    finally:
        process.kill()


def rest_error(response: httpx2.Response) -> str:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_parameters" and error["retryable"] is False, error
    return str(error["message"])


def mcp(server: dict[str, Any], tool: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A raw JSON-RPC tools/call, the body exactly as given (NUL and lone surrogates escaped as JSON allows)."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    )
    response = httpx2.post(server["process"].url, content=body, headers=MCP_HEADERS, auth=server["auth"], timeout=60)
    return response.status_code, response.json() if response.content else {}


def mcp_error(server: dict[str, Any], tool: str, arguments: dict[str, Any]) -> str:
    status, reply = mcp(server, tool, arguments)
    assert status == 200, reply
    result = reply["result"]
    assert result.get("isError"), result
    text = str(result["content"][0]["text"])
    assert text.startswith("invalid_parameters: "), text
    return text


def state(server: dict[str, Any]) -> tuple[Any, ...]:
    """Every memory of the site and the target's attributes: what a refused write must leave alone."""
    http = server["http"]
    listed = http.get("/v1/memories", params={"limit": 100}).json()["memories"]
    target = http.get(f"/v1/memories/{server['target']}").json()
    return tuple(sorted(m["reference"] for m in listed)), target["updated_at"], target["metadata"]


def say_nul(message: str, field: str) -> None:
    assert "NUL" in message or "must be" in message, message  # words and dates: their own rule says it
    assert field.split()[0] in message, message


@pytest.mark.parametrize("field", list(memory_fields(NUL)))
def test_nul_anywhere_in_a_memory_is_invalid_on_rest_patch_and_mcp(server: dict[str, Any], field: str) -> None:
    body = memory_fields(NUL)[field]
    before = state(server)
    http = server["http"]
    say_nul(rest_error(http.post("/v1/memories", json={"content": "A fine memory.", **body})), field)
    say_nul(rest_error(http.patch(f"/v1/memories/{server['target']}", json=body)), field)
    say_nul(mcp_error(server, "remember", {"content": "A fine memory.", **body}), field)
    assert state(server) == before


@pytest.mark.parametrize("field", list(memory_fields(LONE)))
def test_a_lone_surrogate_is_refused_wherever_a_nul_is(server: dict[str, Any], field: str) -> None:
    """REST's body parser names the surrogate; the MCP SDK's refuses the body (-32700) before any tool runs;
    whatever gets past them is invalid_parameters. Never a 5xx, never a write."""
    body = memory_fields(LONE)[field]
    before = state(server)
    http = server["http"]
    for response in (
        http.post(
            "/v1/memories",
            content=json.dumps({"content": "A fine memory.", **body}),
            headers={"Content-Type": "application/json"},
        ),
        http.patch(
            f"/v1/memories/{server['target']}", content=json.dumps(body), headers={"Content-Type": "application/json"}
        ),
    ):
        rest_error(response)
    status, reply = mcp(server, "remember", {"content": "A fine memory.", **body})
    if status == 400:
        assert reply["error"]["code"] == -32700, reply
    else:
        assert status == 200 and reply["result"]["content"][0]["text"].startswith("invalid_parameters"), reply
    assert state(server) == before


@pytest.mark.parametrize(
    "tool, path", [("recall", "/v1/recall"), ("search_memory", "/v1/search"), ("recall_context", "/v1/context")]
)
def test_a_nul_in_a_query_is_invalid(server: dict[str, Any], tool: str, path: str) -> None:
    say_nul(rest_error(server["http"].post(path, json={"query": f"target {NUL} memory"})), "query")
    say_nul(mcp_error(server, tool, {"query": f"target {NUL} memory"}), "query")


@pytest.mark.parametrize("name", ["location", "provenance_source", "provenance_agent", "provenance_conversation_id"])
def test_a_nul_in_a_listing_filter_is_invalid(server: dict[str, Any], name: str) -> None:
    say_nul(rest_error(server["http"].get("/v1/memories", params={name: f"x{NUL}"})), name)


def test_a_nul_in_a_reference_is_invalid_not_unknown(server: dict[str, Any]) -> None:
    http = server["http"]
    before = state(server)
    path = f"/v1/memories/{server['target']}%00"
    for response in (http.get(path), http.patch(path, json={"type": "fact"}), http.delete(path)):
        say_nul(rest_error(response), "reference")
    say_nul(mcp_error(server, "forget", {"reference": f"{server['target']}{NUL}"}), "reference")
    assert state(server) == before


@pytest.mark.parametrize("path", ["/v1/memories", "/v1/conversations"])
def test_a_forged_cursor_holding_a_nul_is_invalid(server: dict[str, Any], path: str) -> None:
    fields: list[Any] = ["m", f"2024-01-01T00:00:00Z{NUL}", 5] if path == "/v1/memories" else [1, f"conv{NUL}"]
    cursor = base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")
    assert "cursor" in rest_error(server["http"].get(path, params={"cursor": cursor}))


def test_a_nul_in_an_idempotency_key_is_invalid_and_appends_nothing(server: dict[str, Any]) -> None:
    http = server["http"]
    conversation = "conv-nul-key-01"
    body = {"items": [{"n": 1}], "idempotency_key": f"key{NUL}"}
    say_nul(rest_error(http.post(f"/v1/conversations/{conversation}/items", json=body)), "idempotency_key")
    say_nul(mcp_error(server, "append_memory", {"conversation_id": conversation, **body}), "idempotency_key")
    assert http.get(f"/v1/conversations/{conversation}/items").json()["items"] == []


def test_a_log_payload_keeps_a_nul_in_keys_and_nested_strings(server: dict[str, Any]) -> None:
    http = server["http"]
    conversation = "conv-nul-payload-01"
    payloads = [{"text": f"tool output {NUL} ends", f"key{NUL}": [{"deep": NUL}], "z": 1, "a": "\\u0000 as text"}]
    appended = http.post(f"/v1/conversations/{conversation}/items", json={"items": payloads})
    assert appended.status_code in (200, 201), appended.text
    status, reply = mcp(server, "append_memory", {"conversation_id": conversation, "items": payloads})
    assert status == 200 and not reply["result"].get("isError"), reply
    items = http.get(f"/v1/conversations/{conversation}/items").json()["items"]
    assert [item["payload"] for item in items] == payloads * 2
    assert [list(item["payload"]) for item in items] == [list(payloads[0])] * 2  # key order kept


def test_a_memory_mentioning_the_escape_as_text_is_fine(server: dict[str, Any]) -> None:
    """The six characters `\\u0000` written as text (a backslash, then u0000) are no NUL."""
    http = server["http"]
    created = http.post(
        "/v1/memories",
        json={"content": "Escape NUL as \\u0000 in JSON.", "metadata": {"escape": "\\u0000", "k\\u0000": "\\\\u0000"}},
    )
    assert created.status_code == 201, created.text
    got = http.get(f"/v1/memories/{created.json()['reference']}").json()
    assert got["content"] == "Escape NUL as \\u0000 in JSON."
    assert got["metadata"] == {"escape": "\\u0000", "k\\u0000": "\\\\u0000"}
    assert http.delete(f"/v1/memories/{created.json()['reference']}").status_code == 200
