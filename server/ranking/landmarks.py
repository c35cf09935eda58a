"""What a question places its answer before: "Which editor did Bianca use before Emacs?", "What was Elena's
role before becoming Tech Lead?".

The words after "before" name a landmark (the later state, an event), not the answer: the answer is what held
until then, which rarely says so. On the lexical side those words are rare and match strongly, so the memories
that name the landmark ("Oscar Reyes uses Emacs", "Yara took on the Tech Lead role") win over the one asked
for, which shares only the subject's name with the question. So a landmark's terms count LANDMARK_WEIGHT of a
query term on the lexical side (unigrams; the dense side and the adjacent-term pairs keep the whole question).
"before" followed by a date ("before 16 November 2023", "the week before last Friday") is left alone: that is a
period, which server/ranking/periods.py reads.

Measured in-process (bench/offline.py, 2026-12-03, production ranking with the date terms), top-1 on
bench/evolving.py's "before" questions (171 of 419 past ones): without links or windows 0.029 -> 0.158
(dense alone 0.094), with links, windows and recency 0.497 -> 0.643 (dense alone 0.550); past questions
0.212 -> 0.265 and 0.609 -> 0.668; every other evolving figure unchanged. LoCoMo dev R@5 / R@10 0.767 /
0.836 -> 0.767 / 0.837 (temporal R@10 0.944 -> 0.946; 2 of its 760 questions have a landmark), profiles
unchanged (none has). A weight of 0.5: "before" 0.094 and 0.585.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from server.ranking.lexical import analyze_query
from server.ranking.periods import query_periods

LANDMARK_WEIGHT = 0.0
_BEFORE = re.compile(r"\bbefore\s+(?P<landmark>[^?!;]{1,200})", re.IGNORECASE)


def landmark_terms(query: str) -> list[str]:
    """The analysed terms of the landmark the query names after "before" (none when it names a date there)."""
    found = _BEFORE.search(query)
    if found is None or query_periods(found["landmark"]):
        return []
    return analyze_query(found["landmark"])


def without_landmarks(query: str, extra: Mapping[str, float]) -> dict[str, float]:
    """`extra` (the weights added to the lexical query's term counts: expansions, date terms) with each landmark
    term's count lowered to LANDMARK_WEIGHT of a query term."""
    out = dict(extra)
    for term in landmark_terms(query):
        out[term] = out.get(term, 0.0) + LANDMARK_WEIGHT - 1.0
    return out
