"""The single writer path and the per-thread readers.

Every write runs on one writer thread per process (`Writer`), inside `BEGIN IMMEDIATE`, so writers from
other processes (a CLI import while the server runs) are serialised by SQLite's lock and wait through
`busy_timeout` instead of failing. Readers use their own connections and never block the writer (WAL).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from memory_server.errors import Unavailable
from memory_server.logging_setup import Throttle
from memory_server.storage.health import StorageHealth
from memory_server.storage.sqlite.connection import connect, sqlite_failure

log = logging.getLogger("memory_server.storage")

T = TypeVar("T")
# Jobs of every result type share one queue: the writer only passes each result to its own future.
Job = tuple[Callable[[sqlite3.Connection], Any], "Future[Any]"]


def transaction(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run `work` inside BEGIN IMMEDIATE … COMMIT; roll back on any exception."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:  # locked past busy_timeout, most likely
        raise (sqlite_failure(exc) or Unavailable(f"storage busy: {exc}")) from exc
    try:
        result = work(conn)
        conn.execute("COMMIT")
        return result
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def detached(result: T) -> T | None:
    """A job's result as it may leave the writer thread: never a cursor of the writer's connection.

    A cursor holds one of the connection's cached statements. Dropped in the caller's thread, it resets that
    statement there, while the writer may be running the same cached statement for a later job (the same SQL):
    SQLite then answers "bad parameter or other API misuse" (SQLITE_MISUSE) to one of them. A cursor is
    closed here, on the writer thread, and its job's result is None."""
    if isinstance(result, sqlite3.Cursor):
        result.close()
        return None
    return result


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
        self.health = StorageHealth("sqlite")
        self._throttle = Throttle(log)
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sqlite-writer", daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[sqlite3.Connection], T]) -> Future[T]:
        future: Future[T] = Future()
        if self._closed:
            future.set_exception(Unavailable("the server is shutting down"))
        else:
            self._jobs.put((work, future))
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

    def _commit_group(self, group: list[Job]) -> None:
        outcomes: list[tuple[bool, object]] = []

        def run_all(conn: sqlite3.Connection) -> None:
            for work, _ in group:
                conn.execute("SAVEPOINT job")
                try:
                    outcomes.append((True, detached(work(conn))))
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
        for (_, future), (ok, value) in zip(group, outcomes, strict=True):
            if ok:
                future.set_result(value)
            else:
                future.set_exception(self._failure(value))  # type: ignore[arg-type]

    def _failure(self, exc: BaseException) -> BaseException:
        """A storage failure as the error clients get (logged at most once a minute); anything else as is."""
        failure = sqlite_failure(exc, self._path)
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
    """One read connection per thread (sqlite3 connections are cheap to keep, costly to reopen).

    Worker pools end idle threads and start new ones as load comes and goes; the connection of a thread that
    has ended (and its page cache) is closed when another thread opens its own, so their number follows the
    threads alive, not every thread there ever was."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._local = threading.local()
        self._open: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self._path, readonly=True)
            self._local.conn = conn
            with self._lock:
                ended = [(thread, old) for thread, old in self._open if not thread.is_alive()]
                self._open = [(thread, old) for thread, old in self._open if thread.is_alive()]
                self._open.append((threading.current_thread(), conn))
            for _, old in ended:  # no thread can use these again
                old.close()
        return conn

    def count(self) -> int:
        """Open read connections."""
        with self._lock:
            return len(self._open)

    def close(self) -> None:
        with self._lock:
            for _, conn in self._open:
                conn.close()
            self._open.clear()
