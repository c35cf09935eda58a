"""What recall ranks: the candidates, and the arrays the ranking computes from them, each worked out once.

A `CandidateSet` is a read-only sequence of `Candidate`s that also holds, computed on first use, their
vectors as one matrix, their analysed documents as integer arrays (memory_server/ranking/term_arrays.py) and the
positions of their conversation neighbours. A scope ranked whole (a bucket of a few thousand memories)
is the same set from one recall to the next until one of its memories changes, so the candidate source
keeps its set and the next recall skips all of that work (memory_server/retrieval/candidates.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any, NamedTuple, TypeVar, cast, overload

import numpy as np

from memory_server.ranking.lexical import analyze
from memory_server.ranking.term_arrays import TERM_IDS, CandidateDocuments


class Candidate(NamedTuple):
    """One memory as the ranker sees it.

    text: `document_text(content, occurred_at)` -- exactly the text that was embedded into `vector`.
    vector: the stored unit-length embedding of `text` (same model as the query vector): float32, or its
      compact form (`compact`) as the candidate cache holds it; `unit_vectors` reads either.
    occurred_at: RFC3339 timestamp (informational here; the date is already rendered into `text`).
    conversation_id / seq: provenance; entries sharing conversation_id with adjacent seq are neighbours.
    terms: optional pre-analysed `lexical.analyze(text)` (the server may pass the stored analysed text
      split on spaces to skip re-analysis); computed from `text` when None.
    term_ids: optional `TERM_IDS.of(terms)` (the server keeps them with its cached candidates).
    """

    id: int
    text: str
    vector: np.ndarray
    occurred_at: str | None = None
    conversation_id: str | None = None
    seq: int | None = None
    terms: Sequence[str] | None = None
    term_ids: np.ndarray | None = None

    def analysed_ids(self) -> np.ndarray:
        return analysed_ids(self)


# A Candidate's fields as a plain tuple, in the same order. What the candidate cache and the sets hold: the
# garbage collector stops tracking a plain tuple of strings, numbers and arrays (not a named tuple), so its
# full collections do not walk the 100k cached candidates (memory_server/retrieval/candidates.py).
Row = tuple[int, str, np.ndarray, str | None, str | None, int | None, Sequence[str] | None, np.ndarray | None]
ID, TEXT, VECTOR, OCCURRED_AT, CONVERSATION_ID, SEQ, TERMS, TERM_ID_ARRAY = range(8)


def analysed_ids(row: Row) -> np.ndarray:
    _, text, _, _, _, _, terms, term_ids = row
    if term_ids is not None:
        return term_ids
    return TERM_IDS.of(terms if terms is not None else analyze(text))


def compact(vector: np.ndarray) -> np.ndarray:
    """A float32 vector as bfloat16 (its upper 16 bits, rounded to nearest even), stored as uint16: how the
    candidate cache and the held sets keep vectors. At 100k cached memories that is 77 MB rather than 154 of
    the server's RSS; a cosine moves by at most 3e-4, and widening a thousand vectors back costs 0.2 ms. (numpy
    has no fast float16 cast here: 1.4 ms a thousand; bfloat16 widens with one integer shift.)"""
    bits = np.ascontiguousarray(vector, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def unit_vectors(vectors: np.ndarray) -> np.ndarray:
    """float32 vectors from float32 or compact (`compact`) ones, row for row."""
    if vectors.dtype != np.uint16:
        return np.asarray(vectors, dtype=np.float32)
    wide = vectors.astype(np.uint32)
    np.left_shift(wide, 16, out=wide)  # in place: one float32-sized array, not two (a 4,100-memory window: 6 MB)
    return wide.view(np.float32)


def stacked_vectors(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """The vectors as one float32 matrix, whichever form each is in."""
    if all(v.dtype == np.uint16 for v in vectors):
        return unit_vectors(np.stack(vectors))
    return np.stack([unit_vectors(v) for v in vectors])


T = TypeVar("T")
COSINE_CHUNK = 1024  # compact vectors widened at once by `CandidateSet.cosines`


class CandidateSet(Sequence[Candidate]):
    """Candidates in ranking order of ties (the order they were given), with their derived arrays."""

    def __init__(self, candidates: Iterable[Candidate]) -> None:
        self._rows: tuple[Row, ...] = tuple(tuple(c) for c in candidates)  # type: ignore[misc]
        self._memos: dict[str, Any] = {}
        self._vectors: np.ndarray | None = None
        self._lock = threading.Lock()
        # Held for later recalls of its scope (memory_server/retrieval/candidates.py): what is derived from its memories
        # is better kept with it than in per-memory caches, which would hold it a second time.
        self.lasting = False

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> CandidateSet:
        return candidates if isinstance(candidates, CandidateSet) else cls(candidates)

    @classmethod
    def of_rows(cls, rows: Iterable[Row], vectors: np.ndarray | None = None, *, lasting: bool = False) -> CandidateSet:
        """`vectors`: the rows' vectors stacked (in their stored form), when the rows' own vectors are its rows
        (see `cosines`)."""
        made = cls(())
        made._rows = tuple(rows)
        made._vectors = vectors
        made.lasting = lasting
        return made

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Candidate]: ...

    def __getitem__(self, index: int | slice) -> Candidate | Sequence[Candidate]:
        if isinstance(index, slice):
            return [Candidate._make(row) for row in self._rows[index]]
        return Candidate._make(self._rows[index])

    def __iter__(self) -> Iterator[Candidate]:
        return map(Candidate._make, self._rows)

    def column(self, field: int) -> list[Any]:
        """One field (ID, TEXT, ...) of every candidate, without making Candidates."""
        return [row[field] for row in self._rows]

    def cosines(self, query: np.ndarray) -> np.ndarray:
        """Each candidate's cosine with the unit vector `query`: from the matrix the set was made with, else
        from its vectors stacked at each call (0.5 ms a thousand). Compact vectors are widened COSINE_CHUNK at a
        time: a 4,100-memory time window's float32 matrix (6 MB, made and freed at every such recall) kept the
        server's heap 20 MB larger through 200 of them."""
        query = np.asarray(query, dtype=np.float32)
        if not self._rows:
            return np.zeros(0, dtype=np.float32)
        stored = self._vectors
        if stored is None:
            vectors = [cast(np.ndarray, row[VECTOR]) for row in self._rows]
            stored = np.stack(vectors) if all(v.dtype == np.uint16 for v in vectors) else stacked_vectors(vectors)
        if stored.dtype != np.uint16:
            return np.asarray(stored @ query, dtype=np.float32)
        out = np.empty(len(stored), dtype=np.float32)
        for start in range(0, len(stored), COSINE_CHUNK):
            out[start : start + COSINE_CHUNK] = unit_vectors(stored[start : start + COSINE_CHUNK]) @ query
        return out

    @cached_property
    def documents(self) -> CandidateDocuments:
        return CandidateDocuments.of([analysed_ids(row) for row in self._rows])

    def neighbours(self, offsets: Sequence[int]) -> dict[int, np.ndarray]:
        """offset -> array of candidate positions: for each candidate, the position of the candidate of the
        same conversation at seq + offset, or -1 when it is not in the set (or provenance is missing)."""
        key = tuple(sorted(set(offsets)))
        return self.memo(
            f"neighbours at {key}",
            lambda pool: neighbour_positions(pool.column(CONVERSATION_ID), pool.column(SEQ), key),
        )

    def memo(self, key: str, compute: Callable[[CandidateSet], T]) -> T:
        """`compute(self)`, worked out on first use under `key` and kept with the set (other modules' derived
        data, e.g. the speaker labels of memory_server/ranking/speakers.py)."""
        if key not in self._memos:
            self.keep(key, compute(self))
        return cast(T, self._memos[key])

    def held(self, key: str) -> Any:
        """What `keep` kept under `key`, or None."""
        return self._memos.get(key)

    def keep(self, key: str, value: object) -> None:
        with self._lock:
            self._memos[key] = value


def neighbour_positions(
    conversations: Sequence[str | None], seqs: Sequence[int | None], offsets: Sequence[int]
) -> dict[int, np.ndarray]:
    pos: dict[tuple[str, int], int] = {}
    for i, (conversation, seq) in enumerate(zip(conversations, seqs, strict=True)):
        if conversation is not None and seq is not None:
            pos[(conversation, seq)] = i
    out: dict[int, np.ndarray] = {}
    for off in offsets:
        idx = np.full(len(conversations), -1, dtype=np.intp)
        for (conv, seq), i in pos.items():
            j = pos.get((conv, seq + off))
            if j is not None:
                idx[i] = j
        out[off] = idx
    return out
