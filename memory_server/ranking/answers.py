"""What kind of answer a query asks for: a time, a number or a name, and the memories that hold one.

"When did Caroline go to the support group?" is answered by a memory that tells a time ("I went
yesterday", "last week", "on 7 May"); "How many times ...?" by one with a number; "Who ...?", "Where
...?" or "What book ...?" by one naming something. So when a query asks for one of these kinds, the
memories holding that kind gain its weight (standard deviations of the fused score), as long as they are a
minority of the candidates (at most MAX_FRACTION): a kind most memories hold singles nothing out (on the
profiles benchmark more than half of a bucket's memories name someone).
Measurements: docs/ranking.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from memory_server.ranking.candidate_set import CandidateSet
from memory_server.ranking.dates import content_of, read_spans
from memory_server.ranking.per_text import PerText
from memory_server.ranking.speakers import speaker_of, speakers

MAX_FRACTION = 0.3

ASKS_TIME = re.compile(
    r"^\s*when\b|\bhow long\b|\bwhat (?:year|month|day|date)\b"
    r"|\bwhich (?:year|month|week|day|weekend)\b|\bhow many (?:days|weeks|months|years)\b",
    re.IGNORECASE,
)
ASKS_NUMBER = re.compile(r"\bhow (?:many|often|much)\b", re.IGNORECASE)
ASKS_NAME = re.compile(
    r"^\s*(?:who|where)\b|\bwhat is the name\b|\bwhat (?:was|were|are) the names?\b"
    r"|\b(?:what|which)\s+(?:[\w-]+\s+)?(?:books?|novels?|movies?|films?|songs?|games?|bands?|shows?"
    r"|series|authors?|artists?)\b|\b(?:which|what) (?:city|country|state|place)\b",
    re.IGNORECASE,
)

# Beyond the dates memory_server/ranking/periods.py reads: words that tell time without naming a date.
TIME_WORDS = re.compile(r"\b(?:(?:day|week|month|year|weekend)s?|recently|lately|since|ago|just)\b", re.IGNORECASE)
NUMBER = re.compile(
    r"\b(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|hundred"
    r"|thousand|once|twice|couple|few|several|dozen)\b",
    re.IGNORECASE,
)
# A capitalised word that does not start the text or a sentence: a name, a title, a place.
CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+)")
NOT_NAMES = frozenset({"Hey", "Thanks", "Wow", "Yeah", "Hi"})


@dataclass(frozen=True)
class Kind:
    name: str
    asks: re.Pattern[str]
    weight: float


TIME = Kind("time", ASKS_TIME, 0.5)
NUMBER_KIND = Kind("number", ASKS_NUMBER, 1.0)
NAME = Kind("name", ASKS_NAME, 1.5)
KINDS = (TIME, NUMBER_KIND, NAME)


def asked_kinds(query: str) -> list[Kind]:
    return [kind for kind in KINDS if kind.asks.search(query)]


Kinds = tuple[bool, bool, tuple[str, ...]]  # tells a time, has a number, capitalised words


def read_kinds(text: str, occurred_at: str | None) -> Kinds:
    """Whether the memory tells a time, whether it has a number, and the capitalised words of its content
    after a speaker label."""
    content = content_of(text, occurred_at)
    _, named = read_spans(text, occurred_at)
    said = content.split(":", 1)[1] if speaker_of(content) else content
    return (
        bool(named) or TIME_WORDS.search(content) is not None,
        NUMBER.search(content) is not None,
        tuple(dict.fromkeys(CAPITALISED.findall(said.strip()))),
    )


MEMORY_KINDS = PerText(read_kinds)


def _holding(kind: Kind, candidates: CandidateSet) -> np.ndarray:
    """Which candidates hold `kind`, worked out once per candidate set."""

    def compute(pool: CandidateSet) -> np.ndarray:
        found = MEMORY_KINDS.of_set(pool)
        if kind is TIME:
            return np.fromiter((tells for tells, _, _ in found), dtype=bool, count=len(found))
        if kind is NUMBER_KIND:
            return np.fromiter((number for _, number, _ in found), dtype=bool, count=len(found))
        labels = {label for label in speakers(pool) if label is not None}
        return np.fromiter(
            (any(w not in labels and w not in NOT_NAMES for w in words) for _, _, words in found),
            dtype=bool,
            count=len(found),
        )

    return candidates.memo(f"answer kind {kind.name}", compute)


def answer_boost(fused: np.ndarray, kinds: list[Kind], candidates: CandidateSet) -> np.ndarray:
    """`fused` with each asked kind's weight added to the candidates holding it, when they are at most
    MAX_FRACTION of the set."""
    out = np.asarray(fused, dtype=np.float64)
    for kind in kinds:
        has = _holding(kind, candidates)
        if has.any() and has.mean() <= MAX_FRACTION:
            out = out + kind.weight * has
    return out
