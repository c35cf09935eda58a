"""The LRU cache of query vectors that both embedding engines share (agents repeat their queries)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np


class QueryCache:
    """Thread-safe LRU of text -> vector; `size` 0 disables it.

    Stored vectors are read-only copies and every hit returns a fresh copy, so a caller modifying its vector
    never reaches the cache. The embedding runs outside the lock: two threads missing on the same text both
    compute it (identical results) rather than one blocking every other query behind a model call.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_compute(self, text: str, compute: Callable[[str], np.ndarray]) -> np.ndarray:
        with self._lock:
            cached = self._vectors.get(text)
            if cached is not None:
                self._vectors.move_to_end(text)
                return cached.copy()
        vector = compute(text)
        if self._size > 0:
            stored = vector.copy()
            stored.setflags(write=False)
            with self._lock:
                self._vectors[text] = stored
                self._vectors.move_to_end(text)
                while len(self._vectors) > self._size:
                    self._vectors.popitem(last=False)
        return vector

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)
