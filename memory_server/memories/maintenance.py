"""Background upkeep, on one thread: what start-up left for later, then a loop every few seconds.

Once: the whole integrity check if start-up's was cut short; index the backlog start-up left (see
STARTUP_SYNC_LIMIT); drop index points whose row is gone; delete expired memories; embed the words of older
memories. Then, every MAINTENANCE_INTERVAL_S: delete memories that expired meanwhile (a few hundred per
transaction), retry any backlog, and build HNSW when enough points are unoptimised. An index that
follows a shared authority (memory_server/memories/follower.py) applies its changes every FOLLOW_INTERVAL_S instead
of keeping an outbox.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from memory_server.errors import Unavailable
from memory_server.index.base import IndexUnavailable
from memory_server.logging_setup import Throttle
from memory_server.memories.follower import CHANGE_RETENTION_S, FOLLOW_INTERVAL_S, IndexFollower
from memory_server.memories.system import Memories
from memory_server.storage.protocols import Storage

log = logging.getLogger("memory_server.memories")
# What upkeep expects now and then (a full disk, the database or the index server away): said without a traceback.
EXPECTED = (IndexUnavailable, Unavailable)

MAINTENANCE_INTERVAL_S = 10.0


def _once(step: Callable[[], int], done: str, failed: str) -> None:
    try:
        count = step()
        if count and done:
            log.info(done, count)
    except EXPECTED as exc:
        log.warning("%s: %s", failed, exc)
    except Exception:
        log.warning(failed, exc_info=True)


def _check_integrity(storage: Storage) -> int:
    damage = storage.check_integrity()
    if damage:
        log.error("%s", damage)
    return 0


def start_maintenance(storage: Storage, memories: Memories | None, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        if storage.integrity_unchecked:
            _once(lambda: _check_integrity(storage), "", "the full integrity check of the database failed to run")
        if memories is None:
            return
        if memories.follower is not None:
            _follow(memories, memories.follower, stop)
        else:
            _keep_outbox(memories, stop)

    thread = threading.Thread(target=run, name="index-maintenance", daemon=True)
    thread.start()
    return thread


def _keep_outbox(memories: Memories, stop: threading.Event) -> None:
    """The index belongs to this authority: index its backlog, drop orphan points, build HNSW."""
    outbox = memories.outbox
    _once(
        lambda: outbox.sync() if outbox.backlog() else 0,
        "indexed %d memories in the background",
        "indexing the backlog failed; retrying later",
    )
    _once(lambda: int(memories.reembedding.check_done()), "", "checking the re-embedding failed")
    _once(outbox.reconcile, "removed %d index points with no stored memory", "index reconciliation failed")
    _once(memories.writes.purge_expired, "deleted %d expired memories", "deleting expired memories failed")
    _once(
        memories.backfill_words,
        "embedded %d words of earlier memories for query expansion",
        "embedding the vocabulary of earlier memories failed",
    )
    throttle = Throttle(log)
    while not stop.wait(MAINTENANCE_INTERVAL_S):
        with _reported(throttle):
            # Before the backlog: the memories whose chains a purge joined are indexed in the same round.
            _purge(memories)
            if outbox.backlog():
                outbox.sync()
            memories.reembedding.check_done()
            # Builds HNSW in a child process once enough points are unoptimised; a no-op otherwise.
            memories.index.optimize()


def _follow(memories: Memories, follower: IndexFollower, stop: threading.Event) -> None:
    """This server's own index follows a shared authority: apply the others' changes every
    FOLLOW_INTERVAL_S; build HNSW and forget old changes every MAINTENANCE_INTERVAL_S."""
    _once(follower.catch_up, "applied %d changes of the authority to the index", "following the authority failed")
    _once(lambda: int(memories.reembedding.check_done()), "", "checking the re-embedding failed")
    _once(memories.writes.purge_expired, "deleted %d expired memories", "deleting expired memories failed")
    _once(
        memories.backfill_words,
        "embedded %d words of earlier memories for query expansion",
        "embedding the vocabulary of earlier memories failed",
    )
    throttle = Throttle(log)
    ticks_per_upkeep = max(1, round(MAINTENANCE_INTERVAL_S / FOLLOW_INTERVAL_S))
    tick = 0
    while not stop.wait(FOLLOW_INTERVAL_S):
        tick += 1
        with _reported(throttle):
            follower.catch_up()
            memories.reembedding.check_done()
            if tick % ticks_per_upkeep == 0:
                _purge(memories)
                memories.index.optimize()
                memories.storage.outbox.prune_changes(CHANGE_RETENTION_S)


def _purge(memories: Memories) -> None:
    purged = memories.writes.purge_expired()
    if purged:
        log.info("deleted %d expired memories", purged)


@contextlib.contextmanager
def _reported(throttle: Throttle) -> Iterator[None]:
    """A failed round is said once a minute and retried on the next."""
    try:
        yield
    except EXPECTED as exc:  # said once a minute
        throttle.log(logging.WARNING, "maintenance", "index maintenance waits: %s", exc)
    except Exception:
        throttle.log(logging.WARNING, "maintenance", "index maintenance failed; retrying later", exc_info=True)
