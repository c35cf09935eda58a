"""The integer-array BM25 scorer recall runs gives exactly the scores of the string scorers."""

from __future__ import annotations

import random

import numpy as np
import pytest

from memory_server.ranking.lexical import bigram_bm25_scores, bm25_scores
from memory_server.ranking.term_arrays import DATE_IDS, TERM_IDS, CandidateDocuments

VOCABULARY = [f"w{i}" for i in range(40)]
DATE_TERMS = ["day20240508", "day20240509", "week2024w19"]


def random_docs(rng: random.Random, n: int) -> list[list[str]]:
    # Short documents over a small vocabulary: repeated terms and repeated pairs are common; some end with date
    # terms, as stored documents do.
    return [
        [rng.choice(VOCABULARY) for _ in range(rng.randint(0, 12))] + rng.sample(DATE_TERMS, rng.choice((0, 0, 1, 2)))
        for _ in range(n)
    ]


def context_of(rng: random.Random, n: int) -> list[tuple[np.ndarray, float]]:
    return [(np.array([rng.randrange(-1, n) for _ in range(n)], dtype=np.intp), w) for w in (0.5, 0.25)]


@pytest.mark.parametrize("seed", range(25))
def test_the_array_scores_equal_the_string_scores(seed: int) -> None:
    rng = random.Random(seed)
    docs = random_docs(rng, rng.randint(1, 60))
    query = [rng.choice(VOCABULARY + ["never-seen"]) for _ in range(rng.randint(1, 6))]
    extra = {rng.choice(VOCABULARY + DATE_TERMS): rng.random() for _ in range(rng.randint(0, 3))}
    context = context_of(rng, len(docs))
    arrays = CandidateDocuments.of([TERM_IDS.of(d) for d in docs])
    for delta in (0.0, 0.5):
        expected = bm25_scores(query, docs, k1=0.6, b=0.5, delta=delta, context=context, extra_terms=extra)
        got = arrays.bm25(query, k1=0.6, b=0.5, delta=delta, context=context, extra_terms=extra)
        assert np.array_equal(got, expected)
        expected = bigram_bm25_scores(query, docs, k1=0.6, b=0.5, delta=delta, context=context)
        assert np.array_equal(arrays.bigram_bm25(query, k1=0.6, b=0.5, delta=delta, context=context), expected)
    assert np.array_equal(arrays.term_counts, [len([t for t in d if t not in DATE_TERMS]) for d in docs])


def test_term_ids_are_stable_and_unknown_query_terms_match_nothing() -> None:
    first = TERM_IDS.of(["alpha", "beta", "alpha"])
    assert first[0] == first[2] != first[1]
    assert list(TERM_IDS.of(["beta"])) == [first[1]]
    assert TERM_IDS.get("a term no document ever had") is None
    docs = CandidateDocuments.of([TERM_IDS.of(["alpha"]), TERM_IDS.of([])])
    assert np.array_equal(docs.bm25(["a term no document ever had"]), np.zeros(2))
    assert docs.bm25(["alpha"])[0] > 0 == docs.bm25(["alpha"])[1]


def test_date_terms_match_but_count_in_no_length_and_no_pair() -> None:
    words = [["w1", "w2"], ["w1", "w2"], ["w3"]]
    dated = [["w1", "w2", "day20240508", "week2024w19"], ["w1", "w2"], ["w3"]]
    plain = CandidateDocuments.of([TERM_IDS.of(d) for d in words])
    docs = CandidateDocuments.of([TERM_IDS.of(d) for d in dated])
    assert list(docs.term_counts) == [2, 2, 1]
    assert np.array_equal(docs.bm25(["w1", "w3"]), plain.bm25(["w1", "w3"]))  # lengths as without them
    assert np.array_equal(docs.bigram_bm25(["w2", "day20240508"]), np.zeros(3))  # never paired with a word
    assert np.array_equal(docs.bigram_bm25(["w1", "w2"]), plain.bigram_bm25(["w1", "w2"]))
    found = docs.bm25([], extra_terms={"day20240508": 1.0})
    assert found[0] > 0 and found[1] == found[2] == 0
    assert TERM_IDS.get("day20240508") >= DATE_IDS > TERM_IDS.get("w1")  # type: ignore[operator]
