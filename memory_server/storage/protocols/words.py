"""Single-word vectors of each site's vocabulary."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import numpy as np

from memory_server.storage.records import Words


class WordStore(Protocol):
    """Single-word vectors of each site's vocabulary (query expansion)."""

    def all_words(self, model: str) -> Iterator[tuple[int, str, np.ndarray]]:
        """(site id, word, vector) of every word embedded with `model`."""
        ...

    def backfill_mark(self, model: str) -> int:
        """The id of the last memory whose words are stored for `model` (0: none)."""
        ...

    def texts_after(self, after_id: int, limit: int) -> list[tuple[int, int, str, str]]:
        """(id, site id, content, occurred_at) of memories after `after_id`, in id order."""
        ...

    def save_backfill(self, words: Iterable[tuple[int, Words]], model: str, through_id: int) -> None:
        """Store words per site and move the backfill mark, in one transaction."""
        ...

    def vectors(self, site_id: int, words: Sequence[str], model: str) -> Words:
        """The stored vectors (made by `model`) of those of `words` the site has."""
        ...
