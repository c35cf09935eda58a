"""The outbox to the vector index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from memory_server.storage.records import ChangePage, IndexRow


class OutboxStore(Protocol):
    """The memories the vector index does not have yet, and the deletions it has not applied."""

    def backlog(self) -> int:
        """Memories not yet indexed plus deletions not yet applied."""
        ...

    def unindexed(self, limit: int) -> list[int]: ...

    def deletions(self) -> list[int]: ...

    def index_rows(self, ids: Sequence[int]) -> list[IndexRow]: ...

    def set_vectors(self, vectors: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        """Store (id, updated_at, vector) as embedded with `model`, in one transaction; a row changed since
        `updated_at` keeps what its change gave it."""
        ...

    def mark_indexed(self, versions: Sequence[tuple[int, str]]) -> None:
        """Mark rows indexed if they are still at the version that was written to the index."""
        ...

    def clear_deletions(self, ids: Sequence[int]) -> None: ...

    def mark_all_unindexed(self) -> None: ...

    def clear_all_deletions(self) -> None: ...

    def present(self, ids: Sequence[int]) -> set[int]:
        """Which of these ids still have a row."""
        ...

    def sites_of(self, ids: Sequence[int]) -> set[int]:
        """The sites of those of these memories still stored."""
        ...

    def counts(self) -> tuple[int, int, int]:
        """(indexed memories, unindexed memories, queued deletions)."""
        ...

    # The change feed: every insert, change and deletion of a memory, numbered per site in commit order (each
    # site's own counter: no row every site's writes update), so a server with an index of its own (one
    # replica of several on a shared authority) can follow what others write, site by site.

    def change_mark(self, site_id: int | None = None) -> int:
        """The number of the site's newest change (0: none yet); without a site, how many changes every site
        has had (a number that grows with every change)."""
        ...

    def change_marks(self, since: float | None = None) -> tuple[dict[int, int], float]:
        """The newest change number of every site that has had one, or with `since` (unix seconds, the store's
        clock) of the sites with a change kept made from then on; and the store's clock when read."""
        ...

    def ids_after(self, after: int, limit: int) -> list[int]:
        """Ids of stored memories above `after`, ascending (a whole index rebuilt page by page)."""
        ...

    def changes(self, site_id: int, after: int, limit: int) -> ChangePage:
        """Up to `limit` of the site's changes after its change number `after`, oldest first."""
        ...

    def prune_changes(self, older_than_s: float) -> int:
        """Forget changes older than this (never the numbering); returns how many went."""
        ...
