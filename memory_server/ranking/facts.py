"""Memories that state one fact: the same thing said again in other words, or an older value of it.

Agents rarely link an update to what it replaces, and they repeat themselves. Two memories state one fact
when their embeddings are close (SAME_FACT on the reference scale) and they name the same things: the
query's names that the best hit holds, and otherwise at least one name in common. A name is a word that
carries a fact's subject or value rather than its wording: a capitalised word inside a sentence, a word
with a digit, or an identifier (`eu-central-1`, `#atlas-dev`, `incident.io`). Two memories with the same
names that are closer still (COPY) say the same thing: a copy.

These are judgements without a model of the language, so they only order, fold and advise, and delete
nothing: recall puts the newest memory of the best hit's fact first (recency.newest_of_fact_first; an older
value stays in the answer, below), folds copies into the first of them, listing them, and places an older
statement of a fact a newer hit already states (`older_statements`) below the other facts; remember answers
with the copies a new memory has. Measurements: docs/ranking.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from memory_server.embeddings.similarity import IDENTITY, Scale
from memory_server.ranking.languages import folded

SAME_FACT = 0.70  # reference scale: e5-small cosine 0.90
COPY = 0.80  # reference scale: e5-small cosine 0.93
RESTATED = 0.92  # reference scale: an older memory this close to a newer one above it, with its names, ranks below
DAY = 86_400.0  # memories of one fact written within a day of each other are not told apart by time

_WORD = re.compile(r"[\w#@][\w#@./:+-]*[\w]|[\w]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_DATE_PREFIX = re.compile(r"^\[[^\]]*\]\s*")  # the date document_text puts before the content
_MARKS = frozenset("#@_-/.:")


class Names(NamedTuple):
    """The names of a text: `sure` ones, and `all` of them with a sentence's capitalised first word (a name
    or just a capital: "Tom Berg moved ...", "Org chart: ...")."""

    sure: frozenset[str]
    all: frozenset[str]

    def within(self, other: Names) -> bool:
        """Every sure name of this one is a name of `other`."""
        return self.sure <= other.all


def names(text: str) -> Names:
    """The words of `text` that name a subject or a value (see the module docstring), folded to lower case."""
    sure: set[str] = set()
    first: set[str] = set()
    for sentence in _SENTENCE.split(_DATE_PREFIX.sub("", text)):
        for place, word in enumerate(_WORD.findall(sentence)):
            if any(c.isdigit() or c in _MARKS for c in word) or (place > 0 and word[0].isupper()):
                sure.add(folded(word))
            elif place == 0 and word[0].isupper():
                first.add(folded(word))
    return Names(frozenset(sure), frozenset(sure | first))


def cosines(vectors: np.ndarray, scale: Scale = IDENTITY) -> np.ndarray:
    """Every pair's similarity on the reference scale (`vectors` unit length, one a row)."""
    return scale.of(np.asarray(vectors, dtype=np.float32) @ np.asarray(vectors, dtype=np.float32).T)


def same_fact(similarity: float, first: Names, other: Names, asked: frozenset[str] = frozenset()) -> bool:
    """Whether a memory named `other` states the fact of one named `first`, at `similarity`: `asked`, the
    query's names `first` holds, must all be in `other`; without any, one of `first`'s sure names."""
    if similarity < SAME_FACT:
        return False
    return asked <= other.all if asked else bool(first.sure & other.all)


def is_copy(similarity: float, first: Names, other: Names) -> bool:
    """Whether the two say the same thing: as close as COPY, and the same names (at least one sure)."""
    return similarity >= COPY and bool(first.sure | other.sure) and first.within(other) and other.within(first)


def copies_of(
    order: Sequence[int], vectors: np.ndarray, found: Sequence[Names], scale: Scale = IDENTITY
) -> dict[int, int]:
    """position -> the earlier position it is a copy of, for each position of `order` (best first) that
    copies one kept before it; `vectors` and `found` (each text's `names`) are by position of `order`."""
    if len(order) < 2:
        return {}
    similar = cosines(vectors, scale)
    kept: list[int] = []
    folded_into: dict[int, int] = {}
    for place in range(len(order)):
        into = next((k for k in kept if is_copy(float(similar[place, k]), found[k], found[place])), None)
        if into is None:
            kept.append(place)
        else:
            folded_into[place] = into
    return folded_into


def older_statements(
    vectors: np.ndarray, found: Sequence[Names], seconds: Sequence[float], scale: Scale = IDENTITY
) -> set[int]:
    """The positions (best first; `vectors`, `found` (each text's `names`) and `seconds` since the epoch by
    position) whose fact a memory above them already states, written at least a DAY later: as close as
    RESTATED, holding one of its names. An older value, or the same value said before: the answer's first
    places go to other facts."""
    if len(found) < 2:
        return set()
    similar = cosines(vectors, scale)
    older: set[int] = set()
    for place in range(1, len(found)):
        if any(
            above not in older
            and seconds[above] >= seconds[place] + DAY
            and similar[place, above] >= RESTATED
            and same_fact(1.0, found[above], found[place])
            for above in range(place)
        ):
            older.add(place)
    return older
