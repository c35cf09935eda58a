"""Deleting conversation logs for good: on request (REST, the CLI) and by a site's log retention.

Both go the same way (see memory_server/storage/deletion.py): mark the conversation, which hides it at once, then
purge it in small transactions until nothing of it is left. Appends to other conversations run between any
two of those transactions; appends to the conversation itself wait until it is gone, then start a new log
at seq 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from memory_server.logging_setup import Throttle
from memory_server.storage.deletion import PURGE_BUDGET
from memory_server.storage.protocols import LogStore

log = logging.getLogger("memory_server.logs")

# How often the retention task looks for conversations past their site's retention.
RETENTION_INTERVAL_S = 60.0
# Conversations marked for deletion per transaction of the retention task.
EXPIRE_BATCH = 100
# The retention task's pause between two purge steps: it runs in the background, so it leaves the writer
# to the requests between its transactions.
RETENTION_PAUSE_S = 0.002


@dataclass(frozen=True, slots=True)
class Deleted:
    conversation_id: str
    item_count: int
    memories_unlinked: int
    turns_deleted: int = 0


def purge(
    store: LogStore,
    site_id: int,
    conversation_id: str,
    *,
    budget: int = PURGE_BUDGET,
    stop: threading.Event | None = None,
    pause_s: float = 0.0,
) -> bool:
    """Purge a conversation marked for deletion, one small transaction at a time, until it is gone (True) or
    `stop` is set (False: the next purger finishes it)."""
    while True:
        step = store.purge_step(site_id, conversation_id, budget)
        if step.done or (stop is not None and stop.is_set()):
            return step.done
        if pause_s:
            time.sleep(pause_s)


def delete_conversation(
    store: LogStore, site_id: int, conversation_id: str, *, budget: int = PURGE_BUDGET
) -> Deleted | None:
    """Delete a conversation with its items, idempotency keys, indexed turns and memory links; None if there is no such
    conversation. Blocking: returns once nothing of it is left. A conversation already being deleted (by
    another request or the retention task) is finished here too. The counts are those of the conversation as
    it was marked, whoever purges it (the retention task may take steps beside this call)."""
    marked = store.delete_conversation(site_id, conversation_id)
    if marked is None:
        return None
    purge(store, site_id, conversation_id, budget=budget)
    return Deleted(
        conversation_id=conversation_id,
        item_count=marked.item_count,
        memories_unlinked=marked.linked,
        turns_deleted=marked.turns,
    )


class LogRetention:
    """The background task that deletes conversations whose last activity is older than their site's log
    retention, and finishes deletions a crash or a shutdown cut short."""

    def __init__(
        self,
        store: LogStore,
        *,
        interval_s: float = RETENTION_INTERVAL_S,
        budget: int = PURGE_BUDGET,
        pause_s: float = RETENTION_PAUSE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.interval_s = interval_s
        self.budget = budget
        self.pause_s = pause_s
        self.clock = clock

    def run_once(self, stop: threading.Event | None = None) -> int:
        """Mark what is past its retention, purge every marked conversation; how many were purged."""
        stop = stop or threading.Event()
        purged = 0
        while not stop.is_set():
            marked = self.store.expire(int(self.clock() * 1_000_000), EXPIRE_BATCH)
            pending = self.store.purging(EXPIRE_BATCH)
            for site_id, conversation_id in pending:
                if stop.is_set():
                    break
                if purge(self.store, site_id, conversation_id, budget=self.budget, stop=stop, pause_s=self.pause_s):
                    purged += 1
            if marked < EXPIRE_BATCH and len(pending) < EXPIRE_BATCH:
                break
        return purged

    def start(self, stop: threading.Event) -> threading.Thread:
        def run() -> None:
            throttle = Throttle(log)
            while True:
                try:
                    purged = self.run_once(stop)
                    if purged:
                        log.info("deleted %d conversations past their site's log retention", purged)
                except Exception:
                    if not stop.is_set():  # a shutdown closes the store under a running purge
                        throttle.log(
                            logging.WARNING, "retention", "log retention failed; retrying later", exc_info=True
                        )
                if stop.wait(self.interval_s):
                    return

        thread = threading.Thread(target=run, name="log-retention", daemon=True)
        thread.start()
        return thread
