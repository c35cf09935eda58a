"""Keeping the vector index in step with the authority: the outbox.

The authority is written first (the memory with its embedding, not yet indexed), then the index, then the
row is marked indexed. `sync()` repairs what a crash or an index outage left behind: it runs at start-up
and in the background. The index records the model it was built with; another model means a new index, filled
by `sync()` too (memory_server/memories/reembedding.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from memory_server.embeddings.base import Embedder
from memory_server.index.base import IndexInfo, IndexPoint, IndexUnavailable, VectorIndex, batched
from memory_server.logging_setup import Throttle
from memory_server.ranking.dates import memory_days
from memory_server.ranking.fusion import document_text
from memory_server.storage.protocols import OutboxStore
from memory_server.storage.records import IndexRow
from memory_server.timestamps import epoch_seconds

log = logging.getLogger("memory_server.memories")

SYNC_BATCH = 500


def index_payload(row: IndexRow) -> dict[str, object]:
    """The payload the index filters by (index/base.py PAYLOAD_VERSION names its fields): the scope, the
    times as epoch seconds and the days the memory is about (its own and those its content names)."""
    payload: dict[str, object] = {
        "site": str(row.site_id),
        "team": row.team or "",
        "project": row.project or "",
        "bucket": row.bucket,
        "type": row.type,
        "tags": list(row.tags),
        "occurred": epoch_seconds(row.occurred_at),
        "days": memory_days(row.content, row.occurred_at),
    }
    if row.valid_to is not None:  # superseded
        payload["valid_to"] = epoch_seconds(row.valid_to)
    if row.expires_at is not None:  # rounded up: a point is left out only once it has surely expired
        payload["expires"] = epoch_seconds(row.expires_at, ceil=True)
    if row.turn_seq is not None:  # an indexed log item: what the `kinds` filter tells memories from turns by
        payload["turn"] = row.turn_seq
    return payload


class IndexSync(Protocol):
    """What the write path tells the vector index after each commit: the outbox (an index of the authority's
    own) or an IndexFollower (an index of this server's own, following a shared authority)."""

    def written(self, ids: Sequence[int]) -> None: ...

    def deleted(self, ids: Sequence[int]) -> None: ...


class Outbox:
    def __init__(self, store: OutboxStore, index: VectorIndex, embedder: Embedder) -> None:
        self.store = store
        self.index = index
        self.embedder = embedder
        self._lock = threading.Lock()  # index writes from request threads and the repair loop
        self._throttle = Throttle(log)

    def expected(self) -> IndexInfo:
        return IndexInfo(model=self.embedder.name, dimension=self.embedder.dimension)

    def check_model(self, *, outbox: bool = True) -> bool:
        """Start a new index when there is none or it was built with another model (True: it is new; with
        `outbox`, every row is then the backlog, embedded again where its stored vector is another model's)."""
        if self.index.info() == self.expected():
            return False
        self.index.reset(self.expected())
        if outbox:
            self.store.mark_all_unindexed()
        return True

    # After a commit: the write happened, and its answer must say so. Whatever fails now (the index, marking
    # the rows indexed) leaves them in the backlog, which `sync` repairs in the background.

    def written(self, ids: Sequence[int]) -> None:
        try:
            self.index_ids(ids)
        except Exception:
            self._throttle.log(
                logging.WARNING,
                "index after commit",
                "indexing %d committed memories failed; they stay in the backlog",
                len(ids),
                exc_info=True,
            )

    def deleted(self, ids: Sequence[int]) -> None:
        try:
            self.apply_deletions(ids)
        except Exception:
            self._throttle.log(
                logging.WARNING,
                "index after commit",
                "removing %d forgotten memories from the index failed; they stay queued",
                len(ids),
                exc_info=True,
            )

    def points(self, rows: Sequence[IndexRow]) -> list[IndexPoint]:
        vectors = self._vectors(rows)
        return [IndexPoint(id=row.id, vector=vectors[row.id], payload=index_payload(row)) for row in rows]

    def index_ids(self, ids: Sequence[int]) -> None:
        """Write committed rows to the index and mark them indexed; on failure they stay in the backlog."""
        if not ids:
            return
        with self._lock:
            # Rows are read under the lock: a row updated after this read is indexed again by its updater,
            # after us, so the index never ends on an older state of a row than the authority holds.
            rows = self.store.index_rows(ids)
            points = self.points(rows)
            try:
                self.index.upsert(points)
                # Marked indexed only once the index has it on disk: a point lost to a power cut after the
                # mark would never be repaired.
                self.index.flush()
            except IndexUnavailable as exc:  # a full disk, an unreachable server: expected, said once a minute
                self._throttle.log(
                    logging.WARNING,
                    "index write",
                    "vector index write failed; %d memories stay in the backlog: %s",
                    len(points),
                    exc,
                )
                return
            except Exception:
                self._throttle.log(
                    logging.WARNING,
                    "index write",
                    "vector index write failed; %d memories stay in the backlog",
                    len(points),
                    exc_info=True,
                )
                return
        # Only rows still as they were read: one updated meanwhile stays in the backlog for its updater.
        self.store.mark_indexed([(row.id, row.updated_at) for row in rows])

    def _vectors(self, rows: Sequence[IndexRow]) -> dict[int, np.ndarray]:
        """Each row's vector: the stored one, or, when stored with another model (the model was changed), its
        text embedded again, in one batch, and stored for the next index (another replica's) to reuse."""
        vectors = {
            row.id: row.vector for row in rows if row.vector_model == self.embedder.name and row.vector is not None
        }
        stale = [row for row in rows if row.id not in vectors]
        if stale:
            embedded = self.embedder.embed_documents([document_text(r.content, r.occurred_at) for r in stale])
            self.store.set_vectors(
                [(r.id, r.updated_at, v) for r, v in zip(stale, embedded, strict=True)], self.embedder.name
            )
            vectors |= {row.id: vector for row, vector in zip(stale, embedded, strict=True)}
        return vectors

    def apply_deletions(self, ids: Sequence[int]) -> None:
        try:
            with self._lock:
                self.index.delete(list(ids))
        except Exception as exc:
            self._throttle.log(
                logging.WARNING,
                "index delete",
                "vector index delete failed; %d deletions stay queued: %s",
                len(ids),
                exc,
                exc_info=not isinstance(exc, IndexUnavailable),
            )
            return
        self.store.clear_deletions(ids)

    def backlog(self) -> int:
        return self.store.backlog()

    def sync(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Apply queued deletions and index every unindexed row; return how many rows were indexed."""
        for chunk in batched(self.store.deletions(), 1000):
            self.apply_deletions(chunk)
        done = 0
        while True:
            ids = self.store.unindexed(SYNC_BATCH)
            if not ids:
                return done
            before = self.backlog()
            self.index_ids(ids)
            done += len(ids)
            if progress:
                progress(len(ids))
            if self.backlog() >= before:  # the index refused: stop, the next sync retries
                return done

    def reconcile(self) -> int:
        """Remove index points whose row is gone (e.g. a site deleted while the server was down)."""
        orphans: list[int] = []
        for chunk in batched(self.index.ids(), 1000):
            present = self.store.present(chunk)
            orphans += [i for i in chunk if i not in present]
        for chunk in batched(orphans, 1000):
            with self._lock:
                self.index.delete(chunk)
        return len(orphans)

    def reindex(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the index from the authority alone."""
        with self._lock:
            self.index.reset(self.expected())
        self.store.clear_all_deletions()
        self.store.mark_all_unindexed()
        return self.sync(progress=progress)
