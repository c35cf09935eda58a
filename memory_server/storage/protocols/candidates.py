"""The reads recall ranks from."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from memory_server.storage.records import CandidateRow
from memory_server.storage.scope import Scope


class CandidateStore(Protocol):
    """The reads recall ranks from."""

    def visible_count(self, scope: Scope, up_to: int) -> int:
        """How many memories the scope sees, counted up to `up_to` + 1 at most."""
        ...

    def load(
        self,
        scope: Scope,
        ids: Sequence[int] | None,
        model: str,
        cached: Callable[[int, str], bool],
        up_to: int | None = None,
    ) -> tuple[list[tuple[int, str]], list[CandidateRow]]:
        """(id, updated_at) of the visible memories embedded with `model` (all of them, or of `ids`), in id
        order, and the rows of those `cached(id, updated_at)` does not hold already: both of one state of the
        store. With `up_to`, at most `up_to` + 1 of them, and no rows when there are more than `up_to`."""
        ...

    def newest(self, model: str, limit: int) -> Iterator[list[CandidateRow]]:
        """The rows of the newest `limit` memories embedded with `model` (of every site), in id order, a chunk
        at a time: what start-up reads into recall's candidate cache."""
        ...

    def next_expiry(self, scope: Scope) -> str | None:
        """The earliest expires_at of the memories the scope sees (None: none of them expires)."""
        ...

    def bucket_sizes(self, model: str) -> list[tuple[int, str | None, int]]:
        """(site id, bucket or None, how many memories embedded with `model` it holds) of every bucket, the
        most recently written to first."""
        ...

    def doc_freqs(self, site_id: int, terms: Sequence[str], up_to: int | None = None) -> dict[str, int]:
        """How many of the site's memories hold each analysed term; with `up_to`, counted up to `up_to` + 1 at
        most. A site's statistics are its own: what other sites hold never counts."""
        ...

    def site_size(self, site_id: int) -> int:
        """How many of the site's memories the lexical index holds: the measure of how much it has grown."""
        ...

    def best_by_terms(self, scope: Scope, terms: Sequence[str], limit: int) -> list[int]:
        """Visible memories holding any of `terms`, best first by BM25 over the statistics of the scope's site."""
        ...

    def neighbours(self, site_id: int, ids: Sequence[int], reach: int) -> set[int]:
        """Ids of the site's memories within `reach` seq of these in the same conversation (these included)."""
        ...
