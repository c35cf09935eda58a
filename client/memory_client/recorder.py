"""A recorder appends a conversation's items in the background: `record()` never waits on the network.

    record(item) ──► buffer (memory or SQLite spool) ──► worker thread ──► POST .../items + idempotency_key
                                                               │
                             ack ──► forget the batch          ├─ unavailable / 5xx / timeout / refused:
                                                               │    the SAME batch, the SAME key, again
                                                               │    (exponential backoff, jitter, capped)
                                                               └─ invalid_parameters / payload_too_large:
                                                                    split the batch until the bad item is
                                                                    alone; dead-letter it; go on

Rules (docs/spec.md, "The client's side"): the acknowledgement is a durability signal, not flow control;
validation errors are permanent; every other failure is retried from the buffer; a retry reuses the batch's
key, so it never appends twice. Batches are sent one at a time, oldest first, so the log keeps the order of `record()`.

The worker is a thread for the sync and the async client alike (`AsyncClient.recorder` gives it its own
sync HTTP connection): `record()` stays a plain, non-blocking call in async code, and delivery goes on
while the event loop is busy. No lock is ever held across network I/O; `record()` holds the recorder's
lock only to append to the buffer (with a spool: one SQLite insert, no fsync).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import random
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from memory_client import _api
from memory_client._spool import Batch, MemoryBuffer, SpoolBuffer
from memory_client.errors import ITEM_ERRORS, InvalidParameters, MemoryServerError, TransportError
from memory_client.models import AppendAck

log = logging.getLogger("memory_client.recorder")

SERVER_MAX_ITEMS = 1000
SERVER_MAX_BATCH_BYTES = 4 * 1024 * 1024

MAX_BATCH_ITEMS = 500
MAX_BATCH_BYTES = 1024 * 1024
MAX_DELAY = 0.05
MAX_BUFFER_ITEMS = 100_000
MAX_BUFFER_BYTES = 64 * 1024 * 1024
BACKOFF_INITIAL = 0.1
BACKOFF_MAX = 5.0
CLOSE_TIMEOUT = 5.0

# Where the server's validation message points at one item: `items[3] is ...` or `body.items.3: ...`.
ITEM_POSITION = re.compile(r"items(?:\[(\d+)\]|\.(\d+))")

DeadLetterHandler = Callable[[dict[str, Any], MemoryServerError], None]


class Sender(Protocol):
    def _append_encoded(self, conversation_id: str, body: bytes) -> AppendAck: ...


@dataclass(frozen=True)
class RecorderStats:
    """A snapshot of a recorder's counters (items, unless named otherwise)."""

    pending: int  # recorded (or recovered from the spool) and neither acknowledged nor dead-lettered
    acked: int  # acknowledged by the server (a duplicate acknowledgement counts: the items are there)
    duplicates: int  # of those, acknowledged as a duplicate: a resent batch the server already had
    dead: int  # dead-lettered: rejected by the server as invalid or too large, or not JSON at all
    dropped: int  # refused by record() because the buffer was full, or recorded after close()
    recovered: int  # found in the spool when this recorder opened it
    batches: int  # batches acknowledged
    retries: int  # failed attempts that were retried
    last_error: str | None


def split_bounds(size: int, error: MemoryServerError) -> list[tuple[int, int]]:
    """How to split a rejected batch: around the item the error names, else in halves."""
    match = ITEM_POSITION.search(error.message)
    if match:
        at = int(match.group(1) or match.group(2))
        if 0 <= at < size:
            return [(a, b) for a, b in ((0, at), (at, at + 1), (at + 1, size)) if b > a]
    half = size // 2
    return [(0, half), (half, size)]


class Recorder:
    """Records one conversation's items; see the module docstring. Made by `Client.recorder(...)`.

    Buffer full (`max_buffer_items` or `max_buffer_bytes` reached, counting everything not yet
    acknowledged): the new item is dropped, counted in `dropped` and logged (once when dropping starts,
    once with the total when it stops). The conversation is never blocked and nothing already buffered is
    ever given up: what is kept is an exact prefix of what was recorded, in order.
    """

    def __init__(
        self,
        sender: Sender,
        conversation_id: str,
        *,
        spool: str | os.PathLike[str] | None = None,
        max_batch_items: int = MAX_BATCH_ITEMS,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        max_delay: float = MAX_DELAY,
        max_buffer_items: int = MAX_BUFFER_ITEMS,
        max_buffer_bytes: int = MAX_BUFFER_BYTES,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
        on_dead_letter: DeadLetterHandler | None = None,
        spool_fsync: bool = False,
        close_timeout: float = CLOSE_TIMEOUT,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        _api.conversation(conversation_id)
        if not 1 <= max_batch_items <= SERVER_MAX_ITEMS:
            raise ValueError(f"max_batch_items must be 1-{SERVER_MAX_ITEMS}")
        if not 1 <= max_batch_bytes <= SERVER_MAX_BATCH_BYTES:
            raise ValueError(f"max_batch_bytes must be 1-{SERVER_MAX_BATCH_BYTES}")
        if max_delay < 0 or backoff_initial <= 0 or backoff_max < backoff_initial:
            raise ValueError("max_delay must be >= 0 and 0 < backoff_initial <= backoff_max")
        if max_buffer_items < 1 or max_buffer_bytes < 1:
            raise ValueError("max_buffer_items and max_buffer_bytes must be positive")
        self.conversation_id = conversation_id
        self._sender = sender
        self._max_items = max_batch_items
        self._max_bytes = max_batch_bytes
        self._max_delay = max_delay
        self._buffer_items = max_buffer_items
        self._buffer_bytes = max_buffer_bytes
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._on_dead_letter = on_dead_letter
        self._close_timeout = close_timeout
        self._on_close = on_close

        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the worker waits here for items
        self._progress = threading.Condition(self._lock)  # flush() waits here for settled items
        self._stop = threading.Event()

        self._buffer: MemoryBuffer | SpoolBuffer = (
            MemoryBuffer() if spool is None else SpoolBuffer(spool, conversation_id, fsync=spool_fsync)
        )
        ready, unassigned, unassigned_bytes = self._buffer.recover()
        self._ready: deque[Batch] = deque(ready)  # batches with a key, oldest first; ready[0] is in flight
        self._unassigned = unassigned  # items not yet in a batch
        self._unassigned_bytes = unassigned_bytes
        self._unassigned_since = 0.0  # monotonic time the oldest unassigned item arrived (0: long ago)
        self._pending = unassigned + sum(len(b) for b in ready)
        self._pending_bytes = unassigned_bytes + sum(b.size for b in ready)
        self._recovered = self._pending
        self._recorded = self._pending  # items ever put into the buffer; they settle in this order
        self._settled = 0
        self._acked = 0
        self._duplicates = 0
        self._dead = 0
        self._dropped = 0
        self._dropping = 0  # drops in the current overflow episode
        self._batches = 0
        self._retries = 0
        self._last_error: str | None = None
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._unencodable: list[tuple[Any, MemoryServerError]] = []  # not JSON: dead on arrival
        self._unencodable_recorded = 0
        self._unencodable_reported = 0
        self._dropped_after_close = 0

        if self._recovered:
            log.info("recorder for %s: %d items recovered from %s", conversation_id, self._recovered, spool)
        self._thread = threading.Thread(target=self._run, name=f"memory-recorder-{conversation_id}", daemon=True)
        self._thread.start()
        _live.add(self)

    # --- the conversation's side: never waits on the network -----------------------------------------

    def record(self, item: Mapping[str, Any]) -> None:
        """Buffer one JSON object for appending; returns at once. With a spool, the item is in the spool
        file when this returns. Never raises for the item: one that is not a JSON object is dead-lettered,
        one that does not fit the full buffer is dropped (both counted and logged)."""
        try:
            payload = _api.serialize(item)
        except (TypeError, ValueError, RecursionError) as exc:
            error = InvalidParameters(f"the item is not a JSON object: {exc}")
            with self._lock:
                self._unencodable.append((item, error))
                self._unencodable_recorded += 1
                self._work.notify()
            return
        size = len(payload.encode("utf-8"))
        message = None
        with self._lock:
            if self._closing:
                self._dropped += 1
                if not self._dropped_after_close:
                    message = "record() after close(): items are dropped"
                self._dropped_after_close += 1
            elif self._pending >= self._buffer_items or self._pending_bytes + size > self._buffer_bytes:
                self._dropped += 1
                self._dropping += 1
                if self._dropping == 1:
                    message = (
                        f"recorder buffer full ({self._pending} items, {self._pending_bytes} bytes): "
                        "dropping new items until it drains"
                    )
            else:
                message = self._add(payload, size)
        if message is not None:
            log.warning("%s (conversation %s)", message, self.conversation_id)

    def _add(self, payload: str, size: int) -> str | None:
        """Put one item in the buffer (lock held); returns what to log, if anything."""
        try:
            self._buffer.add(payload, size)
        except Exception as exc:  # the spool's disk is full or failing: drop the item, never raise
            self._dropped += 1
            return f"spool write failed, item dropped: {exc}"
        if self._unassigned == 0:
            self._unassigned_since = time.monotonic()
        self._unassigned += 1
        self._unassigned_bytes += size
        self._pending += 1
        self._pending_bytes += size
        self._recorded += 1
        self._work.notify()
        if self._dropping:
            dropped, self._dropping = self._dropping, 0
            return f"recorder buffer drained: {dropped} items were dropped while it was full"
        return None

    # --- counters -------------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def acked(self) -> int:
        return self._acked

    @property
    def dead(self) -> int:
        return self._dead

    @property
    def dropped(self) -> int:
        return self._dropped

    def stats(self) -> RecorderStats:
        with self._lock:
            return RecorderStats(
                self._pending,
                self._acked,
                self._duplicates,
                self._dead,
                self._dropped,
                self._recovered,
                self._batches,
                self._retries,
                self._last_error,
            )

    # --- waiting and closing --------------------------------------------------------------------------

    def flush(self, timeout: float) -> bool:
        """Wait until everything recorded so far is acknowledged or dead-lettered (True), or `timeout`
        seconds pass (False). Partial batches go out at once instead of waiting for `max_delay`."""
        deadline = time.monotonic() + timeout
        with self._lock:
            target = self._recorded
            unencodable = self._unencodable_recorded
            self._flushing += 1
            self._work.notify()
            try:
                while self._settled < target or self._unencodable_reported < unencodable:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not self._thread.is_alive():
                        return False
                    self._progress.wait(remaining)
                return True
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> bool:
        """Flush for up to `timeout` seconds (default `close_timeout`), then stop the worker. Returns whether
        everything was delivered. Undelivered items stay in the spool for the next recorder on it; without a
        spool they are lost (logged). Later `record()` calls are dropped."""
        with self._lock:
            if self._closing:
                return self._pending == 0
            self._closing = True
            self._work.notify()
        delivered = self.flush(self._close_timeout if timeout is None else timeout)
        self._stop.set()
        with self._lock:
            self._work.notify_all()
        self._thread.join(timeout=1.0)
        with self._lock:
            self._closed = True
            left = self._pending
            self._buffer.close()
        _live.discard(self)
        if left:
            where = f"kept in {self._buffer.path}" if isinstance(self._buffer, SpoolBuffer) else "lost"
            log.warning("recorder for %s closed with %d items undelivered (%s)", self.conversation_id, left, where)
        if self._on_close is not None:
            self._on_close()
        return delivered and not left

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- the worker -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                batch = self._next_batch()
                if batch is None:
                    return
                if self._deliver(batch):
                    self._maintain()
            except Exception:  # a bug here must not end delivery for the process's lifetime
                log.exception("recorder worker error (conversation %s); going on", self.conversation_id)
                if self._stop.wait(self._backoff_max):
                    return

    def _next_batch(self) -> Batch | None:
        """The batch to send next: the oldest keyed one, or a new one once enough has gathered (count,
        bytes, `max_delay`, or a flush/close asking for it now). None when stopping."""
        while True:
            with self._lock:
                unencodable, self._unencodable = self._unencodable, []
                if not unencodable:
                    if self._stop.is_set():
                        return None
                    if self._ready:
                        return self._ready[0]
                    if self._unassigned == 0:
                        if self._closing:
                            return None
                        self._work.wait()
                        continue
                    wait = self._unassigned_since + self._max_delay - time.monotonic()
                    urgent = (
                        self._unassigned >= self._max_items
                        or self._unassigned_bytes >= self._max_bytes
                        or self._flushing
                        or self._closing
                    )
                    if wait > 0 and not urgent:
                        self._work.wait(wait)
                        continue
            if unencodable:
                for item, error in unencodable:
                    self._report_dead(item, error)
                    with self._lock:
                        self._dead += 1
                        self._unencodable_reported += 1
                        self._progress.notify_all()
                continue
            batch = self._buffer.take(self._max_items, self._max_bytes, self._lock)
            if batch is None:  # only if the counters and the buffer disagree: resynchronise on them
                with self._lock:
                    self._unassigned = 0
                    self._unassigned_bytes = 0
                continue
            with self._lock:
                self._unassigned -= len(batch)
                self._unassigned_bytes -= batch.size
                self._unassigned_since = 0.0  # what is left has waited for this batch: no more lingering
                self._ready.append(batch)
                return batch

    def _deliver(self, batch: Batch) -> bool:
        """Send one batch until it is acknowledged (True), split, dead-lettered, or the recorder stops."""
        attempt = 0
        while not self._stop.is_set():
            try:
                ack = self._sender._append_encoded(self.conversation_id, batch.body())
            except ITEM_ERRORS as exc:
                self._reject(batch, exc)
                return False
            except MemoryServerError as exc:
                error = exc
            except Exception as exc:  # the HTTP library failing in an unforeseen way: retry as a transport error
                error = TransportError(f"{type(exc).__name__}: {exc}")
            else:
                self._accept(batch, ack, attempt)
                return True
            attempt += 1
            delay = self._delay(attempt, error)
            with self._lock:
                self._retries += 1
                self._last_error = str(error)
            self._log_failure(error, attempt, delay, len(batch))
            if self._stop.wait(delay):
                break
        return False

    def _delay(self, attempt: int, error: MemoryServerError) -> float:
        # Exponential with "equal jitter": half fixed, half random, so a fleet does not retry in step.
        ceiling = min(self._backoff_max, self._backoff_initial * 2.0 ** min(attempt - 1, 30))
        delay = ceiling / 2 + random.uniform(0, ceiling / 2)
        if error.retry_after is not None:
            delay = max(delay, min(error.retry_after, self._backoff_max))
        return delay

    def _log_failure(self, error: MemoryServerError, attempt: int, delay: float, size: int) -> None:
        if not error.retryable:  # unauthorized, forbidden, not_found...: the configuration, not the moment
            level = logging.ERROR if attempt == 1 or attempt % 20 == 0 else logging.DEBUG
        else:
            level = logging.WARNING if attempt == 1 else logging.DEBUG
        log.log(
            level,
            "append of %d items to %s failed (%s); retrying the same batch in %.2fs (attempt %d)",
            size,
            self.conversation_id,
            error,
            delay,
            attempt,
        )

    def _accept(self, batch: Batch, ack: AppendAck, attempts: int) -> None:
        if ack.count != len(batch):
            log.error(
                "acknowledgement for %d items covers %d (conversation %s, key %s)",
                len(batch),
                ack.count,
                self.conversation_id,
                batch.key,
            )
        with self._lock:
            if self._closed:
                return
            self._buffer.settle(batch)
            self._ready.popleft()
            self._pending -= len(batch)
            self._pending_bytes -= batch.size
            self._settled += len(batch)
            self._acked += len(batch)
            if ack.duplicate:
                self._duplicates += len(batch)
            self._batches += 1
            self._progress.notify_all()
        if attempts:
            log.info("append of %d items to %s delivered after %d retries", len(batch), self.conversation_id, attempts)

    def _reject(self, batch: Batch, error: MemoryServerError) -> None:
        """A permanent error: alone, the item is dead; in company, split the batch to find it."""
        if len(batch) > 1:
            pieces = [batch.piece(a, b) for a, b in split_bounds(len(batch), error)]
            with self._lock:
                if self._closed:
                    return
                self._buffer.replace(batch, pieces)
                self._ready.popleft()
                self._ready.extendleft(reversed(pieces))
            log.debug("batch of %d rejected (%s); split into %s", len(batch), error, [len(p) for p in pieces])
            return
        # The callback first: a crash before the spool forgets the item means it is reported again by
        # the next recorder, never not at all.
        self._report_dead(json.loads(batch.payloads[0]), error)
        with self._lock:
            if self._closed:
                return
            self._buffer.settle(batch)
            self._ready.popleft()
            self._pending -= 1
            self._pending_bytes -= batch.size
            self._settled += 1
            self._dead += 1
            self._progress.notify_all()

    def _report_dead(self, item: Any, error: MemoryServerError) -> None:
        try:
            preview = repr(item)
        except Exception:
            preview = f"<{type(item).__name__}>"
        if len(preview) > 200:
            preview = preview[:200] + "..."
        log.error("dead letter for conversation %s: %s; item: %s", self.conversation_id, error, preview)
        if self._on_dead_letter is not None:
            try:
                self._on_dead_letter(item, error)
            except Exception:
                log.exception("the dead-letter callback failed")

    def _maintain(self) -> None:
        try:
            self._buffer.maintain()
        except Exception:
            log.debug("spool checkpoint failed", exc_info=True)


class AsyncRecorder:
    """The recorder of an `AsyncClient`: the same worker thread (with its own sync HTTP connection);
    `record()` is a plain non-blocking call, `flush()` and `close()` are awaitable."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.conversation_id = recorder.conversation_id

    def record(self, item: Mapping[str, Any]) -> None:
        self._recorder.record(item)

    async def flush(self, timeout: float) -> bool:
        import asyncio

        return await asyncio.to_thread(self._recorder.flush, timeout)

    async def close(self, timeout: float | None = None) -> bool:
        import asyncio

        return await asyncio.to_thread(self._recorder.close, timeout)

    @property
    def pending(self) -> int:
        return self._recorder.pending

    @property
    def acked(self) -> int:
        return self._recorder.acked

    @property
    def dead(self) -> int:
        return self._recorder.dead

    @property
    def dropped(self) -> int:
        return self._recorder.dropped

    def stats(self) -> RecorderStats:
        return self._recorder.stats()

    async def __aenter__(self) -> AsyncRecorder:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


# Recorders still open when the interpreter exits get `close_timeout` seconds to deliver what they hold.
_live: weakref.WeakSet[Recorder] = weakref.WeakSet()


@atexit.register
def _close_live_recorders() -> None:
    for recorder in list(_live):
        try:
            recorder.close()
        except Exception:
            log.debug("closing a recorder at exit failed", exc_info=True)
