"""The private PostgreSQL server of tests/postgres.py: real connections, restarts, crashes and clean-up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import psycopg_pool
import pytest

from tests.postgres import PostgresDatabases, PostgresServer

ROOT = Path(__file__).resolve().parent.parent


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1").fetchall()
    return [name for (name,) in rows]


def test_a_row_survives_a_fast_restart(postgres_server: PostgresServer, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE items (seq bigint PRIMARY KEY, payload jsonb NOT NULL)")
        conn.execute("INSERT INTO items VALUES (0, %s::jsonb)", ['{"b": 1, "a": [true, null]}'])
        conn.commit()
        postgres_server.restart(mode="fast")
        # The connection open across the restart is closed by the server: clients must reconnect.
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")

    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT seq, payload::text FROM items").fetchall() == [(0, '{"a": [true, null], "b": 1}')]


def test_a_committed_row_survives_a_crash(postgres_server: PostgresServer, postgres_url: str) -> None:
    """`stop("immediate")` is a crash (no checkpoint, WAL replay on start): commits must still be there."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE log (n int)")
        conn.execute("INSERT INTO log SELECT generate_series(1, 1000)")
    postgres_server.stop(mode="immediate")
    assert not postgres_server.running()
    postgres_server.start()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*), sum(n) FROM log").fetchone() == (1000, 500500)
    assert "database system was not properly shut down" in postgres_server.log_path.read_text()


def test_stop_and_start(postgres_server: PostgresServer, postgres_url: str) -> None:
    postgres_server.stop()
    assert not postgres_server.running()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres_url, connect_timeout=5)
    postgres_server.start()
    assert postgres_server.running()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_the_durability_settings_are_production_ones(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method', 'listen_addresses')"
            ).fetchall()
        )
    assert settings["fsync"] == settings["synchronous_commit"] == settings["full_page_writes"] == "on"
    assert settings["listen_addresses"] == "", "no TCP listener: the Unix socket in the private directory only"


def test_databases_are_independent(postgres_url: str, postgres_databases: PostgresDatabases) -> None:
    other = postgres_databases.create()
    assert other != postgres_url
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE only_here (x int)")
        conn.execute("INSERT INTO only_here VALUES (1)")
    assert _tables(postgres_url) == ["only_here"]
    assert _tables(other) == []
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("CREATE TABLE only_here (x int)")  # the same name: no clash
        assert conn.execute("SELECT count(*) FROM only_here").fetchone() == (0,)


def test_databases_are_dropped_even_with_open_connections(postgres_server: PostgresServer) -> None:
    databases = PostgresDatabases(postgres_server)
    url = databases.create()
    name = databases.names[0]
    held = psycopg.connect(url)
    try:
        databases.drop_all()
        with psycopg.connect(postgres_server.url("postgres")) as conn:
            assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [name]).fetchone() == (0,)
    finally:
        held.close()


def test_a_pool_reconnects_after_a_restart(postgres_server: PostgresServer, postgres_url: str) -> None:
    """What the server's storage will rely on: psycopg-pool replaces connections a restart closed."""
    with psycopg_pool.ConnectionPool(
        postgres_url, min_size=2, max_size=2, open=True, timeout=30, check=psycopg_pool.ConnectionPool.check_connection
    ) as pool:
        with pool.connection() as conn:
            conn.execute("CREATE TABLE t (x int)")
        postgres_server.restart()
        for _ in range(4):  # more uses than connections: each one was closed by the restart
            with pool.connection() as conn:
                conn.execute("INSERT INTO t VALUES (1)")
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM t").fetchone() == (4,)


_ORPHAN = """
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.postgres import PostgresServer, _make_directory, _server_user, find_bindir
user = _server_user()
server = PostgresServer(find_bindir(), _make_directory(user), user=user)
server.arm_watchdog()
server.init()
server.start()
pid = (server.data_dir / "postmaster.pid").read_text().split()[0]
print(server.socket_dir, pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too (reaped by its parent later).
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def test_a_killed_test_process_leaves_no_server_behind(postgres_server: PostgresServer) -> None:
    """SIGKILL skips every finalizer: the watchdog still stops the server and removes its directory."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN, str(ROOT)], stdout=subprocess.PIPE, text=True, stderr=subprocess.PIPE
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, proc.stderr.read()  # type: ignore[union-attr]
        directory, pid = Path(line.split()[0]), int(line.split()[1])
        assert _alive(pid) and directory.is_dir()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 60
    while (_alive(pid) or directory.exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the orphaned postmaster is still running"
    assert not directory.exists(), "the orphaned server's directory is still there"
