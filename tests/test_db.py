"""The single writer: group commit keeps each job all-or-nothing and acknowledges only after COMMIT."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memory_server.storage.sqlite.connection import connect
from memory_server.storage.sqlite.writer import Writer


def make_table(path: Path) -> None:
    conn = connect(path)
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    conn.close()


def test_grouped_jobs_fail_alone_and_the_rest_commit(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    make_table(path)
    writer = Writer(path)
    gate = threading.Event()
    # Hold the writer busy so the next jobs queue up and run as one group.
    blocker = writer.submit(lambda conn: gate.wait(10))

    def insert(k: int):  # type: ignore[no-untyped-def]
        def work(conn):  # type: ignore[no-untyped-def]
            conn.execute("INSERT INTO t VALUES (?, 'a')", (k,))
            conn.execute("INSERT INTO t VALUES (?, 'b')", (k + 1000,))
            if k == 5:
                raise ValueError("job 5 fails after writing")
            return k

        return work

    futures = [writer.submit(insert(k)) for k in range(10)]
    gate.set()
    blocker.result(10)
    results = []
    for k, future in enumerate(futures):
        if k == 5:
            with pytest.raises(ValueError):
                future.result(10)
        else:
            results.append(future.result(10))
    writer.close()
    assert results == [k for k in range(10) if k != 5]
    conn = connect(path)
    keys = sorted(r[0] for r in conn.execute("SELECT k FROM t"))
    conn.close()
    assert keys == sorted([k for k in range(10) if k != 5] + [k + 1000 for k in range(10) if k != 5])


def test_a_closed_writer_refuses_work(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    make_table(path)
    writer = Writer(path)
    writer.close()
    from memory_server.errors import Unavailable

    with pytest.raises(Unavailable):
        writer.run_sync(lambda conn: conn.execute("INSERT INTO t VALUES (1, 'x')"))
