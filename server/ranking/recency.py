"""Recency where the query asks for it: "who leads Atlas now?", "our current deploy day", "the latest
decision on auth".

A query with one of the RECENT cue words asks for the state of things as it is now. The memories that
answer it are often several versions of one fact (the old value, then the new one), about equally relevant;
the newest should come first. So, for such a query only: among the best RECENCY_TOP candidates of the
ranking, the relevant ones are those whose dense similarity to the query is within RECENCY_DENSE_MARGIN of
the best of them and whose fused score is within RECENCY_FUSED_MARGIN of the top; they are placed first,
newest first. Every other query (a plain topical one) is ranked exactly as before.

Measured on bench/evolving.py (current-value questions, top-1; see docs/benchmarks.md): without supersede links
0.27 -> 0.51, with them (half of the updates) 0.50 -> 0.62. Tried and dropped there: a recency term added
to every candidate's fused score (z-scored time, at most 0.45), the same window on fused scores alone
(0.49), grouping candidates by their similarity to the top hit (0.51 at best, and worse on past questions),
treating a window's end (occurred_before) as a request for recency (past questions 0.57 -> 0.50-0.58),
and removing the cue words from the query (0.24); the cue words weighing nothing on the lexical side
(current top-1 with recency 0.517 -> 0.509, with links 0.613 -> 0.609; LoCoMo 0.767 / 0.837 -> 0.768 / 0.838).

The same order answers a question about a past period the caller gave no time window for: "Who was Maria's
manager in March 2024?", "Which team was Ivo on in Q3 2024?". What was the case then is the newest relevant
memory written by the period's end; one written later tells what came after. So when a query names a month, a
quarter, a season or a year (server/ranking/dates.py, as_of_end), asks nothing about the present, and the
request has no occurred_after / occurred_before, the relevant memories written by the end of that period are
placed first, newest first (as_of_first); only a period named with its year: one relative to today ("last
year", "in June") says little about memories that may be from any time; and not a period that bounds a range
("since March 2024", "before 2024"). Not when one of the best RECENCY_TOP names a date inside the period:
then the question is about what happened then ("What did Kenji do in October '22?") and the date boost has
placed that memory. With a window the window does the work: the order inside it measured lower.
Measured in-process (bench/offline.py, 2026-12-03), top-1 on bench/evolving.py without windows: "as of" 0.313
-> 0.520 (lexical alone 0.354, dense 0.268), "changed in" 0.440 -> 0.680, with `supersedes` links 0.202 ->
0.293 and 0.200 -> 0.320; with windows unchanged (0.571 and 0.920; inside the window it gave 0.540 and 0.820).
LoCoMo dev unchanged in every category (it reorders 3 of 760 questions; 35 name a period with its year),
profiles too (relative_date R@1 lost a question, 0.788 -> 0.758, until "last summer" said in December came to
mean the summer just over: server/ranking/periods.py). Without the test for a memory naming the period,
profiles event_by_date R@1 / R@5 fell 0.626 / 0.868 -> 0.549 / 0.780: the older facts about the person were
raised above the event.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from embeddings.similarity import IDENTITY, Scale
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


def newest_first(fused: np.ndarray, query_vector: np.ndarray, candidates: Sequence[Candidate],
                 scale: Scale = IDENTITY) -> np.ndarray:
    """The fused scores with the relevant memories among the best RECENCY_TOP raised above the top, newest
    first (see the module docstring). `scale`: the model's cosines on the reference scale."""
    relevant = _relevant(fused, query_vector, candidates, scale)
    if len(relevant) < 2:
        return fused
    return _raised(fused, sorted(relevant, key=lambda i: (-_seconds(candidates[i]), -fused[i])))


def as_of_first(fused: np.ndarray, query_vector: np.ndarray, candidates: Sequence[Candidate], until: float,
                naming: np.ndarray, scale: Scale = IDENTITY) -> np.ndarray:
    """The fused scores with the relevant memories among the best RECENCY_TOP written by `until` (seconds
    since the epoch) raised above the top, newest first: what was the case then. Unchanged when one of the
    best names the period asked about (`naming`, by candidate position: it tells what happened then, and the
    date boost has placed it), when no relevant memory was written by then, or when every one was and there
    are fewer than two."""
    top = _best(fused)
    if naming[top].any():
        return fused
    relevant = _relevant(fused, query_vector, candidates, scale, top)
    seconds = {i: _seconds(candidates[i]) for i in relevant}
    written = [i for i in relevant if seconds[i] <= until]
    if not written or (len(written) == len(relevant) and len(written) < 2):
        return fused
    return _raised(fused, sorted(written, key=lambda i: (-seconds[i], -fused[i])))


def _best(fused: np.ndarray) -> np.ndarray:
    """The positions of the best RECENCY_TOP fused scores, best first."""
    return np.argsort(-fused, kind="stable")[:RECENCY_TOP]


def _relevant(fused: np.ndarray, query_vector: np.ndarray, candidates: Sequence[Candidate], scale: Scale,
              top: np.ndarray | None = None) -> list[int]:
    """The positions among the best RECENCY_TOP (`top`, if worked out already) whose dense similarity to the
    query is within RECENCY_DENSE_MARGIN of the best of them and whose fused score is within
    RECENCY_FUSED_MARGIN of the top."""
    if len(candidates) < 2:
        return []
    top = _best(fused) if top is None else top
    dense = scale.of(stacked_vectors([candidates[i].vector for i in top]) @ np.asarray(query_vector, dtype=np.float32))
    best = float(fused[top[0]])
    return [int(i) for i, d in zip(top, dense, strict=True)
            if d >= float(dense.max()) - RECENCY_DENSE_MARGIN and fused[i] >= best - RECENCY_FUSED_MARGIN]


def _raised(fused: np.ndarray, ordered: Sequence[int]) -> np.ndarray:
    """`fused` with the `ordered` positions placed above the best score, in that order, RECENCY_STEP apart at
    most."""
    out = np.asarray(fused, dtype=np.float64).copy()
    best = float(fused.max())
    for place, i in enumerate(ordered):
        out[i] = best + RECENCY_STEP * (len(ordered) - place) / len(ordered)
    return out
