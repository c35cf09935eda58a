"""Background upkeep, on one thread: what start-up left for later, then a loop every few seconds.

Once: the whole integrity check if start-up's was cut short; index the backlog start-up left (see
STARTUP_SYNC_LIMIT); drop index points whose row is gone; embed the words of older memories. Then, every
MAINTENANCE_INTERVAL_S: retry any backlog, and build HNSW when enough points are unoptimised.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from server.index.base import IndexUnavailable
from server.logging_setup import Throttle
from server.memories.system import Memories
from server.storage.protocols import Storage

log = logging.getLogger("memory_server.memories")

MAINTENANCE_INTERVAL_S = 10.0


def _once(step: Callable[[], int], done: str, failed: str) -> None:
    try:
        count = step()
        if count and done:
            log.info(done, count)
    except Exception:
        log.warning(failed, exc_info=True)


def _check_integrity(storage: Storage) -> int:
    damage = storage.check_integrity()
    if damage:
        log.error("%s", damage)
    return 0


def start_maintenance(storage: Storage, memories: Memories | None, stop: threading.Event) -> threading.Thread:
    throttle = Throttle(log)

    def run() -> None:
        if storage.integrity_unchecked:
            _once(lambda: _check_integrity(storage), "", "the full integrity check of the database failed to run")
        if memories is None:
            return
        outbox = memories.outbox
        _once(lambda: outbox.sync() if outbox.backlog() else 0, "indexed %d memories in the background",
              "indexing the backlog failed; retrying later")
        _once(outbox.reconcile, "removed %d index points with no stored memory", "index reconciliation failed")
        _once(memories.backfill_words, "embedded %d words of earlier memories for query expansion",
              "embedding the vocabulary of earlier memories failed")
        while not stop.wait(MAINTENANCE_INTERVAL_S):
            try:
                if outbox.backlog():
                    outbox.sync()
                # Builds HNSW in a child process once enough points are unoptimised; a no-op otherwise.
                memories.index.optimize()
            except IndexUnavailable as exc:  # a full disk, an unreachable server: say so once a minute
                throttle.log(logging.WARNING, "maintenance", "index maintenance waits: %s", exc)
            except Exception:
                throttle.log(logging.WARNING, "maintenance", "index maintenance failed; retrying later",
                             exc_info=True)

    thread = threading.Thread(target=run, name="index-maintenance", daemon=True)
    thread.start()
    return thread
