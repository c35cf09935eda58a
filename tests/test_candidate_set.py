"""The candidate set's cosines and the held sets' fingerprints."""

from __future__ import annotations

import numpy as np

from memory_server.ranking.candidate_set import COSINE_CHUNK, Candidate, CandidateSet, compact
from memory_server.retrieval.candidates import fingerprint


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_cosines_of_compact_vectors_match_float32_across_chunks() -> None:
    rng = np.random.default_rng(3)
    vectors, query = unit(rng, 2 * COSINE_CHUNK + 17), unit(rng, 1)[0]
    exact = vectors @ query
    stacked = compact(vectors)
    rows = [Candidate(i, f"text {i}", stacked[i]) for i in range(len(vectors))]
    from_rows = CandidateSet(rows).cosines(query)
    from_matrix = CandidateSet.of_rows([tuple(r) for r in rows], stacked).cosines(query)  # type: ignore[misc]
    assert from_rows.shape == (len(vectors),) and np.array_equal(from_rows, from_matrix)
    assert np.abs(from_rows - exact).max() < 3e-4
    mixed = CandidateSet([Candidate(0, "a", vectors[0]), Candidate(1, "b", stacked[1])]).cosines(query)
    assert np.abs(mixed - exact[:2]).max() < 3e-4
    assert CandidateSet(()).cosines(query).shape == (0,)


def test_a_fingerprint_tells_a_changed_version_or_membership() -> None:
    visible = [(1, "2024-01-01T00:00:00Z"), (2, "2024-01-02T00:00:00Z")]
    assert fingerprint(list(visible)) == fingerprint(visible)
    assert fingerprint([(1, "2024-01-01T00:00:00Z"), (2, "2024-01-03T00:00:00Z")]) != fingerprint(visible)
    assert fingerprint(visible[:1]) != fingerprint(visible)
    assert fingerprint([(3, "2024-01-01T00:00:00Z"), (2, "2024-01-02T00:00:00Z")]) != fingerprint(visible)
