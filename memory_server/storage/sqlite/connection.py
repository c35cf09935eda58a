"""SQLite connections: the pragmas every connection needs, the integrity check, and what its errors mean.

Durability: WAL with `synchronous=FULL`, so a committed transaction is fsync'd before COMMIT returns.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memory_server.errors import AppError, Unavailable
from memory_server.storage.files import emptied_database
from memory_server.storage.health import DISK_FULL, DatabaseDamaged, damaged_message

BUSY_TIMEOUT_MS = 30_000


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


def error_code(exc: BaseException) -> int | None:
    """The primary SQLite result code of a sqlite3 exception (extended codes folded), or None."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_damage(exc: BaseException) -> bool:
    return error_code(exc) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def refuse_emptied(path: Path) -> None:
    """An emptied database in a data directory in use is damage (memory_server/storage/files.py), not a new one."""
    detail = emptied_database(path)
    if detail is not None:
        raise DatabaseDamaged(damaged_message(str(path), detail))


@contextmanager
def naming_damage(path: Path) -> Iterator[None]:
    """A damaged file (or one that is not a database at all, or emptied) met inside raises DatabaseDamaged
    naming `path` and saying what to do, as start-up does, instead of SQLite's bare "database disk image is
    malformed"."""
    refuse_emptied(path)
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise DatabaseDamaged(damaged_message(str(path), str(exc))) from exc
        raise


def sqlite_failure(exc: BaseException, path: Path | None = None) -> AppError | None:
    """A full disk, a damaged file, a lock held past the busy timeout; None for anything else."""
    code = error_code(exc)
    if code == sqlite3.SQLITE_FULL:
        return Unavailable(DISK_FULL)
    if is_damage(exc):
        return Unavailable(damaged_message(str(path or "memory.db"), str(exc)))
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return Unavailable(f"storage busy: {exc}")
    return None


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
