"""Baseline rankings for comparison (MEMORY_RECALL_RANKING=dense|lexical): one side of the fusion alone."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memory_server.ranking.candidate_set import Candidate, stacked_vectors
from memory_server.ranking.lexical import BM25Corpus, analyze, analyze_query, words_only


def rank_single(
    side: str, query: str, vector: np.ndarray, candidates: Sequence[Candidate], *, limit: int
) -> list[tuple[Candidate, float]]:
    """Dense cosine alone, or BM25 alone."""
    if not candidates:
        return []
    if side == "dense":
        scores = stacked_vectors([c.vector for c in candidates]) @ vector
    else:
        # BM25 of the words alone: the date terms a memory's document also holds are the production ranking's
        corpus = BM25Corpus([words_only(c.terms) if c.terms is not None else analyze(c.text) for c in candidates])
        scores = corpus.score(analyze_query(query))
    order = np.argsort(-scores, kind="stable")[:limit]
    return [(candidates[i], float(scores[i])) for i in order]
