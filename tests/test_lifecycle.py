"""Memories that change over time and memories that must go, through a real server (MCP and REST), on both
storage and both index backends: time windows on occurred_at, supersede chains, expiry, recency where the
query asks for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx2
import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_edge import UpdateOperation

from memory_server.errors import Unavailable
from memory_server.index.base import PAYLOAD_VERSION, Condition, IndexFilter, IndexPoint, Range
from memory_server.index.edge import EdgeIndex
from memory_server.index.edge_files import read_info, write_info
from memory_server.index.qdrant import METADATA_KEY, QdrantServerIndex
from memory_server.memories import maintenance
from memory_server.memories.outbox import index_payload
from memory_server.memories.validation import Filters, read_scope
from memory_server.ranking.candidate_set import Candidate
from memory_server.ranking.dates import epoch_day
from memory_server.ranking.lexical import analyze
from memory_server.ranking.recency import as_of_first, asks_for_recent, newest_first
from memory_server.retrieval.candidates import CandidateSource
from memory_server.retrieval.recall import Retrieval
from memory_server.services import Services, open_services
from memory_server.storage.backends import backend_of
from memory_server.storage.factory import open_storage

from tests.conftest import LiveServer, index_backlog, make_settings, query, serve

pytestmark = pytest.mark.backends


@pytest.fixture(params=["embedded", "server"])
def mem(request: Any, settings: Any, embedder: Any) -> Iterator[LiveServer]:
    index = QdrantServerIndex(QdrantClient(":memory:"), "memories") if request.param == "server" else None
    with serve(settings, embedder, index=index) as server:
        server.outbox = index is not None or not backend_of(settings).shared  # type: ignore[attr-defined]
        server.index = index  # type: ignore[attr-defined]
        yield server


async def call(client: Any, tool: str, **args: Any) -> Any:
    return await client.call_tool(tool, args, raise_on_error=False)


def error_code(result: Any) -> str:
    assert result.is_error, result
    return str(result.content[0].text.split(": ", 1)[0])


def rest(server: LiveServer, method: str, path: str, *, base: str | None = None, **kwargs: Any) -> httpx2.Response:
    return httpx2.request(method, f"{base or server.base}{path}", auth=server.basic, timeout=60, **kwargs)


# --- time windows ------------------------------------------------------------------------------------------

# The deploy notes of one year; the window [March, May) holds exactly the second and third.
DEPLOYS = [
    ("Deploy notes: the billing service moved to blue-green deploys.", "2024-01-20T10:00:00Z"),
    ("Deploy notes: the billing service deploys now wait for a canary.", "2024-03-01T00:00:00Z"),  # == after
    ("Deploy notes: billing deploys are frozen during the audit.", "2024-04-30T23:59:59.999999Z"),
    ("Deploy notes: the billing service deploys resumed after the audit.", "2024-05-01T00:00:00Z"),  # == before
    ("Deploy notes: billing deploys run on Tuesdays only.", "2024-09-09T09:00:00+02:00"),
]
WINDOW = {"occurred_after": "2024-03-01T00:00:00Z", "occurred_before": "2024-05-01T00:00:00Z"}


def remember_deploys(server: LiveServer) -> list[str]:
    refs = []
    for content, when in DEPLOYS:
        response = rest(server, "POST", "/v1/memories", json={"content": content, "occurred_at": when, "bucket": "ops"})
        assert response.status_code == 201, response.text
        refs.append(response.json()["reference"])
    return refs


async def test_a_time_window_is_half_open_on_every_read(mem: LiveServer) -> None:
    refs = remember_deploys(mem)
    inside = {refs[1], refs[2]}
    query = "billing service deploys"
    async with mem.client() as client:
        recall = await call(client, "recall", query=query, limit=10, **WINDOW)
        assert {h["reference"] for h in recall.structured_content["results"]} == inside
        search = await call(client, "search_memory", query=query, min_score=0.0, **WINDOW)
        assert {h["reference"] for h in search.structured_content["results"]} == inside
        pack = await call(client, "recall_context", query=query, **WINDOW)
        assert {i["reference"] for i in pack.structured_content["items"]} == inside
        assert pack.structured_content["retrieval_plan"]["filters"] == {
            "occurred_after": "2024-03-01T00:00:00.000000Z",
            "occurred_before": "2024-05-01T00:00:00.000000Z",
        }
        only_after = await call(client, "recall", query=query, limit=10, occurred_after="2024-05-01T00:00:00Z")
        assert [h["reference"] for h in only_after.structured_content["results"]] in (
            [refs[3], refs[4]],
            [refs[4], refs[3]],
        )
        # Any offset: +02:00 is two hours before the same wall clock in UTC.
        before = await call(client, "recall", query=query, limit=10, occurred_before="2024-01-20T12:00:00+02:00")
        assert [h["reference"] for h in before.structured_content["results"]] == []
        before = await call(client, "recall", query=query, limit=10, occurred_before="2024-01-20T12:00:01+02:00")
        assert [h["reference"] for h in before.structured_content["results"]] == [refs[0]]
        nothing = await call(client, "recall", query=query, occurred_after="2030-01-01T00:00:00Z")
        assert nothing.structured_content == {"results": []} and nothing.content[0].text == "No matching memories."

    for path in ("/v1/recall", "/v1/search", "/v1/context"):
        body = {"query": query, **WINDOW, **({"min_score": 0.0} if path == "/v1/search" else {})}
        response = rest(mem, "POST", path, json=body)
        assert response.status_code == 200, response.text
        found = response.json()["items" if path == "/v1/context" else "results"]
        assert {h["reference"] for h in found} == inside, path
    listed = rest(mem, "GET", "/v1/memories", params={**WINDOW, "limit": 1})
    assert listed.status_code == 200, listed.text
    page = listed.json()
    second = rest(mem, "GET", "/v1/memories", params={**WINDOW, "limit": 1, "cursor": page["next_cursor"]}).json()
    assert {m["reference"] for m in page["memories"] + second["memories"]} == inside
    assert second["next_cursor"] is None


async def test_a_bad_window_is_invalid_parameters_everywhere(mem: LiveServer) -> None:
    remember_deploys(mem)
    bad = [
        {"occurred_after": "last week"},
        {"occurred_before": "2024-13-01T00:00:00Z"},
        {"occurred_after": "2024-03-01T00:00:00"},  # no timezone
        {"occurred_after": "2024-05-01T00:00:00Z", "occurred_before": "2024-05-01T00:00:00Z"},  # empty
        {"occurred_after": "2024-05-01T00:00:00Z", "occurred_before": "2024-03-01T00:00:00+00:00"},
        {"occurred_after": 1714521600},
    ]
    async with mem.client() as client:
        for window in bad:
            for tool in ("recall", "search_memory", "recall_context"):
                result = await call(client, tool, query="billing deploys", **window)
                assert error_code(result) == "invalid_parameters", (tool, window, result)
                assert "occurred_" in result.content[0].text
    for window in bad:
        for path in ("/v1/recall", "/v1/search", "/v1/context"):
            response = rest(mem, "POST", path, json={"query": "billing deploys", **window})
            assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_parameters"
        if not isinstance(next(iter(window.values())), int):
            response = rest(mem, "GET", "/v1/memories", params=window)
            assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_parameters", window


async def test_the_public_profile_keeps_the_spec_parameters(tmp_path: Any, embedder: Any) -> None:
    with serve(make_settings(tmp_path / "public", tool_profile="public"), embedder) as server:
        async with server.client() as client:
            tools = {t.name: t for t in await client.list_tools()}
            assert set(tools["search_memory"].input_schema["properties"]) == {
                "query",
                "limit",
                "project",
                "team",
                "bucket",
                "type",
                "tags",
                "min_score",
            }
            assert set(tools["remember"].input_schema["properties"]) == {
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
            }
            for tool in ("recall", "search_memory", "recall_context"):
                result = await call(client, tool, query="q", occurred_after="2024-01-01T00:00:00Z")
                assert error_code(result) == "invalid_parameters"


def index_backlog_drains(server: LiveServer, *, outbox: bool = False) -> None:
    """Wait for the vector index to hold every change (`outbox`: it is kept by the outbox, whatever the
    authority: a shared Qdrant server)."""

    def backlog() -> int:
        if not outbox:
            return index_backlog(server.settings)
        [(pending,)] = query(server.settings, "SELECT count(*) FROM memories WHERE indexed = 0")
        [(deletions,)] = query(server.settings, "SELECT count(*) FROM index_deletions")
        return int(pending) + int(deletions)

    deadline = time.monotonic() + 60
    while backlog():
        assert time.monotonic() < deadline, "the index did not catch up"
        time.sleep(0.1)


@pytest.mark.parametrize("backend", ["embedded", "server"])
async def test_an_index_from_before_time_payloads_is_upgraded_at_start_up(
    backend: str, settings: Any, embedder: Any
) -> None:
    """Points written before `occurred` existed: the next start writes every point again (the window then
    works inside the index: search_memory is index-only) and records the payload version."""
    shared = QdrantServerIndex(QdrantClient(":memory:"), "memories") if backend == "server" else None
    with serve(settings, embedder, index=shared) as first:
        refs = remember_deploys(first)
        index_backlog_drains(first, outbox=shared is not None)
    # Make it an index of payload version 1: no `occurred` in the points, no version recorded.
    storage = open_storage(settings)
    old = shared if shared is not None else EdgeIndex(settings.index_path)
    try:
        rows = storage.outbox.index_rows([int(i) for (i,) in query(settings, "SELECT id FROM memories")])
        old.upsert(
            [
                IndexPoint(
                    id=row.id,
                    vector=row.vector,
                    payload={k: v for k, v in index_payload(row).items() if k != "occurred"},
                )
                for row in rows
                if row.vector is not None
            ]
        )
        old.flush()
        if isinstance(old, EdgeIndex):
            info, shard, _ = read_info(settings.index_path)
            assert info is not None and shard is not None
            write_info(settings.index_path, info, shard, 1)
        else:
            record = {"model": embedder.name, "dimension": embedder.dimension}
            shared._client.update_collection("memories", metadata={METADATA_KEY: record})  # type: ignore[union-attr]
    finally:
        if isinstance(old, EdgeIndex):
            old.close()
        storage.close()
    with serve(settings, embedder, index=shared, site="other") as second:
        index_backlog_drains(second, outbox=shared is not None)
        response = rest(
            first, "POST", "/v1/search", json={"query": "billing deploys", "min_score": 0.0, **WINDOW}, base=second.base
        )
        assert {h["reference"] for h in response.json()["results"]} == {refs[1], refs[2]}
        if shared is None:
            assert read_info(settings.index_path)[2] == PAYLOAD_VERSION
        else:
            assert shared.payload_version() == PAYLOAD_VERSION


@pytest.mark.parametrize("backend", ["embedded", "server"])
def test_an_index_from_before_the_days_field_is_upgraded_and_filters_by_it(
    backend: str, settings: Any, embedder: Any
) -> None:
    """Points of payload version 4 (no `days`; on the embedded index no range index on it either): the next
    start creates the range index and writes every point again, and a range on `days` then finds a memory
    by the day its content tells of."""
    shared = QdrantServerIndex(QdrantClient(":memory:"), "memories") if backend == "server" else None
    services = open_services(settings)
    try:
        writes = services.load_memories(embedder=embedder, index=shared).writes
        site_id = services.local_principal("acme").site_id
        writes.remember_many(
            site_id,
            [
                writes.validate(
                    content="Twelve days ago the movers carried the piano upstairs.", occurred_at="2024-03-21T18:00:00Z"
                )
            ],
        )
    finally:
        services.close()
    [(row_id,)] = query(settings, "SELECT id FROM memories")
    ninth = epoch_day(date(2024, 3, 9))
    about_the_ninth = IndexFilter((Condition("site", (str(site_id),)),), ranges=(Range("days", gte=ninth, lte=ninth),))
    vector = embedder.embed_query("piano")
    # Make it an index of payload version 4.
    storage = open_storage(settings)
    old = shared if shared is not None else EdgeIndex(settings.index_path)
    try:
        [row] = storage.outbox.index_rows([row_id])
        assert row.vector is not None
        old.upsert(
            [
                IndexPoint(
                    id=row_id, vector=row.vector, payload={k: v for k, v in index_payload(row).items() if k != "days"}
                )
            ]
        )
        assert old.search(vector, where=about_the_ninth, limit=5) == []
        if isinstance(old, EdgeIndex):
            old._apply(UpdateOperation.delete_field_index("days"))
            old.flush()
            info, shard, _ = read_info(settings.index_path)
            assert info is not None and shard is not None
            write_info(settings.index_path, info, shard, 4)
        else:
            record = {"model": embedder.name, "dimension": embedder.dimension, "payload": 4}
            shared._client.update_collection("memories", metadata={METADATA_KEY: record})  # type: ignore[union-attr]
    finally:
        if isinstance(old, EdgeIndex):
            old.close()
        storage.close()
    services = open_services(settings)
    try:
        index = services.load_memories(embedder=embedder, index=shared).index
        assert index.payload_version() == PAYLOAD_VERSION
        if isinstance(index, EdgeIndex):
            assert "days" in index._live().info().payload_schema
        assert [hit.id for hit in index.search(vector, where=about_the_ninth, limit=5)] == [row_id]
    finally:
        services.close()


@pytest.fixture(params=["embedded", "server"])
def services(request: Any, tmp_path: Any, embedder: Any) -> Iterator[Services]:
    services = open_services(make_settings(tmp_path / "data"))
    index = QdrantServerIndex(QdrantClient(":memory:"), "memories") if request.param == "server" else None
    services.load_memories(embedder=embedder, index=index)
    try:
        yield services
    finally:
        services.close()


def test_the_prefetch_applies_the_window_inside_both_indexes(services: Services) -> None:
    """Past the full-scan size, candidates come from the index's and the lexical index's prefetch. 250
    memories outside the window are closer to the query than the three inside it, which share no word with
    it: only a window applied inside the vector index finds those."""
    principal = services.local_principal("acme")
    memories = services.loaded_memories()
    writes = memories.writes
    crowd = [
        writes.validate(
            content=f"Automobile repair shop visit number {i}.", occurred_at=f"2023-{1 + i % 12:02d}-10T10:00:00Z"
        )
        for i in range(250)
    ]
    inside = [
        writes.validate(content=text, occurred_at=f"2024-06-0{n + 1}T10:00:00Z")
        for n, text in enumerate(
            [
                "The mechanic fixed our car's brakes.",
                "Our van went to the garage for a new clutch.",
                "The truck's engine was serviced.",
            ]
        )
    ]
    outcomes = writes.remember_many(principal.site_id, crowd + inside)
    wanted = {o.reference for o in outcomes[-3:]}
    source = CandidateSource(
        services.storage.candidates, memories.index, model=memories.embedder.name, full_scan_limit=3
    )
    retrieval = Retrieval(services.storage.memories, source, memories.index, memories.embedder, memories.words)
    window = read_scope(principal, Filters()).within(
        occurred_after="2024-01-01T00:00:00.000000Z", occurred_before="2025-01-01T00:00:00.000000Z"
    )
    assert not set(analyze("automobile repair")) & {t for m in inside for t in analyze(m.content)}
    assert {h["reference"] for h in retrieval.recall(window, "automobile repair", 10)} == wanted
    assert {h["reference"] for h in retrieval.search(window, "automobile repair", 10, 0.0)} == wanted
    everything = read_scope(principal, Filters())
    assert not {h["reference"] for h in retrieval.recall(everything, "automobile repair", 10)} & wanted


# --- supersede ---------------------------------------------------------------------------------------------

AUTH = [
    ("We authenticate MCP clients with Basic credentials per site.", "2024-01-10T09:00:00Z"),
    ("Decision update: MCP clients now authenticate with scoped bearer tokens instead.", "2024-06-10T09:00:00Z"),
    ("Decision: MCP clients authenticate through OAuth 2.1 with PKCE from now on.", "2025-02-10T09:00:00Z"),
]
QUESTION = "current MCP authentication decision"


def get(server: LiveServer, reference: str) -> dict[str, Any]:
    response = rest(server, "GET", f"/v1/memories/{reference}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def references(result: Any, key: str = "results") -> list[str]:
    return [hit["reference"] for hit in result.structured_content[key]]


async def test_supersede_chains_resolve_to_the_newest(mem: LiveServer) -> None:
    async with mem.client() as client:
        made: list[str] = []
        for n, (content, when) in enumerate(AUTH):
            # The third names the first: the newest of its chain (the second) is what it replaces.
            links = {"supersedes": made[0]} if n else {}
            result = await call(client, "remember", content=content, occurred_at=when, type="decision", **links)
            assert not result.is_error, result
            made.append(result.structured_content["reference"])
        a, b, c = made
        assert (get(mem, a)["superseded_by"], get(mem, a)["valid_to"]) == (b, "2024-06-10T09:00:00.000000Z")
        assert (get(mem, b)["supersedes"], get(mem, b)["superseded_by"]) == (a, c)
        assert (get(mem, c)["supersedes"], get(mem, c)["superseded_by"], get(mem, c)["valid_to"]) == (b, None, None)

        recall = await call(client, "recall", query=QUESTION, limit=3)
        assert references(recall) == [c, b, a]
        hits = recall.structured_content["results"]
        assert [h["superseded_by"] for h in hits] == [None, c, b] and hits[0]["supersedes"] == b
        assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]
        text = recall.content[0].text
        assert f"Superseded by: {c} | valid_to=2025-02-10T09:00:00.000000Z" in text
        assert text.split("\n\n")[0].count("Superseded by") == 0  # the current one is not marked
        assert references(await call(client, "recall", query=QUESTION, limit=1)) == [c]

        search = await call(client, "search_memory", query=QUESTION, min_score=0.0)
        assert references(search) == [c]
        wide = await call(client, "search_memory", query=QUESTION, min_score=0.0, include_superseded=True)
        assert set(references(wide)) == {a, b, c}
        pack = await call(client, "recall_context", query=QUESTION)
        assert references(pack, "items") == [c]
        wide = await call(client, "recall_context", query=QUESTION, include_superseded=True)
        assert set(references(wide, "items")) == {a, b, c}
        # As of the end of 2024 the second one was current: a window keeps what was valid when it closes.
        then = {"occurred_before": "2025-01-01T00:00:00Z"}
        assert references(await call(client, "search_memory", query=QUESTION, min_score=0.0, **then)) == [b]
        assert references(await call(client, "recall_context", query=QUESTION, **then), "items") == [b]
        assert references(await call(client, "recall", query=QUESTION, limit=2, **then)) == [b, a]

    for path, key in (("/v1/search", "results"), ("/v1/context", "items")):
        found = rest(
            mem, "POST", path, json={"query": QUESTION, "min_score": 0.0} if key == "results" else {"query": QUESTION}
        ).json()[key]
        assert [h["reference"] for h in found] == [c], path
    listed = rest(mem, "GET", "/v1/memories").json()["memories"]  # a listing shows every memory
    assert {m["reference"]: m["superseded_by"] for m in listed} == {a: b, b: c, c: None}

    # Forgetting the middle joins the chain; forgetting the newest makes the one before current again.
    assert rest(mem, "DELETE", f"/v1/memories/{b}").status_code == 200
    assert (get(mem, a)["superseded_by"], get(mem, a)["valid_to"]) == (c, "2025-02-10T09:00:00.000000Z")
    assert get(mem, c)["supersedes"] == a
    assert rest(mem, "DELETE", f"/v1/memories/{c}").status_code == 200
    assert (get(mem, a)["superseded_by"], get(mem, a)["valid_to"]) == (None, None)
    index_backlog_drains(mem, outbox=mem.outbox)  # type: ignore[attr-defined]
    found = rest(mem, "POST", "/v1/search", json={"query": QUESTION, "min_score": 0.0}).json()["results"]
    assert [h["reference"] for h in found] == [a]


async def test_patch_links_unlinks_and_moves_the_validity(mem: LiveServer) -> None:
    a, b = [
        rest(mem, "POST", "/v1/memories", json={"content": content, "occurred_at": when}).json()["reference"]
        for content, when in AUTH[:2]
    ]
    changed = rest(mem, "PATCH", f"/v1/memories/{b}", json={"supersedes": a})
    assert changed.status_code == 200 and changed.json()["supersedes"] == a
    assert get(mem, a)["superseded_by"] == b
    moved = rest(mem, "PATCH", f"/v1/memories/{b}", json={"occurred_at": "2024-07-01T00:00:00+02:00"})
    assert moved.status_code == 200 and get(mem, a)["valid_to"] == "2024-06-30T22:00:00.000000Z"
    assert (
        rest(mem, "PATCH", f"/v1/memories/{b}", json={"supersedes": a}).json()["updated_at"]
        == moved.json()["updated_at"]
    )  # the same link again changes nothing
    unlinked = rest(mem, "PATCH", f"/v1/memories/{b}", json={"supersedes": None})
    assert unlinked.status_code == 200 and unlinked.json()["supersedes"] is None
    assert (get(mem, a)["superseded_by"], get(mem, a)["valid_to"]) == (None, None)
    # Remembering the same memory again with supersedes links it.
    again = rest(mem, "POST", "/v1/memories", json={"content": AUTH[1][0], "occurred_at": AUTH[1][1], "supersedes": a})
    assert again.status_code == 200 and again.json() == {"reference": b, "created": False, "similar": []}
    assert get(mem, a)["superseded_by"] == b


async def test_superseding_refuses_unknown_foreign_and_cyclic_links(mem: LiveServer) -> None:
    def remember(content: str, **fields: Any) -> httpx2.Response:
        return rest(mem, "POST", "/v1/memories", json={"content": content, **fields})

    a = remember("The office opens at eight.", bucket="ops").json()["reference"]
    b = remember("The office opens at nine now.", bucket="ops", supersedes=a).json()["reference"]
    secret = remember("The board meets on Fridays.", bucket="board").json()["reference"]
    unknown = remember("Something new.", supersedes="mem_doesnotexist")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    other_site = mem.create_site("elsewhere")
    foreign = httpx2.post(
        f"{mem.base}/v1/memories",
        auth=("elsewhere", other_site),
        timeout=60,
        json={"content": "Not yours.", "supersedes": a},
    )
    assert foreign.status_code == 404, foreign.text
    for target in (b, a):  # b itself, or a whose chain ends at b: a cycle either way
        cycle = rest(mem, "PATCH", f"/v1/memories/{b}", json={"supersedes": target})
        if target == a:
            assert cycle.status_code == 200  # b supersedes a already: the same link
            continue
        assert cycle.status_code == 422 and cycle.json()["error"]["code"] == "invalid_parameters", cycle.text
    cycle = rest(mem, "PATCH", f"/v1/memories/{a}", json={"supersedes": b})
    assert cycle.status_code == 422 and "cycle" in cycle.json()["error"]["message"]
    assert rest(mem, "PATCH", f"/v1/memories/{a}", json={"supersedes": 5}).status_code == 422

    _, ops_token = mem.create_token(scopes=["memory:read", "memory:write"], buckets=["ops"])
    headers = {"Authorization": f"Bearer {ops_token}"}
    outside = httpx2.post(
        f"{mem.base}/v1/memories",
        headers=headers,
        timeout=60,
        json={"content": "The board meets on Mondays now.", "bucket": "ops", "supersedes": secret},
    )
    assert outside.status_code == 403 and outside.json()["error"]["code"] == "forbidden", outside.text
    inside = httpx2.post(
        f"{mem.base}/v1/memories",
        headers=headers,
        timeout=60,
        json={"content": "The office opens at ten now.", "bucket": "ops", "supersedes": a},
    )
    assert inside.status_code == 201 and get(mem, b)["superseded_by"] == inside.json()["reference"]
    async with mem.client(auth=ops_token) as client:
        result = await call(client, "remember", content="Board moved.", bucket="ops", supersedes=secret)
        assert error_code(result) == "forbidden"
        result = await call(client, "remember", content="Board moved.", bucket="ops", supersedes="mem_nope")
        assert error_code(result) == "not_found"


STANDUP = [
    ("The team standup is at 09:30 every morning.", "2025-05-01T09:59:58Z"),
    ("Decision: the team standup moves to 10:00 every morning.", "2025-05-01T10:00:00Z"),
]
NEIGHBOURS = [
    "The team retro is at 15:00 every second Friday.",
    "The team lunch is on Thursdays at noon.",
    "Standing desks are in room 4.",
]


def refused_order(response: httpx2.Response, *dates: str) -> None:
    """A 422 invalid_parameters naming each of `dates` (as the server writes them)."""
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_parameters" and all(d in error["message"] for d in dates), error


async def test_a_successor_never_occurred_before_what_it_replaces(mem: LiveServer) -> None:
    """Issue 43 item 6: a memory that supersedes another occurred at or after it, on every way in (remember over
    REST and MCP, PATCH linking or moving either end); a refusal names both dates and writes nothing."""
    (old_text, old_at), (new_text, new_at) = STANDUP
    old = rest(mem, "POST", "/v1/memories", json={"content": old_text, "occurred_at": old_at}).json()["reference"]
    for text in NEIGHBOURS:
        assert rest(mem, "POST", "/v1/memories", json={"content": text}).status_code == 201
    before = rest(mem, "GET", "/v1/memories", params={"limit": 100}).json()["memories"]
    earlier = {"content": new_text, "supersedes": old, "occurred_at": "2025-05-01T09:59:57Z"}
    refused_order(rest(mem, "POST", "/v1/memories", json=earlier), "2025-05-01T09:59:57.000000Z", old_at[:-1])
    async with mem.client() as client:
        result = await call(client, "remember", **earlier)
        assert error_code(result) == "invalid_parameters"
        assert "2025-05-01T09:59:57.000000Z" in result.content[0].text and old_at[:-1] in result.content[0].text
    assert rest(mem, "GET", "/v1/memories", params={"limit": 100}).json()["memories"] == before  # nothing written
    assert (get(mem, old)["superseded_by"], get(mem, old)["valid_to"]) == (None, None)

    # The same instant is in order; so is a successor named through the first of a chain (its newest is replaced).
    new = rest(mem, "POST", "/v1/memories", json={"content": new_text, "occurred_at": new_at})
    new = new.json()["reference"]
    linking = {"supersedes": old, "occurred_at": "2025-05-01T09:00:00Z"}
    refused_order(rest(mem, "PATCH", f"/v1/memories/{new}", json=linking), "2025-05-01T09:00:00.000000Z")
    assert get(mem, new)["supersedes"] is None and get(mem, old)["superseded_by"] is None
    assert rest(mem, "PATCH", f"/v1/memories/{new}", json={"supersedes": old, "occurred_at": old_at}).status_code == 200
    assert get(mem, old)["valid_to"] == old_at.replace("Z", ".000000Z")
    assert rest(mem, "PATCH", f"/v1/memories/{new}", json={"occurred_at": new_at}).status_code == 200
    late = {"content": "The team standup is cancelled.", "supersedes": old, "occurred_at": "2025-05-01T09:59:59Z"}
    refused_order(rest(mem, "POST", "/v1/memories", json=late), "2025-05-01T09:59:59.000000Z", "10:00:00.000000Z")
    # Moving either end of a link past the other is refused too: the successor earlier, the older one later.
    refused_order(rest(mem, "PATCH", f"/v1/memories/{new}", json={"occurred_at": "2025-04-30T00:00:00Z"}), old_at[:-1])
    refused_order(rest(mem, "PATCH", f"/v1/memories/{old}", json={"occurred_at": "2025-05-02T00:00:00Z"}), new_at[:-1])
    assert (get(mem, old)["occurred_at"], get(mem, old)["valid_to"]) == (
        old_at.replace("Z", ".000000Z"),
        new_at.replace("Z", ".000000Z"),
    )
    assert get(mem, new)["occurred_at"] == new_at.replace("Z", ".000000Z")


async def test_recall_keeps_a_chain_together_above_its_neighbours(mem: LiveServer) -> None:
    """The ranking the inverted chain of issue 43 item 6 upset: recall answers a chain's newest memory, then the
    one it replaced, and no neighbour between or before them, over REST and MCP, whether the query asks for the
    present or not."""
    (old_text, old_at), (new_text, _) = STANDUP
    old = rest(mem, "POST", "/v1/memories", json={"content": old_text, "occurred_at": old_at}).json()["reference"]
    for text in NEIGHBOURS:
        assert rest(mem, "POST", "/v1/memories", json={"content": text}).status_code == 201
    earlier = {"content": new_text, "supersedes": old, "occurred_at": "2025-05-01T09:59:57Z"}
    assert rest(mem, "POST", "/v1/memories", json=earlier).status_code == 422  # the inverted chain cannot be made
    new = rest(mem, "POST", "/v1/memories", json={"content": new_text, "supersedes": old}).json()["reference"]
    for asked in ("When is the team standup?", "When is the team standup now?"):
        hits = rest(mem, "POST", "/v1/recall", json={"query": asked, "limit": 2}).json()["results"]
        assert [h["reference"] for h in hits] == [new, old], asked
        async with mem.client() as client:
            assert references(await call(client, "recall", query=asked, limit=2)) == [new, old], asked


async def test_recall_brings_the_successor_above_a_better_matching_old_memory(mem: LiveServer) -> None:
    old = rest(
        mem,
        "POST",
        "/v1/memories",
        json={"content": "Alice lives in Paris, near the Louvre.", "occurred_at": "2023-03-01T00:00:00Z"},
    ).json()["reference"]
    for n in range(6):
        rest(mem, "POST", "/v1/memories", json={"content": f"Unrelated note {n} about the garden hose."})
    new = rest(
        mem,
        "POST",
        "/v1/memories",
        json={"content": "Moved to Berlin last month.", "supersedes": old, "occurred_at": "2024-03-01T00:00:00Z"},
    ).json()["reference"]
    hits = rest(
        mem, "POST", "/v1/recall", json={"query": "Where does Alice live, near the Louvre?", "limit": 2}
    ).json()["results"]
    assert [h["reference"] for h in hits] == [new, old]
    plain = rest(
        mem,
        "POST",
        "/v1/recall",
        json={"query": "Where does Alice live, near the Louvre?", "limit": 2, "include_superseded": True},
    ).json()["results"]
    assert plain[0]["reference"] == old


async def test_the_public_profile_shows_the_spec_hit(tmp_path: Any, embedder: Any) -> None:
    with serve(make_settings(tmp_path / "public", tool_profile="public"), embedder) as server:
        a = rest(server, "POST", "/v1/memories", json={"content": AUTH[0][0]}).json()["reference"]
        rest(server, "POST", "/v1/memories", json={"content": AUTH[1][0], "supersedes": a})
        async with server.client() as client:
            tools = {t.name: t for t in await client.list_tools()}
            assert "superseded_by" not in json.dumps(tools["recall"].output_schema)
            assert "superseded_by" not in json.dumps(tools["search_memory"].output_schema)
            result = await call(client, "recall", query=QUESTION, limit=2)
            assert all("superseded_by" not in hit for hit in result.structured_content["results"])
            assert "Superseded by" not in result.content[0].text
            assert error_code(await call(client, "remember", content="x", supersedes=a)) == "invalid_parameters"


# --- expiry ------------------------------------------------------------------------------------------------


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def quick_upkeep(monkeypatch: pytest.MonkeyPatch) -> None:
    """The maintenance thread's rounds every 0.2 s instead of every few seconds."""
    monkeypatch.setattr(maintenance, "MAINTENANCE_INTERVAL_S", 0.2)


def visible(server: LiveServer, reference: str, query_text: str) -> dict[str, bool]:
    """Where a memory can be seen: every read of the REST API."""
    seen = {"get": rest(server, "GET", f"/v1/memories/{reference}").status_code == 200}
    seen["list"] = reference in {m["reference"] for m in rest(server, "GET", "/v1/memories").json()["memories"]}
    for path, key in (("/v1/recall", "results"), ("/v1/search", "results"), ("/v1/context", "items")):
        body = {"query": query_text, **({"min_score": 0.0} if path == "/v1/search" else {})}
        seen[path] = reference in {h["reference"] for h in rest(server, "POST", path, json=body).json()[key]}
    return seen


async def test_an_expired_memory_is_never_returned_then_purged(quick_upkeep: None, mem: LiveServer) -> None:
    keep = rest(mem, "POST", "/v1/memories", json={"content": "The wifi password rotates every month."})
    expiring = rest(
        mem, "POST", "/v1/memories", json={"content": "The wifi password this week is tulip-42.", "expires_at": soon(3)}
    )
    assert expiring.status_code == 201, expiring.text
    ref, kept = expiring.json()["reference"], keep.json()["reference"]
    assert get(mem, ref)["expires_at"].endswith("Z")
    assert all(visible(mem, ref, "wifi password").values())
    async with mem.client() as client:
        hits = (await call(client, "recall", query="wifi password")).structured_content["results"]
        assert {h["reference"]: h["expires_at"] for h in hits}[kept] is None
    [(row_id,)] = query(mem.settings, "SELECT id FROM memories WHERE reference = ?", ref)
    expires = datetime.fromisoformat(get(mem, ref)["expires_at"].replace("Z", "+00:00"))
    deadline = time.monotonic() + 30
    while query(mem.settings, "SELECT 1 FROM memories WHERE reference = ?", ref):
        assert time.monotonic() < deadline, "the expired memory was not purged"
        if datetime.now(UTC) >= expires:  # expired, perhaps not purged yet: no read returns it
            assert not any(visible(mem, ref, "wifi password").values())
        time.sleep(0.1)
    assert not any(visible(mem, ref, "wifi password").values())
    assert all(visible(mem, kept, "wifi password").values())
    index_backlog_drains(mem, outbox=mem.outbox)  # type: ignore[attr-defined]
    index = mem.index  # type: ignore[attr-defined]
    if index is not None:
        assert row_id not in set(index.ids())
    async with mem.client() as client:
        assert error_code(await call(client, "forget", reference=ref)) == "not_found"


async def test_expiry_is_set_and_cleared_by_patch_and_a_past_one_hides_at_once(mem: LiveServer) -> None:
    a = rest(mem, "POST", "/v1/memories", json={"content": "Parking is free on weekends."}).json()["reference"]
    changed = rest(mem, "PATCH", f"/v1/memories/{a}", json={"expires_at": "2999-01-01T00:00:00+01:00"})
    assert changed.status_code == 200 and changed.json()["expires_at"] == "2998-12-31T23:00:00.000000Z"
    assert rest(mem, "PATCH", f"/v1/memories/{a}", json={"expires_at": None}).json()["expires_at"] is None
    assert rest(mem, "PATCH", f"/v1/memories/{a}", json={"expires_at": "soon"}).status_code == 422
    gone = rest(mem, "PATCH", f"/v1/memories/{a}", json={"expires_at": "2001-01-01T00:00:00Z"})
    assert gone.status_code == 200  # answered with the memory as written, never again
    assert not any(visible(mem, a, "parking weekends").values())
    # The same memory remembered again is new (the expired copy is purged first).
    again = rest(mem, "POST", "/v1/memories", json={"content": "Parking is free on weekends."})
    assert again.status_code == 201 and again.json()["reference"] != a
    assert visible(mem, again.json()["reference"], "parking weekends")["get"]
    # An expired memory that another one superseded: purging it leaves its successor current and whole.
    old = rest(mem, "POST", "/v1/memories", json={"content": "Standup is at nine.", "expires_at": soon(1)}).json()[
        "reference"
    ]
    new = rest(mem, "POST", "/v1/memories", json={"content": "Standup is at ten now.", "supersedes": old}).json()
    time.sleep(1.2)
    assert get(mem, new["reference"])["supersedes"] == old  # until the purge joins the chain
    async with mem.client() as client:
        result = await call(client, "remember", content="Tea is at four.", expires_at="not a time")
        assert error_code(result) == "invalid_parameters"
        result = await call(client, "recall", query="standup", limit=5)
        assert [h["reference"] for h in result.structured_content["results"]][0] == new["reference"]


# --- recency where the query asks for it ------------------------------------------------------------------

LEADS = [
    ("Project Atlas is led by Maria Lopez.", "2024-01-15T10:00:00Z"),
    ("Tom Berg has taken over as lead of Project Atlas.", "2024-09-02T10:00:00Z"),
    ("The Atlas retro is on Friday afternoons.", "2024-05-06T10:00:00Z"),
    ("Project Borealis is led by Priya Shah.", "2024-11-20T10:00:00Z"),
]


async def test_a_query_for_the_current_state_ranks_the_newest_relevant_memory_first(mem: LiveServer) -> None:
    refs = [
        rest(mem, "POST", "/v1/memories", json={"content": c, "occurred_at": w}).json()["reference"] for c, w in LEADS
    ]
    for question in (
        "Who leads Project Atlas now?",
        "Who is the current lead of Project Atlas?",
        "Project Atlas lead these days",
    ):
        hits = rest(mem, "POST", "/v1/recall", json={"query": question, "limit": 4}).json()["results"]
        assert hits[0]["reference"] == refs[1], (question, [h["content"] for h in hits])
        assert refs[0] in [h["reference"] for h in hits[:3]]


def test_recency_cues_and_the_reordering() -> None:
    for text in (
        "who leads atlas now?",
        "our current deploy day",
        "the LATEST decision on auth",
        "what is Maria working on these days",
        "qual é o estado atual?",
        "¿quién lo lleva ahora?",
    ):
        assert asks_for_recent(text), text
    for text in ("who leads atlas?", "knowledge of the currency exchange", "snowfall in March", "nowhere"):
        assert not asks_for_recent(text), text
    vectors = [np.array(v, dtype=np.float32) for v in ([1, 0], [0.98, 0.2], [0.6, 0.8], [0.99, 0.1])]
    times = ["2024-01-01T00:00:00Z", "2024-06-01T00:00:00Z", "2025-01-01T00:00:00Z", "2023-01-01T00:00:00Z"]
    candidates = [
        Candidate(id=i, text=f"m{i}", vector=v / np.linalg.norm(v), occurred_at=t)
        for i, (v, t) in enumerate(zip(vectors, times, strict=True))
    ]
    fused = np.array([3.0, 2.5, 2.9, -1.0])
    adjusted = newest_first(fused, np.array([1.0, 0.0], dtype=np.float32), candidates)
    # 0 and 1 are relevant (2 is far in meaning, 3 far in score): 1, the newer, goes first; 2 and 3 stay.
    assert list(np.argsort(-adjusted, kind="stable")) == [1, 0, 2, 3]
    assert adjusted[2] == fused[2] and adjusted[3] == fused[3]
    assert list(newest_first(fused[:1], np.array([1.0, 0.0]), candidates[:1])) == [3.0]


async def test_a_question_about_a_past_period_ranks_what_was_the_case_then_first(mem: LiveServer) -> None:
    refs = [
        rest(mem, "POST", "/v1/memories", json={"content": c, "occurred_at": w}).json()["reference"] for c, w in LEADS
    ]

    def first(body: dict[str, Any]) -> str:
        hits = rest(mem, "POST", "/v1/recall", json={"limit": 4, **body}).json()["results"]
        return str(hits[0]["reference"])

    # Tom took over in September 2024: in June Maria still led it, in October Tom did.
    assert first({"query": "Who led Project Atlas in June 2024?"}) == refs[0]
    assert first({"query": "Who was the lead of Project Atlas in Q2 2024?"}) == refs[0]
    assert first({"query": "Who led Project Atlas in October 2024?"}) == refs[1]
    assert first({"query": "Who led Project Atlas in 2025?"}) == refs[1]
    # A caller's own window decides instead: inside it the ranking is the plain one.
    windowed = {"query": "Who led Project Atlas in June 2024?", "occurred_before": "2024-07-01T00:00:00Z"}
    assert first(windowed) == refs[0]


def test_the_as_of_reordering() -> None:
    vectors = [np.array(v, dtype=np.float32) for v in ([1, 0], [0.98, 0.2], [0.99, 0.1], [0.6, 0.8])]
    times = ["2024-01-01T00:00:00Z", "2024-09-01T00:00:00Z", "2023-06-01T00:00:00Z", "2024-02-01T00:00:00Z"]
    candidates = [
        Candidate(id=i, text=f"m{i}", vector=v / np.linalg.norm(v), occurred_at=t)
        for i, (v, t) in enumerate(zip(vectors, times, strict=True))
    ]
    fused = np.array([2.0, 3.0, 2.5, 2.9])
    query = np.array([1.0, 0.0], dtype=np.float32)
    until = datetime(2024, 7, 1, tzinfo=UTC).timestamp()
    nothing_named = np.zeros(4, dtype=bool)
    adjusted = as_of_first(fused, query, candidates, until, nothing_named)
    # 0, 1 and 2 are relevant (3 is far in meaning); 1 was written after the period: 0, the newest of the
    # others, goes first, then 2; 1 and 3 keep their scores.
    assert list(np.argsort(-adjusted, kind="stable")) == [0, 2, 1, 3]
    assert adjusted[1] == fused[1] and adjusted[3] == fused[3]
    # One of the best names the period: it tells what happened then, and the order is left alone.
    assert list(as_of_first(fused, query, candidates, until, np.array([False, False, False, True]))) == list(fused)
    # Nothing relevant was written by then: left alone.
    early = datetime(2020, 1, 1, tzinfo=UTC).timestamp()
    assert list(as_of_first(fused, query, candidates, early, nothing_named)) == list(fused)


def test_upkeep_says_an_unavailable_store_in_a_line_and_a_bug_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The database away (a changed password, a restart) is expected: its message, no traceback, in the log."""

    def away() -> int:
        raise Unavailable("PostgreSQL authentication failed (retrying will not help)")

    def bug() -> int:
        raise KeyError("site")

    with caplog.at_level("WARNING", logger="memory_server.memories"):
        maintenance._once(away, "", "following the authority failed")
        maintenance._once(bug, "", "deleting expired memories failed")
    said = {record.getMessage(): record.exc_info for record in caplog.records}
    line = "following the authority failed: unavailable: PostgreSQL authentication failed (retrying will not help)"
    assert said[line] is None, said
    assert said["deleting expired memories failed"] is not None
