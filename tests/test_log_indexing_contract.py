"""The storage contract of log indexing (memory_server/logs/indexing.py), the same on SQLite and on PostgreSQL: which
conversations are indexed (the site's setting, an append's own choice), what waits, the one transaction that
stores a batch of turns and moves the conversation on (refused when the log changed), the kind of an entry as
every read sees it, and a deletion taking the turns with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from storage_support import WHEN, document, memory, remember

from memory_server.logs.deletion import LogRetention, delete_conversation
from memory_server.storage.factory import open_storage
from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    CREATED,
    DUPLICATE,
    TURN,
    IndexingProgress,
    LogDeletion,
    NewMemory,
    ToIndex,
    Words,
)
from memory_server.storage.scope import Scope

from conftest import execute, make_settings

pytestmark = pytest.mark.backends


@pytest.fixture
def storage(storage_backend: str, tmp_path: Path) -> Iterator[Storage]:
    opened = open_storage(make_settings(tmp_path / "data"))
    try:
        yield opened
    finally:
        opened.close()


def site(storage: Storage, name: str = "acme") -> int:
    return storage.sites.create_site(name, f"hash-of-{name}")


def texts(*words: str) -> list[str]:
    return [json.dumps({"text": w}) for w in words]


def turn(at: ToIndex, seq: int, content: str) -> NewMemory:
    return replace(
        memory(
            content,
            type=TURN,
            bucket=at.bucket or "default",
            provenance={"conversation_id": at.conversation_id, "seq": seq},
        ),
        kind=TURN,
    )


def pending(storage: Storage) -> dict[str, tuple[int, int]]:
    return {t.conversation_id: (t.indexed_seq, t.item_count) for t in storage.logs.to_index(100)}


async def test_the_site_setting_and_an_appends_choice_decide_what_is_indexed(storage: Storage, tmp_path: Path) -> None:
    sid = site(storage)
    await storage.logs.append(sid, "conv-plain", texts("a", "b"), None)
    await storage.logs.append(sid, "conv-chosen", texts("a"), None, index=True, bucket="team-room")
    await storage.logs.append(sid, "conv-refused", texts("a"), None, index=False)
    assert pending(storage) == {"conv-chosen": (0, 1)}
    [chosen] = storage.logs.to_index(10)
    assert (chosen.site_id, chosen.bucket) == (sid, "team-room") and chosen.first_recorded_at.endswith("Z")

    assert storage.sites.set_log_indexing("acme", True) and not storage.sites.set_log_indexing("nobody", True)
    assert [s.index_logs for s in storage.sites.sites()] == [True]
    assert pending(storage) == {"conv-chosen": (0, 1), "conv-plain": (0, 2)}
    await storage.logs.append(sid, "conv-new", texts("a"), None)  # a new conversation follows its site
    await storage.logs.append(sid, "conv-refused", texts("b"), None)  # its own choice holds
    await storage.logs.append(sid, "conv-chosen", texts("b"), None, bucket="other")
    assert pending(storage) == {"conv-chosen": (0, 2), "conv-plain": (0, 2), "conv-new": (0, 1)}
    assert {t.conversation_id: t.bucket for t in storage.logs.to_index(10)}["conv-chosen"] == "other"
    assert storage.logs.index_waiting() == 5
    assert storage.logs.index_progress(sid) == IndexingProgress(waiting=5, indexed=0, skipped=0)

    # A conversation an append created with the former setting while it was being turned on (a PostgreSQL
    # race: its statement read the setting before the change committed): the sweep of the conversations
    # active since a given time finds it.
    execute(
        make_settings(tmp_path / "data"),
        "UPDATE conversations SET indexing = ? WHERE conversation_id = ?",
        False,
        "conv-new",
    )
    assert "conv-new" not in pending(storage)
    assert storage.logs.mark_for_indexing(sid, 2**62) == 0  # not active since then
    assert storage.logs.mark_for_indexing(sid, 0) == 1 and "conv-new" in pending(storage)

    assert storage.sites.set_log_indexing("acme", False)
    assert pending(storage) == {"conv-chosen": (0, 2)}  # chose for itself
    # The sweep finds nothing to set while the site does not index.
    assert storage.logs.mark_for_indexing(sid, 0) == 0
    other = site(storage, "other")
    await storage.logs.append(other, "conv-else", texts("x"), None)
    assert storage.logs.index_progress(other) == IndexingProgress()


async def test_turns_are_stored_once_with_the_move_of_their_conversation(storage: Storage) -> None:
    sid = site(storage)
    await storage.logs.append(sid, "conv-0001", texts("apples", "pears", "plums"), None, index=True)
    [at] = storage.logs.to_index(10)
    batch = [(turn(at, 0, "user: apples"), document("user: apples")), (turn(at, 2, "plums"), document("plums"))]
    inserted = storage.memories.insert_turns(at, 3, 1, batch, Words())
    assert inserted is not None and [i.outcome for i in inserted] == [CREATED, CREATED]
    assert storage.logs.to_index(10) == [] and storage.logs.index_waiting() == 0
    assert storage.logs.index_progress(sid) == IndexingProgress(waiting=0, indexed=3, skipped=1)
    # The same batch again (another indexer, a retry): refused as a whole, nothing written.
    assert storage.memories.insert_turns(at, 3, 1, batch, Words()) is None
    assert storage.logs.index_progress(sid).skipped == 1
    stored = storage.memories.by_ids([i.row_id for i in inserted if i.row_id is not None])
    assert sorted((m.kind, m.provenance["seq"], m.content) for m in stored.values()) == [
        (TURN, 0, "user: apples"),
        (TURN, 2, "plums"),
    ]
    rows = {row.id: row for row in storage.outbox.index_rows(list(stored))}
    assert sorted(row.turn_seq for row in rows.values()) == [0, 2]

    # A turn's identity is its log item, whatever its text: a memory of the same content is another entry.
    again = storage.memories.decided(sid, turn(at, 0, "different text"), None)
    assert again is not None and again.outcome == DUPLICATE
    saved = remember(storage, sid, "user: apples", type=TURN, provenance={"conversation_id": "conv-0001", "seq": 0})
    assert saved.outcome == CREATED
    assert storage.memories.get(Scope(sid), saved.reference).kind == "memory"  # type: ignore[union-attr]

    # Kinds as every read sees them: listings, counts, recall's candidates.
    scope = Scope(sid)
    for kinds, expected in ((None, 3), ({"turn"}, 2), ({"memory"}, 1), ({"memory", "turn"}, 3)):
        narrowed = scope.of_kinds(kinds)
        page, _ = storage.memories.page(narrowed, location=None, provenance={}, limit=10, after=None)
        assert len(page) == expected
        assert storage.candidates.visible_count(narrowed, 100) == expected
        visible, _ = storage.candidates.load(narrowed, None, "model-a", lambda i, v: False)
        assert len(visible) == expected
    assert scope.of_kinds({"memory"}).of_kinds({"turn"}).empty


async def test_a_changed_log_refuses_the_batch_read_from_the_old_one(storage: Storage) -> None:
    sid = site(storage)
    await storage.logs.append(sid, "conv-0001", texts("one"), None, index=True)
    [at] = storage.logs.to_index(10)
    batch = [(turn(at, 0, "one"), document("one"))]
    assert storage.memories.insert_turns(replace(at, indexed_seq=1), 1, 0, batch, Words()) is None
    assert storage.memories.insert_turns(replace(at, first_recorded_at=WHEN), 1, 0, batch, Words()) is None
    # Deleted and begun again under the same id: the batch read from the old log is refused.
    storage.logs.delete_conversation(sid, "conv-0001")
    assert storage.logs.to_index(10) == []  # being deleted: not indexed
    assert storage.memories.insert_turns(at, 1, 0, batch, Words()) is None
    while not storage.logs.purge_step(sid, "conv-0001", 100).done:
        pass
    await storage.logs.append(sid, "conv-0001", texts("new"), None, index=True)
    [fresh] = storage.logs.to_index(10)
    assert fresh.indexed_seq == at.indexed_seq == 0 and fresh.first_recorded_at > at.first_recorded_at
    assert storage.memories.insert_turns(at, 1, 0, batch, Words()) is None
    assert storage.memories.insert_turns(fresh, 1, 0, [(turn(fresh, 0, "new"), document("new"))], Words())


async def test_a_purge_deletes_the_turns_and_unlinks_the_memories(storage: Storage) -> None:
    sid = site(storage)
    await storage.logs.append(sid, "conv-0001", texts(*(f"w{n}" for n in range(7))), None, index=True)
    [at] = storage.logs.to_index(10)
    batch = [(turn(at, n, f"w{n}"), document(f"w{n}", seed=n)) for n in range(7)]
    inserted = storage.memories.insert_turns(at, 7, 0, batch, Words())
    assert inserted is not None
    linked = remember(storage, sid, "noted", provenance={"conversation_id": "conv-0001", "seq": 3})
    storage.outbox.clear_all_deletions()
    marked = storage.logs.delete_conversation(sid, "conv-0001")
    assert marked is not None and (marked.turns, marked.linked) == (7, 1)
    steps = []
    while True:
        step = storage.logs.purge_step(sid, "conv-0001", 4)
        steps.append((step.turns, step.unlinked, step.items))
        if step.done:
            break
    assert sum(t for t, _, _ in steps) == 7 and sum(u for _, u, _ in steps) == 1 and sum(i for *_, i in steps) == 7
    assert all(t + u + i <= 4 for t, u, i in steps)  # each step within its budget
    assert storage.memories.by_ids([i.row_id for i in inserted if i.row_id is not None]) == {}
    assert storage.memories.get(Scope(sid), linked.reference).provenance == {}  # type: ignore[union-attr]
    assert set(storage.outbox.deletions()) == {i.row_id for i in inserted}  # queued for the vector index


async def test_a_deletion_reports_what_it_deleted_when_another_purger_finished_it(storage: Storage) -> None:
    """The retention task (or another server) may purge a conversation between this call's mark and its purge."""
    sid = site(storage)
    await storage.logs.append(sid, "conv-0001", texts("a", "b", "c"), None, index=True)
    [at] = storage.logs.to_index(10)
    batch = [(turn(at, n, w), document(w, seed=n)) for n, w in enumerate("abc")]
    assert storage.memories.insert_turns(at, 3, 0, batch, Words()) is not None
    remember(storage, sid, "noted", provenance={"conversation_id": "conv-0001", "seq": 1})
    logs = storage.logs

    class RetentionFirst:
        """The store, with every marked conversation purged by another purger right after a mark."""

        def __getattr__(self, name: str) -> Any:
            return getattr(logs, name)

        def delete_conversation(self, site_id: int, conversation_id: str) -> LogDeletion | None:
            marked = logs.delete_conversation(site_id, conversation_id)
            LogRetention(logs).run_once()
            return marked

    deleted = delete_conversation(RetentionFirst(), sid, "conv-0001")  # type: ignore[arg-type]
    assert deleted is not None
    assert (deleted.item_count, deleted.turns_deleted, deleted.memories_unlinked) == (3, 3, 1)
    assert logs.purging(10) == [] and logs.delete_conversation(sid, "conv-0001") is None
