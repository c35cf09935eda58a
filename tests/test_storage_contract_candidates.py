"""The candidate store's contract on SQLite and PostgreSQL: the reads recall ranks from (visible counts, term
frequencies, held sets, lexical prefetch, neighbours), narrowed by a time window, and ranked identically on both.

Part of the storage seam's contract suite (tests/README.md lists the others); the fixtures and records
are in tests/storage_support.py.
"""

from __future__ import annotations

import re

import numpy as np
from storage_support import both, corpus, remember, site, storage, vector  # noqa: F401

from memory_server.ranking.lexical import analyze
from memory_server.retrieval.candidates import CandidateSource
from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    Kept,
)
from memory_server.storage.scope import Scope

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


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
    # Counted in the site alone: the other site's apple is not.
    assert candidates.doc_freqs(sid, ["appl", "red", "nothing"]) == {"appl": 3, "red": 2, "nothing": 0}
    assert candidates.doc_freqs(sid, ["appl", "red", "nothing"], up_to=1) == {"appl": 2, "red": 2, "nothing": 0}
    assert candidates.doc_freqs(other, ["appl", "red"]) == {"appl": 1, "red": 0}
    assert candidates.site_size(sid) == 5 and candidates.site_size(other) == 1 and candidates.site_size(10**6) == 0
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
    assert (
        candidates.neighbours(sid, [ids[2]], 1) == {ids[1], ids[2], ids[3]}
        and candidates.neighbours(sid, [], 1) == set()
    )
    assert candidates.neighbours(other, [ids[2]], 1) == set()


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


def _ranked(storage: Storage, scope: Scope, terms: list[str], references: dict[int, str]) -> list[str]:
    return [references[i] for i in storage.candidates.best_by_terms(scope, terms, 50)]


def test_lexical_prefetch_ranks_identically_on_both_backends(both: tuple[Storage, Storage]) -> None:
    """The same memories on SQLite (FTS5's bm25()) and PostgreSQL: the same memories, in the same order, for
    every query, down to ties; document frequencies and newest-first walks agree too."""
    references: list[dict[int, str]] = [{}, {}]
    sites = [[site(s, "a"), site(s, "b")] for s in both]
    for n, (owner, content) in enumerate(corpus(320)):
        for b, store in enumerate(both):
            done = remember(store, sites[b][owner], content, kept=Kept(reference=f"mem_{n:04d}"), team=f"t{n % 3}")
            references[b][done.row_id] = done.reference
            if n % 37 == 5:  # deletions change the totals BM25 reads
                store.memories.delete(Scope(sites[b][owner]), done.reference)
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
        for owner in (0, 1):
            counted = [store.candidates.doc_freqs(sites[b][owner], terms) for b, store in enumerate(both)]
            assert counted[0] == counted[1], terms


def test_recall_prefetch_is_the_same_on_both_backends(both: tuple[Storage, Storage]) -> None:
    """CandidateSource's lexical prefetch with a lowered postings budget (the selective terms by BM25): the
    same candidates in the same order."""
    sites = [site(s) for s in both]
    references: list[dict[int, str]] = [{}, {}]
    for n, (_, content) in enumerate(corpus(300, seed=5)):
        for b, store in enumerate(both):
            done = remember(store, sites[b], content, kept=Kept(reference=f"mem_{n:04d}"))
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
