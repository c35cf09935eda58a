"""`memory-server doctor`'s checks of a SQLite database: read-only, nothing is changed."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from memory_server.storage.checks import FAIL, OK, Check, CheckedDatabase, schema_check
from memory_server.storage.files import emptied_database
from memory_server.storage.sqlite.connection import connect, quick_check
from memory_server.storage.sqlite.schema import SCHEMA

DOCTOR_BUSY_TIMEOUT_MS = 5_000


class SqliteState(CheckedDatabase[sqlite3.Connection]):
    """What the SQLite checks leave for doctor's later checks."""


def _counts(conn: sqlite3.Connection) -> tuple[int, int, int, int]:
    total, indexed = conn.execute("SELECT count(*), coalesce(sum(indexed = 1), 0) FROM memories").fetchone()
    deletions = conn.execute("SELECT count(*) FROM index_deletions").fetchone()[0]
    return int(total), int(indexed), int(total) - int(indexed), int(deletions)


def sqlite_checks(path: Path, state: SqliteState) -> Iterator[Check]:
    """The file opens, is in WAL mode, can take the write lock, has the current schema and is sound;
    leaves the read-only connection and the memory counts in `state`."""
    if not path.is_file():
        yield Check(
            "sqlite",
            FAIL,
            f"no database at {path}",
            "start the server (it creates the database), or pass the right --data-dir",
        )
        return
    emptied = emptied_database(path)
    if emptied is not None:  # opening it would make a new database of it
        yield Check(
            "sqlite",
            FAIL,
            f"{path}: {emptied}",
            "restore the latest `memory-server backup` into the data directory (then run `memory-server "
            "reindex`); do not start the server on it, which would begin a new, empty database",
        )
        return
    try:
        conn = connect(path, readonly=True)  # readonly: no journal-mode switch behind the check's back
        conn.execute(f"PRAGMA busy_timeout = {DOCTOR_BUSY_TIMEOUT_MS}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except (sqlite3.Error, OSError) as exc:
        yield Check(
            "sqlite",
            FAIL,
            f"cannot open {path}: {exc}",
            "restore the latest `memory-server backup` into the data directory",
        )
        return
    state.conn = conn
    yield Check("sqlite", OK, f"opens {path}")

    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    if str(mode).lower() == "wal":
        yield Check("sqlite journal", OK, "WAL")
    else:
        yield Check(
            "sqlite journal",
            FAIL,
            f"journal mode is {mode}, not WAL",
            "start the server or run any admin command (e.g. `memory-server site list`): it switches to WAL",
        )

    yield _check_writable(conn, path)

    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    yield schema_check(version, len(SCHEMA))

    try:
        problems = quick_check(conn) or []
    except sqlite3.Error as exc:
        problems = [str(exc)]
    if problems == ["ok"]:
        yield Check("sqlite integrity", OK, "quick_check ok")
    else:
        yield Check(
            "sqlite integrity",
            FAIL,
            f"quick_check: {'; '.join(problems[:3])}",
            "restore the latest `memory-server backup`; `memory-server export` may save what is readable",
        )
    if version >= 2:
        state.counts = _counts(conn)


def _check_writable(conn: sqlite3.Connection, path: Path) -> Check:
    fix = f"make {path.parent} and the files in it writable by the user running memory-server"
    for target in (path, path.parent):
        if not os.access(target, os.W_OK):
            return Check("sqlite writable", FAIL, f"{target} is not writable", fix)
    try:
        conn.execute("BEGIN IMMEDIATE")  # takes the write lock, writes nothing
        conn.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return Check(
                "sqlite writable",
                FAIL,
                f"the write lock was held for {DOCTOR_BUSY_TIMEOUT_MS // 1000} s",
                "find the process holding a long write transaction on the database",
            )
        return Check("sqlite writable", FAIL, f"cannot take the write lock: {exc}", fix)
    return Check("sqlite writable", OK, "write lock can be taken")
