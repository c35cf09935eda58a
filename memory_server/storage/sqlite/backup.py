"""The online backup of the SQLite database: one consistent copy, verified, renamed into place."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memory_server.errors import NotFound
from memory_server.storage.files import private_file, refuse_live_target
from memory_server.storage.health import DatabaseDamaged, damaged_message
from memory_server.storage.sqlite.connection import connect, naming_damage


@dataclass(frozen=True, slots=True)
class BackupResult:
    path: Path
    size: int
    counts: dict[str, int]
    schema_version: int


BACKUP_COUNTED = ("sites", "tokens", "memories", "conversations", "log_items")


def backup_database(
    source: Path, dest: Path, *, force: bool = False, live: Mapping[Path, str] | None = None
) -> BackupResult:
    """Copy the live database to `dest` with SQLite's online backup API, then verify the copy.

    The copy is made in one backup step, under one read transaction: a consistent snapshot that holds
    every transaction committed before it began, while writers go on (WAL). It is written beside `dest`
    and renamed into place only once it passes `PRAGMA quick_check`, so `dest` is never a partial file.
    `live`: the paths a running server writes (see memory_server.storage.files.live_paths), never a target;
    the copy is 0600.
    """
    if not source.is_file():
        raise NotFound(f"no database at {source}: is --data-dir right?")
    if dest.is_dir():
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        dest = dest / f"memory-{stamp}.db"
    refuse_live_target(dest, {source: "the live database", **(live or {})})
    if dest.exists() and not force:
        raise FileExistsError(f"{dest} exists; pass --force to overwrite it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with naming_damage(source):
        src = connect(source, readonly=True)
    try:
        tmp = private_file(dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp"))
        try:
            _copy(src, tmp, source)
            _fsync(tmp)
            os.replace(tmp, dest)
            _fsync(dest.parent)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    finally:
        src.close()
    counts, version = _verify(dest)
    return BackupResult(path=dest, size=dest.stat().st_size, counts=counts, schema_version=version)


def _copy(src: sqlite3.Connection, tmp: Path, source: Path) -> None:
    """The whole database into `tmp`, checked. The copy is the source page for page, so damage found in it
    is the source's: named as start-up names it."""
    with naming_damage(source):
        target = sqlite3.connect(tmp, isolation_level=None)
        try:
            src.backup(target)  # pages=-1: the whole database in one step, so one consistent snapshot
            # A single self-contained file: no -wal/-shm beside the backup.
            target.execute("PRAGMA journal_mode = DELETE")
            target.execute("PRAGMA synchronous = FULL")
        finally:
            target.close()
        try:
            _verify(tmp)
        except CheckFailed as exc:
            raise DatabaseDamaged(damaged_message(str(source), f"quick_check: {exc.findings}")) from exc


class CheckFailed(RuntimeError):
    def __init__(self, path: Path, findings: str) -> None:
        super().__init__(f"the backup {path} failed quick_check: {findings}")
        self.findings = findings


def _verify(path: Path) -> tuple[dict[str, int], int]:
    """Open a backup, check it, count its rows; raises CheckFailed if it is not sound."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        result = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
        if result != ["ok"]:
            raise CheckFailed(path, "; ".join(result[:5]))
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        counts = {
            name: int(conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0])
            for name in BACKUP_COUNTED
            if name in tables
        }
        return counts, version
    finally:
        conn.close()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
