"""The candidate set's documents as integer arrays: the BM25 scorer `recall` runs.

`bm25_scores` and `bigram_bm25_scores` (memory_server/ranking/lexical.py) walk every candidate's terms in Python
for every query: most of a ranking's time on a thousand candidates. Here each term gets a process-wide
integer id once (`TERM_IDS`), each candidate's analysed terms become an id array once (and are kept with
the cached candidate), and a query concatenates the arrays and counts its terms with numpy. The counts
and the BM25 arithmetic (`lexical.bm25_core`) are the same, so the scores are identical to the string
scorers' (tests/test_term_arrays.py checks that on random documents).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from memory_server.ranking.lexical import K1, B, bigrams, bm25_core, is_date_term

_PAIR_SHIFT = 32  # a pair id: first term's id in the high bits, second's in the low bits
# A term id fits 32 bits (words below DATE_IDS, date terms above), a pair's two need 64. Ids are kept at 32 bits
# and a document's position in its set at 32 too: with a cached candidate's term ids and a held set's arrays
# that is ~200 bytes a memory less than at 64 (20 MB at 100k memories).
TERM_ID = np.uint32
POSITION = np.int32
# Date terms (lexical.DATE_TERM) take their ids from here up, so a document's length and pairs can leave them
# out with one comparison; word ids stay below it, and every id below 2**32 (a pair holds two).
DATE_IDS = 1 << 31


class TermIds:
    """term -> int, assigned on first sight and never changed (ids only ever grow with the vocabulary)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._dates = 0
        self._lock = threading.Lock()

    def of(self, terms: Sequence[str]) -> np.ndarray:
        """Ids of a document's terms, in order (new terms get new ids; a date term one from DATE_IDS up)."""
        table = self._ids
        missing = [t for t in terms if t not in table]
        if missing:
            with self._lock:
                for term in missing:
                    if term not in table:
                        if is_date_term(term):
                            table[term] = DATE_IDS + self._dates
                            self._dates += 1
                        else:
                            table[term] = len(table) - self._dates
        return np.fromiter((table[t] for t in terms), dtype=TERM_ID, count=len(terms))

    def get(self, term: str) -> int | None:
        """A query term's id; None if no document ever had it (it can match nothing)."""
        return self._ids.get(term)


TERM_IDS = TermIds()


def pair_ids(term_ids: np.ndarray) -> np.ndarray:
    """Ids of a document's adjacent term pairs (its bigrams)."""
    wide = term_ids.astype(np.int64)
    pairs: np.ndarray = (wide[:-1] << _PAIR_SHIFT) | wide[1:]
    return pairs


@dataclass(frozen=True)
class Items:
    """One side (terms or pairs) of the candidate documents: every id, with the document it is in."""

    ids: np.ndarray
    owner: np.ndarray
    lengths: np.ndarray  # per document

    @classmethod
    def of(cls, per_document: Sequence[np.ndarray]) -> Items:
        """The documents' term ids; a document's length counts its words, not its date terms."""
        lengths = np.fromiter((len(a) for a in per_document), dtype=np.int64, count=len(per_document))
        ids = np.concatenate(per_document) if per_document else np.zeros(0, dtype=TERM_ID)
        owner = np.repeat(np.arange(len(per_document), dtype=POSITION), lengths)
        if len(ids) and int(ids.max()) >= DATE_IDS:
            lengths = np.bincount(owner[ids < DATE_IDS], minlength=len(per_document))
        return cls(ids, owner, lengths.astype(np.float64))

    def scores(
        self,
        query: Mapping[int, float],
        *,
        k1: float,
        b: float,
        delta: float,
        context: Sequence[tuple[np.ndarray, float]],
    ) -> np.ndarray:
        n = len(self.lengths)
        if n == 0 or not query:
            return np.zeros(n)
        mask = np.isin(self.ids, np.fromiter(query, dtype=self.ids.dtype, count=len(query)))
        ids, owner = self.ids[mask], self.owner[mask]

        def count(item: int) -> np.ndarray | None:
            where = owner[ids == item]
            return np.bincount(where, minlength=n).astype(np.float64) if len(where) else None

        return bm25_core(query, count, self.lengths, k1=k1, b=b, delta=delta, context=context)


@dataclass(frozen=True)
class CandidateDocuments:
    terms: Items
    pairs: Items

    @classmethod
    def of(cls, term_ids: Sequence[np.ndarray]) -> CandidateDocuments:
        terms = Items.of(term_ids)
        # Every document's pairs at once: adjacent ids of the concatenation, but for those that straddle
        # two documents (as `pair_ids` of each document would give, without a Python call per document).
        within = terms.owner[:-1] == terms.owner[1:]
        if len(terms.ids) and int(terms.ids.max()) >= DATE_IDS:  # no pair holds a date term
            words = terms.ids < DATE_IDS
            within &= words[:-1] & words[1:]
        pairs = Items(pair_ids(terms.ids)[within], terms.owner[:-1][within], np.maximum(terms.lengths - 1, 0))
        return cls(terms, pairs)

    @property
    def term_counts(self) -> np.ndarray:
        return self.terms.lengths

    def bm25(
        self,
        query_terms: Sequence[str],
        *,
        k1: float = K1,
        b: float = B,
        delta: float = 0.0,
        context: Sequence[tuple[np.ndarray, float]] = (),
        extra_terms: Mapping[str, float] | None = None,
    ) -> np.ndarray:
        """`lexical.bm25_scores` of these documents."""
        weights: dict[str, float] = dict(Counter(query_terms))
        for term, weight in (extra_terms or {}).items():
            weights[term] = weights.get(term, 0.0) + weight
        query = {tid: w for term, w in weights.items() if (tid := TERM_IDS.get(term)) is not None}
        return self.terms.scores(query, k1=k1, b=b, delta=delta, context=context)

    def bigram_bm25(
        self,
        query_terms: Sequence[str],
        *,
        k1: float = K1,
        b: float = B,
        delta: float = 0.0,
        context: Sequence[tuple[np.ndarray, float]] = (),
    ) -> np.ndarray:
        """`lexical.bigram_bm25_scores` of these documents (a pair's length counts pairs, as there)."""
        query: dict[int, float] = {}
        for (first, second), count in Counter(bigrams(query_terms)).items():
            a, z = TERM_IDS.get(first), TERM_IDS.get(second)
            if a is not None and z is not None:
                query[(a << _PAIR_SHIFT) | z] = float(count)
        return self.pairs.scores(query, k1=k1, b=b, delta=delta, context=context)
