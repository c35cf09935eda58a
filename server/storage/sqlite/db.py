"""SQLite: connections, schema, and the single writer path.

Durability: WAL with `synchronous=FULL`, so a committed transaction is fsync'd before `commit()` returns.
Every write runs on one writer thread per process (`Writer`), inside `BEGIN IMMEDIATE`, so writers from
other processes (a CLI import while the server runs) are serialised by SQLite's lock and wait through
`busy_timeout` instead of failing. Readers use their own connections and never block the writer (WAL).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import queue
import sqlite3
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, TypeVar

from server.errors import AppError, Unavailable
from server.logging_setup import Throttle

log = logging.getLogger("memory_server.storage")

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000

# Tables holding a site's data, emptied when the site is deleted.
SITE_TABLES = ["tokens", "conversations", "log_items", "append_keys", "memories", "memory_words"]

SCHEMA = [
    # 1: sites, tokens, conversation logs
    """
    CREATE TABLE sites (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a recreated name gets a fresh tenant
        name TEXT NOT NULL UNIQUE,
        secret_hash TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        site_id INTEGER NOT NULL REFERENCES sites(id) ON DELETE CASCADE,
        token_hash TEXT NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        teams TEXT,
        projects TEXT,
        buckets TEXT,
        created_at TEXT NOT NULL,
        revoked_at TEXT
    );
    CREATE TABLE conversations (
        site_id INTEGER NOT NULL,
        conversation_id TEXT NOT NULL,
        item_count INTEGER NOT NULL,
        first_recorded_at TEXT NOT NULL,
        last_recorded_at TEXT NOT NULL,
        last_activity_us INTEGER NOT NULL,
        PRIMARY KEY (site_id, conversation_id)
    ) WITHOUT ROWID;
    CREATE INDEX conversations_by_activity
        ON conversations (site_id, last_activity_us DESC, conversation_id DESC);
    CREATE TABLE log_items (
        site_id INTEGER NOT NULL,
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        recorded_at TEXT NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY (site_id, conversation_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE append_keys (
        site_id INTEGER NOT NULL,
        conversation_id TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        count INTEGER NOT NULL,
        recorded_at TEXT NOT NULL,
        PRIMARY KEY (site_id, conversation_id, idempotency_key)
    ) WITHOUT ROWID;
    """,
    # 2: saved memories, their lexical index, and the outbox of index deletions
    """
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY,                -- the point id in the vector index
        reference TEXT NOT NULL UNIQUE,
        site_id INTEGER NOT NULL,
        content TEXT NOT NULL,
        type TEXT NOT NULL,
        location TEXT,
        project TEXT,
        team TEXT,
        bucket TEXT NOT NULL,
        tags TEXT NOT NULL,                    -- JSON list
        metadata TEXT NOT NULL,                -- JSON object
        provenance TEXT NOT NULL,              -- JSON object
        occurred_at TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        dedup_key TEXT NOT NULL,
        conversation_id TEXT,                  -- from provenance: neighbours give context when ranking
        conversation_seq INTEGER,
        vector BLOB,                           -- float32 embedding of the document text
        vector_model TEXT,
        indexed INTEGER NOT NULL DEFAULT 0,    -- the outbox: 0 until the vector index has the point
        UNIQUE (site_id, dedup_key)
    );
    CREATE INDEX memories_unindexed ON memories (id) WHERE indexed = 0;
    CREATE INDEX memories_by_bucket ON memories (site_id, bucket);
    CREATE INDEX memories_by_conversation ON memories (site_id, conversation_id, conversation_seq);
    CREATE VIRTUAL TABLE memories_fts USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 2');
    CREATE TABLE index_deletions (id INTEGER PRIMARY KEY);  -- forgotten rows the index may still hold
    CREATE TRIGGER memories_deleted AFTER DELETE ON memories BEGIN
        DELETE FROM memories_fts WHERE rowid = old.id;
        INSERT OR IGNORE INTO index_deletions (id) VALUES (old.id);
    END;
    """,
    # 3: single-word embeddings of each site's vocabulary, for query expansion (server/vocabulary.py)
    """
    CREATE TABLE memory_words (
        site_id INTEGER NOT NULL,
        word TEXT NOT NULL,
        model TEXT NOT NULL,                   -- vectors of another model are ignored and re-embedded
        vector BLOB NOT NULL,                  -- float32 embedding of the word alone
        PRIMARY KEY (site_id, word)
    ) WITHOUT ROWID;
    CREATE TABLE memory_words_backfill (       -- one row: memories up to through_id have words from model
        id INTEGER PRIMARY KEY CHECK (id = 1),
        model TEXT NOT NULL,
        through_id INTEGER NOT NULL
    );
    """,
]


class DatabaseDamaged(Exception):
    """The database file is corrupt or not a database; the message names it and says what to do."""


def damaged_message(path: Path, detail: str) -> str:
    return (f"the database {path} is damaged ({detail}); restore the latest `memory-server backup` into the data "
            "directory (then run `memory-server reindex`), or run `memory-server doctor` to see what is wrong")


def error_code(exc: BaseException) -> int | None:
    """The primary SQLite result code of a sqlite3 exception (extended codes folded), or None."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


DISK_FULL = "the disk holding the database is full; free space on it and retry (the server recovers by itself)"


def storage_failure(exc: BaseException, path: Path | None = None) -> AppError | None:
    """The client-facing error for a storage failure that is not a bug: a full disk, a damaged file, a lock
    held past the busy timeout. None for anything else."""
    code = error_code(exc)
    if code == sqlite3.SQLITE_FULL or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return Unavailable(DISK_FULL)
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return Unavailable(damaged_message(path or Path("memory.db"), str(exc)))
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return Unavailable(f"storage busy: {exc}")
    return None


class StorageHealth:
    """What the server last learned about its database, for /readyz: a write that failed for lack of space
    (and nothing written since) means the disk is still full; a damaged page stays damaged."""

    def __init__(self) -> None:
        self.disk_full_since: float | None = None
        self.damage: str | None = None

    def saw(self, failure: AppError) -> None:
        if failure.message == DISK_FULL:
            self.disk_full()
        elif "is damaged" in failure.message:
            self.damage = failure.message

    def wrote(self) -> None:
        self.disk_full_since = None

    def disk_full(self) -> None:
        if self.disk_full_since is None:
            self.disk_full_since = time.time()

    def problems(self) -> list[str]:
        found = [f"sqlite: {self.damage}"] if self.damage else []
        if self.disk_full_since is not None:
            since = time.strftime("%H:%M:%S", time.localtime(self.disk_full_since))
            found.append(f"sqlite: {DISK_FULL} (writes failing since {since})")
        return found


def quick_check(conn: sqlite3.Connection, *, budget_s: float | None = None) -> list[str] | None:
    """`PRAGMA quick_check`'s findings (["ok"] for a sound file), or None when `budget_s` ran out first.

    It reads every page: 0.15 s for 100k memories (240 MB) in the page cache, 4.5 s from a cold disk here,
    so start-up gives it a budget and `doctor` runs it whole."""
    if budget_s is not None:
        deadline = time.monotonic() + budget_s
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        return [str(row[0]) for row in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.OperationalError as exc:
        if budget_s is not None and "interrupt" in str(exc):
            return None
        raise
    finally:
        if budget_s is not None:
            conn.set_progress_handler(None, 0)


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open a connection with the pragmas every connection needs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: we issue BEGIN/COMMIT ourselves, so nothing opens a transaction behind our back.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    if not readonly:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise Unavailable(f"could not put {path} in WAL mode (got {mode})")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def migrate(conn: sqlite3.Connection, extra: list[str] | None = None) -> None:
    """Apply schema steps not yet applied (tracked in `PRAGMA user_version`), each in one transaction."""
    steps = SCHEMA + (extra or [])
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number, script in enumerate(steps[version:], start=version + 1):
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT our transaction; split on complete statements instead.
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


def transaction(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run `work` inside BEGIN IMMEDIATE … COMMIT; roll back on any exception."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:  # locked past busy_timeout, most likely
        raise (storage_failure(exc) or Unavailable(f"storage busy: {exc}")) from exc
    try:
        result = work(conn)
        conn.execute("COMMIT")
        return result
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class Writer:
    """The one write path of a process: a thread that runs write jobs in order.

    Group commit: jobs that queued up while the previous commit was being fsync'd run together in one
    transaction, each inside its own SAVEPOINT (a failing job is rolled back alone), and are acknowledged
    together after the one shared COMMIT. Under concurrency that turns N fsyncs into one; alone, a job
    still gets its own transaction at once.
    """

    MAX_GROUP = 64

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn = connect(path)
        self.health = StorageHealth()
        self._throttle = Throttle(log)
        self._jobs: queue.Queue[tuple[Callable[[sqlite3.Connection], object], Future] | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sqlite-writer", daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[sqlite3.Connection], T]) -> Future[T]:
        future: Future[T] = Future()
        if self._closed:
            future.set_exception(Unavailable("the server is shutting down"))
        else:
            self._jobs.put((work, future))  # type: ignore[arg-type]
        return future

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.wrap_future(self.submit(work))

    def run_sync(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return self.submit(work).result()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            group = []
            job = self._jobs.get()
            while job is not None:
                if job[1].set_running_or_notify_cancel():
                    group.append(job)
                if len(group) >= self.MAX_GROUP:
                    break
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
            else:
                stopping = True
            if group:
                self._commit_group(group)
        self._conn.close()

    def _commit_group(self, group: list[tuple[Callable[[sqlite3.Connection], object], Future]]) -> None:
        outcomes: list[tuple[bool, object]] = []

        def run_all(conn: sqlite3.Connection) -> None:
            for work, _ in group:
                conn.execute("SAVEPOINT job")
                try:
                    outcomes.append((True, work(conn)))
                    conn.execute("RELEASE job")
                except BaseException as exc:  # this job's changes are undone; the others go on
                    try:
                        conn.execute("ROLLBACK TO job")
                        conn.execute("RELEASE job")
                    except sqlite3.Error:
                        raise exc from None  # SQLite ended the whole transaction itself (e.g. a full disk)
                    outcomes.append((False, exc))

        changes = self._conn.total_changes
        try:
            transaction(self._conn, run_all)
        except BaseException as exc:  # BEGIN or COMMIT failed: nothing of the group is durable
            failure = self._failure(exc)
            for _, future in group:
                future.set_exception(failure)
            return
        if self._conn.total_changes != changes:
            self.health.wrote()
        for (_, future), (ok, value) in zip(group, outcomes):
            if ok:
                future.set_result(value)
            else:
                future.set_exception(self._failure(value))  # type: ignore[arg-type]

    def _failure(self, exc: BaseException) -> BaseException:
        """A storage failure as the error clients get (logged at most once a minute); anything else as is."""
        failure = storage_failure(exc, self._path)
        if failure is None:
            return exc
        self.health.saw(failure)
        self._throttle.log(logging.ERROR, failure.message, "write failed: %s (%s)", failure.message, exc)
        return failure

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            self._thread.join(timeout=30)


class Readers:
    """One read connection per thread (sqlite3 connections are cheap to keep, costly to reopen)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self._path, readonly=True)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
