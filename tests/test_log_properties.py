"""Property: whatever JSON objects are appended, in whatever batches, replay (at any page size) and recall
return exactly them, in order, with gapless seqs.

Mostly in-process (`Client(mcp)`, a local principal, a real SQLite file); a smaller run goes over real HTTP,
since what the wire does to numbers and unicode is part of "returned exactly as appended".
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastmcp import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_server.api.app import build_mcp
from memory_server.services import open_services

from conftest import make_settings, serve

pytestmark = pytest.mark.backends

# JSON values as a client might send them: unicode keys and strings, big and small numbers, nesting.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=10), json_values, max_size=6)
batches = st.lists(st.lists(json_objects, min_size=1, max_size=12), min_size=1, max_size=6)


@pytest.fixture(scope="module")
async def inproc(tmp_path_factory: pytest.TempPathFactory, storage_backend: str) -> AsyncIterator[Client]:
    services = open_services(make_settings(tmp_path_factory.mktemp("props") / "data"))
    principal = services.local_principal("props")
    try:
        async with Client(build_mcp(services, local=lambda: principal)) as c:
            yield c
    finally:
        services.close()


@pytest.fixture(scope="module")
async def http(tmp_path_factory: pytest.TempPathFactory, embedder: Any, storage_backend: str) -> AsyncIterator[Client]:
    with serve(make_settings(tmp_path_factory.mktemp("props-http") / "data"), embedder) as server:
        async with server.client() as c:
            yield c


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    assert not result.is_error, result.content[0].text
    return result.structured_content


def exact(value: Any) -> str:
    """Type- and order-sensitive text: tells 1 from 1.0 from true, and {"a","b"} from {"b","a"}."""
    return json.dumps(value, ensure_ascii=False)


async def check_roundtrip(client: Client, batches: list[list[dict[str, Any]]], page: int, tail: int) -> None:
    conversation = f"prop-{uuid.uuid4().hex}"
    appended: list[dict[str, Any]] = []
    for batch in batches:
        ack = await call(client, "append_memory", {"conversation_id": conversation, "items": batch})
        assert (ack["first_seq"], ack["last_seq"], ack["count"]) == (
            len(appended),
            len(appended) + len(batch) - 1,
            len(batch),
        )
        appended += batch

    replayed: list[dict[str, Any]] = []
    while True:
        items = (
            await call(
                client, "replay_memory", {"conversation_id": conversation, "limit": page, "offset": len(replayed)}
            )
        )["items"]
        replayed += items
        if len(items) < page:  # a short page (possibly empty) is the end
            break
        assert len(items) == page
    assert [item["seq"] for item in replayed] == list(range(len(appended)))
    assert [exact(item["payload"]) for item in replayed] == [exact(p) for p in appended]

    recalled = (await call(client, "recall_memory", {"conversation_id": conversation, "count": tail}))["items"]
    expected_tail = appended[-tail:] if tail else []
    assert [exact(item["payload"]) for item in recalled] == [exact(p) for p in expected_tail]
    assert [item["seq"] for item in recalled] == list(range(len(appended) - len(expected_tail), len(appended)))


SLOW_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
pages = st.integers(min_value=1, max_value=15)
tails = st.integers(min_value=0, max_value=80)


@settings(max_examples=40, deadline=None, suppress_health_check=SLOW_OK)
@given(batches=batches, page=pages, tail=tails)
async def test_replay_returns_exactly_what_was_appended(
    inproc: Client, batches: list[list[dict[str, Any]]], page: int, tail: int
) -> None:
    await check_roundtrip(inproc, batches, page, tail)


@settings(max_examples=15, deadline=None, suppress_health_check=SLOW_OK)
@given(batches=batches, page=pages, tail=tails)
async def test_replay_over_http_returns_exactly_what_was_appended(
    http: Client, batches: list[list[dict[str, Any]]], page: int, tail: int
) -> None:
    await check_roundtrip(http, batches, page, tail)
