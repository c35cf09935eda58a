"""What a question places its answer before: "Which editor did Bianca use before Emacs?", "What was Elena's
role before becoming Tech Lead?", "¿Qué editor usaba Bianca antes de Emacs?".

The words after "before" name a landmark (the later state, an event), not the answer: the answer is what held
until then, which rarely says so. On the lexical side those words are rare and match strongly, so the memories
that name the landmark ("Oscar Reyes uses Emacs", "Yara took on the Tech Lead role") win over the one asked
for, which shares only the subject's name with the question. So a landmark's terms count LANDMARK_WEIGHT of a
query term on the lexical side (unigrams; the dense side and the adjacent-term pairs keep the whole question).
"before" followed by a date ("before 16 November 2023", "the week before last Friday", "antes de marzo de 2024")
is left alone: that is a period, which memory_server/ranking/periods.py reads. The words for "before" are those of
memory_server/ranking/time_words.py; the landmark's words are analysed in their own languages and the question's,
so that they include the question's own terms.
Measurements: docs/ranking.md.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

from memory_server.ranking.languages import detect, query_languages
from memory_server.ranking.lexical import analyze_query
from memory_server.ranking.periods import query_periods
from memory_server.ranking.time_words import alternation, words

LANDMARK_WEIGHT = 0.0
_BEFORE = re.compile(r"\b" + alternation(words("before")) + r"\s+(?P<landmark>[^?!;¿¡]{1,200})", re.IGNORECASE)


def landmark_terms(query: str) -> list[str]:
    """The analysed terms of the landmark the query names after "before" (none when it names a date there)."""
    found = _BEFORE.search(unicodedata.normalize("NFC", query))  # composed as the tables are; case kept ("May")
    if found is None or query_periods(found["landmark"]):
        return []
    landmark = found["landmark"]
    # In the languages its own words point to and the question's: a Spanish question stems "Emacs" as Spanish.
    return analyze_query(landmark, tuple(dict.fromkeys((*query_languages(landmark), detect(query)))))


def without_landmarks(query: str, extra: Mapping[str, float]) -> dict[str, float]:
    """`extra` (the weights added to the lexical query's term counts: expansions, date terms) with each landmark
    term's count lowered to LANDMARK_WEIGHT of a query term."""
    out = dict(extra)
    for term in landmark_terms(query):
        out[term] = out.get(term, 0.0) + LANDMARK_WEIGHT - 1.0
    return out
