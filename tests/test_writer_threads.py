"""The SQLite writer and readers under many threads, on a real database file.

Nothing of the writer's connection leaves its thread: before this held, a job's cursor dropped in the caller's
thread reset a cached statement the writer was running for another job, and SQLite answered "bad parameter or
other API misuse" (a remember answered 503 after its memory was committed). Read connections follow the
threads alive: a worker pool that ends and starts threads does not pile them up.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from memory_server.storage.factory import open_storage
from memory_server.storage.sqlite.writer import Writer

from conftest import make_settings

THREADS = 6
CALLS = 1500


def test_jobs_returning_cursors_never_misuse_the_writer_connection(tmp_path: Path) -> None:
    """Jobs as the stores write them (`lambda conn: conn.executemany(...)`, whose cursor is the job's result),
    the same statement from several threads at once, as the outbox marks rows indexed after each remember."""
    writer = Writer(tmp_path / "writer.db")
    failures: list[str] = []
    try:
        writer.run_sync(lambda conn: conn.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, version TEXT, done INT)"))
        writer.run_sync(
            lambda conn: conn.executemany("INSERT INTO rows VALUES (?, 'v1', 0)", [(i,) for i in range(THREADS * 10)])
        )

        def mark(worker: int) -> None:
            rows = [(worker * 10 + n, "v1") for n in range(10)]
            for _ in range(CALLS):
                try:
                    writer.run_sync(
                        lambda conn: conn.executemany(
                            "UPDATE rows SET done = done + 1 WHERE id = ? AND version = ?", rows
                        )
                    )
                except Exception as exc:
                    failures.append(repr(exc))

        threads = [threading.Thread(target=mark, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done = writer.run_sync(lambda conn: conn.execute("SELECT min(done), max(done) FROM rows").fetchone())
    finally:
        writer.close()
    assert failures == [], f"{len(failures)} of {THREADS * CALLS} writes failed, e.g. {failures[:3]}"
    assert tuple(done) == (CALLS, CALLS)


def test_no_cursor_of_the_writer_connection_leaves_the_writer_thread(tmp_path: Path) -> None:
    writer = Writer(tmp_path / "writer.db")
    try:
        assert writer.run_sync(lambda conn: conn.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY)")) is None
        assert writer.run_sync(lambda conn: conn.executemany("INSERT INTO rows VALUES (?)", [(1,), (2,)])) is None
        assert writer.run_sync(lambda conn: conn.execute("SELECT count(*) FROM rows").fetchone()[0]) == 2
    finally:
        writer.close()


def open_descriptors(path: Path) -> int:
    """How many of this process's file descriptors are open on `path`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            pass
    return count


def test_read_connections_of_ended_threads_are_closed(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    storage = open_storage(settings)

    def threads_that_read_once(count: int) -> int:
        """Threads that read once and end, as an idle worker pool's do; then the descriptors open on the file."""
        for _ in range(count):
            thread = threading.Thread(target=storage.outbox.backlog)
            thread.start()
            thread.join()
        return open_descriptors(settings.db_path)

    try:
        # SQLite may hold a closed connection's descriptor until its other connections release their locks:
        # a constant few. What must not happen is one more per thread that ever read.
        settled = threads_that_read_once(5)
        assert threads_that_read_once(30) <= settled
    finally:
        storage.close()
