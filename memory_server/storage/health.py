"""What the server has learned about its authority while serving, for /readyz and the error clients get.

A failure that is not a bug (a full disk, a damaged database, a store too busy) is answered as what it is,
`unavailable` with a message saying so, and remembered here: a write that failed for lack of space (and
nothing written since) means the disk is still full; a damaged page stays damaged.
"""

from __future__ import annotations

import errno
import sys
import time

from memory_server.errors import AppError, Unavailable

DISK_FULL = "the disk holding the database is full; free space on it and retry (the server recovers by itself)"


def damaged_message(where: str, detail: str) -> str:
    return (
        f"the database {where} is damaged ({detail}); restore the latest `memory-server backup` into the "
        "data directory (then run `memory-server reindex`), or run `memory-server doctor` to see what is wrong"
    )


class DatabaseDamaged(Exception):
    """The database is corrupt or not a database; the message names it and says what to do."""


def storage_failure(exc: BaseException) -> AppError | None:
    """The client-facing error for a storage failure that is not a bug, from any backend; None otherwise."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return Unavailable(DISK_FULL)
    from memory_server.storage.sqlite.connection import sqlite_failure  # each backend names its own failures

    failure = sqlite_failure(exc)
    if failure is None and "psycopg" in sys.modules:  # without psycopg loaded, no failure can be PostgreSQL's
        from memory_server.storage.postgres.errors import postgres_failure

        failure = postgres_failure(exc)
    return failure


class StorageHealth:
    def __init__(self, label: str = "storage") -> None:
        self.label = label  # the backend, as /readyz names it: "sqlite", "postgres"
        self.disk_full_since: float | None = None
        self.damage: str | None = None

    def saw(self, failure: AppError) -> None:
        if failure.message == DISK_FULL:
            if self.disk_full_since is None:
                self.disk_full_since = time.time()
        elif "is damaged" in failure.message:
            self.damage = failure.message

    def wrote(self) -> None:
        self.disk_full_since = None

    def problems(self) -> list[str]:
        found = [f"{self.label}: {self.damage}"] if self.damage else []
        if self.disk_full_since is not None:
            since = time.strftime("%H:%M:%S", time.localtime(self.disk_full_since))
            found.append(f"{self.label}: {DISK_FULL} (writes failing since {since})")
        return found
