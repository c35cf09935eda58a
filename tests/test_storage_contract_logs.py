"""The log store's contract on SQLite and PostgreSQL: appends (gapless seqs, idempotency keys, all or nothing),
conversations listed per site, imported items, and deleting logs (marks, purge steps, retention).

Part of the storage seam's contract suite (tests/README.md lists the others); the fixtures and records
are in tests/storage_support.py.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from storage_support import (
    WHEN,
    remember,
    site,
    storage,  # noqa: F401
)

from memory_server.errors import Unavailable
from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    APPENDED,
    PRESENT,
    LogDeletion,
    PurgeStep,
)
from memory_server.storage.scope import Scope

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


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
