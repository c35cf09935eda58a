"""Recency where the query asks for it: "who leads Atlas now?", "our current deploy day", "the latest
decision on auth".

A query with one of the RECENT cue words asks for the state of things as it is now. The memories that
answer it are often several versions of one fact (the old value, then the new one), about equally relevant;
the newest should come first. So, for such a query only: among the best RECENCY_TOP candidates of the
ranking, the relevant ones are those whose dense similarity to the query is within RECENCY_DENSE_MARGIN of
the best of them and whose fused score is within RECENCY_FUSED_MARGIN of the top; they are placed first,
newest first. Every other query (a plain topical one) is ranked exactly as before.

Measured on bench/evolving.py (current-value questions, top-1; see the README): without supersede links
0.27 -> 0.51, with them (half of the updates) 0.50 -> 0.62. Tried and dropped there: a recency term added
to every candidate's fused score (z-scored time, at most 0.45), the same window on fused scores alone
(0.49), grouping candidates by their similarity to the top hit (0.51 at best, and worse on past questions),
treating a window's end (occurred_before) as a request for recency (past questions 0.57 -> 0.50-0.58),
and removing the cue words from the query (0.24).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from server.ranking.candidate_set import Candidate, stacked_vectors
from server.ranking.fusion import parse_rfc3339

RECENCY_TOP = 10
RECENCY_DENSE_MARGIN = 0.10  # cosine
RECENCY_FUSED_MARGIN = 2.0  # z units of the fused score
RECENCY_STEP = 0.5  # the newest relevant memory ends this far above the top (z units), the others between

# Words asking for the present state (English, and the Portuguese and Spanish of the product's documents).
RECENT = re.compile(
    r"\b(now|nowadays|right now|current|currently|latest|most recent|recent|recently|these days|at the moment|"
    r"at present|presently|today|up to date|newest|anymore|any more|still|"
    r"agora|atual|atualmente|hoje|ahora|actual|actualmente|hoy|reciente|recientemente|recente|recentemente|"
    r"último|última|ultimo|ultima)\b",
    re.IGNORECASE,
)


def asks_for_recent(query: str) -> bool:
    return RECENT.search(query) is not None


def _seconds(candidate: Candidate) -> float:
    moment = parse_rfc3339(candidate.occurred_at) if candidate.occurred_at else None
    return moment.timestamp() if moment is not None else float("-inf")


def newest_first(fused: np.ndarray, query_vector: np.ndarray, candidates: Sequence[Candidate]) -> np.ndarray:
    """The fused scores with the relevant memories among the best RECENCY_TOP raised above the top, newest
    first (see the module docstring)."""
    if len(candidates) < 2:
        return fused
    top = np.argsort(-fused, kind="stable")[:RECENCY_TOP]
    dense = stacked_vectors([candidates[i].vector for i in top]) @ np.asarray(query_vector, dtype=np.float32)
    best = float(fused[top[0]])
    relevant = [int(i) for i, d in zip(top, dense, strict=True)
                if d >= float(dense.max()) - RECENCY_DENSE_MARGIN and fused[i] >= best - RECENCY_FUSED_MARGIN]
    if len(relevant) < 2:
        return fused
    out = np.asarray(fused, dtype=np.float64).copy()
    ordered = sorted(relevant, key=lambda i: (-_seconds(candidates[i]), -fused[i]))
    for place, i in enumerate(ordered):
        out[i] = best + RECENCY_STEP * (len(ordered) - place) / len(ordered)
    return out
