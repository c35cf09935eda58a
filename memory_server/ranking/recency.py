"""Recency where the query asks for it: "who leads Atlas now?", "the latest decision on auth".

A query with a RECENT cue word asks for the state of things now; the memories answering it are often several
versions of one fact, about equally relevant. So among the best RECENCY_TOP, the relevant ones (dense within
RECENCY_DENSE_MARGIN of the best of them, fused within RECENCY_FUSED_MARGIN of the top) are placed first,
newest first (`newest_first`). A question about a past period named with its year and no time window ("Who was
Maria's manager in March 2024?") is answered by the newest relevant memory written by the period's end
(`as_of_first`, the period from dates.as_of_end). Every other query is ranked as before.
Measurements: docs/ranking.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from memory_server.embeddings.similarity import IDENTITY, Scale
from memory_server.ranking.candidate_set import Candidate, stacked_vectors
from memory_server.ranking.facts import DAY, names, same_fact
from memory_server.ranking.languages import folded
from memory_server.ranking.lexical import analyze, analyze_query
from memory_server.ranking.time_words import alternation, words
from memory_server.timestamps import parse_rfc3339

RECENCY_TOP = 10
RECENCY_DENSE_MARGIN = 0.10  # cosine
RECENCY_FUSED_MARGIN = 2.0  # z units of the fused score
RECENCY_STEP = 0.5  # the newest relevant memory ends this far above the top (z units), the others between
# A memory of the best hit's fact (`of_best_fact`): dense within FACT_DENSE_MARGIN of the best hit's, and holding
# the query's words the best hit holds, unless it is fused within FACT_FUSED_MARGIN of it and as close to it as
# FACT_CLOSE (reference scale).
FACT_DENSE_MARGIN = 0.10  # cosine, on the reference scale
FACT_FUSED_MARGIN = 1.0  # z units
FACT_CLOSE = 0.76
# ... or as close to it as FACT_VERY_CLOSE and dense within FACT_VERY_CLOSE_DENSE of it: a newer value is often
# worded without the query's words ("Hugo now reports to Ingrid" for "Who is Hugo's manager?").
FACT_VERY_CLOSE = 0.84
FACT_VERY_CLOSE_DENSE = 0.04  # cosine, on the reference scale

# Words asking for the present state, in every language of memory_server/ranking/time_words.py.
RECENT = re.compile(r"\b" + alternation(words("recent")) + r"\b")


def asks_for_recent(query: str) -> bool:
    return RECENT.search(folded(query)) is not None


def seconds_of(candidate: Candidate) -> float:
    """When the candidate occurred, in seconds since the epoch (-inf: unknown)."""
    moment = parse_rfc3339(candidate.occurred_at) if candidate.occurred_at else None
    return moment.timestamp() if moment is not None else float("-inf")


def newest_first(
    fused: np.ndarray, query_vector: np.ndarray, candidates: Sequence[Candidate], scale: Scale = IDENTITY
) -> np.ndarray:
    """The fused scores with the relevant memories among the best RECENCY_TOP raised above the top, newest
    first (see the module docstring). `scale`: the model's cosines on the reference scale."""
    relevant = _relevant(fused, query_vector, candidates, scale)
    if len(relevant) < 2:
        return fused
    return _raised(fused, sorted(relevant, key=lambda i: (-seconds_of(candidates[i]), -fused[i])))


def newest_of_fact_first(
    fused: np.ndarray, query: str, query_vector: np.ndarray, candidates: Sequence[Candidate], scale: Scale = IDENTITY
) -> np.ndarray:
    """The fused scores with the memories stating the best one's fact (`of_best_fact`) raised above the top,
    newest first, whether or not the query asks for the present: an older value of a fact, or the same thing
    said before, ranks below its newest statement."""
    group = of_best_fact(fused, query, query_vector, candidates, scale)
    days = {i: seconds_of(candidates[i]) // DAY for i in group}
    if len(set(days.values())) < 2:  # written the same day (an import, one conversation): not versions
        return fused
    return _raised(fused, sorted(group, key=lambda i: (-days[i], -fused[i])))


def of_best_fact(
    fused: np.ndarray,
    query: str,
    query_vector: np.ndarray,
    candidates: Sequence[Candidate],
    scale: Scale = IDENTITY,
    top: np.ndarray | None = None,
) -> list[int]:
    """The positions of the relevant memories (`_relevant`) that state the best one's fact, the best first: by
    facts.same_fact with the query's names, dense within FACT_DENSE_MARGIN of the best, and holding the query's
    other words the best holds, unless fused within FACT_FUSED_MARGIN of it and as close to it as FACT_CLOSE,
    or as close as FACT_VERY_CLOSE and dense within FACT_VERY_CLOSE_DENSE of it (another attribute of the same
    subject is close too, and often newer: the words keep it out)."""
    top = _best(fused) if top is None else top
    relevant = _relevant(fused, query_vector, candidates, scale, top)
    first = int(top[0])
    looked = [first, *(i for i in relevant if i != first)]
    vectors = stacked_vectors([candidates[i].vector for i in looked])
    similar = scale.of(vectors @ vectors[0])
    dense = scale.of(vectors @ np.asarray(query_vector, dtype=np.float32))
    query_names = names(query).all
    held = names(candidates[first].text)
    wanted = (set(analyze_query(query)) - set(analyze_query(" ".join(query_names)))) & _terms(candidates[first])
    group = [first]
    for place, i in enumerate(looked[1:], start=1):
        close = dense[place] >= dense[0] - FACT_DENSE_MARGIN
        near = fused[i] >= fused[first] - FACT_FUSED_MARGIN and similar[place] >= FACT_CLOSE
        very_close = similar[place] >= FACT_VERY_CLOSE and dense[place] >= dense[0] - FACT_VERY_CLOSE_DENSE
        asked = bool(wanted) and wanted <= _terms(candidates[i]) or near or very_close
        if (
            close
            and asked
            and same_fact(float(similar[place]), held, names(candidates[i].text), query_names & held.all)
        ):
            group.append(i)
    return group


def _terms(candidate: Candidate) -> set[str]:
    return set(candidate.terms if candidate.terms is not None else analyze(candidate.text))


def as_of_first(
    fused: np.ndarray,
    query_vector: np.ndarray,
    candidates: Sequence[Candidate],
    until: float,
    naming: np.ndarray,
    scale: Scale = IDENTITY,
    query: str | None = None,
) -> np.ndarray:
    """The fused scores with the relevant memories among the best RECENCY_TOP written by `until` (seconds
    since the epoch) raised above the top, newest first: what was the case then. With `query`, only those
    stating the best one's fact (`of_best_fact`) if one of them was written by then. Unchanged when one of
    the best names the period asked about (`naming`, by candidate position: it tells what happened then, and
    the date boost has placed it), when no relevant memory was written by then, or when every one was and
    there are fewer than two."""
    top = _best(fused)
    if naming[top].any():
        return fused
    relevant = _relevant(fused, query_vector, candidates, scale, top)
    if query is not None:  # the best one's fact, when one of its memories was written by then
        fact = of_best_fact(fused, query, query_vector, candidates, scale, top)
        relevant = fact if any(seconds_of(candidates[i]) <= until for i in fact) else relevant
    seconds = {i: seconds_of(candidates[i]) for i in relevant}
    written = [i for i in relevant if seconds[i] <= until]
    if not written or (len(written) == len(relevant) and len(written) < 2):
        return fused
    return _raised(fused, sorted(written, key=lambda i: (-seconds[i], -fused[i])))


def _best(fused: np.ndarray) -> np.ndarray:
    """The positions of the best RECENCY_TOP fused scores, best first."""
    return np.argsort(-fused, kind="stable")[:RECENCY_TOP]


def _relevant(
    fused: np.ndarray,
    query_vector: np.ndarray,
    candidates: Sequence[Candidate],
    scale: Scale,
    top: np.ndarray | None = None,
) -> list[int]:
    """The positions among the best RECENCY_TOP (`top`, if worked out already) whose dense similarity to the
    query is within RECENCY_DENSE_MARGIN of the best of them and whose fused score is within
    RECENCY_FUSED_MARGIN of the top."""
    if len(candidates) < 2:
        return []
    top = _best(fused) if top is None else top
    dense = scale.of(stacked_vectors([candidates[i].vector for i in top]) @ np.asarray(query_vector, dtype=np.float32))
    best = float(fused[top[0]])
    return [
        int(i)
        for i, d in zip(top, dense, strict=True)
        if d >= float(dense.max()) - RECENCY_DENSE_MARGIN and fused[i] >= best - RECENCY_FUSED_MARGIN
    ]


def _raised(fused: np.ndarray, ordered: Sequence[int]) -> np.ndarray:
    """`fused` with the `ordered` positions placed above the best score, in that order, RECENCY_STEP apart at
    most."""
    out = np.asarray(fused, dtype=np.float64).copy()
    best = float(fused.max())
    for place, i in enumerate(ordered):
        out[i] = best + RECENCY_STEP * (len(ordered) - place) / len(ordered)
    return out
