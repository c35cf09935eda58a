"""The storage seam's contract, on every backend: each protocol method behaves the same on SQLite and on
PostgreSQL (real servers, no mocks), and lexical prefetches rank identically on both.

PostgreSQL's own promises follow: appenders in several processes, replicas migrating one database at once,
a restart under load, and a duplicate idempotency key raced by two servers.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from storage_support import (
    WHEN,
    check_acks,
    corpus,
    document,
    memory,
    remember,
    run_appenders,
    vector,
)

from memory_server.auth.principal import READ, WRITE
from memory_server.errors import InvalidParameters, NotFound, Unavailable
from memory_server.memories.outbox import index_payload
from memory_server.ranking.lexical import analyze
from memory_server.retrieval.candidates import CandidateSource
from memory_server.storage.factory import open_snapshot, open_storage
from memory_server.storage.oauth_records import (
    ACCESS,
    REFRESH,
    Bounds,
    IssuedToken,
    NewGrant,
    OAuthClient,
    OAuthCode,
    OAuthGrant,
    PendingAuthorization,
)
from memory_server.storage.postgres.schema import SCHEMA
from memory_server.storage.postgres.storage import PostgresStorage
from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    APPENDED,
    BY_CREATED,
    BY_OCCURRED,
    CONFLICT,
    CREATED,
    DUPLICATE,
    PRESENT,
    Kept,
    LogDeletion,
    PurgeStep,
    SessionRecord,
    StaleRow,
    TokenRecord,
    Words,
    WouldBlock,
)
from memory_server.storage.scope import Scope
from memory_server.timestamps import now_rfc3339, rfc3339_at

from conftest import make_settings
from tests.postgres import PostgresServer

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "sqlite":
        settings = make_settings(tmp_path / "data")
    else:
        settings = make_settings(tmp_path / "data", database_url=request.getfixturevalue("postgres_url"))
    opened = open_storage(settings)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def both(tmp_path: Path, postgres_url: str) -> Iterator[tuple[Storage, Storage]]:
    sqlite = open_storage(make_settings(tmp_path / "data"))
    postgres = open_storage(make_settings(tmp_path / "data", database_url=postgres_url))
    try:
        yield sqlite, postgres
    finally:
        sqlite.close()
        postgres.close()


def site(storage: Storage, name: str = "acme") -> int:
    return storage.sites.create_site(name, f"hash-of-{name}")


# --- conversation logs ------------------------------------------------------------------------------------


async def test_append_acknowledges_gapless_seqs_and_keeps_payload_text(storage: Storage) -> None:
    sid = site(storage)
    texts = ['{"b": 1,  "a": [true, null]}', '{"é":"\\u00e9","n":1.50}']
    first = await storage.logs.append(sid, "conv-0001", texts, None)
    second = await storage.logs.append(sid, "conv-0001", ['{"x":1}'], None)
    assert (first["first_seq"], first["last_seq"], first["count"], first["duplicate"]) == (0, 1, 2, False)
    assert (second["first_seq"], second["last_seq"], second["count"]) == (2, 2, 1)
    assert RFC3339.fullmatch(first["recorded_at"]) and first["recorded_at"] <= second["recorded_at"]
    assert first["conversation_id"] == "conv-0001"
    items = storage.logs.replay(sid, "conv-0001", 0, 10)
    assert items == [
        (0, first["recorded_at"], texts[0]),
        (1, first["recorded_at"], texts[1]),
        (2, second["recorded_at"], '{"x":1}'),
    ]
    assert storage.logs.tail(sid, "conv-0001", 2) == items[1:]
    assert storage.logs.tail(sid, "conv-0001", 0) == [] and storage.logs.replay(sid, "conv-0001", 1, 0) == []
    assert storage.logs.replay(sid, "conv-0001", 2, 10) == items[2:]
    assert storage.logs.replay(sid, "conv-0001", 3, 10) == []
    assert storage.logs.replay(sid, "conv-0001", 2**63 + 5, 10) == []
    assert storage.logs.tail(sid, "conv-unknown", 5) == []
    assert storage.logs.tail(site(storage, "b"), "conv-0001", 5) == []


async def test_an_idempotency_key_answers_its_first_acknowledgement(storage: Storage) -> None:
    sid = site(storage)
    ack = await storage.logs.append(sid, "conv-0001", ['{"n":1}', '{"n":2}'], "key-1")
    again = await storage.logs.append(sid, "conv-0001", ['{"other":true}'], "key-1")
    assert again == {**ack, "duplicate": True}
    assert len(storage.logs.replay(sid, "conv-0001", 0, 10)) == 2
    elsewhere = await storage.logs.append(sid, "conv-0002", ['{"n":1}'], "key-1")  # keys are per conversation
    assert (elsewhere["first_seq"], elsewhere["duplicate"]) == (0, False)
    unkeyed = [await storage.logs.append(sid, "conv-0001", ['{"n":3}'], None) for _ in range(2)]
    assert [a["first_seq"] for a in unkeyed] == [2, 3]  # without a key a retry appends again


async def test_a_batch_is_all_or_nothing(storage: Storage) -> None:
    sid = site(storage)
    await storage.logs.append(sid, "conv-0001", ['{"n":0}'], None)
    with pytest.raises(Exception):  # noqa: B017  # a lone surrogate cannot be stored by either backend
        await storage.logs.append(sid, "conv-0001", ['{"n":1}', '{"bad":"\ud800"}'], None)
    assert [seq for seq, _, _ in storage.logs.replay(sid, "conv-0001", 0, 10)] == [0]
    ack = await storage.logs.append(sid, "conv-0001", ['{"n":1}'], None)
    assert ack["first_seq"] == 1


async def test_conversations_newest_activity_first_in_pages(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    acks = {}
    for name in ("conv-a", "conv-b", "conv-c", "conv-a", "conv-d"):
        acks[name] = await storage.logs.append(sid, f"{name}-0001", ['{"n":1}'], None)
    await storage.logs.append(other, "conv-z-0001", ['{"n":1}'], None)
    page = storage.logs.conversations(sid, 2, None)
    assert [c["conversation_id"] for c in page.conversations] == ["conv-d-0001", "conv-a-0001"]
    assert page.conversations[1]["item_count"] == 2
    assert page.conversations[1]["last_recorded_at"] == acks["conv-a"]["recorded_at"]
    assert page.following is not None
    rest = storage.logs.conversations(sid, 2, page.following)
    assert [c["conversation_id"] for c in rest.conversations] == ["conv-c-0001", "conv-b-0001"]
    assert rest.following is None  # a short (or exactly full, last) page ends the listing
    assert storage.logs.conversations(sid, 1, page.following).following is not None


async def test_conversations_are_counted_per_site(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    assert storage.logs.count_conversations(sid) == 0
    for name in ("conv-a-0001", "conv-b-0001", "conv-a-0001"):
        await storage.logs.append(sid, name, ['{"n":1}'], None)
    storage.logs.import_items(sid, "conv-c-0001", [(0, "2023-01-01T00:00:00.000000Z", '{"n":0}')])
    await storage.logs.append(other, "conv-z-0001", ['{"n":1}'], None)
    assert storage.logs.count_conversations(sid) == 3 and storage.logs.count_conversations(other) == 1
    assert storage.logs.count_conversations(10**9) == 0


async def test_import_items_keeps_seqs_and_times_and_reports_each_item(storage: Storage) -> None:
    sid = site(storage)
    t1, t2 = "2023-01-01T00:00:00.000000Z", "2023-01-02T00:00:00.000000Z"
    items = [(0, t1, '{"n":0}'), (1, t1, '{"n":1}'), (2, t2, '{"n":2}')]
    assert storage.logs.import_items(sid, "conv-0001", items) == [APPENDED] * 3
    assert storage.logs.replay(sid, "conv-0001", 0, 10) == items
    outcomes = storage.logs.import_items(
        sid,
        "conv-0001",
        [
            (0, t1, '{"n":0}'),
            (1, t1, '{"n":9}'),
            (3, t2, '{"n":3}'),
            (3, t2, '{"n":3}'),
            (3, t2, '{"n":4}'),
            (6, t2, '{"n":6}'),
        ],
    )
    assert outcomes[0] == PRESENT and outcomes[1].startswith("conflict:") and outcomes[2:4] == [APPENDED, PRESENT]
    assert outcomes[4].startswith("conflict:") and outcomes[5].startswith("gap:")
    summary = storage.logs.conversations(sid, 1, None).conversations[0]
    assert (summary["item_count"], summary["first_recorded_at"], summary["last_recorded_at"]) == (4, t1, t2)
    ack = await storage.logs.append(sid, "conv-0001", ['{"n":4}'], None)
    assert ack["first_seq"] == 4


# --- deleting conversation logs ---------------------------------------------------------------------------


async def test_a_deleted_conversation_is_hidden_at_once_then_purged_in_small_steps(storage: Storage) -> None:
    logs = storage.logs
    sid, other = site(storage), site(storage, "other")
    for n, key in enumerate(["k0", "k1", None, "k2"]):
        await logs.append(sid, "conv-0001", [f'{{"n":{n}}}', f'{{"n":{n}.5}}'], key)
    await logs.append(sid, "conv-0002", ['{"kept":1}'], "k0")
    await logs.append(other, "conv-0001", ['{"theirs":1}'], None)
    linked = remember(
        storage, sid, "from the log", provenance={"source": "chat", "conversation_id": "conv-0001", "seq": 3}
    )
    named = remember(storage, sid, "names it without a seq", provenance={"conversation_id": "conv-0001"})
    numeric = remember(storage, sid, "a number is not an id", provenance={"conversation_id": 12345678})
    elsewhere = remember(storage, sid, "from the other log", provenance={"conversation_id": "conv-0002", "seq": 0})
    theirs = remember(storage, other, "another site's", provenance={"conversation_id": "conv-0001", "seq": 0})
    before = storage.memories.get(Scope(sid), linked.reference)
    assert before is not None

    marked = logs.delete_conversation(sid, "conv-0001")
    # linked: the two memories naming it as a string, not a number, on this site
    assert marked == LogDeletion(conversation_id="conv-0001", item_count=8, started=True, linked=2)
    assert logs.delete_conversation(sid, "conv-0001") == LogDeletion("conv-0001", 8, started=False, linked=2)
    assert logs.delete_conversation(sid, "conv-unknown") is None
    # Hidden from every read at once, before anything is purged.
    assert logs.tail(sid, "conv-0001", 10) == [] and logs.replay(sid, "conv-0001", 0, 10) == []
    assert [c["conversation_id"] for c in logs.conversations(sid, 10, None).conversations] == ["conv-0002"]
    assert logs.purging(10) == [(sid, "conv-0001")]
    snapshot = storage.snapshot(None)
    try:
        assert snapshot.counts == {"memories": 5, "conversations": 2, "log_items": 2}
        assert [(s, c) for s, c, _ in snapshot.log_items()] == [("acme", "conv-0002"), ("other", "conv-0001")]
    finally:
        snapshot.close()
    with pytest.raises(Unavailable, match="being deleted"):
        logs.import_items(sid, "conv-0001", [(8, WHEN, '{"n":8}')])

    steps = []
    while not steps or not steps[-1].done:
        steps.append(logs.purge_step(sid, "conv-0001", 3))
    assert all(step.rows <= 3 for step in steps) and len(steps) >= 5
    assert sum(s.unlinked for s in steps) == 2 and sum(s.items for s in steps) == 8
    assert sum(s.keys for s in steps) == 3
    assert logs.purging(10) == [] and logs.delete_conversation(sid, "conv-0001") is None
    assert logs.purge_step(sid, "conv-0001", 3) == PurgeStep(unlinked=0, items=0, keys=0, done=True)

    after = storage.memories.get(Scope(sid), linked.reference)
    assert after is not None and after.content == "from the log" and after.provenance == {"source": "chat"}
    assert after.updated_at > before.updated_at  # a change: cached candidates are read again
    unnamed = storage.memories.get(Scope(sid), named.reference)
    assert unnamed is not None and unnamed.provenance == {}
    for ref, owner, provenance in [
        (numeric.reference, sid, {"conversation_id": 12345678}),
        (elsewhere.reference, sid, {"conversation_id": "conv-0002", "seq": 0}),
        (theirs.reference, other, {"conversation_id": "conv-0001", "seq": 0}),
    ]:
        kept = storage.memories.get(Scope(owner), ref)
        assert kept is not None and kept.provenance == provenance
    _, rows = storage.candidates.load(Scope(sid), None, "model-a", lambda _id, _at: False)
    positions = {row.content: (row.conversation_id, row.seq) for row in rows}
    assert positions["from the log"] == (None, None) and positions["from the other log"] == ("conv-0002", 0)
    assert (
        storage.memories.page(
            Scope(sid), location=None, provenance={"conversation_id": "conv-0001"}, limit=10, after=None
        )[0]
        == []
    )

    # Nothing of it is left: the id starts a new log, and its old idempotency keys are forgotten.
    ack = await logs.append(sid, "conv-0001", ['{"new":true}'], "k0")
    assert (ack["first_seq"], ack["duplicate"]) == (0, False)
    assert [t for _, _, t in logs.replay(sid, "conv-0001", 0, 10)] == ['{"new":true}']
    assert (await logs.append(sid, "conv-0002", ['{"kept":2}'], "k0"))["duplicate"]
    assert len(logs.tail(sid, "conv-0002", 10)) == 1 and len(logs.tail(other, "conv-0001", 10)) == 1


async def test_an_append_racing_a_deletion_waits_then_starts_a_new_log_at_seq_0(storage: Storage) -> None:
    logs = storage.logs
    sid = site(storage)
    await logs.append(sid, "conv-0001", [f'{{"old":{n}}}' for n in range(50)], "key")
    assert logs.delete_conversation(sid, "conv-0001") is not None
    keyed = asyncio.ensure_future(logs.append(sid, "conv-0001", ['{"new":1}'], "key"))
    plain = asyncio.ensure_future(logs.append(sid, "conv-0001", ['{"new":2}'], None))
    await asyncio.sleep(0.3)
    assert not keyed.done() and not plain.done()  # waiting for the deletion, nothing written
    other = await logs.append(sid, "conv-0002", ['{"elsewhere":1}'], None)  # other conversations go on
    assert other["first_seq"] == 0
    while not (await asyncio.to_thread(logs.purge_step, sid, "conv-0001", 7)).done:
        pass
    acks = sorted([await keyed, await plain], key=lambda a: a["first_seq"])
    assert [a["first_seq"] for a in acks] == [0, 1] and not any(a["duplicate"] for a in acks)
    assert sorted(t for _, _, t in logs.replay(sid, "conv-0001", 0, 100)) == ['{"new":1}', '{"new":2}']


async def test_an_append_gives_up_on_a_deletion_that_does_not_finish(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("memory_server.storage.deletion.DELETION_WAIT_S", 0.3)
    sid = site(storage)
    await storage.logs.append(sid, "conv-0001", ['{"n":0}'], None)
    storage.logs.delete_conversation(sid, "conv-0001")  # and no purge comes
    started = time.monotonic()
    with pytest.raises(Unavailable, match="being deleted") as raised:
        await storage.logs.append(sid, "conv-0001", ['{"n":1}'], "key")
    assert raised.value.retryable and 0.25 < time.monotonic() - started < 5
    assert storage.logs.tail(sid, "conv-0001", 5) == [] and storage.logs.purging(5) == [(sid, "conv-0001")]


async def test_log_retention_marks_what_is_past_it_oldest_first(storage: Storage) -> None:
    from memory_server.logs.deletion import LogRetention

    logs, sites = storage.logs, storage.sites
    kept_site, short = site(storage), site(storage, "short")
    assert sites.set_log_retention("short", 2) and not sites.set_log_retention("nobody", 2)
    assert {s.name: s.log_retention_days for s in sites.sites()} == {"acme": None, "short": 2}
    for n in range(3):
        await logs.append(short, f"conv-000{n}", ['{"n":0}'], None)
        await logs.append(kept_site, f"conv-000{n}", ['{"n":0}'], None)
    now_us = int(time.time() * 1_000_000)
    day_us = 86_400 * 1_000_000
    assert logs.expire(now_us + day_us, 10) == 0  # within the retention
    assert logs.expire(now_us + 3 * day_us, 2) == 2  # the two oldest first
    assert sorted(logs.purging(10)) == [(short, "conv-0000"), (short, "conv-0001")]
    assert [c["conversation_id"] for c in logs.conversations(short, 10, None).conversations] == ["conv-0002"]
    retention = LogRetention(logs, budget=1, pause_s=0, clock=lambda: time.time() + 3 * 86_400)
    assert retention.run_once() == 3
    assert logs.conversations(short, 10, None).conversations == [] and logs.purging(10) == []
    assert len(logs.conversations(kept_site, 10, None).conversations) == 3  # no retention: kept
    assert sites.set_log_retention("short", None)
    await logs.append(short, "conv-0009", ['{"n":0}'], None)
    assert logs.expire(now_us + 1000 * day_us, 10) == 0 and retention.run_once() == 0
    assert [s.log_retention_days for s in sites.sites()] == [None, None]


# --- sites and tokens -------------------------------------------------------------------------------------


def token_record(token_id: str, site_id: int, **bounds: Any) -> TokenRecord:
    return TokenRecord(
        id=token_id,
        site_id=site_id,
        site="acme",
        scopes=("memory:read",),
        teams=bounds.get("teams"),
        projects=bounds.get("projects"),
        buckets=bounds.get("buckets"),
        created_at=f"2024-01-01T00:00:0{token_id[-1]}.000000Z",
        revoked_at=None,
    )


def test_sites_and_tokens(storage: Storage) -> None:
    sites = storage.sites
    sid = site(storage)
    with pytest.raises(InvalidParameters):
        site(storage)
    assert sites.site_id("acme") == sid and sites.site_id("nobody") is None
    site(storage, "Beta")
    assert [s.name for s in sites.sites()] == ["Beta", "acme"]  # byte order, as SQLite compares
    assert sites.set_secret("acme", "new-hash") and not sites.set_secret("nobody", "x")
    for nowait in (False, True):
        try:
            credential = sites.credential("acme", nowait=nowait)
        except WouldBlock:
            assert nowait
            continue
        assert credential is not None and (credential.site_id, credential.secret_hash) == (sid, "new-hash")
    assert sites.credential("nobody") is None
    sites.add_token(token_record("tok-2", sid, teams=("b", "a")), "hash-2")
    sites.add_token(token_record("tok-1", sid), "hash-1")
    assert [t.id for t in sites.tokens(sid)] == ["tok-1", "tok-2"]
    assert sites.tokens(sid)[1].teams == ("a", "b") and sites.tokens(sid)[1].site == "acme"
    assert sites.revoke_token("tok-2") and not sites.revoke_token("tok-2") and not sites.revoke_token("nope")
    revoked = sites.token("hash-2")
    assert revoked is not None and revoked.revoked_at is not None and revoked.scopes == ("memory:read",)
    assert sites.token("hash-unknown") is None


def test_token_labels_and_last_use(storage: Storage) -> None:
    sites = storage.sites
    sid = site(storage)
    sites.add_token(replace(token_record("tok-1", sid), label="ci: nightly import"), "hash-1")
    sites.add_token(token_record("tok-2", sid), "hash-2")
    assert [(t.label, t.last_used_at) for t in sites.tokens(sid)] == [("ci: nightly import", None), (None, None)]
    sites.mark_token_used("tok-1", "2026-05-01T10:00:00.000000Z")
    sites.mark_token_used("tok-1", "2026-05-01T09:00:00.000000Z")  # an earlier use (another server): kept later
    sites.mark_token_used("tok-none", "2026-05-01T10:00:00.000000Z")  # no such token: nothing happens
    used = sites.token("hash-1")
    assert used is not None and (used.label, used.last_used_at) == ("ci: nightly import", "2026-05-01T10:00:00.000000Z")
    sites.mark_token_used("tok-1", "2026-05-01T10:01:00.000000Z")
    assert [t.last_used_at for t in sites.tokens(sid)] == ["2026-05-01T10:01:00.000000Z", None]


def session_record(id_hash: str, site_id: int, *, created_at: float, seen_at: float) -> SessionRecord:
    return SessionRecord(
        id_hash=id_hash,
        site_id=site_id,
        site="acme",
        kind="basic",
        credential=f"digest-{id_hash}",
        created_at=created_at,
        seen_at=seen_at,
    )


def test_console_sessions(storage: Storage) -> None:
    sites = storage.sites
    sid = site(storage)
    now = time.time()
    first = session_record("a" * 64, sid, created_at=now - 0.25, seen_at=now)
    sites.add_session(first)
    sites.add_session(
        SessionRecord(
            id_hash="b" * 64,
            site_id=sid,
            site="acme",
            kind="bearer",
            credential="tok-hash",
            created_at=now,
            seen_at=now,
        )
    )
    assert sites.session("a" * 64) == first  # unix seconds come back exactly (double precision)
    bearer = sites.session("b" * 64)
    assert bearer is not None and (bearer.kind, bearer.credential) == ("bearer", "tok-hash")
    assert sites.session("c" * 64) is None
    sites.touch_session("a" * 64, now + 60)
    sites.touch_session("a" * 64, now + 30)  # activity never goes back (two replicas touching at once)
    touched = sites.session("a" * 64)
    assert touched is not None and touched.seen_at == now + 60 and touched.created_at == first.created_at
    sites.touch_session("c" * 64, now)  # no such session: nothing happens
    assert sites.session("c" * 64) is None
    sites.delete_session("b" * 64)
    sites.delete_session("b" * 64)
    assert sites.session("b" * 64) is None and sites.session("a" * 64) is not None
    for name, created, seen in (("idle", now - 10, now - 100), ("old", now - 1000, now), ("live", now - 10, now)):
        sites.add_session(session_record(name, sid, created_at=created, seen_at=seen))
    assert sites.prune_sessions(seen_before=now - 50, created_before=now - 500) == 2  # idle, old
    assert [n for n in ("idle", "old", "live") if sites.session(n) is not None] == ["live"]
    assert sites.prune_sessions(seen_before=now - 50, created_before=now - 500) == 0
    assert sites.prune_sessions(seen_before=now + 3600, created_before=0.0) == 2  # every one of them: idle
    assert sites.session("live") is None and sites.session("a" * 64) is None


async def test_deleting_a_site_deletes_all_of_it(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    for owner in (sid, other):
        await storage.logs.append(owner, "conv-0001", ['{"n":1}'], "key")
        words = Words(("apple",), np.stack([vector(1)]))
        remember(storage, owner, "apple pie", words=words)
    storage.sites.add_token(token_record("tok-1", sid), "hash-1")
    for owner in (sid, other):
        storage.sites.add_session(session_record(f"session-{owner}", owner, created_at=1.0, seen_at=2.0))
    gone = storage.memories.page(Scope(sid), location=None, provenance={}, limit=10, after=None)[0][0].id
    assert storage.sites.delete_site("acme") and not storage.sites.delete_site("acme")
    assert storage.sites.site_id("acme") is None and storage.sites.token("hash-1") is None
    assert storage.sites.session(f"session-{sid}") is None and storage.sites.session(f"session-{other}") is not None
    assert storage.logs.tail(sid, "conv-0001", 5) == [] and storage.logs.conversations(sid, 5, None).conversations == []
    assert storage.memories.page(Scope(sid), location=None, provenance={}, limit=10, after=None)[0] == []
    assert gone in storage.outbox.deletions()
    assert [w[0] for w in storage.words.all_words("model-a")] == [other]
    assert len(storage.logs.tail(other, "conv-0001", 5)) == 1 and storage.memories.count() == 1
    recreated = site(storage)
    assert recreated != sid  # a new tenant, never the old one's id
    ack = await storage.logs.append(recreated, "conv-0001", ['{"n":1}'], "key")
    assert (ack["first_seq"], ack["duplicate"]) == (0, False)  # its keys went with it


# --- OAuth clients, requests, codes, grants and tokens ---------------------------------------------------

NOW = 1_900_000_000.0


def oauth_code(site_id: int, **fields: Any) -> OAuthCode:
    values: dict[str, Any] = {
        "client_id": "client-1",
        "site_id": site_id,
        "bounds": Bounds((READ,), buckets=("b",)),
        "resource": "http://127.0.0.1:8765/mcp",
        "code_challenge": "challenge",
        "redirect_uri": "http://127.0.0.1:5000/cb",
        "redirect_uri_explicit": True,
        "expires_at": NOW + 60,
    }
    values.update(fields)
    return OAuthCode(**values)


def oauth_grant(grant_id: str, site_id: int, created_at: str = WHEN) -> NewGrant:
    return NewGrant(
        id=grant_id,
        site_id=site_id,
        client_id="client-1",
        bounds=Bounds((READ, WRITE), teams=("t",)),
        resource="http://127.0.0.1:8765/mcp",
        created_at=created_at,
        expires_at=NOW + 3600,
    )


def test_oauth_clients_and_requests(storage: Storage) -> None:
    oauth = storage.oauth
    public = OAuthClient("client-1", None, "Claude", '{"redirect_uris": ["http://127.0.0.1:5000/cb"]}', NOW)
    oauth.add_client(public)
    oauth.add_client(OAuthClient("client-2", "secret-digest", None, "{}", NOW + 0.25))
    assert oauth.client("client-1") == public and oauth.client("client-2") == OAuthClient(
        "client-2", "secret-digest", None, "{}", NOW + 0.25
    )
    assert oauth.client("nobody") is None
    pending = PendingAuthorization("client-1", '{"state": "s"}', NOW + 600)
    oauth.add_request("req-1", pending, now=NOW)
    oauth.add_request("req-old", replace(pending, expires_at=NOW + 1), now=NOW)
    assert oauth.request("req-1", now=NOW) == pending and oauth.request("nope", now=NOW) is None
    assert oauth.request("req-1", now=NOW + 600) is None  # expired
    assert oauth.set_request_csrf("req-1", "csrf-digest", now=NOW)
    assert not oauth.set_request_csrf("req-1", "x", now=NOW + 600) and not oauth.set_request_csrf("nope", "x", now=NOW)
    assert oauth.request("req-1", now=NOW) == replace(pending, csrf_hash="csrf-digest")
    oauth.add_request("req-2", pending, now=NOW + 2)  # forgets the expired ones
    assert oauth.take_request("req-old", now=NOW) is None
    assert oauth.take_request("req-1", now=NOW) == replace(pending, csrf_hash="csrf-digest")
    assert oauth.take_request("req-1", now=NOW) is None  # taken once
    assert oauth.take_request("req-2", now=NOW + 600) is None and oauth.request("req-2", now=NOW) is None


def test_oauth_codes_grants_and_tokens(storage: Storage) -> None:
    oauth = storage.oauth
    sid = site(storage)
    oauth.add_client(OAuthClient("client-1", None, "Claude", "{}", NOW))
    assert not oauth.add_code("code-x", oauth_code(sid + 100), now=NOW)  # no such site
    assert oauth.code("code-x") is None
    assert oauth.add_code("code-1", oauth_code(sid), now=NOW)
    assert oauth.add_code("code-2", oauth_code(sid, bounds=Bounds((READ, WRITE)), redirect_uri_explicit=False), now=NOW)
    assert oauth.code("code-1") == oauth_code(sid) and oauth.code("code-2") == oauth_code(
        sid, bounds=Bounds((READ, WRITE)), redirect_uri_explicit=False
    )
    access = IssuedToken("access-1", ACCESS, (READ,), NOW + 3600)
    refresh = IssuedToken("refresh-1", REFRESH, (READ, WRITE), NOW + 7200)
    grant = oauth_grant("oa_1", sid)
    assert not oauth.redeem_code("code-1", grant, [access, refresh], now=NOW + 60)  # expired
    assert not oauth.redeem_code("code-none", grant, [access, refresh], now=NOW)
    assert oauth.redeem_code("code-1", grant, [access, refresh], now=NOW)
    assert not oauth.redeem_code("code-1", oauth_grant("oa_2", sid), [], now=NOW)  # used
    assert oauth.code("code-1") == replace(oauth_code(sid), used=True, grant_id="oa_1")
    record = oauth.token("access-1")
    assert record is not None and (record.kind, record.scopes, record.expires_at, record.rotated) == (
        ACCESS,
        (READ,),
        NOW + 3600,
        False,
    )
    listed = OAuthGrant(
        id="oa_1",
        site_id=sid,
        site="acme",
        client_id="client-1",
        client_name="Claude",
        bounds=Bounds((READ, WRITE), teams=("t",)),
        resource="http://127.0.0.1:8765/mcp",
        created_at=WHEN,
        expires_at=NOW + 3600,
        revoked_at=None,
        last_used_at=rfc3339_at(NOW),
    )
    assert record.grant == listed and oauth.token("unknown") is None
    try:
        assert oauth.token("access-1", nowait=True) == record
    except WouldBlock:
        pass  # PostgreSQL: the caller asks again from a thread

    # Rotation: once, before expiry, of a refresh token only; the grant's expired tokens go.
    new = [IssuedToken("access-2", ACCESS, (READ,), NOW + 100), IssuedToken("refresh-2", REFRESH, (READ,), NOW + 9000)]
    assert not oauth.rotate_refresh("access-1", new, now=NOW, grant_expires_at=NOW + 9000)
    assert not oauth.rotate_refresh("refresh-1", new, now=NOW + 7200, grant_expires_at=NOW + 9000)
    assert oauth.rotate_refresh("refresh-1", new, now=NOW + 3600, grant_expires_at=NOW + 9000)
    assert not oauth.rotate_refresh("refresh-1", [], now=NOW + 3600, grant_expires_at=NOW + 9999)
    rotated = oauth.token("refresh-1")
    assert rotated is not None and rotated.rotated and rotated.grant.expires_at == NOW + 9000
    assert oauth.token("access-1") is None  # expired at the rotation: forgotten
    fresh = oauth.token("refresh-2")
    assert fresh is not None and (fresh.kind, fresh.scopes, fresh.rotated) == (REFRESH, (READ,), False)

    # Grants: oldest first, revoked ones included; a revoked grant refreshes no more.
    assert oauth.redeem_code(
        "code-2",
        oauth_grant("oa_0", sid, created_at="2024-04-01T00:00:00.000000Z"),
        [IssuedToken("refresh-0", REFRESH, (READ,), NOW + 3600)],
        now=NOW,
    )
    assert [g.id for g in oauth.grants(sid)] == ["oa_0", "oa_1"] and oauth.grants(sid + 100) == []
    assert oauth.revoke_grant("oa_1") and not oauth.revoke_grant("oa_1") and not oauth.revoke_grant("oa_none")
    revoked = oauth.grants(sid)[1]
    assert revoked.revoked_at is not None and RFC3339.fullmatch(revoked.revoked_at)
    assert not oauth.rotate_refresh("refresh-2", [], now=NOW + 3600, grant_expires_at=NOW + 9999)
    record = oauth.token("access-2")
    assert record is not None and record.grant.revoked_at == revoked.revoked_at

    # When a grant was last used (its code exchanged, a refresh, one of its tokens): only ever later.
    assert [g.last_used_at for g in oauth.grants(sid)] == [rfc3339_at(NOW), rfc3339_at(NOW + 3600)]
    oauth.mark_grant_used("oa_0", "2030-03-17T18:00:00.000000Z")
    oauth.mark_grant_used("oa_0", "2030-03-17T17:59:00.000000Z")
    oauth.mark_grant_used("oa_none", "2030-03-17T18:00:00.000000Z")
    assert [g.last_used_at for g in oauth.grants(sid)] == ["2030-03-17T18:00:00.000000Z", rfc3339_at(NOW + 3600)]

    # A site's deletion takes its codes, grants and tokens (not the clients: they belong to no site).
    other = site(storage, "other")
    assert oauth.add_code("code-o", oauth_code(other), now=NOW)
    assert oauth.redeem_code(
        "code-o", oauth_grant("oa_o", other), [IssuedToken("access-o", ACCESS, (READ,), NOW + 60)], now=NOW
    )
    assert oauth.add_code("code-3", oauth_code(sid), now=NOW)
    assert storage.sites.delete_site("acme")
    assert oauth.grants(sid) == [] and oauth.code("code-1") is None and oauth.code("code-3") is None
    assert all(oauth.token(t) is None for t in ("refresh-0", "refresh-1", "refresh-2", "access-2"))
    assert [g.id for g in oauth.grants(other)] == ["oa_o"] and oauth.token("access-o") is not None
    assert oauth.client("client-1") is not None
    assert not oauth.redeem_code("code-3", oauth_grant("oa_3", sid), [], now=NOW)


# --- saved memories ---------------------------------------------------------------------------------------


def test_insert_decides_duplicates_and_kept_references(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    created = remember(storage, sid, "the sky is blue", project="p")
    assert created.outcome == CREATED and created.row_id is not None and created.reference.startswith("mem_")
    assert storage.memories.find_duplicate(sid, memory("the sky is blue", project="p").dedup_key) == created.reference
    assert storage.memories.decided(sid, memory("the sky is blue", project="p"), None) == type(created)(
        None, created.reference, DUPLICATE
    )
    assert remember(storage, sid, "the sky is blue", project="p").outcome == DUPLICATE
    assert storage.memories.decided(sid, memory("the sky is blue"), None) is None  # other filing: new
    assert remember(storage, other, "the sky is blue", project="p").outcome == CREATED  # other site: new
    kept = Kept(
        reference="mem_kept", created_at="2020-01-01T00:00:00.000000Z", updated_at="2020-02-01T00:00:00.000000Z"
    )
    assert remember(storage, sid, "imported", kept=kept).outcome == CREATED
    assert remember(storage, sid, "imported", kept=kept).outcome == PRESENT
    assert remember(storage, sid, "something else", kept=kept).outcome == CONFLICT
    assert remember(storage, other, "imported", kept=kept).outcome == CONFLICT
    got = storage.memories.get(Scope(sid), "mem_kept")
    assert got is not None and (got.created_at, got.updated_at) == (kept.created_at, kept.updated_at)
    batch = [(memory(text), document(text), None) for text in ("one", "two", "one")]
    assert [i.outcome for i in storage.memories.insert(sid, batch, Words())] == [CREATED, CREATED, DUPLICATE]
    assert storage.memories.count() == 5


def test_update_checks_what_it_was_based_on(storage: Storage) -> None:
    sid = site(storage)
    first = remember(storage, sid, "alpha fact", tags=["x"])
    second = remember(storage, sid, "beta fact")
    stored = storage.memories.get(Scope(sid), first.reference)
    assert stored is not None and stored.has_vector and stored.vector_model == "model-a"
    with pytest.raises(StaleRow):
        storage.memories.update(
            sid, first.reference, memory("alpha changed"), based_on={"content": "not it"}, document=None, words=Words()
        )
    with pytest.raises(InvalidParameters):
        storage.memories.update(sid, first.reference, memory("beta fact"), based_on={}, document=None, words=Words())
    assert storage.memories.update(sid, "mem_gone", memory("x"), based_on={}, document=None, words=Words()) is None
    storage.outbox.mark_indexed([(first.row_id, stored.updated_at)])
    row_id = storage.memories.update(
        sid,
        first.reference,
        memory("gamma fact", tags=["y"]),
        based_on={"content": "alpha fact"},
        document=document("gamma fact"),
        words=Words(),
    )
    assert row_id == first.row_id and storage.outbox.unindexed(10) == [first.row_id, second.row_id]
    changed = storage.memories.get(Scope(sid), first.reference)
    assert changed is not None and (changed.content, changed.tags) == ("gamma fact", ("y",))
    assert changed.updated_at >= stored.updated_at
    assert storage.candidates.best_by_terms(Scope(sid), analyze("gamma"), 10) == [first.row_id]
    assert storage.candidates.best_by_terms(Scope(sid), analyze("alpha"), 10) == []
    storage.memories.update(
        sid, first.reference, memory("gamma fact", project="p"), based_on={}, document=None, words=Words()
    )  # the text is the same: vector and terms stay
    assert storage.candidates.best_by_terms(Scope(sid), analyze("gamma"), 10) == [first.row_id]


def test_delete_get_page_by_ids(storage: Storage) -> None:
    sid = site(storage)
    made = [
        remember(
            storage,
            sid,
            f"memory number {n}",
            team="t1" if n % 2 else "t2",
            tags=["a", f"n{n}"],
            location="notes/a" if n < 3 else None,
            provenance={"source": "chat", "agent": 7} if n == 4 else {},
            kept=Kept(created_at=f"2024-01-0{1 + n // 2}T00:00:00.000000Z"),
        )
        for n in range(6)
    ]
    scope = Scope(sid)
    page, following = storage.memories.page(scope, location=None, provenance={}, limit=4, after=None)
    expected = [made[n].reference for n in (5, 4, 3, 2, 1, 0)]  # created_at descending, then id descending
    assert [m.reference for m in page] == expected[:4] and following == (page[-1].created_at, page[-1].id)
    rest, end = storage.memories.page(scope, location=None, provenance={}, limit=4, after=following)
    assert [m.reference for m in rest] == expected[4:] and end is None
    located, _ = storage.memories.page(scope, location="notes/a", provenance={}, limit=10, after=None)
    assert len(located) == 3
    assert [
        m.reference
        for m in storage.memories.page(scope, location=None, provenance={"source": "chat"}, limit=10, after=None)[0]
    ] == [made[4].reference]
    assert storage.memories.page(scope, location=None, provenance={"agent": "7"}, limit=10, after=None)[0] == []
    with pytest.raises(InvalidParameters):
        storage.memories.page(scope, location=None, provenance={"secret": "x"}, limit=10, after=None)
    bounded = scope.narrowed(team="t1", tags=["n3"])
    assert [
        m.reference for m in storage.memories.page(bounded, location=None, provenance={}, limit=10, after=None)[0]
    ] == [made[3].reference]
    assert storage.memories.get(Scope(sid, teams=frozenset({"t2"})), made[1].reference) is None
    assert storage.memories.delete(Scope(sid, teams=frozenset({"t2"})), made[1].reference) is None
    assert storage.memories.delete(scope, made[1].reference) == made[1].row_id
    assert storage.memories.delete(scope, made[1].reference) is None
    assert storage.memories.get(scope, made[1].reference) is None
    assert made[1].row_id in storage.outbox.deletions()
    found = storage.memories.by_ids([made[0].row_id, made[1].row_id, 10**9])
    assert list(found) == [made[0].row_id] and found[made[0].row_id].tags == ("a", "n0")
    assert storage.memories.by_ids([]) == {} and storage.memories.count() == 5


def test_page_on_an_occurred_range(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    times = [
        "2026-04-30T23:59:59.999999Z",
        "2026-05-01T00:00:00.000000Z",
        "2026-05-15T12:00:00.000000Z",
        "2026-05-31T23:59:59.999999Z",
        "2026-06-01T00:00:00.000000Z",
    ]
    made = [
        remember(storage, sid, f"event {n}", occurred_at=when, bucket="b" if n % 2 else "default")
        for n, when in enumerate(times)
    ]
    remember(storage, other, "event elsewhere", occurred_at=times[2])
    scope = Scope(sid)

    def listed(
        scope: Scope, limit: int = 10, after: tuple[str, int] | None = None, **bounds: str
    ) -> tuple[list[str], tuple[str, int] | None]:
        page, following = storage.memories.page(scope, location=None, provenance={}, limit=limit, after=after, **bounds)
        return [m.reference for m in page], following

    may = {"occurred_after": "2026-05-01T00:00:00.000000Z", "occurred_before": "2026-06-01T00:00:00.000000Z"}
    assert listed(scope, **may)[0] == [made[n].reference for n in (3, 2, 1)]  # at or after, strictly before
    assert listed(scope, occurred_after=times[3])[0] == [made[4].reference, made[3].reference]
    assert listed(scope, occurred_before=times[1])[0] == [made[0].reference]
    assert listed(scope, occurred_after=times[4], occurred_before=times[4])[0] == []
    first, following = listed(scope, limit=2, **may)
    rest, end = listed(scope, limit=2, after=following, **may)
    assert first + rest == [made[n].reference for n in (3, 2, 1)] and end is None
    assert listed(scope.narrowed(bucket="b"), **may)[0] == [made[3].reference, made[1].reference]
    assert listed(scope)[0] == [m.reference for m in reversed(made)]  # no range: every one


def test_page_by_occurred_and_the_count_of_a_listing(storage: Storage) -> None:
    """A back-dated import: created in one order, occurred in another. The listing is keyed on either, and
    counted with the same filters."""
    sid, other = site(storage), site(storage, "other")
    occurred = [
        "2026-03-05T00:00:00.000000Z",
        "2025-01-01T00:00:00.000000Z",
        "2026-03-05T00:00:00.000000Z",
        "2024-06-30T12:00:00.000000Z",
        "2026-01-15T08:00:00.000000Z",
    ]
    made = [
        remember(
            storage,
            sid,
            f"imported {n}",
            occurred_at=when,
            bucket="b" if n % 2 else "default",
            kept=Kept(created_at=f"2026-04-0{n + 1}T00:00:00.000000Z"),
        )
        for n, when in enumerate(occurred)
    ]
    remember(storage, other, "elsewhere", occurred_at=occurred[0])
    scope = Scope(sid)

    def listed(
        order: str, limit: int = 10, after: tuple[str, int] | None = None, **bounds: Any
    ) -> tuple[list[int], tuple[str, int] | None]:
        page, following = storage.memories.page(
            scope, location=None, provenance={}, limit=limit, after=after, order=order, **bounds
        )
        return [made.index(next(m for m in made if m.reference == p.reference)) for p in page], following

    assert listed(BY_CREATED)[0] == [4, 3, 2, 1, 0]
    assert listed(BY_OCCURRED)[0] == [2, 0, 4, 1, 3]  # equal occurred_at: the later id first
    first, following = listed(BY_OCCURRED, limit=2)
    assert following == (occurred[0], made[0].row_id)
    second, following = listed(BY_OCCURRED, limit=2, after=following)
    rest, end = listed(BY_OCCURRED, limit=2, after=following)
    assert first + second + rest == [2, 0, 4, 1, 3] and end is None
    assert listed(
        BY_OCCURRED, occurred_after="2025-01-01T00:00:00.000000Z", occurred_before="2026-03-05T00:00:00.000000Z"
    )[0] == [4, 1]
    with pytest.raises(ValueError):
        listed("alphabetical")

    def counted(scope: Scope, up_to: int = 100, **filters: Any) -> int:
        return storage.memories.count_listed(scope, location=None, provenance={}, up_to=up_to, **filters)

    assert counted(scope) == 5 and counted(Scope(other)) == 1 and counted(scope, up_to=2) == 3
    assert counted(scope.narrowed(bucket="b")) == 2
    assert counted(scope, occurred_after="2026-01-01T00:00:00.000000Z") == 3
    assert counted(scope, occurred_before="2025-01-01T00:00:00.000000Z") == 1
    assert storage.memories.count_listed(scope, location="nowhere", provenance={}, up_to=100) == 0
    with pytest.raises(InvalidParameters):
        storage.memories.count_listed(scope, location=None, provenance={"secret": "x"}, up_to=100)


def test_occurred_per_day(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    days = {
        "2026-03-01T23:59:59.999999Z": "a",
        "2026-03-02T00:00:00.000000Z": "a",
        "2026-03-02T12:00:00.000000Z": "b",
        "2026-03-02T23:00:00.000000Z": "a",
        "2026-03-05T08:00:00.000000Z": "b",
        "2026-02-28T10:00:00.000000Z": "a",
    }
    for n, (occurred, bucket) in enumerate(days.items()):
        # Saved on one day (an import), occurred on six: the days counted are the occurred ones.
        remember(
            storage,
            sid,
            f"saved {n}",
            bucket=bucket,
            tags=["t"] if n % 2 else [],
            occurred_at=occurred,
            kept=Kept(created_at="2026-04-01T00:00:00.000000Z"),
        )
    remember(storage, other, "saved elsewhere", occurred_at="2026-03-02T10:00:00.000000Z")
    since, before = "2026-03-01T00:00:00.000000Z", "2026-04-01T00:00:00.000000Z"
    per_day = storage.memories.occurred_per_day
    assert per_day(Scope(sid), since, before) == [("2026-03-01", 1), ("2026-03-02", 3), ("2026-03-05", 1)]
    assert per_day(Scope(sid), "2026-03-02T12:00:00.000000Z", before) == [("2026-03-02", 2), ("2026-03-05", 1)]
    assert per_day(Scope(sid), since, "2026-03-05T00:00:00.000000Z") == [("2026-03-01", 1), ("2026-03-02", 3)]
    assert per_day(Scope(sid, buckets=frozenset({"b"})), since, before) == [("2026-03-02", 1), ("2026-03-05", 1)]
    assert per_day(Scope(sid).narrowed(tags=["t"]), since, before) == [("2026-03-02", 2)]
    assert per_day(Scope(other), since, before) == [("2026-03-02", 1)]
    assert per_day(Scope(sid), before, "2026-05-01T00:00:00.000000Z") == []


# --- the outbox and the words -----------------------------------------------------------------------------


def test_outbox(storage: Storage) -> None:
    sid = site(storage)
    a, b = remember(storage, sid, "first memory", tags=["t"]), remember(storage, sid, "second memory")
    outbox = storage.outbox
    assert outbox.backlog() == 2 and outbox.unindexed(1) == [a.row_id] and outbox.counts() == (0, 2, 0)
    rows = outbox.index_rows([b.row_id, a.row_id])
    assert [r.id for r in rows] == sorted([a.row_id, b.row_id])
    assert rows[0].tags == ("t",) and rows[0].vector is not None and np.array_equal(rows[0].vector, vector(12))
    assert index_payload(rows[0])["site"] == str(sid)
    outbox.mark_indexed([(a.row_id, rows[0].updated_at), (b.row_id, "an older version")])
    assert outbox.unindexed(10) == [b.row_id] and outbox.counts() == (1, 1, 0)
    outbox.set_vectors(
        [
            (b.row_id, rows[1].updated_at, np.ones(4, dtype=np.float32)),
            (a.row_id, "an older version", np.zeros(4, dtype=np.float32)),
        ],
        "model-b",
    )
    again, first = outbox.index_rows([b.row_id])[0], outbox.index_rows([a.row_id])[0]
    assert again.vector_model == "model-b" and again.vector is not None and again.vector.tolist() == [1.0] * 4
    assert first.vector_model != "model-b", "a row changed since it was read keeps its own vector"
    storage.memories.delete(Scope(sid), a.reference)
    assert outbox.deletions() == [a.row_id] and outbox.backlog() == 2 and outbox.counts() == (0, 1, 1)
    assert outbox.present([a.row_id, b.row_id]) == {b.row_id} and outbox.present([]) == set()
    outbox.clear_deletions([a.row_id])
    assert outbox.deletions() == []
    outbox.mark_indexed([(b.row_id, again.updated_at)])
    outbox.mark_all_unindexed()
    assert outbox.unindexed(10) == [b.row_id]
    storage.memories.delete(Scope(sid), b.reference)
    outbox.clear_all_deletions()
    assert outbox.backlog() == 0 and outbox.index_rows([]) == []


def test_change_feed(storage: Storage) -> None:
    sid = site(storage)
    outbox = storage.outbox
    assert outbox.change_mark() == 0 and outbox.changes(0, 10).changed == [] and len(storage.identity) == 32
    a, b = remember(storage, sid, "first memory"), remember(storage, sid, "second memory")
    start = outbox.change_mark()
    assert (
        start == 2 and outbox.ids_after(0, 10) == [a.row_id, b.row_id] and outbox.ids_after(a.row_id, 10) == [b.row_id]
    )
    stored = storage.memories.get(Scope(sid), a.reference)
    assert stored is not None
    outbox.mark_indexed([(a.row_id, stored.updated_at)])
    assert outbox.change_mark() == start  # being indexed changes nothing the index holds
    storage.memories.update(
        sid,
        a.reference,
        memory("first memory, changed"),
        based_on={},
        document=document("first memory, changed"),
        words=Words(),
    )
    storage.memories.delete(Scope(sid), b.reference)
    page = outbox.changes(start, 10)
    assert (page.changed, page.deleted, page.mark, page.more, page.truncated) == (
        [a.row_id],
        [b.row_id],
        outbox.change_mark(),
        False,
        False,
    )
    assert outbox.changes(0, 10).deleted == [b.row_id]  # inserted, then deleted: deleted, once
    cut = outbox.changes(0, 1)
    assert cut.more and cut.mark == 1 and cut.changed == [a.row_id]
    # When each change was made: a reader that applied change `mark` at `mark_at` finds it as it was.
    assert cut.after_at is None and cut.mark_at is not None and outbox.changes(1, 10).after_at == cut.mark_at
    assert page.after_at == outbox.changes(start - 1, 1).mark_at and page.mark_at is not None
    # A feed whose numbering is behind what a reader applied (changes lost by a failover): rebuild.
    assert outbox.changes(outbox.change_mark() + 3, 10).truncated
    assert outbox.prune_changes(3600.0) == 0 and outbox.prune_changes(-1.0) >= 4
    assert outbox.changes(0, 10).truncated and not outbox.changes(outbox.change_mark(), 10).truncated
    remember(storage, sid, "third memory")
    assert outbox.changes(page.mark, 10).truncated is False and outbox.change_mark() == page.mark + 1


def test_change_numbers_follow_commit_order_across_servers(
    both: tuple[Storage, Storage], postgres_url: str, tmp_path: Path
) -> None:
    """Two servers write memories at once while a third follows the feed: following it page by page from
    where it left off finds every memory (a number that committed after a later one would be skipped)."""
    writers = [open_storage(make_settings(tmp_path / f"w{n}", database_url=postgres_url)) for n in range(2)]
    follower = both[1]
    sid = site(follower)
    stop = threading.Event()

    def write(storage: Storage, writer: int) -> None:
        for n in range(60):
            remember(storage, sid, f"writer {writer} memory {n}")

    threads = [threading.Thread(target=write, args=(w, n)) for n, w in enumerate(writers)]
    seen: set[int] = set()
    mark = 0
    try:
        for thread in threads:
            thread.start()
        while not stop.is_set():
            done = not any(thread.is_alive() for thread in threads)
            page = follower.outbox.changes(mark, 7)
            seen.update(page.changed)
            mark = page.mark
            if done and not page.more:
                stop.set()
        assert seen == set(follower.outbox.ids_after(0, 1000)) and len(seen) == 120
    finally:
        for thread in threads:
            thread.join()
        for w in writers:
            w.close()


def test_words(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    words = Words(("apple", "pie", "apple"), np.stack([vector(1), vector(2), vector(3)]))
    remember(storage, sid, "apple pie", words=words)
    found = sorted((s, w, v.tolist()) for s, w, v in storage.words.all_words("model-a"))
    assert found == [(sid, "apple", vector(3).tolist()), (sid, "pie", vector(2).tolist())]  # the last one wins
    assert list(storage.words.all_words("model-b")) == []
    assert storage.words.backfill_mark("model-b") == 0
    second = remember(storage, other, "banana split")
    texts = storage.words.texts_after(0, 10)
    assert [(t[1], t[2], t[3]) for t in texts] == [(sid, "apple pie", WHEN), (other, "banana split", WHEN)]
    assert storage.words.texts_after(texts[0][0], 10)[0][0] == second.row_id
    storage.words.save_backfill([(other, Words(("banana",), np.stack([vector(4)])))], "model-b", second.row_id)
    assert storage.words.backfill_mark("model-b") == second.row_id and storage.words.backfill_mark("model-a") == 0
    assert [(s, w) for s, w, _ in storage.words.all_words("model-b")] == [(other, "banana")]


# --- the reads recall ranks from --------------------------------------------------------------------------


def test_candidates(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    rows = [
        remember(storage, sid, text, team=team, provenance={"conversation_id": "conv-0001", "seq": n})
        for n, (text, team) in enumerate(
            [
                ("red apple", "a"),
                ("green apple pie", "b"),
                ("red wine", "a"),
                ("apple apple apple", "a"),
                ("blue sky", "b"),
            ]
        )
    ]
    remember(storage, other, "apple elsewhere")
    ids = [r.row_id for r in rows]
    candidates, scope = storage.candidates, Scope(sid)
    assert candidates.visible_count(scope, 2) == 3 and candidates.visible_count(scope, 100) == 5
    assert candidates.visible_count(Scope(sid, teams=frozenset({"b"})), 100) == 2
    assert candidates.doc_freqs(["appl", "red", "nothing"]) == {"appl": 4, "red": 2, "nothing": 0}
    assert candidates.doc_freqs(["appl", "red", "nothing"], up_to=2) == {"appl": 3, "red": 2, "nothing": 0}
    assert candidates.top_id() == max(ids) + 1
    held = {ids[0]: "never this version"}
    visible, loaded = candidates.load(scope, None, "model-a", lambda i, version: held.get(i) == version)
    assert visible == [(row.id, row.updated_at) for row in loaded] and [row.id for row in loaded] == ids
    assert loaded[1].terms == ["green", "appl", "pie"] and loaded[1].conversation_id == "conv-0001"
    assert loaded[1].seq == 1 and np.array_equal(loaded[1].vector, vector(len("green apple pie")))
    fresh = {row.id: row.updated_at for row in loaded}
    visible, loaded = candidates.load(scope, [ids[4], ids[0], 10**9], "model-a", lambda i, v: fresh.get(i) == v)
    assert visible == [(ids[0], fresh[ids[0]]), (ids[4], fresh[ids[4]])] and loaded == []
    assert candidates.load(scope, None, "model-b", lambda i, v: False) == ([], [])
    # Up to a limit: one more than it says the scope is larger, and nothing is read.
    visible, loaded = candidates.load(scope, None, "model-a", lambda i, v: False, up_to=3)
    assert len(visible) == 4 and loaded == []
    visible, loaded = candidates.load(scope, None, "model-a", lambda i, v: False, up_to=5)
    assert [i for i, _ in visible] == ids and [row.id for row in loaded] == ids
    best = candidates.best_by_terms(scope, ["appl"], 10)
    assert best == [ids[3], ids[0], ids[1]]  # three occurrences first; shorter before longer
    assert candidates.best_by_terms(Scope(sid, teams=frozenset({"b"})), ["appl", "sky"], 10) == [ids[4], ids[1]]
    assert candidates.best_by_terms(scope, ["nothing"], 10) == []
    assert candidates.best_by_terms(scope, ["appl"], 1) == [ids[3]]
    assert candidates.neighbours([ids[2]], 1) == {ids[1], ids[2], ids[3]} and candidates.neighbours([], 1) == set()


def test_lexical_terms_are_written_again_in_batches_then_versioned(storage: Storage) -> None:
    sid = site(storage)
    rows = [remember(storage, sid, text) for text in ("red apple", "green pear", "apple pie", "blue sky", "apple")]
    ids = [r.row_id for r in rows]
    assert storage.memories.terms_version() == 1  # a store that never recorded one

    def terms(content: str, occurred_at: str | None) -> str:
        assert occurred_at == WHEN
        return " ".join([*analyze(content), *(["day20240508"] if "apple" in content else [])])

    assert storage.memories.rewrite_terms(terms, 2, batch=2) == 3  # three batches; only the apples change
    assert storage.memories.terms_version() == 2
    _, loaded = storage.candidates.load(Scope(sid), None, "model-a", lambda i, v: False)
    assert {row.id: row.terms for row in loaded}[ids[2]] == ["appl", "pie", "day20240508"]
    assert {row.id: row.terms for row in loaded}[ids[1]] == ["green", "pear"]
    assert sorted(storage.candidates.best_by_terms(Scope(sid), ["day20240508"], 10)) == [ids[0], ids[2], ids[4]]
    assert storage.memories.rewrite_terms(terms, 2) == 0  # derived from the row alone: the same again


def test_a_time_window_narrows_every_read(storage: Storage) -> None:
    sid = site(storage)
    months = [
        "2024-01-15T00:00:00.000000Z",
        "2024-03-01T00:00:00.000000Z",
        "2024-04-30T23:59:59.999999Z",
        "2024-05-01T00:00:00.000000Z",
    ]
    rows = [remember(storage, sid, f"apple report {n}", occurred_at=when) for n, when in enumerate(months)]
    ids = [r.row_id for r in rows]
    window = Scope(sid).within(occurred_after=months[1], occurred_before=months[3])
    assert Scope(sid).within(occurred_after=None, occurred_before=None) == Scope(sid)
    assert window.within(occurred_after=months[0], occurred_before=None) == window  # narrowed, never widened
    assert window.within(occurred_after=months[2], occurred_before=None).occurred_after == months[2]
    inside = [ids[1], ids[2]]
    candidates = storage.candidates
    assert candidates.visible_count(window, 100) == 2
    assert [i for i, _ in candidates.load(window, None, "model-a", lambda i, v: False)[0]] == inside
    assert [i for i, _ in candidates.load(window, ids, "model-a", lambda i, v: False)[0]] == inside
    assert sorted(candidates.best_by_terms(window, ["appl"], 10)) == inside
    assert storage.memories.get(window, rows[0].reference) is None
    assert storage.memories.get(window, rows[1].reference) is not None
    listed, _ = storage.memories.page(
        Scope(sid),
        location=None,
        provenance={},
        limit=10,
        after=None,
        occurred_after=months[1],
        occurred_before=months[3],
    )
    assert sorted(m.id for m in listed) == inside
    only_before, _ = storage.memories.page(
        Scope(sid), location=None, provenance={}, limit=10, after=None, occurred_before=months[1]
    )
    assert [m.id for m in only_before] == [ids[0]]
    found = storage.memories.by_ids(ids)
    assert [window.admits(found[i]) for i in ids] == [False, True, True, False]


def test_supersede_chains(storage: Storage) -> None:
    sid = site(storage)
    when = ["2024-01-01T00:00:00.000000Z", "2024-02-01T00:00:00.000000Z", "2024-03-01T00:00:00.000000Z"]
    a = remember(storage, sid, "value one", occurred_at=when[0])
    b = remember(storage, sid, "value two", occurred_at=when[1], supersedes=a.reference)
    get = lambda ref: storage.memories.get(Scope(sid), ref)  # noqa: E731
    assert (get(a.reference).superseded_by, get(a.reference).valid_to) == (b.reference, when[1])
    assert get(b.reference).supersedes == a.reference and get(b.reference).superseded_by is None
    assert index_payload(storage.outbox.index_rows([a.row_id])[0])["valid_to"] == 1706745600
    assert "valid_to" not in index_payload(storage.outbox.index_rows([b.row_id])[0])
    with pytest.raises(StaleRow):  # a is superseded already: the caller must resolve the chain to b
        remember(storage, sid, "value three", occurred_at=when[2], supersedes=a.reference)
    with pytest.raises(StaleRow):
        remember(storage, sid, "value three", occurred_at=when[2], supersedes="mem_gone")
    assert storage.memories.count() == 2  # the refused inserts left nothing
    c = remember(storage, sid, "value three", occurred_at=when[2], supersedes=b.reference)
    assert [storage.memories.chain_head(sid, r.reference) for r in (a, b, c)] == [c.reference] * 3
    assert storage.memories.chain_head(sid, "mem_gone") is None
    assert storage.memories.chain_head(site(storage, "other"), a.reference) is None
    # What recall reads of its best-ranked memories: which have a successor, and until when they were valid.
    assert storage.memories.replaced([a.row_id, b.row_id, c.row_id, 10**9]) == {a.row_id: when[1], b.row_id: when[2]}
    assert storage.memories.replaced([]) == {}
    newest = storage.memories.newest(Scope(sid), [a.reference, b.reference, c.reference])
    assert {k: v.reference for k, v in newest.items()} == {a.reference: c.reference, b.reference: c.reference}
    window = Scope(sid).within(occurred_after=None, occurred_before=when[2])  # c is outside: b is the newest
    assert {k: v.reference for k, v in storage.memories.newest(window, [a.reference]).items()} == {
        a.reference: b.reference
    }
    current = Scope(sid).only_current()

    def visible(scope: Scope) -> list[int]:
        return [i for i, _ in storage.candidates.load(scope, None, "model-a", lambda i, v: False)[0]]

    assert visible(current) == [c.row_id] and visible(window.only_current()) == [b.row_id]
    assert storage.candidates.visible_count(current, 10) == 1 and storage.candidates.visible_count(Scope(sid), 10) == 3

    # A cycle is refused inside the transaction: a supersedes c, which supersedes (through b) a.
    with pytest.raises(InvalidParameters, match="cycle"):
        storage.memories.update(
            sid,
            a.reference,
            memory("value one", occurred_at=when[0], supersedes=c.reference),
            based_on={},
            document=None,
            words=Words(),
        )
    assert get(c.reference).superseded_by is None and get(a.reference).supersedes is None
    # Moving c's date moves b's validity; unlinking c makes b current again.
    storage.memories.update(
        sid,
        c.reference,
        memory("value three", occurred_at="2024-04-01T00:00:00.000000Z", supersedes=b.reference),
        based_on={},
        document=None,
        words=Words(),
    )
    assert get(b.reference).valid_to == "2024-04-01T00:00:00.000000Z"
    storage.memories.update(
        sid, c.reference, memory("value three", occurred_at=when[2]), based_on={}, document=None, words=Words()
    )
    assert (get(b.reference).superseded_by, get(b.reference).valid_to) == (None, None)
    assert get(c.reference).supersedes is None
    storage.memories.update(
        sid,
        c.reference,
        memory("value three", occurred_at=when[2], supersedes=b.reference),
        based_on={},
        document=None,
        words=Words(),
    )
    # Deleting the middle joins the chain; deleting the newest makes the one before current.
    assert storage.memories.delete(Scope(sid), b.reference) == b.row_id
    assert (get(a.reference).superseded_by, get(a.reference).valid_to) == (c.reference, when[2])
    assert get(c.reference).supersedes == a.reference
    storage.memories.delete(Scope(sid), c.reference)
    assert (get(a.reference).superseded_by, get(a.reference).valid_to) == (None, None)
    # An import keeps the links it carries, linked to nothing yet or not.
    imported = remember(
        storage, sid, "imported old", kept=Kept(reference="mem_old", superseded_by="mem_new", valid_to=when[1])
    )
    remember(storage, sid, "imported new", supersedes="mem_old", kept=Kept(reference="mem_new"))
    assert get("mem_old").superseded_by == "mem_new" and get("mem_new").supersedes == "mem_old"
    assert imported.outcome == CREATED
    snapshot = storage.snapshot(None)
    try:
        exported = {m["reference"]: m for m in snapshot.memories()}
    finally:
        snapshot.close()
    assert (exported["mem_old"]["superseded_by"], exported["mem_old"]["valid_to"]) == ("mem_new", when[1])
    assert exported["mem_new"]["supersedes"] == "mem_old" and "superseded_by" not in exported["mem_new"]
    assert "supersedes" not in exported[a.reference]


def test_expired_memories_are_unseen_then_purged_in_batches(storage: Storage) -> None:
    sid = site(storage)
    past, future = "2001-01-01T00:00:00.000000Z", "2999-01-01T00:00:00.000000Z"
    gone = [remember(storage, sid, f"apple expired {n}", expires_at=past) for n in range(3)]
    later = remember(storage, sid, "apple later", expires_at=future)
    kept = remember(storage, sid, "apple kept")
    assert index_payload(storage.outbox.index_rows([gone[0].row_id])[0])["expires"] == 978307200
    scope = Scope(sid)
    assert storage.candidates.visible_count(scope, 10) == 2
    assert [i for i, _ in storage.candidates.load(scope, None, "model-a", lambda i, v: False)[0]] == [
        later.row_id,
        kept.row_id,
    ]
    assert sorted(storage.candidates.best_by_terms(scope, ["appl"], 10)) == [later.row_id, kept.row_id]
    assert storage.memories.get(scope, gone[0].reference) is None
    assert storage.memories.get(Scope(sid, at="2000-01-01T00:00:00.000000Z"), gone[0].reference) is not None
    assert len(storage.memories.page(scope, location=None, provenance={}, limit=10, after=None)[0]) == 2
    assert storage.memories.delete(scope, gone[0].reference) is None  # unseen: cannot be forgotten either
    found = storage.memories.by_ids([gone[0].row_id, later.row_id])
    assert [scope.admits(found[i]) for i in (gone[0].row_id, later.row_id)] == [False, True]
    # A superseded memory that expires: the purge makes its successor's link go with it.
    newer = remember(storage, sid, "apple newer", supersedes=gone[2].reference)
    first = storage.memories.purge_expired(now_rfc3339(), 2)
    assert first == [gone[0].row_id, gone[1].row_id]
    assert storage.memories.purge_expired(now_rfc3339(), 2) == [gone[2].row_id]
    assert storage.memories.purge_expired(now_rfc3339(), 2) == []
    assert storage.memories.get(scope, newer.reference).supersedes is None
    assert set(storage.outbox.deletions()) >= {g.row_id for g in gone}
    assert storage.memories.count() == 3
    snapshot = storage.snapshot(None)
    try:
        assert {m["content"]: m.get("expires_at") for m in snapshot.memories()} == {
            "apple later": future,
            "apple kept": None,
            "apple newer": None,
        }
    finally:
        snapshot.close()


def _ranked(storage: Storage, scope: Scope, terms: list[str], references: dict[int, str]) -> list[str]:
    return [references[i] for i in storage.candidates.best_by_terms(scope, terms, 50)]


def test_lexical_prefetch_ranks_identically_on_both_backends(both: tuple[Storage, Storage]) -> None:
    """The same memories on SQLite (FTS5's bm25()) and PostgreSQL: the same memories, in the same order, for
    every query, down to ties; document frequencies and newest-first walks agree too."""
    references: list[dict[int, str]] = [{}, {}]
    sites = [[site(s, "a"), site(s, "b")] for s in both]
    for n, (owner, content) in enumerate(corpus(320)):
        for b, storage in enumerate(both):
            done = remember(storage, sites[b][owner], content, kept=Kept(reference=f"mem_{n:04d}"), team=f"t{n % 3}")
            references[b][done.row_id] = done.reference
            if n % 37 == 5:  # deletions change the totals BM25 reads
                storage.memories.delete(Scope(sites[b][owner]), done.reference)
    queries = [
        analyze(q)
        for q in (
            "apple banana",
            "cafe",
            "café naïve",
            "snake_case",
            "snake case river",
            "running runs",
            "zurich Zürich 2024",
            "x_y v2",
            "kettle",
            "lemon meadow night",
            "orange orange piano",
            "unknownword apple",
        )
    ]
    for terms in queries + [["snake_case"], ["café"], ["appl", "appl"]]:
        for owner in (0, 1):
            scopes = [Scope(sites[b][owner]) for b in (0, 1)]
            assert _ranked(both[0], scopes[0], terms, references[0]) == _ranked(
                both[1], scopes[1], terms, references[1]
            ), terms
            bounded = [s.narrowed(team="t1") for s in scopes]
            assert _ranked(both[0], bounded[0], terms, references[0]) == _ranked(
                both[1], bounded[1], terms, references[1]
            ), terms
        assert both[0].candidates.doc_freqs(terms) == both[1].candidates.doc_freqs(terms)


def test_recall_prefetch_is_the_same_on_both_backends(both: tuple[Storage, Storage]) -> None:
    """CandidateSource's lexical prefetch with a lowered postings budget (the selective terms by BM25): the
    same candidates in the same order."""
    sites = [site(s) for s in both]
    references: list[dict[int, str]] = [{}, {}]
    for n, (_, content) in enumerate(corpus(300, seed=5)):
        for b, storage in enumerate(both):
            done = remember(storage, sites[b], content, kept=Kept(reference=f"mem_{n:04d}"))
            references[b][done.row_id] = done.reference
    sources = [
        CandidateSource(
            s.candidates,
            None,
            model="model-a",
            full_scan_limit=10,  # type: ignore[arg-type]
            lexical_postings=150,
        )
        for s in both
    ]
    for query in ("apple tiger", "violet walnut xenon", "café river sunset", "snake_case banana", "zebra"):
        found = [[references[b][i] for i in sources[b].lexical_ids(Scope(sites[b]), query)] for b in (0, 1)]
        assert found[0] == found[1] and found[0], query


# --- the storage's own operations -------------------------------------------------------------------------


async def test_snapshot_is_consistent_while_writes_go_on(storage: Storage, tmp_path: Path) -> None:
    sid, other = site(storage), site(storage, "other")
    await storage.logs.append(sid, "conv-0001", ['{"n":0}', '{"n":1}'], None)
    await storage.logs.append(other, "conv-0002", ['{"n":0}'], None)
    remember(storage, sid, "kept in the export", metadata={"b": 1, "a": 2})
    snapshot = storage.snapshot(None)
    try:
        await storage.logs.append(sid, "conv-0001", ['{"n":2}'], None)
        await storage.logs.append(sid, "conv-0003", ['{"n":0}'], None)
        remember(storage, sid, "written after the snapshot")
        assert snapshot.counts == {"memories": 1, "conversations": 2, "log_items": 3}
        exported = list(snapshot.memories())
        assert [(m["site"], m["content"]) for m in exported] == [("acme", "kept in the export")]
        assert list(exported[0]) == [
            "site",
            "reference",
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
            "created_at",
            "updated_at",
        ]
        assert list(exported[0]["metadata"]) == ["b", "a"]
        items = list(snapshot.log_items())
        assert [(s, c, item[0], item[2]) for s, c, item in items] == [
            ("acme", "conv-0001", 0, '{"n":0}'),
            ("acme", "conv-0001", 1, '{"n":1}'),
            ("other", "conv-0002", 0, '{"n":0}'),
        ]
    finally:
        snapshot.close()
    one = storage.snapshot("other")
    try:
        assert one.counts == {"memories": 0, "conversations": 1, "log_items": 1}
    finally:
        one.close()
    with pytest.raises(NotFound):
        storage.snapshot("nobody")


def test_probe_and_integrity(storage: Storage) -> None:
    assert storage.probe() == [] and storage.check_integrity() is None and not storage.integrity_unchecked
    assert storage.health.problems() == []


# --- PostgreSQL: several servers on one database ----------------------------------------------------------


def test_appenders_in_several_processes_share_four_conversations(postgres_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", database_url=postgres_url)
    storage = open_storage(settings)
    try:
        sid = site(storage)
        acks = run_appenders(postgres_url, tmp_path / "data", sid, writers=4, batches=30)
        assert len(acks) == 4 * 30
        counts = check_acks(
            storage, sid, acks, lambda key, pos: json.dumps({"writer": key[0], "batch": key[1], "pos": pos})
        )
        assert sum(counts.values()) == sum(a["count"] for a in acks.values()) and len(counts) == 4
    finally:
        storage.close()


def test_replicas_migrating_one_empty_database_at_once(postgres_url: str, tmp_path: Path) -> None:
    start = threading.Barrier(3)
    opened: list[Storage] = []
    failures: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(open_storage(make_settings(tmp_path / "data", database_url=postgres_url)))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert failures == [] and len(opened) == 3
        with psycopg.connect(postgres_url) as conn:
            versions = [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == list(range(1, len(SCHEMA) + 1))
        opened[0].sites.create_site("acme", "h")
        assert opened[1].sites.site_id("acme") is not None
    finally:
        for storage in opened:
            storage.close()


async def test_a_duplicate_key_raced_by_two_servers_appends_once(postgres_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", database_url=postgres_url)
    first, second = open_storage(settings), open_storage(settings)
    try:
        sid = site(first)
        for n in range(15):
            acks = await asyncio.gather(
                *(s.logs.append(sid, "conv-raced-0001", [f'{{"n":{n}}}', '{"x":0}'], f"k{n}") for s in (first, second))
            )
            assert sorted(a["duplicate"] for a in acks) == [False, True]
            assert acks[0]["first_seq"] == acks[1]["first_seq"] == 2 * n
        items = first.logs.replay(sid, "conv-raced-0001", 0, 1000)
        assert [seq for seq, _, _ in items] == list(range(30))
    finally:
        first.close()
        second.close()


async def _append_until(
    storage: Storage, sid: int, writer: int, stop: threading.Event, results: list[tuple[Any, Any]]
) -> None:
    batch = 0
    while not stop.is_set():
        texts = [json.dumps({"writer": writer, "batch": batch, "pos": pos}) for pos in range(3)]
        try:
            results.append(
                ((writer, batch), await storage.logs.append(sid, f"conv-restart-{writer % 2:04d}", texts, None))
            )
        except Unavailable as exc:
            results.append(((writer, batch), exc))
        batch += 1
        await asyncio.sleep(0.005)


async def test_a_restart_under_load_answers_unavailable_and_recovers(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    """`pg_ctl restart -m fast` while six appenders run: each call is acknowledged or answered
    `unavailable` (never another error), nothing acknowledged is lost, and the pools reconnect by themselves."""
    storage = open_storage(make_settings(tmp_path / "data", database_url=postgres_url))
    try:
        sid = site(storage)
        stop, results = threading.Event(), []
        tasks = [asyncio.create_task(_append_until(storage, sid, w, stop, results)) for w in range(6)]
        await asyncio.sleep(0.5)
        await asyncio.to_thread(postgres_server.restart, "fast")
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*tasks)
        acks = {key: ack for key, ack in results if isinstance(ack, dict)}
        refused = [exc for _, exc in results if isinstance(exc, Unavailable)]
        assert len(acks) + len(refused) == len(results) and len(acks) > 20
        check_acks(storage, sid, acks, lambda key, pos: json.dumps({"writer": key[0], "batch": key[1], "pos": pos}))
        after = await storage.logs.append(sid, "conv-restart-0000", ['{"after":true}'], None)
        assert after["duplicate"] is False and storage.probe() == []
    finally:
        storage.close()


async def test_a_stopped_database_is_unavailable_until_it_is_back(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    storage = PostgresStorage(postgres_url, retry_budget_s=1.0)
    try:
        sid = site(storage)
        await storage.logs.append(sid, "conv-0001", ['{"n":0}'], None)
        postgres_server.stop()
        try:
            with pytest.raises(Unavailable, match="PostgreSQL"):
                await storage.logs.append(sid, "conv-0001", ['{"n":1}'], None)
            with pytest.raises(Unavailable):
                storage.logs.tail(sid, "conv-0001", 5)
            assert any(reason.startswith("postgres:") for reason in storage.probe())
        finally:
            postgres_server.start()
        deadline = time.monotonic() + 30
        while True:  # both pools reconnect in the background, with back-off
            try:
                ack = await storage.logs.append(sid, "conv-0001", ['{"n":1}'], "after-start")
                tail = storage.logs.tail(sid, "conv-0001", 5)
                break
            except Unavailable:
                assert time.monotonic() < deadline, "the storage did not recover"
        assert ack["first_seq"] == 1 and [text for _, _, text in tail] == ['{"n":0}', '{"n":1}']
    finally:
        storage.close()


def test_export_from_postgres_through_the_factory(postgres_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", database_url=postgres_url)
    with pytest.raises(NotFound):
        open_snapshot(settings, site=None)  # nothing was ever stored there
    storage = open_storage(settings)
    try:
        site(storage)
        snapshot = open_snapshot(settings, site="acme")
        assert snapshot.counts == {"memories": 0, "conversations": 0, "log_items": 0}
        snapshot.close()
    finally:
        storage.close()


def test_appends_from_many_event_loops_do_not_pile_up_connections(postgres_url: str, tmp_path: Path) -> None:
    """Each `asyncio.run` is a new loop with its own append pool: the pools of finished loops are closed."""
    storage = open_storage(make_settings(tmp_path / "data", database_url=postgres_url))
    try:
        sid = site(storage)
        for n in range(25):
            ack = asyncio.run(storage.logs.append(sid, "conv-0001", [f'{{"n":{n}}}'], None))
            assert ack["first_seq"] == n
        with psycopg.connect(postgres_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert row is not None and row[0] <= 4  # this loop's pool and the blocking pool, not one per loop
    finally:
        storage.close()
