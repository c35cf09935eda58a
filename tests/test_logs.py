"""The four log tools, checked against docs/spec.md: fastmcp Client -> real HTTP -> uvicorn -> SQLite on tmp_path.

One server serves the whole module; every test gets a fresh site, so its conversations and
`list_conversations` results are its own. Only the exact 4 MiB batch boundary is checked in-process, because
over HTTP the MCP transport caps request bodies at 4 MiB before the tool sees them.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import httpx2
import pytest
from fastmcp import Client

from memory_server.api.app import build_mcp
from memory_server.services import open_services

from conftest import LiveServer, admin, execute, make_settings, serve

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
KIB = 1024
MAX_PAYLOAD = 256 * KIB
MAX_BATCH = 4 * 1024 * KIB


# --- fixtures and helpers ---------------------------------------------------------------------------


pytestmark = pytest.mark.backends


@pytest.fixture(scope="module")
def srv(storage_backend: str, tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[LiveServer]:
    with serve(make_settings(tmp_path_factory.mktemp("logs") / "data"), embedder) as server:
        yield server


def new_site(srv: LiveServer) -> tuple[str, str]:
    name = f"site-{uuid.uuid4().hex[:12]}"
    return name, srv.create_site(name)


@pytest.fixture
async def c(srv: LiveServer) -> AsyncIterator[Client]:
    """A Basic-authenticated client for a site of its own."""
    name, secret = new_site(srv)
    async with Client(srv.url, auth=httpx2.BasicAuth(name, secret)) as client:
        yield client


def cid() -> str:
    return f"conv-{uuid.uuid4().hex}"


async def ok(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    assert not result.is_error, result.content[0].text
    # The text rendering is the same JSON as the structured content.
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def fails(client: Client, tool: str, args: dict[str, Any], code: str) -> str:
    result = await client.call_tool(tool, args, raise_on_error=False)
    text = result.content[0].text
    assert result.is_error, f"{tool}({str(args)[:200]}) unexpectedly succeeded: {text[:200]}"
    assert text.startswith(f"{code}: "), text
    assert result.structured_content is None  # the code and message are the text, the whole error result
    assert code != "unavailable"  # the only retryable code
    assert text.split(": ", 1)[1] and "Traceback" not in text
    return text


async def append(client: Client, conversation_id: str, items: list[dict], **extra: Any) -> dict[str, Any]:
    return await ok(client, "append_memory", {"conversation_id": conversation_id, "items": items, **extra})


async def replay_all(client: Client, conversation_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        page = (
            await ok(client, "replay_memory", {"conversation_id": conversation_id, "limit": 1000, "offset": len(items)})
        )["items"]
        items += page
        if len(page) < 1000:
            return items


def canonical(value: Any) -> str:
    """Type- and order-sensitive text of a JSON value (1 vs 1.0 vs true, key order)."""
    return json.dumps(value, ensure_ascii=False)


# --- append: seq, recorded_at, payload fidelity ------------------------------------------------------


async def test_seq_is_gapless_from_zero_across_batches(c: Client) -> None:
    conv = cid()
    acks = [await append(c, conv, [{"b": b, "i": i} for i in range(size)]) for b, size in enumerate([1, 3, 2, 5])]
    assert [(a["first_seq"], a["last_seq"], a["count"]) for a in acks] == [(0, 0, 1), (1, 3, 3), (4, 5, 2), (6, 10, 5)]
    assert all(a["conversation_id"] == conv and a["duplicate"] is False for a in acks)
    items = await replay_all(c, conv)
    assert [item["seq"] for item in items] == list(range(11))
    assert [(it["payload"]["b"], it["payload"]["i"]) for it in items] == [
        (b, i) for b, size in enumerate([1, 3, 2, 5]) for i in range(size)
    ]


async def test_recorded_at_is_rfc3339_and_shared_by_a_batch(c: Client) -> None:
    conv = cid()
    acks = [await append(c, conv, [{"n": n} for n in range(4)]) for _ in range(3)]
    items = await replay_all(c, conv)
    for ack in acks:
        assert RFC3339.match(ack["recorded_at"]), ack["recorded_at"]
        stamp = datetime.fromisoformat(ack["recorded_at"].replace("Z", "+00:00"))
        assert stamp.tzinfo is not None
        batch = items[ack["first_seq"] : ack["last_seq"] + 1]
        assert {item["recorded_at"] for item in batch} == {ack["recorded_at"]}
    for item in items:
        assert set(item) == {"seq", "recorded_at", "payload"}


TRICKY_PAYLOADS = [
    {"z": 1, "a": 2, "m": 3, "": "empty key", "10": "ten", "2": "two"},
    {
        "float_one": 1.0,
        "tiny": 1e-7,
        "pi": 3.141592653589793,
        "tenth": 0.1,
        "neg": -2.5,
        "zero": 0.0,
        "max": 1.7976931348623157e308,
        "min_sub": 5e-324,
        "exp": 1e21,
    },
    {"big": 2**80, "neg_big": -(2**70), "i64max": 2**63 - 1, "zero": 0, "one": 1},
    {
        "ünïcødé": "日本語テキスト",
        "emoji 😀": "👩‍👩‍👧‍👦",
        "rtl": "שלום עולם",
        "combining": "e\u0301",
        "escapes": 'quote " backslash \\ newline \n tab \t nul \u0000',
        "html": "</script><b>&amp;</b>",
    },
    {
        "nested": {
            "list": [1, [2, [3, [4, {"deep": [None, True, False, "x", 1.5]}]]]],
            "empty_obj": {},
            "empty_list": [],
        },
        "null": None,
        "t": True,
        "f": False,
    },
    {},
]


async def test_payloads_come_back_exactly_as_appended(c: Client) -> None:
    conv = cid()
    await append(c, conv, TRICKY_PAYLOADS)
    await append(c, conv, TRICKY_PAYLOADS[::-1])
    expected = TRICKY_PAYLOADS + TRICKY_PAYLOADS[::-1]
    for items in (await replay_all(c, conv), (await ok(c, "recall_memory", {"conversation_id": conv}))["items"]):
        got = [item["payload"] for item in items]
        assert [canonical(p) for p in got] == [canonical(p) for p in expected]
        assert [list(p) for p in got] == [list(p) for p in expected]  # key order
        assert type(got[1]["float_one"]) is float and type(got[2]["big"]) is int


# --- recall_memory -----------------------------------------------------------------------------------


async def test_recall_tail_ascending_with_default_50(c: Client) -> None:
    conv = cid()
    await append(c, conv, [{"n": n} for n in range(60)])

    async def recall(**args: Any) -> list[int]:
        items = (await ok(c, "recall_memory", {"conversation_id": conv, **args}))["items"]
        assert [item["payload"]["n"] for item in items] == [item["seq"] for item in items]
        return [item["seq"] for item in items]

    assert await recall() == list(range(10, 60))
    assert await recall(count=5) == [55, 56, 57, 58, 59]
    assert await recall(count=1) == [59]
    assert await recall(count=60) == list(range(60))
    assert await recall(count=100) == list(range(60))  # fewer if fewer
    assert await recall(count=1000) == list(range(60))
    assert await recall(count=0) == []


async def test_unknown_conversation_reads_as_empty(c: Client) -> None:
    conv = cid()
    assert (await ok(c, "recall_memory", {"conversation_id": conv}))["items"] == []
    assert (await ok(c, "replay_memory", {"conversation_id": conv, "limit": 10}))["items"] == []
    assert (await ok(c, "list_conversations", {}))["conversations"] == []


# --- replay_memory -----------------------------------------------------------------------------------


async def test_replay_pages_and_short_page_marks_end(c: Client) -> None:
    conv = cid()
    await append(c, conv, [{"n": n} for n in range(60)])

    async def replay(**args: Any) -> list[int]:
        items = (await ok(c, "replay_memory", {"conversation_id": conv, **args}))["items"]
        return [item["seq"] for item in items]

    assert await replay(limit=25) == list(range(25))  # offset defaults to 0
    pages, offset = [], 0
    while True:
        page = await replay(limit=25, offset=offset)
        pages.append(page)
        if len(page) < 25:
            break
        offset = page[-1] + 1
    assert [len(p) for p in pages] == [25, 25, 10]
    assert sum(pages, []) == list(range(60))
    assert await replay(limit=20, offset=40) == list(range(40, 60))  # exactly full, then:
    assert await replay(limit=20, offset=60) == []  # offset at the end
    assert await replay(limit=10, offset=1000) == []  # past the end
    assert await replay(limit=10, offset=2**63 - 1) == []
    assert await replay(limit=10, offset=2**70) == []  # larger than SQLite's integers: still just "past the end"
    assert await replay(limit=0) == []
    assert await replay(limit=1000) == list(range(60))


# --- list_conversations ------------------------------------------------------------------------------


async def test_list_newest_activity_first_with_counts_and_times(c: Client) -> None:
    convs = [f"conv-order-{n:04d}" for n in range(5)]
    first_acks = {conv: await append(c, conv, [{"n": n}] * (n + 1)) for n, conv in enumerate(convs)}
    listed = await ok(c, "list_conversations", {})
    assert [x["conversation_id"] for x in listed["conversations"]] == convs[::-1]
    assert listed["next_cursor"] is None
    for entry in listed["conversations"]:
        ack = first_acks[entry["conversation_id"]]
        assert entry["item_count"] == ack["count"]
        assert entry["first_recorded_at"] == entry["last_recorded_at"] == ack["recorded_at"]

    later = await append(c, convs[1], [{"again": True}])  # activity moves it to the front
    listed = (await ok(c, "list_conversations", {}))["conversations"]
    assert [x["conversation_id"] for x in listed] == [convs[1], convs[4], convs[3], convs[2], convs[0]]
    assert listed[0]["item_count"] == 3
    assert listed[0]["first_recorded_at"] == first_acks[convs[1]]["recorded_at"]
    assert listed[0]["last_recorded_at"] == later["recorded_at"]


async def test_list_order_follows_commits_even_if_the_clock_steps_back(srv: LiveServer) -> None:
    """The last append to `earlier` was stamped an hour ahead (as if the clock was then stepped back)."""
    name, secret = new_site(srv)
    async with Client(srv.url, auth=httpx2.BasicAuth(name, secret)) as client:
        await append(client, "conv-earlier-01", [{"n": 0}])
        site_id = admin(srv.settings, lambda sites: sites.site_id(name))
        execute(
            srv.settings,
            "UPDATE conversations SET last_activity_us = last_activity_us + 3600000000"
            " WHERE site_id = ? AND conversation_id = 'conv-earlier-01'",
            site_id,
        )
        await append(client, "conv-later-0001", [{"n": 1}])
        listed = (await ok(client, "list_conversations", {}))["conversations"]
        assert [x["conversation_id"] for x in listed] == ["conv-later-0001", "conv-earlier-01"]


async def test_list_default_limit_and_cursor_paging(c: Client) -> None:
    convs = [f"conv-page-{n:04d}" for n in range(105)]
    for conv in convs:
        await append(c, conv, [{"c": conv}])
    newest_first = convs[::-1]

    first = await ok(c, "list_conversations", {})
    assert [x["conversation_id"] for x in first["conversations"]] == newest_first[:100]
    assert first["next_cursor"]
    second = await ok(c, "list_conversations", {"cursor": first["next_cursor"]})
    assert [x["conversation_id"] for x in second["conversations"]] == newest_first[100:]
    assert second["next_cursor"] is None

    for limit in (1, 7, 35, 104, 105):
        seen, cursor, pages = [], None, 0
        while True:
            args: dict[str, Any] = {"limit": limit}
            if cursor is not None:
                args["cursor"] = cursor
            page = await ok(c, "list_conversations", args)
            assert len(page["conversations"]) <= limit
            seen += [x["conversation_id"] for x in page["conversations"]]
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == newest_first, f"limit={limit}"  # everything, once, in order
        assert pages == -(-105 // limit)
    everything = await ok(c, "list_conversations", {"limit": 1000})
    assert len(everything["conversations"]) == 105 and everything["next_cursor"] is None


# --- idempotency ---------------------------------------------------------------------------------------


async def test_idempotency_key_returns_original_ack_and_appends_nothing(c: Client) -> None:
    conv = cid()
    await append(c, conv, [{"before": True}])
    original = await append(c, conv, [{"k": 1}, {"k": 2}], idempotency_key="batch-1")
    assert original["duplicate"] is False and (original["first_seq"], original["last_seq"]) == (1, 2)

    again = await append(c, conv, [{"k": 1}, {"k": 2}], idempotency_key="batch-1")
    assert again == {**original, "duplicate": True}
    different_items = await append(c, conv, [{"other": 1}], idempotency_key="batch-1")
    assert different_items == {**original, "duplicate": True}
    assert [item["payload"] for item in await replay_all(c, conv)] == [{"before": True}, {"k": 1}, {"k": 2}]

    # Without a key, a retry appends again (duplicates tolerated).
    await append(c, conv, [{"k": 1}, {"k": 2}])
    await append(c, conv, [{"k": 1}, {"k": 2}])
    assert len(await replay_all(c, conv)) == 7


async def test_same_idempotency_key_on_another_conversation_is_independent(c: Client) -> None:
    one, two = cid(), cid()
    await append(c, one, [{"x": 0}, {"x": 1}])
    a = await append(c, one, [{"x": 2}], idempotency_key="shared-key")
    b = await append(c, two, [{"y": 0}], idempotency_key="shared-key")
    assert a["duplicate"] is False and b["duplicate"] is False
    assert (a["conversation_id"], a["first_seq"]) == (one, 2)
    assert (b["conversation_id"], b["first_seq"]) == (two, 0)
    assert len(await replay_all(c, one)) == 3 and len(await replay_all(c, two)) == 1


async def test_concurrent_retries_with_one_key_append_once(c: Client) -> None:
    conv = cid()
    key = "k" * 128  # the longest allowed key
    acks = await asyncio.gather(*(append(c, conv, [{"a": 1}, {"b": 2}], idempotency_key=key) for _ in range(8)))
    assert sorted(a["duplicate"] for a in acks) == [False] + [True] * 7
    assert len({(a["first_seq"], a["last_seq"], a["recorded_at"]) for a in acks}) == 1
    assert [item["seq"] for item in await replay_all(c, conv)] == [0, 1]


# --- size limits -----------------------------------------------------------------------------------------


def sized(total_bytes: int, char: str = "x") -> dict[str, str]:
    """An object whose compact JSON serialization is exactly `total_bytes` bytes of UTF-8."""
    room = total_bytes - len('{"a":""}')
    width = len(char.encode())
    assert room % width == 0
    return {"a": char * (room // width)}


async def test_payload_limit_is_256_kib_serialized(c: Client) -> None:
    conv = cid()
    await append(c, conv, [sized(MAX_PAYLOAD)])  # exactly at the limit: accepted
    await fails(c, "append_memory", {"conversation_id": conv, "items": [sized(MAX_PAYLOAD + 1)]}, "payload_too_large")
    # Bytes, not characters: 2-byte characters reach the limit at half the character count.
    await fails(
        c,
        "append_memory",
        {"conversation_id": conv, "items": [{"ok": 1}, sized(MAX_PAYLOAD + 2, "é")]},
        "payload_too_large",
    )
    items = await replay_all(c, conv)
    assert len(items) == 1 and items[0]["payload"] == sized(MAX_PAYLOAD)


async def test_batch_over_4_mib_over_http_is_rejected_and_nothing_written(srv: LiveServer) -> None:
    """Over HTTP the MCP transport itself caps request bodies at 4 MiB, so an oversized batch may be refused
    there (HTTP 413) before the tool sees it; either way it is a 413-class refusal and nothing is written."""
    name, secret = new_site(srv)
    conv = cid()
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "append_memory", "arguments": {"conversation_id": conv, "items": [sized(250_000)] * 17}},
        }
    ).encode()
    headers = {
        "Authorization": srv.basic_header(name, secret),
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with httpx2.AsyncClient(timeout=60) as http:
        response = await http.post(srv.url, content=body, headers=headers)
    if response.status_code == 200:
        assert response.json()["result"]["content"][0]["text"].startswith("payload_too_large: ")
    else:
        assert response.status_code == 413, response.text
    async with Client(srv.url, auth=httpx2.BasicAuth(name, secret)) as client:
        assert await replay_all(client, conv) == []
        assert (await ok(client, "list_conversations", {}))["conversations"] == []


@pytest.fixture(scope="module")
async def inproc(storage_backend: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """The tools in-process (no HTTP body cap in the way), acting for a local site."""
    services = open_services(make_settings(tmp_path_factory.mktemp("inproc") / "data"))
    principal = services.local_principal("local")
    try:
        async with Client(build_mcp(services, local=lambda: principal)) as client:
            yield client
    finally:
        services.close()


async def test_batch_limit_is_4_mib_serialized_and_nothing_is_written(inproc: Client) -> None:
    conv = cid()
    await fails(inproc, "append_memory", {"conversation_id": conv, "items": [sized(250_000)] * 17}, "payload_too_large")
    await fails(
        inproc,
        "append_memory",
        {"conversation_id": conv, "items": [sized(MAX_PAYLOAD)] * 16 + [{"small": 1}]},
        "payload_too_large",
    )
    assert await replay_all(inproc, conv) == []
    assert conv not in [x["conversation_id"] for x in (await ok(inproc, "list_conversations", {}))["conversations"]]
    ack = await append(inproc, conv, [sized(MAX_PAYLOAD)] * (MAX_BATCH // MAX_PAYLOAD))  # exactly 4 MiB
    assert ack["count"] == 16
    assert len(await replay_all(inproc, conv)) == 16


# --- bad input: every case gets its code and changes nothing ---------------------------------------------

GOOD = "conv-good-0001"


def deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        node = {"a": node}
    return node


BAD_IDS = [
    "abcdefg",
    "a" * 65,
    "ünïcødé-conv",
    "../x",
    "../../etc/passwd",
    "",
    "has spaces in it",
    "conv-0001\n",
    "conv\x00-0001",
    "conv.0001",
    "conv/0001",
]
BAD_COUNTS = [-1, 1001, "5", 2.5, True, None, [5]]

BAD_CALLS: list[tuple[str, dict[str, Any], str]] = []
for bad in BAD_IDS:
    BAD_CALLS += [
        ("append_memory", {"conversation_id": bad, "items": [{"a": 1}]}, "invalid_parameters"),
        ("recall_memory", {"conversation_id": bad}, "invalid_parameters"),
        ("replay_memory", {"conversation_id": bad, "limit": 10}, "invalid_parameters"),
    ]
BAD_CALLS += [("append_memory", {"conversation_id": 12345678, "items": [{"a": 1}]}, "invalid_parameters")]
for bad in BAD_COUNTS:
    BAD_CALLS += [("replay_memory", {"conversation_id": GOOD, "limit": bad}, "invalid_parameters")]
    if bad is None:  # null for a parameter with a default means the default (memory_server.arguments); limit has none
        continue
    BAD_CALLS += [
        ("recall_memory", {"conversation_id": GOOD, "count": bad}, "invalid_parameters"),
        (
            "replay_memory",
            {"conversation_id": GOOD, "limit": 10, "offset": bad if bad != 1001 else -5},
            "invalid_parameters",
        ),
        ("list_conversations", {"limit": bad}, "invalid_parameters"),
    ]
BAD_CALLS += [
    ("replay_memory", {"conversation_id": GOOD}, "invalid_parameters"),  # limit is required
    ("list_conversations", {"limit": 0}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD}, "invalid_parameters"),  # items required
    ("append_memory", {"items": [{"a": 1}]}, "invalid_parameters"),  # conversation_id required
    ("append_memory", {"conversation_id": GOOD, "items": []}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": [{"n": n} for n in range(1001)]}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": [1, 2, 3]}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": ["a", "b"]}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": [None]}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": [[{"a": 1}]]}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": [{"ok": 1}, 7]}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": {"a": 1}}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": "[{}]"}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": None}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": [{"ok": 1}, deep(100)]}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": [{"a": 1}], "idempotency_key": ""}, "invalid_parameters"),
    (
        "append_memory",
        {"conversation_id": GOOD, "items": [{"a": 1}], "idempotency_key": "k" * 129},
        "invalid_parameters",
    ),
    ("append_memory", {"conversation_id": GOOD, "items": [{"a": 1}], "idempotency_key": 5}, "invalid_parameters"),
    ("append_memory", {"conversation_id": GOOD, "items": [{"a": 1}], "idempotency_key": ["k"]}, "invalid_parameters"),
]
MALFORMED_CURSORS = [
    "",
    "!!!",
    "not-a-cursor",
    "x" * 201,
    "eyJ9",  # base64 of '{}'-ish garbage
    "WzEsMiwzXQ",  # [1,2,3]
    "WyJ4IiwieSJd",  # ["x","y"]
    "W3RydWUsInkiXQ",  # [true,"y"]
    "WzEyMDg5MjU4MTk2MTQ2MjkxNzQ3MDYxNzYsIngiXQ",  # [2**80,"x"]: too large for SQLite
    "Wy0xLCJ4Il0",  # [-1,"x"]
]
BAD_CALLS += [("list_conversations", {"cursor": cursor}, "invalid_parameters") for cursor in MALFORMED_CURSORS]
BAD_CALLS += [("list_conversations", {"cursor": 5}, "invalid_parameters")]


@pytest.fixture(scope="module")
async def seeded(srv: LiveServer) -> tuple[str, str]:
    """A site whose only conversation, GOOD, holds three items."""
    name, secret = new_site(srv)
    async with Client(srv.url, auth=httpx2.BasicAuth(name, secret)) as client:
        await append(client, GOOD, [{"i": 0}, {"i": 1}, {"i": 2}])
    return name, secret


async def snapshot(client: Client) -> Any:
    return (await replay_all(client, GOOD), await ok(client, "list_conversations", {"limit": 1000}))


def case_id(tool: str, args: dict[str, Any]) -> str:
    shown = {k: repr(v) if len(repr(v)) <= 40 else f"<{type(v).__name__} of {len(v)}>" for k, v in args.items()}
    return f"{tool}({', '.join(f'{k}={v}' for k, v in shown.items())})"


@pytest.mark.parametrize(("tool", "args", "code"), BAD_CALLS, ids=[case_id(t, a) for t, a, _ in BAD_CALLS])
async def test_bad_input_gets_its_code_and_changes_nothing(
    srv: LiveServer, seeded: tuple[str, str], tool: str, args: dict[str, Any], code: str
) -> None:
    async with Client(srv.url, auth=httpx2.BasicAuth(*seeded)) as client:
        before = await snapshot(client)
        assert len(before[0]) == 3
        await fails(client, tool, args, code)
        assert await snapshot(client) == before


async def test_nesting_1000_deep_is_a_clean_4xx_and_changes_nothing(srv: LiveServer, seeded: tuple[str, str]) -> None:
    """Too deep for the client library to even encode, so it is sent raw: a JSON-RPC error, never a 500."""
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"append_memory","arguments":'
        f'{{"conversation_id":"{GOOD}","items":[' + '{"a":' * 1000 + "1" + "}" * 1000 + "]}}}"
    )
    headers = {
        "Authorization": srv.basic_header(*seeded),
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with Client(srv.url, auth=httpx2.BasicAuth(*seeded)) as client:
        before = await snapshot(client)
        async with httpx2.AsyncClient(timeout=30) as http:
            response = await http.post(srv.url, content=body.encode(), headers=headers)
        # Observed: 400 with JSON-RPC -32700 "recursion limit exceeded" from the MCP layer's parser.
        if response.status_code == 200:
            result = response.json()["result"]
            assert result["isError"] and result["content"][0]["text"].startswith("invalid_parameters: ")
        else:
            assert 400 <= response.status_code < 500, response.text
            assert "error" in response.json()
        assert await snapshot(client) == before
