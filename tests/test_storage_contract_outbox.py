"""The outbox's contract on SQLite and PostgreSQL: rows waiting for the vector index, deletions to carry to it,
and the change feed a replica's index follows (its numbers in commit order across servers).

Part of the storage seam's contract suite (tests/README.md lists the others); the fixtures and records
are in tests/storage_support.py.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
from storage_support import both, document, memory, remember, site, storage, vector  # noqa: F401

from memory_server.memories.outbox import index_payload
from memory_server.storage.factory import open_storage
from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    Words,
)
from memory_server.storage.scope import Scope

from conftest import make_settings

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


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
    assert outbox.change_mark() == 0 and outbox.changes(sid, 0, 10).changed == [] and len(storage.identity) == 32
    a, b = remember(storage, sid, "first memory"), remember(storage, sid, "second memory")
    start = outbox.change_mark(sid)
    assert (
        start == 2 and outbox.ids_after(0, 10) == [a.row_id, b.row_id] and outbox.ids_after(a.row_id, 10) == [b.row_id]
    )
    assert outbox.sites_of([a.row_id, b.row_id, 10**9]) == {sid}
    stored = storage.memories.get(Scope(sid), a.reference)
    assert stored is not None
    outbox.mark_indexed([(a.row_id, stored.updated_at)])
    assert outbox.change_mark(sid) == start  # being indexed changes nothing the index holds
    storage.memories.update(
        sid,
        a.reference,
        memory("first memory, changed"),
        based_on={},
        document=document("first memory, changed"),
        words=Words(),
    )
    storage.memories.delete(Scope(sid), b.reference)
    page = outbox.changes(sid, start, 10)
    assert (page.changed, page.deleted, page.mark, page.more, page.truncated) == (
        [a.row_id],
        [b.row_id],
        outbox.change_mark(sid),
        False,
        False,
    )
    assert outbox.changes(sid, 0, 10).deleted == [b.row_id]  # inserted, then deleted: deleted, once
    cut = outbox.changes(sid, 0, 1)
    assert cut.more and cut.mark == 1 and cut.changed == [a.row_id]
    # When each change was made: a reader that applied change `mark` at `mark_at` finds it as it was.
    assert cut.after_at is None and cut.mark_at is not None and outbox.changes(sid, 1, 10).after_at == cut.mark_at
    assert page.after_at == outbox.changes(sid, start - 1, 1).mark_at and page.mark_at is not None
    # A feed whose numbering is behind what a reader applied (changes lost by a failover): rebuild.
    assert outbox.changes(sid, outbox.change_mark(sid) + 3, 10).truncated
    assert outbox.prune_changes(3600.0) == 0 and outbox.prune_changes(-1.0) >= 4
    assert outbox.changes(sid, 0, 10).truncated and not outbox.changes(sid, outbox.change_mark(sid), 10).truncated
    remember(storage, sid, "third memory")
    assert outbox.changes(sid, page.mark, 10).truncated is False and outbox.change_mark(sid) == page.mark + 1


def test_each_site_has_a_change_feed_of_its_own(storage: Storage) -> None:
    """Numbered per site: one site's writes never move another's numbers; the store's total is every site's
    numbers added up; what changed lately is found by time."""
    sid, other = site(storage), site(storage, "other")
    outbox = storage.outbox
    marks, clock = outbox.change_marks()
    assert marks == {} and clock > 0
    a = remember(storage, sid, "first memory")
    for n in range(3):
        remember(storage, other, f"another site's memory {n}")
    storage.memories.delete(Scope(other), remember(storage, other, "gone").reference)
    assert outbox.change_mark(sid) == 1 and outbox.change_mark(other) == 5 and outbox.change_mark() == 6
    assert outbox.change_marks()[0] == {sid: 1, other: 5}
    page = outbox.changes(sid, 0, 10)
    assert (page.changed, page.deleted, page.mark) == ([a.row_id], [], 1)
    assert len(outbox.changes(other, 0, 10).changed) == 3 and len(outbox.changes(other, 0, 10).deleted) == 1
    later, clock = outbox.change_marks(clock + 3600.0)
    assert later == {}
    remember(storage, sid, "second memory")
    assert outbox.change_marks(clock - 60.0)[0] == {sid: 2, other: 5}


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
            page = follower.outbox.changes(sid, mark, 7)
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
