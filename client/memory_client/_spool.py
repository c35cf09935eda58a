"""The recorder's buffers: in memory, or a local SQLite file (the spool) that outlives the process.

Both hold items as the JSON text that will be sent, oldest first, and hand the recorder *batches*: a run of
the oldest items with an idempotency key. A batch, once formed, never changes (its key names exactly those
items); rejecting it for one bad item replaces it by smaller batches with new keys, which is safe because
the server appends a rejected batch not at all.

Spool layout (one conversation per file):

    meta(key, value)                         conversation_id, format
    items(id AUTOINCREMENT, payload, size)   recorded, not yet acknowledged or dead-lettered
    batches(first_id, last_id, key)          batch boundaries and keys, written before the batch is sent

Durability: WAL with synchronous=NORMAL. Each `record()` is its own committed transaction: the item is in
the file (the OS has it) when `record()` returns, so it survives SIGKILL or any crash of the client
process. A power cut or kernel crash may lose the items of the last moments (NORMAL does not fsync each
commit); `spool_fsync=True` makes every record an fsync'd commit (synchronous=FULL), which makes record()
wait on the disk. Checkpoints (which fsync) run in the worker thread, never inside `record()`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_client import _api

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None  # type: ignore[assignment]

FORMAT = "1"
CHECKPOINT_INTERVAL = 0.25  # seconds between WAL checkpoints while batches are being settled


class SpoolInUse(RuntimeError):
    """Another live recorder holds this spool file."""


def new_key() -> str:
    return uuid.uuid4().hex


@dataclass
class Batch:
    key: str
    payloads: list[str]
    sizes: list[int]
    ids: list[int] = field(default_factory=list)  # spool row ids; empty in memory
    _body: bytes | None = None

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def size(self) -> int:
        return sum(self.sizes)

    def body(self) -> bytes:
        if self._body is None:
            self._body = _api.encode_batch(self.payloads, self.key)
        return self._body

    def piece(self, start: int, stop: int) -> Batch:
        return Batch(new_key(), self.payloads[start:stop], self.sizes[start:stop], self.ids[start:stop])


class MemoryBuffer:
    """Unsent items in a deque. Every method is called with the recorder's lock held."""

    durable = False

    def __init__(self) -> None:
        self._queue: deque[tuple[str, int]] = deque()

    def recover(self) -> tuple[list[Batch], int, int]:
        return [], 0, 0

    def add(self, payload: str, size: int) -> None:
        self._queue.append((payload, size))

    def take(self, max_items: int, max_bytes: int, lock: threading.Lock) -> Batch | None:
        with lock:
            payloads: list[str] = []
            sizes: list[int] = []
            total = 0
            while self._queue and len(payloads) < max_items:
                payload, size = self._queue[0]
                if payloads and total + size > max_bytes:
                    break
                self._queue.popleft()
                payloads.append(payload)
                sizes.append(size)
                total += size
            return Batch(new_key(), payloads, sizes) if payloads else None

    def settle(self, batch: Batch) -> None:
        pass

    def replace(self, batch: Batch, pieces: list[Batch]) -> None:
        pass

    def maintain(self) -> None:
        pass

    def close(self) -> None:
        self._queue.clear()


class SpoolBuffer:
    """Unsent items and batch boundaries in a SQLite file.

    `add`, `settle` and `replace` write through one connection and are called with the recorder's lock
    held; `take` persists the new batch's boundaries and key under the lock. The items not yet in a batch
    are mirrored in memory (the same bound as the memory buffer applies), so forming a batch reads nothing
    back from the file; the file is read only by `recover`, when a recorder opens it.

    Row ids are plain rowids (max + 1: no AUTOINCREMENT bookkeeping on every insert). An id can only be
    reused once every item is gone, and so every batch: "not yet in a batch" is "above the last id of the
    open batches", or every item when none is open.
    """

    durable = True

    def __init__(self, path: str | os.PathLike[str], conversation_id: str, *, fsync: bool = False) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(f"{self.path}.lock", "a+")
        if fcntl is not None:
            try:
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._lock_file.close()
                raise SpoolInUse(f"{self.path} is in use by another recorder") from None
        try:
            self._db = self._connect(fsync)
            self._init(conversation_id)
        except BaseException:
            self._lock_file.close()
            raise
        self._queue: deque[tuple[int, str, int]] = deque()  # (id, payload, size) not yet in a batch
        self._open: dict[int, int] = {}  # first_id -> last_id of every batch not yet settled
        self._checkpointed = 0.0
        self._checkpointer: sqlite3.Connection | None = None

    def _connect(self, fsync: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints run in the worker (maintain)
        conn.execute("PRAGMA journal_size_limit = 8388608")
        return conn

    def _init(self, conversation_id: str) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, payload TEXT NOT NULL,"
                " size INTEGER NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS batches (first_id INTEGER PRIMARY KEY,"
                " last_id INTEGER NOT NULL, key TEXT NOT NULL)"
            )
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("conversation_id", conversation_id), ("format", FORMAT)],
                )
            elif meta.get("conversation_id") != conversation_id:
                raise ValueError(
                    f"{self.path} spools conversation {meta.get('conversation_id')!r}, not {conversation_id!r}"
                )
            elif meta.get("format") != FORMAT:
                raise ValueError(f"{self.path} has spool format {meta.get('format')!r}; expected {FORMAT}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def recover(self) -> tuple[list[Batch], int, int]:
        """Batches formed before a crash (sent again first, with their keys), and the unassigned backlog."""
        batches: list[Batch] = []
        for first, last, key in self._db.execute(
            "SELECT first_id, last_id, key FROM batches ORDER BY first_id"
        ).fetchall():
            rows = self._db.execute(
                "SELECT id, payload, size FROM items WHERE id BETWEEN ? AND ? ORDER BY id", (first, last)
            ).fetchall()
            if rows:
                batches.append(Batch(key, [r[1] for r in rows], [r[2] for r in rows], [r[0] for r in rows]))
                self._open[first] = last
            else:
                self._db.execute("DELETE FROM batches WHERE first_id = ?", (first,))
        rows = self._db.execute(
            "SELECT id, payload, size FROM items WHERE id > ? ORDER BY id", (self._assigned_through(),)
        ).fetchall()
        self._queue.extend(rows)
        return batches, len(rows), sum(r[2] for r in rows)

    def _assigned_through(self) -> int:
        return max(self._open.values(), default=0)

    def add(self, payload: str, size: int) -> None:
        rowid = self._db.execute("INSERT INTO items (payload, size) VALUES (?, ?)", (payload, size)).lastrowid
        self._queue.append((rowid or 0, payload, size))

    def take(self, max_items: int, max_bytes: int, lock: threading.Lock) -> Batch | None:
        with lock:
            ids: list[int] = []
            payloads: list[str] = []
            sizes: list[int] = []
            total = 0
            while self._queue and len(ids) < max_items:
                rowid, payload, size = self._queue[0]
                if ids and total + size > max_bytes:
                    break
                self._queue.popleft()
                ids.append(rowid)
                payloads.append(payload)
                sizes.append(size)
                total += size
            if not ids:
                return None
            batch = Batch(new_key(), payloads, sizes, ids)
            self._db.execute(
                "INSERT INTO batches (first_id, last_id, key) VALUES (?, ?, ?)", (ids[0], ids[-1], batch.key)
            )
            self._open[ids[0]] = ids[-1]
            return batch

    def settle(self, batch: Batch) -> None:
        self._transaction(
            [
                ("DELETE FROM items WHERE id BETWEEN ? AND ?", (batch.ids[0], batch.ids[-1])),
                ("DELETE FROM batches WHERE first_id = ?", (batch.ids[0],)),
            ]
        )
        self._open.pop(batch.ids[0], None)

    def replace(self, batch: Batch, pieces: list[Batch]) -> None:
        self._transaction(
            [("DELETE FROM batches WHERE first_id = ?", (batch.ids[0],))]
            + [
                ("INSERT INTO batches (first_id, last_id, key) VALUES (?, ?, ?)", (p.ids[0], p.ids[-1], p.key))
                for p in pieces
            ]
        )
        self._open.pop(batch.ids[0], None)
        self._open.update((p.ids[0], p.ids[-1]) for p in pieces)

    def _transaction(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in statements:
                self._db.execute(sql, params)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def maintain(self) -> None:
        """Fold the WAL back into the database file, at most every CHECKPOINT_INTERVAL seconds (it fsyncs;
        run by the worker outside the lock: a PASSIVE checkpoint never blocks record())."""
        now = time.monotonic()
        if now - self._checkpointed >= CHECKPOINT_INTERVAL:
            self._checkpointed = now
            if self._checkpointer is None:
                self._checkpointer = sqlite3.connect(
                    self.path, isolation_level=None, timeout=30, check_same_thread=False
                )
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        for conn in (self._checkpointer, self._db):
            try:
                if conn is not None:
                    conn.close()
            except sqlite3.Error:
                pass
        self._queue.clear()
        self._lock_file.close()  # releases the flock
