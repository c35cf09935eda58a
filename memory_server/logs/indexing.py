"""Conversations recalled by topic: log items of the sites (or conversations) that ask for it become entries
`recall`, `search_memory` and `recall_context` find beside saved memories.

An append never waits for this: it commits its items as ever, and the conversation's row says it is
`indexing` with its items from `indexed_seq` on still to do. This indexer, in the background, reads those
items, takes the text of each (`turn_text`), embeds them, and stores them as memories of kind `turn` in one
transaction with the move of `indexed_seq` past them (MemoryStore.insert_turns), so an item is indexed once
whatever crashes or how many servers index: a crash between an append's commit and the indexing leaves the
items waiting, found again at start-up. An item without text is skipped and counted.

A turn is filed like a memory: type `turn`, the conversation's bucket (named by its appends; else
`default`), no team or project, provenance {conversation_id, seq}, occurred_at its item's recorded_at (or
the payload's own `occurred_at`). Deleting the conversation deletes its turns (memory_server/storage/deletion.py).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from memory_server.errors import AppError
from memory_server.logging_setup import Throttle
from memory_server.memories.validation import DEFAULT_BUCKET, check_timestamp
from memory_server.memories.writes import MemoryWrites
from memory_server.storage.protocols import LogStore, SiteStore
from memory_server.storage.records import TURN, NewMemory, RawItem, ToIndex

log = logging.getLogger("memory_server.logs")

# Items embedded and committed per transaction: a few seconds of model time on 2 cores at most, so a
# deletion or a newer conversation waits no longer than that.
INDEX_BATCH = 128
# Conversations taken per round: each gets one batch before any gets a second, so a long backfill does not
# hold up the turns of a conversation being written now.
CONVERSATIONS_PER_ROUND = 64
# Woken by every append; after a round that found nothing it looks again no sooner than this, so a stream
# of appends to conversations that are not indexed costs a few reads a second.
MIN_PAUSE_S = 0.05
# Without a wake (appends to another server, a site turned on from the CLI) it looks this often.
POLL_S = 1.0
# How often, and how far back, it looks for conversations an append created with the former setting while
# their site's setting was turned on (possible on PostgreSQL: see PostgresLogStore.mark_for_indexing).
SWEEP_S, SWEEP_BACK_S = 10.0, 600.0
ROLES = ("speaker", "role", "name")
LOGGED_ROUND = 1000  # a round that indexed this many items (a backfill) is logged


def turn_text(payload: object, max_bytes: int) -> str | None:
    """The text a log item is indexed by, or None (skipped): its `text`, else its `content` (a string, or a
    list of parts whose `text` strings are joined by newlines), prefixed with "<speaker>: " when it has a
    `speaker`, `role` or `name` string. At most `max_bytes` of UTF-8 (cut at a character)."""
    if not isinstance(payload, dict):
        return None
    body = payload.get("text")
    if not isinstance(body, str) or not body.strip():
        body = _content(payload.get("content"))
    if body is None or not body.strip():
        return None
    who = next((payload[k] for k in ROLES if isinstance(payload.get(k), str) and payload[k].strip()), None)
    text = f"{who.strip()}: {body.strip()}" if who else body.strip()
    encoded = text.encode("utf-8")
    return text if len(encoded) <= max_bytes else encoded[:max_bytes].decode("utf-8", errors="ignore")


def _content(content: object) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)]
        return "\n".join(p for p in parts if p.strip()) or None
    return None


def occurred_at(payload: dict[str, Any], recorded_at: str) -> str:
    """When the item happened: its payload's `occurred_at` when that is an RFC3339 timestamp with a timezone
    (a transcript logged after the fact), else when it was recorded."""
    given = payload.get("occurred_at")
    if isinstance(given, str):
        try:
            return check_timestamp("occurred_at", given)
        except AppError:  # not a timestamp: the recorded time stands
            pass
    return recorded_at


def turns_of(at: ToIndex, items: list[RawItem], max_bytes: int) -> tuple[list[NewMemory], int]:
    """The turns of these items of a conversation, and how many items had no text."""
    turns: list[NewMemory] = []
    skipped = 0
    for seq, recorded_at, raw in items:
        payload = json.loads(raw)
        text = turn_text(payload, max_bytes)
        if text is None:
            skipped += 1
            continue
        turns.append(
            NewMemory(
                content=text,
                type=TURN,
                location=None,
                project=None,
                team=None,
                bucket=at.bucket or DEFAULT_BUCKET,
                tags=(),
                metadata={},
                provenance={"conversation_id": at.conversation_id, "seq": seq},
                occurred_at=occurred_at(payload, recorded_at),
                kind=TURN,
            )
        )
    return turns, skipped


class LogIndexer:
    def __init__(
        self,
        logs: LogStore,
        sites: SiteStore,
        writes: MemoryWrites,
        *,
        batch: int = INDEX_BATCH,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.logs = logs
        self.sites = sites
        self.writes = writes
        self.batch = batch
        self.clock = clock
        self._wake = threading.Event()
        self._throttle = Throttle(log)
        self.indexed = 0  # items looked at by this process (turned into entries or skipped)

    def wake(self) -> None:
        """An append committed: look for items to index (cheap; called on the event loop)."""
        self._wake.set()

    def waiting(self) -> int:
        return self.logs.index_waiting()

    def drain(self, stop: threading.Event | None = None) -> int:
        """Index every item waiting (or until `stop`), a batch of each conversation per round; how many items
        were looked at."""
        done = 0
        while stop is None or not stop.is_set():
            pending = self.logs.to_index(CONVERSATIONS_PER_ROUND)
            if not pending:
                return done
            moved = 0
            for at in pending:
                if stop is not None and stop.is_set():
                    break
                moved += self.index_batch(at)
            done += moved
            if not moved:  # every one of them moved on by another indexer or being deleted: look again later
                return done
        return done

    def index_batch(self, at: ToIndex) -> int:
        """Index the conversation's next items (up to `batch`); how many were looked at (0: it changed since
        `at` was read, and is left to the next round)."""
        items = self.logs.replay(
            at.site_id, at.conversation_id, at.indexed_seq, min(self.batch, at.item_count - at.indexed_seq)
        )
        items = [item for n, item in enumerate(items) if item[0] == at.indexed_seq + n]  # gapless from there
        if not items:
            return 0
        turns, skipped = turns_of(at, items, self.writes.max_content_bytes)
        inserted = self.writes.insert_turns(at, items[-1][0] + 1, skipped, turns)
        if inserted is None:
            return 0
        self.indexed += len(items)
        return len(items)

    def sweep(self) -> int:
        """Find conversations an append created with its site's former setting (see SWEEP_S)."""
        since = int((self.clock() - SWEEP_BACK_S) * 1_000_000)
        return sum(self.logs.mark_for_indexing(site.id, since) for site in self.sites.sites() if site.index_logs)

    def start(self, stop: threading.Event) -> threading.Thread:
        def run() -> None:
            swept = 0.0
            while not stop.is_set():
                try:
                    if time.monotonic() - swept >= SWEEP_S:
                        self.sweep()
                        swept = time.monotonic()
                    done = self.drain(stop)
                    if done >= LOGGED_ROUND:
                        log.info("indexed %d log items", done)
                except Exception:
                    if stop.is_set():  # a shutdown closes the store under a running round
                        return
                    self._throttle.log(
                        logging.WARNING, "log indexing", "indexing log items failed; retrying later", exc_info=True
                    )
                if stop.wait(MIN_PAUSE_S):
                    return
                self._wake.wait(POLL_S)
                self._wake.clear()

        thread = threading.Thread(target=run, name="log-indexing", daemon=True)
        thread.start()
        return thread
