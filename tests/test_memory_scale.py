"""Saved memories past the full-scan size: the bounded prefetch (dense + lexical + neighbours) and a
start-up that does not wait for a large index backlog. Real SQLite, real Qdrant Edge, the real model; the
size thresholds are lowered so a few dozen memories cross them."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_server.auth import admin as auth
from memory_server.memories.validation import Filters, read_scope, validate_new
from memory_server.ranking.candidate_set import Candidate, unit_vectors
from memory_server.ranking.dates import epoch_day, prefetch_windows
from memory_server.ranking.fusion import document_text
from memory_server.ranking.lexical import analyze, analyzed_text, fts_phrase, prefetch_terms
from memory_server.ranking.periods import query_periods
from memory_server.ranking.term_arrays import TERM_IDS
from memory_server.retrieval import candidates as candidates_module
from memory_server.retrieval.candidates import NEIGHBOUR_REACH, PREPARE_MIN_MEMORIES, CandidateSource
from memory_server.retrieval.recall import Retrieval
from memory_server.services import Services, open_services
from memory_server.storage.factory import open_storage
from memory_server.storage.records import Document, Words
from memory_server.storage.scope import Scope
from memory_server.timestamps import now_rfc3339

from tests.conftest import make_settings

TOPICS = ["budget review", "coffee machine", "release train", "backup schedule", "design critique"]


def test_prefetch_terms_takes_the_rarest_terms_within_the_budget() -> None:
    assert prefetch_terms({"a": 5, "b": 1, "c": 3, "d": 0}, 4) == ["b", "c"]
    assert prefetch_terms({"a": 5, "b": 1}, 100) == ["b", "a"]
    # Once a term does not fit, no more frequent one is taken (ties broken by the term).
    assert prefetch_terms({"x": 3, "y": 3, "z": 1}, 3) == ["z"]
    assert prefetch_terms({"a": 0}, 10) == []
    assert fts_phrase("caf\u00e9") == '"caf\u00e9"'


def source(services: Services, **limits: int) -> CandidateSource:
    """A candidate source over the services' store and index, with its size thresholds set."""
    memories = services.loaded_memories()
    return CandidateSource(services.storage.candidates, memories.index, model=memories.embedder.name, **limits)


def retrieval(services: Services, candidates: CandidateSource) -> Retrieval:
    memories = services.loaded_memories()
    return Retrieval(services.storage.memories, candidates, memories.index, memories.embedder, memories.words)


def scope_of(services: Services, **found: Any) -> Scope:
    return read_scope(services.local_principal("acme"), Filters(**found))


def fill(services: Services) -> tuple[int, dict[str, str]]:
    """40 memories in two buckets, most in conversations (so neighbours count), one with a rare word."""
    principal = services.local_principal("acme")
    writes = services.loaded_memories().writes
    memories = [
        writes.validate(
            content=f"Notes from the {TOPICS[i % 5]} meeting, item {i}: {w}.",
            bucket="eng" if i % 4 else "ops",
            provenance={"conversation_id": f"c{i % 3}", "seq": i // 3},
            occurred_at=f"2024-03-{1 + i % 28:02d}T10:00:00Z",
        )
        for i, w in enumerate(["agreed", "postponed", "dropped", "approved", "questioned"] * 8)
    ]
    memories.append(writes.validate(content="A zebra crossing was painted outside the office.", bucket="eng"))
    refs = writes.remember_many(principal.site_id, memories)
    return principal.site_id, {m.content: inserted.reference for m, inserted in zip(memories, refs, strict=False)}


def query_db(services: Services, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """The SQLite file read directly: the oracle the store's answers are checked against."""
    with sqlite3.connect(services.settings.db_path) as db:
        return db.execute(sql, args).fetchall()


QUERIES = [
    "what happened at the budget review?",
    "zebra crossing",
    "coffee machine item 7 approved",
    "which meeting was postponed in March?",
    "release train backup",
]


@pytest.mark.parametrize("bucket", [None, "eng"])
def test_the_prefetch_path_ranks_like_the_full_scan_when_it_covers_everything(
    services: Services, bucket: str | None
) -> None:
    fill(services)
    scope = scope_of(services, bucket=bucket)
    full = retrieval(services, source(services, full_scan_limit=5000))
    # 41 memories < PREFETCH: the dense prefetch alone brings them all
    prefetched = retrieval(services, source(services, full_scan_limit=3))
    for query in QUERIES:
        expected = [(h["reference"], h["score"]) for h in full.recall(scope, query, 10)]
        assert [(h["reference"], h["score"]) for h in prefetched.recall(scope, query, 10)] == expected


@pytest.mark.parametrize("bucket", [None, "eng"])
def test_the_full_scan_loads_candidates_as_a_single_join_would(
    services: Services, embedder: Any, bucket: str | None
) -> None:
    """Rows and FTS terms come from separate queries (and a cache): the same candidates as one join, in
    id order (ties keep candidate order, so the order is fixed rather than left to the query plan)."""
    site_id, _ = fill(services)
    joined = query_db(
        services,
        "SELECT m.id, f.terms FROM memories m JOIN memories_fts f ON f.rowid = m.id"
        " WHERE m.site_id = ? AND (? IS NULL OR m.bucket = ?) AND m.vector_model = ? ORDER BY m.id",
        site_id,
        bucket,
        bucket,
        embedder.name,
    )
    candidates = source(services)
    vector = embedder.embed_query("anything")
    loaded = candidates.candidates(scope_of(services, bucket=bucket), "anything", vector)
    assert [(c.id, list(c.analysed_ids())) for c in loaded] == [(r[0], list(TERM_IDS.of(r[1].split()))) for r in joined]
    again = candidates.candidates(scope_of(services, bucket=bucket), "anything", vector)  # from the cache
    assert [(c.id, list(c.analysed_ids())) for c in again] == [(c.id, list(c.analysed_ids())) for c in loaded]
    assert [(c.id, c.text, c.vector.tobytes()) for c in again] == [(c.id, c.text, c.vector.tobytes()) for c in loaded]


def test_lexical_prefetch_ranks_the_rare_terms_and_leaves_common_ones_to_the_dense_side(services: Services) -> None:
    site_id, refs = fill(services)
    candidates = source(services, lexical_postings=5)  # 'zebra' (1 row) fits; 'budget', 'review' (8 rows each) do not
    scope = scope_of(services)

    def ids_of(*contents: str) -> set[int]:
        return {query_db(services, "SELECT id FROM memories WHERE reference = ?", refs[c])[0][0] for c in contents}

    found = candidates.lexical_ids(scope, "zebra budget review")
    # The rare word's row alone: the common words' postings would cross the budget, so they are not read.
    assert found == list(ids_of("A zebra crossing was painted outside the office."))
    # A common term alone reads nothing: the dense prefetch brings the memories holding it.
    assert candidates.lexical_ids(scope, "meeting") == []
    # Within the budget, every row holding a query term, best first.
    assert set(source(services, lexical_postings=100).lexical_ids(scope, "zebra budget review")) == ids_of(
        "A zebra crossing was painted outside the office.", *[c for c in refs if "budget review" in c]
    )

    # The scope applies to lexical candidates too.
    found = source(services, lexical_postings=100).lexical_ids(scope_of(services, bucket="ops"), "zebra budget review")
    assert found and set(found) <= {r[0] for r in query_db(services, "SELECT id FROM memories WHERE bucket = 'ops'")}


def test_the_postings_budget_is_a_share_of_the_store_between_a_floor_and_the_cap(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, refs = fill(services)  # 41 memories: 'zebra' in 1, 'budget' and 'review' in 8 each
    scope = scope_of(services)
    assert source(services).postings_budget(10_000) == 500  # 5%
    assert source(services).postings_budget(1_000) == 500  # the floor
    assert source(services).postings_budget(1_000_000) == 2000  # the cap
    assert source(services, lexical_postings=5).postings_budget(1_000_000) == 5

    monkeypatch.setattr(candidates_module, "LEXICAL_POSTINGS_FLOOR", 1)
    monkeypatch.setattr(candidates_module, "LEXICAL_POSTINGS_SHARE", 0.25)  # 10 postings of 41 memories
    found = source(services, lexical_postings=100).lexical_ids(scope, "zebra budget review")
    zebra = query_db(
        services,
        "SELECT id FROM memories WHERE reference = ?",
        refs["A zebra crossing was painted outside the office."],
    )[0][0]
    # zebra (1) and one of the 8-posting terms fit in 10; both of them (17) would not.
    assert len(found) == 9 and found[0] == zebra
    monkeypatch.setattr(candidates_module, "LEXICAL_POSTINGS_SHARE", 0.1)  # 4: zebra alone
    assert len(source(services, lexical_postings=100).lexical_ids(scope, "zebra budget review")) == 1


def test_the_lexical_prefetch_reaches_words_the_index_holds_as_other_tokens(services: Services) -> None:
    # FTS5 folds accents and cuts a Hindi word at its vowel signs: counted as written, such a term held nowhere.
    site_id, _ = fill(services)
    writes = services.loaded_memories().writes
    contents = [
        "O colegiado avalia o pedido do acadêmico em dez dias úteis.",
        "Das Büro zieht im Frühjahr nach München um.",
        "भारत की राजधानी नई दिल्ली है",
    ]
    refs = writes.remember_many(site_id, [writes.validate(content=c, bucket="eng") for c in contents])
    ids = [query_db(services, "SELECT id FROM memories WHERE reference = ?", r.reference)[0][0] for r in refs]
    candidates = source(services, lexical_postings=100)
    scope = scope_of(services)
    assert set(candidates.doc_freqs(site_id, analyze("acadêmico úteis", "pt")).values()) == {1}
    assert candidates.lexical_ids(scope, "Quem avalia o pedido do acadêmico?")[:1] == ids[:1]
    assert candidates.lexical_ids(scope, "Wann zieht das Büro nach München?")[:1] == ids[1:2]
    assert candidates.lexical_ids(scope, "भारत की राजधानी क्या है?")[:1] == ids[2:]


def test_document_frequencies_are_cached_until_the_corpus_moves_by_a_percent(services: Services) -> None:
    site_id, _ = fill(services)
    candidates = source(services)
    writes = services.loaded_memories().writes
    assert candidates.doc_freqs(site_id, ["zebra", "budget", "nowher"]) == {"zebra": 1, "budget": 8, "nowher": 0}
    writes.remember_many(site_id, [writes.validate(content=f"Zebra sighting number {i}.") for i in range(3)])
    # Only a cost estimate for the prefetch: 3 new rows on 41 are within the tolerance (at least 100 rows).
    assert candidates.doc_freqs(site_id, ["zebra"]) == {"zebra": 1}
    writes.remember_many(site_id, [writes.validate(content=f"Filler note {i}.") for i in range(100)])
    assert candidates.doc_freqs(site_id, ["zebra"]) == {"zebra": 4}
    # Counted only as far as the postings budget: a term beyond it is never searched, its count is moot.
    assert source(services, lexical_postings=5).doc_freqs(site_id, ["budget", "zebra"]) == {"budget": 6, "zebra": 4}


def test_recall_past_the_full_scan_limit_finds_rare_words_and_neighbours(services: Services) -> None:
    site_id, refs = fill(services)
    prefetching = retrieval(services, source(services, full_scan_limit=3, lexical_postings=5))
    hits = prefetching.recall(scope_of(services), "zebra", 3)
    assert hits[0]["reference"] == refs["A zebra crossing was painted outside the office."]
    # Neighbours of prefetched rows come along: the first memory is c0 seq 0; c0 seq 1, 2 are rows 4 and 7.
    assert services.storage.candidates.neighbours(site_id, [1], NEIGHBOUR_REACH) == {1, 4, 7}


def wait_for(condition: Any, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(condition())


def test_a_large_backlog_is_indexed_in_the_background_after_start_up(tmp_path: Path, embedder: Any) -> None:
    settings = make_settings(tmp_path / "data")
    storage = open_storage(settings)
    try:
        site_id, _ = auth.ensure_site(storage.sites, "acme")
        contents = [f"Backlog memory number {i} about the {TOPICS[i % 5]}." for i in range(6)]
        validated = [validate_new(content=c, bucket="crash", max_content_bytes=65536) for c in contents]
        vectors = embedder.embed_documents([document_text(m.content, m.occurred_at) for m in validated])
        documents = [
            Document(vector=v, model=embedder.name, terms=analyzed_text(document_text(m.content, m.occurred_at)))
            for m, v in zip(validated, vectors, strict=True)
        ]
        # Committed to the authority, never indexed: what a crash or an offline write leaves behind.
        storage.memories.insert(site_id, [(m, d, None) for m, d in zip(validated, documents, strict=False)], Words())
    finally:
        storage.close()

    services = open_services(settings)
    services.startup_sync_limit = 5
    try:
        memories = services.load_memories(embedder=embedder)  # 6 > 5: ready without indexing them
        assert memories.outbox.backlog() == 6
        assert memories.index.count() == 0
        services.start_maintenance()
        assert wait_for(lambda: memories.outbox.backlog() == 0)
        assert memories.index.count() == 6
        hits = memories.retrieval.search(scope_of(services), "backlog memory about the coffee machine", 6, 0.0)
        assert len(hits) == 6
    finally:
        services.close()

    # At or under the limit, start-up indexes the backlog itself before it reports ready.
    with sqlite3.connect(settings.db_path) as db:
        db.execute("UPDATE memories SET indexed = 0 WHERE id <= 2")
    services = open_services(settings)
    try:
        assert services.load_memories(embedder=embedder).outbox.backlog() == 0
    finally:
        services.close()


def test_the_candidate_cache_follows_changes_and_deletions(services: Services, embedder: Any) -> None:
    """Candidates are cached between recalls; a changed row is read again and a forgotten one is gone."""
    _, refs = fill(services)
    principal = services.local_principal("acme")
    memories = services.loaded_memories()
    candidates, scope, vector = memories.source, scope_of(services), embedder.embed_query("anything")

    def row_id(reference: str) -> int:
        return int(query_db(services, "SELECT id FROM memories WHERE reference = ?", reference)[0][0])

    changed, forgotten = refs["A zebra crossing was painted outside the office."], list(refs.values())[0]
    changed_id = row_id(changed)
    before = {c.id: c for c in candidates.candidates(scope, "anything", vector)}
    memories.writes.update(principal, changed, {"content": "The sailing club meets on Thursdays."})
    memories.writes.forget(principal, forgotten)
    after = {c.id: c for c in candidates.candidates(scope, "anything", vector)}

    now = after[changed_id]
    assert now.text == document_text("The sailing club meets on Thursdays.", now.occurred_at)
    assert TERM_IDS.get("sail") in now.analysed_ids() and TERM_IDS.get("zebra") not in now.analysed_ids()
    # the new embedding, not the cached one
    assert float(unit_vectors(now.vector) @ unit_vectors(before[changed_id].vector)) < 0.9

    def same(a: Candidate, b: Candidate) -> bool:
        return (a.id, a.text, a.vector.tobytes(), a.occurred_at) == (b.id, b.text, b.vector.tobytes(), b.occurred_at)

    assert len(after) == len(before) - 1 and all(same(after[i], before[i]) for i in after if i != changed_id)


def test_a_named_day_prefetches_the_memories_dated_around_it(services: Services, embedder: Any) -> None:
    """In a scope too large to rank whole, the index's nearest dated in the window around a day the query
    names join the candidates, though they match neither its words nor its meaning best."""
    principal = services.local_principal("acme")
    writes = services.loaded_memories().writes
    yesterday = datetime.now(UTC) - timedelta(days=1)
    writes.remember_many(
        principal.site_id,
        [
            *(
                writes.validate(
                    content=f"Budget notes, item {i}: approved.", occurred_at=f"2023-01-{1 + i:02d}T10:00:00Z"
                )
                for i in range(20)
            ),
            *(
                writes.validate(content=text, occurred_at=yesterday.strftime("%Y-%m-%dT%H:%M:%SZ"))
                for text in (
                    "The balcony plants need water.",
                    "Bought new running shoes.",
                    "The cat slept all day.",
                    "Called grandma about the holidays.",
                )
            ),
        ],
    )
    question = "What did we decide about the budget yesterday?"
    windows = prefetch_windows(query_periods(question))
    assert len(windows) == 1
    small, scope = source(services, full_scan_limit=3, prefetch=3), scope_of(services)
    vector = embedder.embed_query(question)

    def dated_in_window(candidates: Iterable[Candidate]) -> set[int]:
        return {c.id for c in candidates if windows[0][0] <= day_of(c.occurred_at) <= windows[0][1]}

    plain = small.candidates(scope, question, vector)
    dated = small.candidates(scope, question, vector, windows)
    assert dated_in_window(plain) == set() and len(dated_in_window(dated)) == 3
    assert {c.id for c in plain} <= {c.id for c in dated}


def day_of(occurred_at: str | None) -> int:
    return epoch_day(date.fromisoformat(occurred_at[:10])) if occurred_at else -1


def test_a_named_day_prefetches_the_memories_telling_of_it_though_dated_after_it(services: Services) -> None:
    """In a scope too large to rank whole, a memory telling of the day a query names relative to its own
    date ("twelve days ago", "two weeks ago") is prefetched by that day and recalled, though it is dated
    after the window around the day, shares no word with the query, and others are nearer it in meaning."""
    principal = services.local_principal("acme")
    writes = services.loaded_memories().writes
    told = [
        ("Twelve days ago the movers carried the piano upstairs.", "2024-03-21T18:00:00Z"),  # 9 March
        ("Two weeks ago the neighbours painted their fence green.", "2024-03-22T09:00:00Z"),
    ]  # 5-11 March
    # Nearer the question than those (the dense prefetch of 3 takes them), dated after the window too.
    outcomes = writes.remember_many(
        principal.site_id,
        [
            *(
                writes.validate(
                    content=f"Events of the day at the budget meeting, item {i}.",
                    occurred_at=f"2024-03-{21 + i % 10:02d}T10:00:00Z",
                )
                for i in range(20)
            ),
            *(writes.validate(content=content, occurred_at=when) for content, when in told),
        ],
    )
    wanted = {o.reference for o in outcomes[-2:]}
    question = "What happened on March 9, 2024?"
    [(first, last)] = prefetch_windows(query_periods(question))
    assert all(day_of(when) > last for _, when in told)  # their own dates are after the window
    assert not set(analyze(question)) & {t for content, _ in told for t in analyze(content)}
    small, scope = source(services, full_scan_limit=3, prefetch=3, lexical_postings=5), scope_of(services)

    def telling(candidates: Iterable[Candidate]) -> set[str]:
        return {content for c in candidates for content, _ in told if content in c.text}

    vector = services.loaded_memories().embedder.embed_query(question)
    assert telling(small.candidates(scope, question, vector)) == set()  # the nearest and the best by words
    assert telling(small.candidates(scope, question, vector, [(first, last)])) == {content for content, _ in told}
    assert wanted <= {h["reference"] for h in retrieval(services, small).recall(scope, question, 3)}


def test_a_held_set_is_looked_at_again_after_any_change_or_an_expiry(services: Services, embedder: Any) -> None:
    """A scope ranked whole keeps its set; the store is read again once its change number moved or one of
    the set's memories reached its expiry."""
    principal = services.local_principal("acme")
    memories = services.loaded_memories()
    writes, store = memories.writes, services.storage.candidates
    soon = (datetime.now(UTC) + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    writes.remember_many(
        principal.site_id,
        [writes.validate(content=f"Kept note {n}", bucket="eng") for n in range(4)]
        + [writes.validate(content="Soon gone", bucket="eng", expires_at=soon)],
    )
    loads: list[int] = []
    counted = CandidateSource(
        _Counting(store, loads),
        memories.index,
        model=memories.embedder.name,
        change_mark=services.storage.outbox.change_mark,
    )
    scope, vector = scope_of(services, bucket="eng"), embedder.embed_query("note")

    def texts() -> list[str]:
        return sorted(c.text for c in counted.candidates(replace(scope, at=now_rfc3339()), "note", vector))

    first = texts()
    assert len(first) == 5 and len(loads) == 1
    assert texts() == first and len(loads) == 1  # nothing changed: no look
    writes.remember_many(principal.site_id, [writes.validate(content="Elsewhere", bucket="ops")])
    assert texts() == first and len(loads) == 2  # a change, even elsewhere: looked, the same set
    assert texts() == first and len(loads) == 2
    time.sleep(
        max(
            0.0,
            (datetime.strptime(soon, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds(),
        )
        + 0.1
    )
    assert len(texts()) == 4 and len(loads) == 3  # the expiry passed: looked, one fewer


class _Counting:
    """A candidate store that counts the loads of whole scopes."""

    def __init__(self, store: Any, loads: list[int]) -> None:
        self._store, self._loads = store, loads

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def load(self, scope: Scope, ids: Any, model: str, cached: Any, up_to: int | None = None) -> Any:
        if ids is None:
            self._loads.append(1)
        return self._store.load(scope, ids, model, cached, up_to)


def test_start_up_prepares_the_sets_of_the_buckets_ranked_whole(services: Services) -> None:
    principal = services.local_principal("acme")
    memories = services.loaded_memories()
    writes = memories.writes
    writes.remember_many(
        principal.site_id,
        [writes.validate(content=f"Big bucket note {n}", bucket="big") for n in range(PREPARE_MIN_MEMORIES)]
        + [writes.validate(content=f"Small bucket note {n}", bucket="small") for n in range(5)],
    )
    memories.retrieval.warm_up()
    held = set(memories.source._whole_sets)  # the scopes whose candidate sets are ready
    assert scope_of(services, bucket="big") in held and scope_of(services) in held
    assert scope_of(services, bucket="small") not in held  # too small to be worth it


def test_start_up_keeps_one_copy_of_a_prepared_memorys_vector(services: Services) -> None:
    """The newest memories are read into the cache after the held sets are prepared, and those already
    cached keep the vector that is a row of their set's matrix rather than a second copy of it."""
    principal = services.local_principal("acme")
    memories = services.loaded_memories()
    writes = memories.writes
    writes.remember_many(
        principal.site_id,
        [writes.validate(content=f"Prepared note {n}", bucket="big") for n in range(PREPARE_MIN_MEMORIES)],
    )
    source = memories.source
    source._cache.clear()  # as after a start
    memories.retrieval.warm_up()
    # The sets' matrices as stored (cosines() widens them to float32 a chunk at a time).
    matrices = [held.candidates._vectors for held in source._whole_sets.values()]
    assert matrices and all(m is not None for m in matrices)
    ids = [candidate.id for candidate in source._whole_sets[scope_of(services)].candidates]
    assert len(ids) == PREPARE_MIN_MEMORIES
    for row_id in ids:
        cached = source.cached(row_id)
        assert cached is not None
        assert any(np.shares_memory(cached.vector, matrix) for matrix in matrices)
