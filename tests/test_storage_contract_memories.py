"""The memory store's contract on SQLite and PostgreSQL: inserts and duplicates, updates checked against what
they were based on, reads and pages, per-day counts, lexical terms written again, supersede chains and expiry.

Part of the storage seam's contract suite (tests/README.md lists the others); the fixtures and records
are in tests/storage_support.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from storage_support import (
    WHEN,
    document,
    memory,
    remember,
    site,
    storage,  # noqa: F401
)

from memory_server.errors import InvalidParameters
from memory_server.memories.outbox import index_payload
from memory_server.ranking.lexical import analyze
from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    BY_CREATED,
    BY_OCCURRED,
    CONFLICT,
    CREATED,
    DUPLICATE,
    PRESENT,
    Kept,
    StaleRow,
    Words,
)
from memory_server.storage.scope import Scope
from memory_server.timestamps import now_rfc3339

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


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
    assert storage.memories.replaced(sid, [a.row_id, b.row_id, c.row_id, 10**9]) == {
        a.row_id: when[1],
        b.row_id: when[2],
    }
    assert storage.memories.replaced(sid, []) == {}
    assert storage.memories.replaced(site(storage, "another"), [a.row_id, b.row_id]) == {}  # another site's ids
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


def test_a_successor_never_occurred_before_what_it_supersedes(storage: Storage) -> None:
    """Inside the write transaction, on both backends: linking a memory that occurred earlier, moving a successor
    before what it replaces, or moving the replaced one after its successor is invalid_parameters, naming both
    dates, and writes nothing. The same instant is in order."""
    sid = site(storage)
    when = ["2025-05-01T09:59:57.000000Z", "2025-05-01T09:59:58.000000Z", "2025-05-01T10:00:00.000000Z"]
    get = lambda ref: storage.memories.get(Scope(sid), ref)  # noqa: E731
    old = remember(storage, sid, "the standup is at 09:30", occurred_at=when[1])
    with pytest.raises(InvalidParameters, match=f"occurred_at {when[0]} is before {when[1]}"):
        remember(storage, sid, "the standup is at 10:00", occurred_at=when[0], supersedes=old.reference)
    assert storage.memories.count() == 1 and get(old.reference).superseded_by is None  # the insert rolled back
    new = remember(storage, sid, "the standup is at 10:00", occurred_at=when[1], supersedes=old.reference)
    assert get(old.reference).valid_to == when[1]  # the same instant: valid from and until it, in order

    def change(reference: str, content: str, occurred_at: str, supersedes: str | None = None) -> None:
        storage.memories.update(
            sid,
            reference,
            memory(content, occurred_at=occurred_at, supersedes=supersedes),
            based_on={},
            document=None,
            words=Words(),
        )

    with pytest.raises(InvalidParameters, match=f"occurred_at {when[0]} is before {when[1]}"):
        change(new.reference, "the standup is at 10:00", when[0], old.reference)  # the successor earlier
    with pytest.raises(InvalidParameters, match=f"occurred_at {when[2]} is after {when[1]}"):
        change(old.reference, "the standup is at 09:30", when[2])  # the replaced one after its successor
    assert (get(old.reference).occurred_at, get(old.reference).valid_to) == (when[1], when[1])
    assert get(new.reference).occurred_at == when[1]
    change(new.reference, "the standup is at 10:00", when[2], old.reference)
    assert get(old.reference).valid_to == when[2]
    other = remember(storage, sid, "lunch is at noon", occurred_at=when[2])
    with pytest.raises(InvalidParameters, match="is before"):  # linked by a change rather than on insert
        change(old.reference, "the standup is at 09:30", when[1], other.reference)
    assert get(other.reference).superseded_by is None and get(old.reference).supersedes is None


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
