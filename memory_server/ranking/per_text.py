"""Facts recall reads from a memory's text (the dates it names, the kinds of answer it holds),
worked out once per process and kept.

A recall over a prefetch sees a thousand candidates, most of them seen by earlier recalls: reading a
fact again costs microseconds a memory (a regular expression, a date parse), looking it up ~0.1 us. Keyed
by the memory's id and its text's hash, so an update (a new text) is read again, and the text itself is not
kept alive by the cache. Bounded: when full it is cleared, and refilled by the next recalls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from memory_server.ranking.candidate_set import ID, OCCURRED_AT, TEXT, CandidateSet

T = TypeVar("T")
SIZE = 200_000  # memories per fact (the candidate cache holds 100k)


class PerText(Generic[T]):
    def __init__(self, read: Callable[[str, str | None], T], size: int = SIZE) -> None:
        """`read(text, occurred_at)` works the fact out; `text` is the candidate's document text."""
        self._read = read
        self._found: dict[tuple[int, int], T] = {}
        self._size = size
        self._lock = threading.Lock()

    def of(self, row_id: int, text: str, occurred_at: str | None) -> T:
        key = (row_id, hash(text))
        try:
            return self._found[key]
        except KeyError:
            pass
        found = self._read(text, occurred_at)
        with self._lock:
            if len(self._found) >= self._size:
                self._found.clear()
            self._found[key] = found
        return found

    def of_set(self, pool: CandidateSet) -> list[T]:
        """The fact of each of the set's candidates. A set held for later recalls (`lasting`) keeps what is
        derived from it, so its facts are read without this cache, which would hold them a second time
        (~200 bytes a memory: 20 MB for 100k)."""
        rows = zip(pool.column(ID), pool.column(TEXT), pool.column(OCCURRED_AT), strict=True)
        if pool.lasting:
            return [self._read(text, at) for _, text, at in rows]
        return [self.of(row_id, text, at) for row_id, text, at in rows]
