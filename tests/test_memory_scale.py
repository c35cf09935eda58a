"""Saved memories past the full-scan size: the bounded prefetch (dense + lexical + neighbours) and a
start-up that does not wait for a large index backlog. Real SQLite, real Qdrant Edge, the real model; the
size thresholds are lowered so a few dozen memories cross them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from server.auth import core as auth
from server.memories import rows
from server.ranking.lexical import fts_phrase, prefetch_terms
from server.memories.service import PREFETCH, Filters, MemoryService
from server.ranking.fusion import document_text
from server.services import Services, open_services
from tests.conftest import make_settings

TOPICS = ["budget review", "coffee machine", "release train", "backup schedule", "design critique"]


def test_prefetch_terms_takes_the_rarest_terms_within_the_budget() -> None:
    assert prefetch_terms({"a": 5, "b": 1, "c": 3, "d": 0}, 4) == (["b", "c"], ["a"])
    assert prefetch_terms({"a": 5, "b": 1}, 100) == (["b", "a"], [])
    # Once a term does not fit, every more frequent one is common too (ties broken by the term).
    assert prefetch_terms({"x": 3, "y": 3, "z": 1}, 3) == (["z"], ["x", "y"])
    assert prefetch_terms({"a": 0}, 10) == ([], [])
    assert fts_phrase("caf\u00e9") == '"caf\u00e9"'


@pytest.fixture
def services(tmp_path: Path, embedder: Any) -> Iterator[Services]:
    services = open_services(make_settings(tmp_path / "data"))
    services.load_memory(embedder=embedder)
    try:
        yield services
    finally:
        services.close()


def service_of(services: Services) -> MemoryService:
    return getattr(services.memory_service, "_inner", services.memory_service)


def fill(services: Services) -> tuple[int, dict[str, str]]:
    """40 memories in two buckets, most in conversations (so neighbours count), one with a rare word."""
    principal = services.local_principal("acme")
    service = service_of(services)
    memories = [
        service.validate(content=f"Notes from the {TOPICS[i % 5]} meeting, item {i}: {w}.",
                         bucket="eng" if i % 4 else "ops",
                         provenance={"conversation_id": f"c{i % 3}", "seq": i // 3},
                         occurred_at=f"2024-03-{1 + i % 28:02d}T10:00:00Z")
        for i, w in enumerate(["agreed", "postponed", "dropped", "approved", "questioned"] * 8)
    ]
    memories.append(service.validate(content="A zebra crossing was painted outside the office.", bucket="eng"))
    refs = service.remember_many(principal.site_id, memories)
    return principal.site_id, {m.content: inserted.reference for m, inserted in zip(memories, refs)}


QUERIES = ["what happened at the budget review?", "zebra crossing", "coffee machine item 7 approved",
           "which meeting was postponed in March?", "release train backup"]


@pytest.mark.parametrize("bucket", [None, "eng"])
def test_the_prefetch_path_ranks_like_the_full_scan_when_it_covers_everything(
        services: Services, embedder: Any, bucket: str | None) -> None:
    fill(services)
    service = service_of(services)
    scope = service.read_scope(services.local_principal("acme"), Filters(bucket=bucket))
    for query in QUERIES:
        vector = embedder.embed_query(query)
        service.full_scan_limit = 5000
        full = service._ranked_hits(scope, query, vector, 10)
        service.full_scan_limit = 3  # 41 memories < PREFETCH: the dense prefetch alone brings them all
        prefetched = service._ranked_hits(scope, query, vector, 10)
        assert [(h["reference"], h["score"]) for h in prefetched] == [(h["reference"], h["score"]) for h in full]


@pytest.mark.parametrize("bucket", [None, "eng"])
def test_the_full_scan_loads_candidates_as_the_former_single_join_did(services: Services, bucket: str | None) -> None:
    """Rows and FTS terms come from separate queries (and a cache): the same candidates as one join, in
    id order (ties keep candidate order, so the order is fixed rather than left to the query plan)."""
    fill(services)
    service = service_of(services)
    where, args = service.read_scope(services.local_principal("acme"), Filters(bucket=bucket)).sql("m")
    joined = services.readers.get().execute(
        "SELECT m.id, f.terms FROM memories m JOIN memories_fts f ON f.rowid = m.id"
        f" WHERE {where} AND m.vector_model = ? ORDER BY m.id", [*args, service.embedder.name]).fetchall()
    loaded = service._load_candidates("memories m", where, args)
    assert [(c.id, list(c.terms or [])) for c in loaded] == [(r[0], r[1].split()) for r in joined]
    again = service._load_candidates("memories m", where, args)  # from the candidate cache
    assert [(c.id, c.terms) for c in again] == [(c.id, c.terms) for c in loaded]


def test_lexical_prefetch_keeps_rare_terms_and_rows_holding_every_common_term(services: Services) -> None:
    site_id, refs = fill(services)
    service = service_of(services)
    service.lexical_postings = 5  # 'zebra' (1 row) fits; 'budget', 'review' (8 rows each) do not
    scope = service.read_scope(services.local_principal("acme"), Filters())
    conn = services.readers.get()

    def ids_of(*contents: str) -> set[int]:
        return {conn.execute("SELECT id FROM memories WHERE reference = ?", (refs[c],)).fetchone()[0]
                for c in contents}

    found = service._lexical_ids(scope, "zebra budget review")
    budget = [c for c in refs if "budget review" in c]
    assert len(found) == len(set(found)) == 1 + len(budget)
    # The rare word's row (by bm25), then the rows holding both common words (newest first); no other row
    # holds both, and the rows holding just one come last, newest first, all already taken here.
    assert set(found) == ids_of("A zebra crossing was painted outside the office.", *budget)

    # One common term alone: no bm25 over all its rows, the newest rows holding it instead.
    found = service._lexical_ids(scope, "meeting")
    every = [r[0] for r in conn.execute("SELECT id FROM memories WHERE content LIKE '%meeting%' ORDER BY id DESC")]
    assert found == every[:PREFETCH]

    # The scope applies to lexical candidates too.
    ops = service.read_scope(services.local_principal("acme"), Filters(bucket="ops"))
    found = service._lexical_ids(ops, "zebra budget review")
    assert found and set(found) <= {r[0] for r in conn.execute("SELECT id FROM memories WHERE bucket = 'ops'")}


def test_document_frequencies_are_cached_until_the_corpus_moves_by_a_percent(services: Services) -> None:
    site_id, _ = fill(services)
    service = service_of(services)
    conn = services.readers.get()
    assert service._doc_freqs(conn, ["zebra", "budget", "nowher"]) == {"zebra": 1, "budget": 8, "nowher": 0}
    more = [service.validate(content=f"Zebra sighting number {i}.") for i in range(3)]
    service.remember_many(site_id, more)
    # Only a cost estimate for the prefetch: 3 new rows on 41 are within the tolerance (at least 100 rows).
    assert service._doc_freqs(conn, ["zebra"]) == {"zebra": 1}
    service.remember_many(site_id, [service.validate(content=f"Filler note {i}.") for i in range(100)])
    assert service._doc_freqs(conn, ["zebra"]) == {"zebra": 4}


def test_recall_past_the_full_scan_limit_finds_rare_words_and_neighbours(services: Services, embedder: Any) -> None:
    _, refs = fill(services)
    service = service_of(services)
    service.full_scan_limit = 3
    service.lexical_postings = 5
    scope = service.read_scope(services.local_principal("acme"), Filters())
    hits = service._ranked_hits(scope, "zebra", embedder.embed_query("zebra"), 3)
    assert hits[0]["reference"] == refs["A zebra crossing was painted outside the office."]
    # Neighbours of prefetched rows come along: the first memory is c0 seq 0; c0 seq 1, 2 are rows 4 and 7.
    assert service._neighbour_ids({1}) == {1, 4, 7}


def test_a_large_backlog_is_indexed_in_the_background_after_start_up(tmp_path: Path, embedder: Any) -> None:
    settings = make_settings(tmp_path / "data")
    services = open_services(settings)
    try:
        site_id, _ = services.writer.run_sync(lambda c: auth.ensure_site(c, "acme"))
        contents = [f"Backlog memory number {i} about the {TOPICS[i % 5]}." for i in range(6)]
        validated = [rows.validate_new(content=c, bucket="crash", max_content_bytes=65536) for c in contents]
        documents = [document_text(m.content, m.occurred_at) for m in validated]
        vectors = embedder.embed_documents(documents)
        # Committed to SQLite, never indexed: what a crash or an offline write leaves behind.
        services.writer.run_sync(lambda c: [
            rows.insert_memory(c, site_id, m, document=d, vector=v, model=embedder.name)
            for m, d, v in zip(validated, documents, vectors)
        ])
    finally:
        services.close()

    services = open_services(settings)
    services.startup_sync_limit = 5
    try:
        services.load_memory(embedder=embedder)  # 6 > 5: ready without indexing them
        service = service_of(services)
        assert service.backlog() == 6
        assert service.index.count() == 0
        services.start_maintenance()
        deadline = time.monotonic() + 60
        while service.backlog() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert service.backlog() == 0
        assert service.index.count() == 6
        scope = service.read_scope(services.local_principal("acme"), Filters())
        hits = service._strict_hits(scope, embedder.embed_query("backlog memory about the coffee machine"), 6, 0.0)
        assert len(hits) == 6
    finally:
        services.close()

    # At or under the limit, start-up indexes the backlog itself before it reports ready.
    services = open_services(settings)
    try:
        services.writer.run_sync(lambda c: c.execute("UPDATE memories SET indexed = 0 WHERE id <= 2"))
        services.load_memory(embedder=embedder)
        assert service_of(services).backlog() == 0
    finally:
        services.close()


async def test_the_candidate_cache_follows_changes_and_deletions(services: Services) -> None:
    """Candidates are cached between recalls; a changed row is read again and a forgotten one is gone."""
    _, refs = fill(services)
    service = service_of(services)
    principal = services.local_principal("acme")
    where, args = service.read_scope(principal, Filters()).sql("m")
    conn = services.readers.get()

    def row_id(reference: str) -> int:
        return conn.execute("SELECT id FROM memories WHERE reference = ?", (reference,)).fetchone()[0]

    changed, forgotten = refs["A zebra crossing was painted outside the office."], list(refs.values())[0]
    before = {c.id: c for c in service._load_candidates("memories m", where, args)}
    await service.update(principal, changed, {"content": "The sailing club meets on Thursdays."})
    await service.forget(principal, forgotten)
    after = {c.id: c for c in service._load_candidates("memories m", where, args)}

    now = after[row_id(changed)]
    assert now.text == document_text("The sailing club meets on Thursdays.", now.occurred_at)
    assert "sail" in now.terms and "zebra" not in now.terms
    assert float(now.vector @ before[row_id(changed)].vector) < 0.9  # the new embedding, not the cached one
    assert len(after) == len(before) - 1 and all(after[i] is before[i] for i in after if i != row_id(changed))
