"""The configured authority: SQLite in the data directory (the default); PostgreSQL with MEMORY_DATABASE_URL.

Besides the stores, what admin commands need of the backend without opening it for writing: a read-only
snapshot for export, and the online backup. Which backend is `memory_server.storage.backends.backend_of`'s
choice, the only one.
"""

from __future__ import annotations

from pathlib import Path

from memory_server.settings import Settings
from memory_server.storage.backends import POSTGRES, backend_of, database_url
from memory_server.storage.protocols import Snapshot, Storage


def open_storage(settings: Settings, *, integrity_budget_s: float | None = None) -> Storage:
    if backend_of(settings) is POSTGRES:
        from memory_server.storage.postgres.storage import PostgresStorage

        return PostgresStorage(database_url(settings))
    from memory_server.storage.sqlite.storage import SqliteStorage

    return SqliteStorage(settings.db_path, integrity_budget_s=integrity_budget_s)


def open_snapshot(settings: Settings, *, site: str | None) -> Snapshot:
    """A consistent read-only view for export (works while a server writes)."""
    if backend_of(settings) is POSTGRES:
        from memory_server.storage.postgres.snapshot import PostgresSnapshot

        return PostgresSnapshot(database_url(settings), site=site)
    from memory_server.storage.sqlite.snapshot import SqliteSnapshot

    return SqliteSnapshot(settings.db_path, site=site)


def live_paths(settings: Settings) -> dict[Path, str]:
    """The files a running server writes, which no backup or export may replace, and the data directory
    they live in, which no backup or export may write into (a file there could be taken for one of them)."""
    if not backend_of(settings).in_data_dir:  # the embedded index still is
        return {settings.index_path: "the live vector index", settings.data_dir: "the data directory"}
    from memory_server.storage.files import live_paths as sqlite_live_paths

    return {**sqlite_live_paths(settings.db_path, settings.index_path), settings.data_dir: "the data directory"}
