"""Sites that never touch each other: a site's recall ranks by its own lexical statistics, so what another site
writes never moves its answers, on both backends and at every scope size. Real storage, real Qdrant Edge, the
real model; the size thresholds are lowered so a few hundred memories cross them (the path a site of more than
FULL_SCAN_LIMIT memories takes)."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from memory_server.memories.validation import Filters, read_scope
from memory_server.ranking.lexical import analyzed_text
from memory_server.retrieval.candidates import CandidateSource
from memory_server.retrieval.recall import Retrieval
from memory_server.services import Services
from memory_server.settings import Settings
from memory_server.storage.backends import SQLITE, backend_of
from memory_server.storage.factory import open_storage
from memory_server.storage.fts5 import fts_tokens
from memory_server.storage.records import Words
from memory_server.storage.scope import Scope

from tests.conftest import make_settings, query
from tests.storage_support import WHEN, document, memory, remember, vector

pytestmark = pytest.mark.backends

WORDS = (
    "budget review coffee machine release train backup schedule design critique garden harbor island kettle "
    "lemon meadow piano quartz river sunset tiger umbrella violet walnut zebra invoice laptop"
).split()
QUERIES = [
    "what happened at the budget review?",
    "zebra walnut invoice",
    "coffee machine piano",
    "which release train was postponed?",
    "harbor sunset river",
    "backup schedule laptop",
]


def texts(count: int, seed: int, weights: list[float]) -> list[str]:
    rng = random.Random(seed)
    return [f"Note {n}: " + " ".join(rng.choices(WORDS, weights, k=rng.randint(3, 12))) + "." for n in range(count)]


def write(services: Services, site: str, contents: list[str]) -> None:
    writes = services.loaded_memories().writes
    site_id = services.local_principal(site).site_id
    writes.remember_many(
        site_id,
        [
            writes.validate(content=text, provenance={"conversation_id": f"c{n % 7}", "seq": n // 7})
            for n, text in enumerate(contents)
        ],
    )


def answers(services: Services, source: CandidateSource, scope: Scope) -> list[list[tuple[str, float]]]:
    memories = services.loaded_memories()
    retrieval = Retrieval(services.storage.memories, source, memories.index, memories.embedder, memories.words)
    return [[(h["reference"], h["score"]) for h in retrieval.recall(scope, query, 10)] for query in QUERIES]


def large_scope_source(services: Services) -> CandidateSource:
    """The prefetch path, with its limits set so that a few hundred memories are a large scope."""
    memories = services.loaded_memories()
    return CandidateSource(
        services.storage.candidates,
        memories.index,
        model=memories.embedder.name,
        full_scan_limit=20,
        prefetch=10,
        lexical_postings=60,
    )


def test_another_sites_writes_never_move_a_sites_recall(services: Services) -> None:
    # Site A: rare words rare, common words common. Site B later writes the same words the other way round,
    # which would move every document frequency and average length the store as a whole has.
    write(services, "acme", texts(240, seed=1, weights=[1.0 / (1 + i) for i in range(len(WORDS))]))
    scope = read_scope(services.local_principal("acme"), Filters())
    before = answers(services, large_scope_source(services), scope)
    assert all(before)
    write(services, "other", texts(400, seed=2, weights=[1.0 / (len(WORDS) - i) for i in range(len(WORDS))]))
    after = answers(services, large_scope_source(services), scope)
    for asked, old, new in zip(QUERIES, before, after, strict=True):
        assert [ref for ref, _ in new] == [ref for ref, _ in old], asked
        assert [score for _, score in new] == pytest.approx([score for _, score in old], abs=1e-9), asked


OLD_MEMORIES = [("a", "red apple and an apple pie"), ("a", "café naïve snake_case"), ("b", "apple tree")] + [
    ("b", f"apple orchard row {n}") for n in range(4)
]


def test_a_store_made_before_gets_each_sites_statistics(
    tmp_path: Path, storage_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upgrading: the lexical rows already stored are counted per site, and ranked by their site's alone."""
    settings = make_settings(tmp_path / "data")
    inserts = [
        "INSERT INTO sites (name, secret_hash, created_at) VALUES ('a', 'h', ?), ('b', 'h', ?)",
        "INSERT INTO memories (reference, site_id, content, type, bucket, tags, metadata, provenance, occurred_at,"
        " created_at, updated_at, dedup_key, vector, vector_model) SELECT ?, id, ?, 'note', 'default', '[]', '{}',"
        " '{}', ?, ?, ?, ?, ?, 'model-a' FROM sites WHERE name = ?",
    ]
    if backend_of(settings) is SQLITE:
        from memory_server.storage.sqlite import schema

        settings.data_dir.mkdir(parents=True)
        with contextlib.closing(sqlite3.connect(settings.db_path, isolation_level=None)) as conn:
            with monkeypatch.context() as patched:
                patched.setattr(schema, "SCHEMA", _before(schema.SCHEMA))
                schema.migrate(conn)
            conn.execute(inserts[0], (WHEN, WHEN))
            for n, (owner, content) in enumerate(OLD_MEMORIES):
                conn.execute(inserts[1], _memory_values(n, owner, content))
                conn.execute("INSERT INTO memories_fts (rowid, terms) VALUES (?, ?)", (n + 1, analyzed_text(content)))
            conn.execute(FORGET)
            schema.migrate(conn)
    else:
        import psycopg

        from memory_server.storage.postgres import schema as pg_schema

        with psycopg.connect(settings.database_url.get_secret_value(), autocommit=True) as pg:
            pg_schema.migrate(pg, _before(pg_schema.SCHEMA))
            pg.execute(inserts[0].replace("?", "%s"), (WHEN, WHEN))
            for n, (owner, content) in enumerate(OLD_MEMORIES):
                row = pg.execute(inserts[1].replace("?", "%s") + " RETURNING id", _memory_values(n, owner, content))
                terms = analyzed_text(content)
                pg.execute(
                    "INSERT INTO memories_fts (id, terms, tokens) VALUES (%s, %s, %s)",
                    (row.fetchone()[0], terms, fts_tokens(terms)),  # type: ignore[index]
                )
            pg.execute(FORGET)
            pg_schema.migrate(pg)
    kept = OLD_MEMORIES[:-1]
    expected = {
        owner: (sum(1 for o, _ in kept if o == owner), sum(_size(c) for o, c in kept if o == owner)) for owner in "ab"
    }
    stored = query(settings, "SELECT s.name, l.rows, l.tokens FROM memory_lexicon l JOIN sites s ON s.id = l.site_id")
    assert {name: (rows, tokens) for name, rows, tokens in stored} == expected
    storage = open_storage(settings)
    try:
        a, b = (storage.sites.site_id(name) or 0 for name in ("a", "b"))
        assert storage.candidates.doc_freqs(a, ["appl", "cafe"]) == {"appl": 1, "cafe": 1}
        assert storage.candidates.doc_freqs(b, ["appl", "cafe"]) == {"appl": 4, "cafe": 0}
        assert storage.candidates.site_size(a) == 2 and storage.candidates.site_size(b) == 4
        assert len(storage.candidates.best_by_terms(Scope(a), ["appl"], 10)) == 1
        # The deletion made before is still queued for the index; the change feed starts again, per site.
        assert storage.outbox.deletions() == [len(OLD_MEMORIES)] and storage.outbox.change_mark() == 0
        remember(storage, a, "apple crumble")
        assert storage.candidates.site_size(a) == 3 and storage.candidates.doc_freqs(a, ["appl"]) == {"appl": 2}
        assert storage.outbox.change_mark(a) == 1 and storage.outbox.change_mark(b) == 0
    finally:
        storage.close()


FORGET = f"DELETE FROM memories WHERE reference = 'mem_{len(OLD_MEMORIES) - 1:04d}'"


def _before(steps: list[str]) -> list[str]:
    return steps[: steps.index(next(s for s in steps if "CREATE TABLE memory_lexicon" in s))]


def _memory_values(n: int, owner: str, content: str) -> tuple[Any, ...]:
    return (f"mem_{n:04d}", content, WHEN, WHEN, WHEN, f"key-{n}", vector(n).tobytes(), owner)


def _size(content: str) -> int:
    return len(fts_tokens(analyzed_text(content)))


def test_each_sites_statistics_follow_every_write(tmp_path: Path) -> None:
    """Saved, changed, forgotten, terms written again, a site deleted: each site's totals stay what its rows
    add up to, and no other site's move."""
    settings = make_settings(tmp_path / "data")
    storage = open_storage(settings)
    try:
        a, b = storage.sites.create_site("a", "h"), storage.sites.create_site("b", "h")
        done = [remember(storage, site_id, f"apple {n} " + "pear " * n) for n in range(6) for site_id in (a, b)]
        assert _totals(settings) == _recounted(settings)
        first = done[0]
        changed = memory("apple apple apple banana cherry date")
        storage.memories.update(
            a, first.reference, changed, based_on={}, document=document(changed.content), words=Words()
        )
        storage.memories.delete(Scope(b), done[3].reference)
        assert _totals(settings) == _recounted(settings)
        storage.memories.rewrite_terms(lambda content, _: analyzed_text(content + " extra words"), 99)
        assert _totals(settings) == _recounted(settings)
        before = _totals(settings)
        assert storage.sites.delete_site("b")
        assert _totals(settings) == _recounted(settings) == {a: before[a]}
    finally:
        storage.close()


def _totals(settings: Settings) -> dict[int, tuple[int, int]]:
    rows = query(settings, "SELECT site_id, rows, tokens FROM memory_lexicon WHERE rows > 0")
    return {int(site_id): (int(n), int(tokens)) for site_id, n, tokens in rows}


def _recounted(settings: Settings) -> dict[int, tuple[int, int]]:
    """Each site's lexical rows and tokens, counted from the rows."""
    key = "rowid" if backend_of(settings) is SQLITE else "id"
    counted: dict[int, tuple[int, int]] = {}
    for site_id, terms in query(
        settings, f"SELECT m.site_id, f.terms FROM memories m JOIN memories_fts f ON f.{key} = m.id"
    ):
        rows, tokens = counted.get(int(site_id), (0, 0))
        counted[int(site_id)] = (rows + 1, tokens + len(fts_tokens(str(terms))))
    return counted
