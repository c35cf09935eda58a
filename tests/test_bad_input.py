"""Input that can never succeed gets `invalid_parameters` (never a 5xx, never `unavailable`, which tells a
client to retry), against a real server process: extreme dates, forged cursors, lone surrogates, NULs,
deep nesting — on REST, MCP and import. Plus a property test over every write path."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import wait_ready
from procs import ServerProcess, parse_fields, run_cli

EXTREME_DATES = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:30:00+00:45"]
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, tuple[str, str]]]:
    data = tmp_path_factory.mktemp("bad-input") / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    process = ServerProcess(data)
    process.start()
    try:
        wait_ready(process.base)
        yield process, ("acme", secret)
    finally:
        process.kill()


def mcp_call(process: ServerProcess, auth: tuple[str, str], tool: str, arguments: Any) -> tuple[int, dict[str, Any]]:
    """A raw JSON-RPC tools/call (the body exactly as given, lone surrogates escaped as JSON allows)."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    )
    response = httpx2.post(process.url, content=body, headers=MCP_HEADERS, auth=auth, timeout=60)
    return response.status_code, response.json() if response.content else {}


def tool_error(reply: dict[str, Any]) -> str | None:
    result = reply.get("result") or {}
    return result["content"][0]["text"] if result.get("isError") else None


def forged_cursor(fields: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


@pytest.mark.parametrize("occurred_at", EXTREME_DATES)
def test_dates_outside_the_calendar_in_utc_are_invalid_everywhere(server: Any, occurred_at: str) -> None:
    process, auth = server
    with httpx2.Client(base_url=process.base, auth=auth, timeout=60) as http:
        created = http.post("/v1/memories", json={"content": "A memory to move in time."})
        reference = created.json()["reference"]
        for response in (
            http.post("/v1/memories", json={"content": "x", "occurred_at": occurred_at}),
            http.patch(f"/v1/memories/{reference}", json={"occurred_at": occurred_at}),
        ):
            assert response.status_code == 422, response.text
            assert response.json()["error"]["code"] == "invalid_parameters"
            assert "years 1 and 9999" in response.json()["error"]["message"]
    status, reply = mcp_call(process, auth, "remember", {"content": "x", "occurred_at": occurred_at})
    assert status == 200 and (tool_error(reply) or "").startswith("invalid_parameters: occurred_at")


@pytest.mark.parametrize("fields", [[1, "\ud800"], ["m", "\udfff", 1], ["m", "2024-01-01T00:00:00Z\ud800", 5]])
def test_forged_cursors_with_lone_surrogates_are_invalid(server: Any, fields: list[Any]) -> None:
    process, auth = server
    cursor = forged_cursor(fields)
    with httpx2.Client(base_url=process.base, auth=auth, timeout=60) as http:
        for path in ("/v1/conversations", "/v1/memories"):
            response = http.get(path, params={"cursor": cursor})
            assert response.status_code == 422, (path, response.text)
            assert response.json()["error"]["code"] == "invalid_parameters"
    status, reply = mcp_call(process, auth, "list_conversations", {"cursor": cursor})
    assert status == 200 and (tool_error(reply) or "").startswith("invalid_parameters")


LONE = "\ud83d"


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("remember", {"content": f"broken {LONE} text"}),
        ("remember", {"content": "fine", "location": f"a/{LONE}"}),
        ("remember", {"content": "fine", "metadata": {LONE: 1}}),
        ("remember", {"content": "fine", "provenance": {"agent": LONE}}),
        ("append_memory", {"conversation_id": "conv-surrogate", "items": [{"text": LONE}]}),
        ("append_memory", {"conversation_id": "conv-surrogate", "items": [{"a": 1}], "idempotency_key": LONE}),
        ("recall", {"query": f"what {LONE}"}),
        ("search_memory", {"query": f"what {LONE}"}),
        ("recall_context", {"query": f"what {LONE}"}),
    ],
)
def test_lone_surrogates_are_refused_on_mcp(server: Any, tool: str, arguments: dict[str, Any]) -> None:
    """The MCP SDK's JSON parser refuses a body escaping a lone surrogate with its JSON-RPC parse error
    (HTTP 400, -32700), before any tool runs; whatever gets past it is invalid_parameters. Never a 5xx."""
    process, auth = server
    status, reply = mcp_call(process, auth, tool, arguments)
    if status == 400:
        assert reply["error"]["code"] == -32700, reply
    else:
        assert status == 200 and (tool_error(reply) or "").startswith("invalid_parameters"), reply


def test_import_reports_and_skips_every_bad_line_and_keeps_going(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run_cli("site", "create", "acme", data_dir=data)
    lines = [
        {"kind": "header", "version": 1},
        {"kind": "memory", "site": "acme", "reference": "mem_good1", "content": "First good memory."},
        {"kind": "memory", "site": "acme", "reference": "mem_bad1", "content": f"surrogate {LONE}"},
        {"kind": "memory", "site": "acme", "reference": "mem_bad2", "content": "x", "occurred_at": EXTREME_DATES[0]},
        {"kind": "memory", "site": "acme", "reference": "../../x y/\u202e", "content": "Unaddressable."},
        {"kind": "memory", "site": "acme", "reference": "mem_bad3", "content": "x", "metadata": {"k": LONE}},
        {
            "kind": "log_item",
            "site": "acme",
            "conversation_id": "conv-import-1",
            "seq": 0,
            "recorded_at": "2024-01-01T00:00:00Z",
            "payload": {"t": LONE},
        },
        {
            "kind": "log_item",
            "site": "acme",
            "conversation_id": "conv-import-1",
            "seq": 0,
            "recorded_at": EXTREME_DATES[1],
            "payload": {"t": "late"},
        },
        {"kind": "memory", "site": "acme", "reference": "mem_good2", "content": "Second good memory."},
        {
            "kind": "log_item",
            "site": "acme",
            "conversation_id": "conv-import-1",
            "seq": 0,
            "recorded_at": "2024-01-01T00:00:00Z",
            "payload": {"t": "ok"},
        },
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n{not json\n\x00\x01\n")
    imported = run_cli("import", str(path), data_dir=data)
    assert imported.returncode == 1 and "Traceback" not in imported.stderr, imported.stderr
    report = parse_fields(imported.stdout)
    assert report["memories created"] == "2" and report["log items appended"] == "1"
    assert report["rejected lines"] == "8", imported.stderr
    for line in (3, 4, 5, 6, 7, 8, 11, 12):
        assert f"line {line}: " in imported.stderr, (line, imported.stderr)
    assert "URL path" in imported.stderr


def test_a_reference_holding_other_content_is_a_conflict_not_already_present(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run_cli("site", "create", "acme", data_dir=data)
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps({"kind": "memory", "site": "acme", "reference": "mem_same", "content": "Original."}))
    assert run_cli("import", str(first), data_dir=data).returncode == 0
    again = run_cli("import", str(first), data_dir=data)
    assert parse_fields(again.stdout)["memories already present"] == "1"
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps({"kind": "memory", "site": "acme", "reference": "mem_same", "content": "Changed."}))
    clash = run_cli("import", str(changed), data_dir=data)
    assert clash.returncode == 1
    report = parse_fields(clash.stdout)
    assert report["memories already present"] == "0" and report["rejected lines"] == "1"
    assert "line 1: conflict: reference mem_same already holds a memory with other content" in clash.stderr


# --- the property test: arbitrary JSON into every write path ---------------------------------------------

# Text with everything JSON can carry: lone surrogates (category Cs), NULs and other controls, any plane.
TEXT = st.text(st.characters(codec=None, categories=None), max_size=40) | st.sampled_from(
    ["", " ", "\x00", "\ud800", "a\udfffb", "\u202e", "x" * 300, "../../x y"]
)
DATES = (
    st.sampled_from(
        [
            *EXTREME_DATES,
            "0000-01-01T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2024-05-08",
            "now",
            "2024-05-08T13:56:00Z",
            "1970-01-01T00:00:00+14:00",
            "+275760-09-13T00:00:00Z",
        ]
    )
    | TEXT
)
NUMBERS = st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT | DATES


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12
) | st.sampled_from([nested(63), nested(64), nested(65), nested(500)])
MEMORY_FIELDS = [
    "content",
    "type",
    "location",
    "project",
    "team",
    "bucket",
    "tags",
    "metadata",
    "provenance",
    "occurred_at",
]
WRITES = st.one_of(
    st.tuples(st.just("rest-remember"), st.dictionaries(st.sampled_from(MEMORY_FIELDS), JSON, min_size=1)),
    st.tuples(st.just("rest-patch"), st.dictionaries(st.sampled_from(MEMORY_FIELDS), JSON, min_size=1)),
    st.tuples(st.just("rest-append"), st.fixed_dictionaries({"items": JSON}, optional={"idempotency_key": JSON})),
    st.tuples(st.just("mcp-remember"), st.dictionaries(st.sampled_from(MEMORY_FIELDS), JSON, min_size=1)),
    st.tuples(
        st.just("mcp-append"),
        st.fixed_dictionaries({"conversation_id": JSON, "items": JSON}, optional={"idempotency_key": JSON}),
    ),
    st.tuples(st.just("rest-append-items"), st.lists(st.dictionaries(TEXT, JSON, max_size=3), min_size=1, max_size=3)),
)


@settings(max_examples=250, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(write=WRITES)
def test_no_write_ever_answers_5xx_or_unavailable(server: Any, write: tuple[str, Any]) -> None:
    process, auth = server
    path, body = write
    with httpx2.Client(base_url=process.base, auth=auth, timeout=60) as http:
        if path.startswith("mcp-"):
            tool = "remember" if path == "mcp-remember" else "append_memory"
            status, reply = mcp_call(process, auth, tool, body)
            assert status < 500, reply
            error = tool_error(reply) or ""
            assert not error.startswith("unavailable"), (body, error)
            return
        if path == "rest-remember":
            response = http.post("/v1/memories", content=json.dumps(body))
        elif path == "rest-patch":
            reference = http.post("/v1/memories", json={"content": "Patch target."}).json()["reference"]
            response = http.patch(f"/v1/memories/{reference}", content=json.dumps(body))
        elif path == "rest-append":
            response = http.post("/v1/conversations/conv-property-01/items", content=json.dumps(body))
        else:
            response = http.post("/v1/conversations/conv-property-02/items", content=json.dumps({"items": body}))
        assert response.status_code < 500, (body, response.text[:500])
