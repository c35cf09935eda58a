"""Who a query means: the memories said by the person it names rank higher.

Memories saved from a conversation usually start with who said them ("Nate: Been playing it for a
month"). A question about a person ("What game has Nate been playing?") is answered by that person's own
turns far more often than by the other side's, whose replies ("Hey Nate! ...") match the name as well as
the query's other words and crowd the top ten.

So the candidates' speaker labels are read (a label is a capitalised name of one to three words and a
colon at the start of the content, after the date prefix, heading at least MIN_TURNS candidates), and when
the query names one of them, that speaker's memories gain SPEAKER_BOOST standard deviations of the fused
score. Two speakers named together ("Nate and Joanna", "both") ask about both: no one is boosted; otherwise
the first named is the one asked about ("What did Nate tell Joanna ...").
Memories without labels (facts, notes) are left as they are. Measurements: docs/ranking.md.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from memory_server.ranking.candidate_set import TEXT, CandidateSet

SPEAKER_BOOST = 1.5
MIN_TURNS = 2  # a label heading a single memory is as likely a heading ("Note: ...") as a speaker
MAX_SPEAKERS = 64  # labels looked for in the query, the most frequent first (bounded work per query)

# '[8 May 2023] Nate: ...' or 'Joanna Smith: ...' (names of up to 40 characters a word).
_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)?([A-Z][\w.'-]{0,40}(?: [A-Z][\w.'-]{0,40}){0,2}):\s")
_BOTH = re.compile(r"\bboth\b", re.IGNORECASE)


def speaker_of(text: str) -> str | None:
    found = _LABEL.match(text)
    return found.group(1) if found else None


def speakers(candidates: CandidateSet) -> list[str | None]:
    """Each candidate's speaker label, or None; worked out once per candidate set. Not kept per memory across
    sets as the costlier facts are (memory_server/ranking/per_text.py): the label's match costs 0.3-0.5 us, a cached
    lookup 0.26 us, and 100k cached labels held 15 MB."""
    return candidates.memo("speakers", lambda pool: [speaker_of(text) for text in pool.column(TEXT)])


def asked_speaker(query: str, labels: Sequence[str | None]) -> str | None:
    """The speaker among `labels` the query is about (see the module docstring), or None."""
    counts = Counter(label for label in labels if label is not None)
    named: list[tuple[int, str]] = []
    for label, count in counts.most_common(MAX_SPEAKERS):
        if count < MIN_TURNS:
            break
        found = re.search(rf"\b{re.escape(label)}\b", query, re.IGNORECASE)
        if found:
            named.append((found.start(), label))
    if not named:
        return None
    named.sort()
    if len(named) >= 2:
        first, second = named[0][1], named[1][1]
        together = rf"\b{re.escape(first)}\s+(?:and|or|&)\s+{re.escape(second)}\b"
        if _BOTH.search(query) or re.search(together, query, re.IGNORECASE):
            return None
    return named[0][1]


def speaker_boost(
    fused: np.ndarray, who: str | None, candidates: CandidateSet, weight: float = SPEAKER_BOOST
) -> np.ndarray:
    """`fused` with `weight` added to the memories of `who` (the speaker `asked_speaker` found in the query;
    unchanged if None)."""
    if who is None:
        return fused
    labels = speakers(candidates)
    said: np.ndarray = np.fromiter((label == who for label in labels), dtype=bool, count=len(labels))
    return np.asarray(fused, dtype=np.float64) + weight * said
