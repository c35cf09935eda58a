"""Semantic query-term expansion: the pure pieces on hand-written vectors, and the word-vector store with
the real model, real SQLite and a real memory service."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import pytest

from memory_server.auth import admin as auth
from memory_server.ranking.candidate_set import Candidate
from memory_server.ranking.expansion import expansion_terms, unused_classes, vocabulary_words
from memory_server.ranking.fusion import document_text, rank
from memory_server.ranking.lexical import analyze, bm25_scores
from memory_server.retrieval.vocabulary import WordVectors
from memory_server.services import open_services
from memory_server.storage.records import Words
from memory_server.storage.scope import Scope


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


# --- vocabulary_words ----------------------------------------------------------------------------------


def test_vocabulary_words_are_lowercase_content_words_once() -> None:
    assert vocabulary_words("The Dog and the dog's PUPPY ran 3 km in 2023, ok?") == ["dog", "puppy", "ran"]
    assert vocabulary_words("") == []
    assert vocabulary_words("Ärger über Öl") == ["ärger", "über"]  # letters of any script; short words out


# --- expansion_terms -------------------------------------------------------------------------------------

VECTORS = {
    "career": unit(1, 0, 0, 0),
    "job": unit(0.8, 0.6, 0, 0),  # cos 0.8 with career
    "profession": unit(0.7, 0, 0.714, 0),  # cos 0.7
    "careers": unit(0.95, 0, 0, 0.31),  # same stem as career
    "banana": unit(0, 0, 0, 1),  # unrelated
    "work": unit(0.62, 0, 0, 0.785),  # cos 0.62: above the threshold, fourth nearest
    "pets": unit(0, 1, 0, 0),
    "dog": unit(0, 0.55, 0.835, 0),  # cos 0.55 with pets: an instance, not a synonym
}


def pool_of(words: list[str]) -> tuple[list[str], np.ndarray]:
    from memory_server.ranking.lexical import stem

    return [stem(w) for w in words], np.stack([VECTORS[w] for w in words]) if words else np.empty((0, 4))


def test_expansion_adds_the_nearest_pool_words_with_weighted_cosine() -> None:
    pool = pool_of(["job", "profession", "banana", "careers", "work"])
    added = expansion_terms(
        "what career?", analyze("what career?"), VECTORS, *pool, min_similarity=0.6, neighbours=3, weight=0.5
    )
    # nearest three: careers (same stem: skipped, but it takes a place), job, profession; work is fourth
    assert added == pytest.approx({"job": 0.4, "profess": 0.35}, abs=1e-3)  # stems


def test_expansion_respects_threshold_query_terms_and_pool() -> None:
    terms = analyze("career job")
    added = expansion_terms(
        "career job",
        terms,
        VECTORS,
        *pool_of(["job", "profession", "banana"]),
        min_similarity=0.75,
        neighbours=3,
        weight=0.5,
    )
    assert added == {}  # job is a query term already; profession (0.7) is under 0.75; banana far
    assert expansion_terms("career", analyze("career"), VECTORS, *pool_of([]), weight=0.5) == {}
    # a query word without a vector never expands
    assert expansion_terms("sailing", analyze("sailing"), VECTORS, *pool_of(["job"])) == {}


def test_a_class_the_question_asks_instances_of_reaches_them_when_no_candidate_names_it() -> None:
    pool = pool_of(["dog", "banana"])
    for query in ("Does Ana have any pets?", "Which pets does Ana have?", "What pets has she got?"):
        assert unused_classes(query, pool[0]) == {"pets"}, query
        assert expansion_terms(query, analyze(query), VECTORS, *pool) == pytest.approx({"dog": 0.275}, abs=1e-3)
    # Where a candidate names the class itself, the lexical side finds it by name: the usual threshold.
    named = pool_of(["dog", "pets"])
    assert unused_classes("Does Ana have any pets?", named[0]) == set()
    assert expansion_terms("Does Ana have any pets?", analyze("Does Ana have any pets?"), VECTORS, *named) == {}
    # Not a question about instances, or a word that names no class: the usual threshold.
    assert expansion_terms("pets allowed", analyze("pets allowed"), VECTORS, *pool) == {}
    assert unused_classes("What kinds of pets does Ana like?", pool[0]) == set()


# --- lexical and ranking with expansion -----------------------------------------------------------------


def test_bm25_counts_an_added_term_at_its_weight() -> None:
    docs = [analyze("she found a new job"), analyze("went to the beach"), analyze("job job job")]
    plain = bm25_scores(analyze("career"), docs)
    assert not plain.any()
    half = bm25_scores(analyze("career"), docs, extra_terms={"job": 0.5})
    full = bm25_scores(analyze("job"), docs)
    assert half == pytest.approx(0.5 * full)
    assert half[0] > 0 and half[1] == 0


def cand(i: int, content: str, vector: np.ndarray) -> Candidate:
    return Candidate(id=i, text=document_text(content, None), vector=vector)


def test_rank_lifts_a_memory_that_only_shares_a_near_synonym() -> None:
    # Every memory is orthogonal to the query: the dense side scores them all exactly 0, lexical decides.
    q, same = unit(1, 0, 0, 0), unit(0, 1, 1, 1)
    # As long as the job memory (four terms), and before it: on a tie it comes last.
    fillers = [
        cand(10 + k, f"{word} notes sunday evening", same)
        for k, word in enumerate(["garden", "kitchen", "holiday", "weather", "football", "music"])
    ]
    cands = [*fillers, cand(1, "the new job starts monday", same)]
    without = [c.id for c, _ in rank("career plans", q, cands, limit=7)]
    with_expansion = [c.id for c, _ in rank("career plans", q, cands, limit=7, expansion={"job": 0.4})]
    assert with_expansion[0] == 1
    assert without.index(1) > 0  # without it, nothing sets the job memory apart


# --- the word-vector store, real model and SQLite ------------------------------------------------------


def test_real_model_puts_near_synonyms_above_the_threshold(minilm_embedder: Any) -> None:
    embedder = minilm_embedder  # its words carry meaning alone; the multilingual model's need a sentence
    words = WordVectors(embedder)
    pool_words = ["job", "banana", "children"]
    words.add(7, Words(tuple(pool_words), words.embed(pool_words)))
    candidates = [Candidate(id=i, text=w, vector=np.zeros(4)) for i, w in enumerate(pool_words)]
    pool = words.pool(7, candidates)
    for query, expected in (("career advice", {"job"}), ("her kids", {"children"})):
        added = expansion_terms(query, analyze(query), words.for_query(7, query), *pool, scale=embedder.similarity.word)
        assert set(added) == expected, query


def test_the_default_model_reaches_a_plain_synonym(embedder: Any) -> None:
    words = WordVectors(embedder)
    pool_words = ["job", "banana", "children"]
    words.add(7, Words(tuple(pool_words), words.embed(pool_words)))
    pool = words.pool(7, [Candidate(id=i, text=w, vector=np.zeros(4)) for i, w in enumerate(pool_words)])
    added = expansion_terms(
        "her kids", analyze("her kids"), words.for_query(7, "her kids"), *pool, scale=embedder.similarity.word
    )
    assert set(added) == {"children"}


def test_real_model_reaches_instances_of_a_class_the_question_asks_about(minilm_embedder: Any) -> None:
    embedder = minilm_embedder
    words = WordVectors(embedder)
    pool_words = ["swim", "banana", "invoice"]  # swim: cosine 0.53 with "sports", under the usual threshold
    words.add(7, Words(tuple(pool_words), words.embed(pool_words)))
    pool = words.pool(7, [Candidate(id=i, text=w, vector=np.zeros(4)) for i, w in enumerate(pool_words)])
    query = "What sports does Ana do?"
    scale = embedder.similarity.word
    assert set(expansion_terms(query, analyze(query), words.for_query(7, query), *pool, scale=scale)) == {"swim"}
    plain = "Ana watches sports"  # no question for instances: near-synonyms only
    assert expansion_terms(plain, analyze(plain), words.for_query(7, plain), *pool, scale=scale) == {}


def stored_words(settings: Any, site_id: int | None = None) -> set[str]:
    with sqlite3.connect(settings.db_path) as db:
        if site_id is None:
            return {w for (w,) in db.execute("SELECT word FROM memory_words")}
        return {w for (w,) in db.execute("SELECT word FROM memory_words WHERE site_id = ?", (site_id,))}


def damage(settings: Any, sql: str) -> None:
    """Change the stored words behind the running services' back, as a lost table or another model would."""
    with sqlite3.connect(settings.db_path) as db:
        db.execute(sql)


def test_words_are_saved_with_memories_reloaded_and_backfilled(settings: Any, embedder: Any) -> None:
    services = open_services(settings)
    try:
        memories = services.load_memories(embedder=embedder)
        site_id, _ = auth.ensure_site(services.storage.sites, "words")
        writes, store = memories.writes, services.storage.words
        writes.remember_many(site_id, [writes.validate(content="Our puppy chewed the sofa cushions")])
        stored = stored_words(settings, site_id)
        assert {"puppy", "chewed", "sofa", "cushions"} <= stored
        assert "the" not in stored
        with sqlite3.connect(settings.db_path) as db:
            vector = db.execute(
                "SELECT vector FROM memory_words WHERE site_id = ? AND word = 'puppy'", (site_id,)
            ).fetchone()[0]
        assert np.allclose(np.frombuffer(vector, np.float32), embedder.embed_documents(["puppy"])[0], atol=1e-5)

        # recall's candidates offer their words to the query's expansion
        writes.remember_many(site_id, [writes.validate(content="She picked the children up from school")])
        scope = Scope(site_id=site_id)
        candidates = memories.source.candidates(scope, "her kids", embedder.embed_query("her kids"))
        assert "children" in memories.retrieval.expansion(site_id, "her kids", candidates)

        # a fresh process reads them back; a lost table is rebuilt from the memories
        stored = stored_words(settings, site_id)
        reloaded = WordVectors(embedder)
        assert reloaded.load(store) == len(stored)
        assert "puppy" in reloaded.for_query(site_id, "puppy")
        assert reloaded.vocabulary(site_id) == stored
        damage(settings, "DELETE FROM memory_words")
        fresh = WordVectors(embedder)
        assert fresh.backfill(store) == len(stored)
        assert stored_words(settings) == stored

        # the next start reads only memories saved since; another model's backfill starts over
        with sqlite3.connect(settings.db_path) as db:
            top = db.execute("SELECT max(id) FROM memories").fetchone()[0]
            mark = tuple(db.execute("SELECT model, through_id FROM memory_words_backfill").fetchone())
        assert mark == (embedder.name, top)
        damage(settings, "DELETE FROM memory_words")
        assert WordVectors(embedder).backfill(store) == 0
        damage(settings, "UPDATE memory_words_backfill SET model = 'another-model'")
        assert WordVectors(embedder).backfill(store) == len(stored)

        # deleting the site deletes its words
        auth.delete_site(services.storage.sites, "words")
        assert stored_words(settings) == set()
    finally:
        services.close()


def test_query_words_missing_from_the_site_are_embedded_and_cached(embedder: Any) -> None:
    words = WordVectors(embedder, query_cache_size=2)
    found = words.for_query(1, "zebra migration")
    assert set(found) == {"zebra", "migration"}
    again = words.for_query(1, "zebra migration")
    assert found["zebra"] is again["zebra"]  # from the cache, not embedded again
    words.for_query(1, "kettle lamp")
    assert set(words._query_words) == {"kettle", "lamp"}  # bounded: the oldest went


async def test_patched_content_brings_its_new_words(live: Any) -> None:
    from tests.test_rest import client, remember

    async with client(live) as http:
        ref = await remember(http, content="Weekly planning notes.")
        response = await http.patch(f"/v1/memories/{ref}", json={"content": "The greenhouse tomatoes need water."})
        assert response.status_code == 200, response.text
    conn = sqlite3.connect(live.settings.db_path)
    try:
        words = {w for (w,) in conn.execute("SELECT word FROM memory_words")}
    finally:
        conn.close()
    assert {"weekly", "planning", "notes", "greenhouse", "tomatoes", "water"} <= words
