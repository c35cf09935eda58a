"""The SQLite authority: one database file in the data directory, its stores, and its own operations."""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from memory_server.storage.backends import SQLITE
from memory_server.storage.files import private_dir, private_file
from memory_server.storage.health import DatabaseDamaged, damaged_message
from memory_server.storage.sqlite.candidates import SqliteCandidateStore
from memory_server.storage.sqlite.connection import connect, is_damage, quick_check, refuse_emptied
from memory_server.storage.sqlite.logs import SqliteLogStore
from memory_server.storage.sqlite.memories import SqliteMemoryStore
from memory_server.storage.sqlite.oauth import SqliteOAuthStore
from memory_server.storage.sqlite.outbox import SqliteOutboxStore
from memory_server.storage.sqlite.schema import migrate
from memory_server.storage.sqlite.sites import SqliteSiteStore
from memory_server.storage.sqlite.snapshot import SqliteSnapshot
from memory_server.storage.sqlite.words import SqliteWordStore
from memory_server.storage.sqlite.writer import Readers, Writer

# How long /readyz waits for the writer to take and release the write lock.
WRITER_PROBE_TIMEOUT_S = 2.0


def open_database(path: Path, *, integrity_budget_s: float | None = None) -> bool:
    """Create the data directory (0700) and the database (0600), and bring the schema up to date.

    With `integrity_budget_s`, first check the file (PRAGMA quick_check) for at most that long (0: not at
    all); returns whether the check finished (False: it ran out of time, the file was not found damaged so
    far). A damaged file, or one that is not a database at all, raises DatabaseDamaged naming it, before
    anything is written.
    """
    private_dir(path.parent)
    refuse_emptied(path)
    private_file(path)
    try:
        conn = connect(path)
    except sqlite3.DatabaseError as exc:
        raise DatabaseDamaged(damaged_message(str(path), str(exc))) from exc
    try:
        finished = True
        if integrity_budget_s == 0:
            finished = False
        elif integrity_budget_s is not None:
            findings = quick_check(conn, budget_s=integrity_budget_s)
            finished = findings is not None
            if findings is not None and findings != ["ok"]:
                raise DatabaseDamaged(damaged_message(str(path), "; ".join(findings[:3])))
        migrate(conn)
        return finished
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise DatabaseDamaged(damaged_message(str(path), str(exc))) from exc
        raise
    finally:
        conn.close()


class SqliteStorage:
    backend = SQLITE

    def __init__(self, path: Path, *, integrity_budget_s: float | None = None) -> None:
        self.path = path
        self.integrity_unchecked = not open_database(path, integrity_budget_s=integrity_budget_s)
        self._writer = Writer(path)
        self._readers = Readers(path)
        self.health = self._writer.health
        self.logs = SqliteLogStore(self._writer, self._readers)
        self.sites = SqliteSiteStore(self._writer, self._readers, path)
        self.oauth = SqliteOAuthStore(self._writer, self._readers, path)
        self.memories = SqliteMemoryStore(self._writer, self._readers)
        self.outbox = SqliteOutboxStore(self._writer, self._readers)
        self.candidates = SqliteCandidateStore(self._readers)
        self.words = SqliteWordStore(self._writer, self._readers)
        self._file = _file_identity(path)
        self.identity = str(self._readers.get().execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()[0])

    def check_integrity(self) -> str | None:
        conn = connect(self.path, readonly=True)
        try:
            findings = quick_check(conn) or []
        except sqlite3.DatabaseError as exc:  # a page too damaged to check stops the check: that is a finding
            if not is_damage(exc):
                raise
            findings = [str(exc)]
        finally:
            conn.close()
        self.integrity_unchecked = False
        if findings == ["ok"]:
            return None
        self.health.damage = damaged_message(str(self.path), "; ".join(findings[:3]))
        return self.health.damage

    def snapshot(self, site: str | None) -> SqliteSnapshot:
        return SqliteSnapshot(self.path, site=site)

    def probe(self) -> list[str]:
        """A read answers; the file is still the one opened (the open connections would otherwise go on
        writing to a file nobody will ever read again) and writable; no write failed for lack of space and
        no damaged page was met since; the writer takes and releases the write lock in a short time."""
        reasons: list[str] = []
        try:
            self._readers.get().execute("SELECT count(*) FROM sites").fetchone()
        except Exception as exc:
            reasons.append(f"sqlite: {exc}")
        identity = _file_identity(self.path)
        if identity is None:
            reasons.append(f"sqlite: {self.path} is gone (deleted or moved while the server runs)")
        elif self._file is not None and identity != self._file:
            reasons.append(f"sqlite: {self.path} was replaced by another file while the server runs")
        elif not os.access(self.path, os.R_OK | os.W_OK) or not os.access(self.path.parent, os.W_OK):
            reasons.append(f"sqlite: {self.path} or its directory is not writable")
        reasons += self.health.problems()
        future = self._writer.submit(lambda conn: None)
        try:
            future.result(timeout=WRITER_PROBE_TIMEOUT_S)
        except FutureTimeout:
            reasons.append(
                f"sqlite: the writer did not get the write lock within {WRITER_PROBE_TIMEOUT_S:g}s (busy or stuck)"
            )
        except Exception as exc:
            reasons.append(f"sqlite: cannot write: {exc}")
        return reasons

    def close(self) -> None:
        self._writer.close()
        self._readers.close()


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
