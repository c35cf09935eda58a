"""The integer-array BM25 scorer recall runs gives exactly the scores of the string scorers."""

from __future__ import annotations

import random

import numpy as np
import pytest

from server.ranking.lexical import bigram_bm25_scores, bm25_scores
from server.ranking.term_arrays import TERM_IDS, CandidateDocuments

VOCABULARY = [f"w{i}" for i in range(40)]


def random_docs(rng: random.Random, n: int) -> list[list[str]]:
    # Short documents over a small vocabulary: repeated terms and repeated pairs are common.
    return [[rng.choice(VOCABULARY) for _ in range(rng.randint(0, 12))] for _ in range(n)]


def context_of(rng: random.Random, n: int) -> list[tuple[np.ndarray, float]]:
    return [(np.array([rng.randrange(-1, n) for _ in range(n)], dtype=np.intp), w) for w in (0.5, 0.25)]


@pytest.mark.parametrize("seed", range(25))
def test_the_array_scores_equal_the_string_scores(seed: int) -> None:
    rng = random.Random(seed)
    docs = random_docs(rng, rng.randint(1, 60))
    query = [rng.choice(VOCABULARY + ["never-seen"]) for _ in range(rng.randint(1, 6))]
    extra = {rng.choice(VOCABULARY): rng.random() for _ in range(rng.randint(0, 3))}
    context = context_of(rng, len(docs))
    arrays = CandidateDocuments.of([TERM_IDS.of(d) for d in docs])
    for delta in (0.0, 0.5):
        expected = bm25_scores(query, docs, k1=0.6, b=0.5, delta=delta, context=context, extra_terms=extra)
        got = arrays.bm25(query, k1=0.6, b=0.5, delta=delta, context=context, extra_terms=extra)
        assert np.array_equal(got, expected)
        expected = bigram_bm25_scores(query, docs, k1=0.6, b=0.5, delta=delta, context=context)
        assert np.array_equal(arrays.bigram_bm25(query, k1=0.6, b=0.5, delta=delta, context=context), expected)
    assert np.array_equal(arrays.term_counts, [len(d) for d in docs])


def test_term_ids_are_stable_and_unknown_query_terms_match_nothing() -> None:
    first = TERM_IDS.of(["alpha", "beta", "alpha"])
    assert first[0] == first[2] != first[1]
    assert list(TERM_IDS.of(["beta"])) == [first[1]]
    assert TERM_IDS.get("a term no document ever had") is None
    docs = CandidateDocuments.of([TERM_IDS.of(["alpha"]), TERM_IDS.of([])])
    assert np.array_equal(docs.bm25(["a term no document ever had"]), np.zeros(2))
    assert docs.bm25(["alpha"])[0] > 0 == docs.bm25(["alpha"])[1]
