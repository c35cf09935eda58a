"""The storage backends this server can run on, what each can do, and the one choice among them.

The choice is made from the settings by `backend_of` alone; an open store names its own (`Storage.backend`).
Callers ask a backend what it can do rather than which one it is, so another backend states its capabilities
here once.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_server.settings import Settings


@dataclass(frozen=True, slots=True)
class Backend:
    name: str  # as tests and reports name it
    label: str  # as people read it (the console's status page)
    in_data_dir: bool  # the database is a file in the data directory: backed up, checked and guarded as one
    shared: bool  # several servers may use it at once, each with an embedded index of its own that follows it
    needs_url: bool  # configured by MEMORY_DATABASE_URL


SQLITE = Backend("sqlite", "SQLite", in_data_dir=True, shared=False, needs_url=False)
POSTGRES = Backend("postgres", "PostgreSQL", in_data_dir=False, shared=True, needs_url=True)
BACKENDS = (SQLITE, POSTGRES)  # the default first


def backend_of(settings: Settings) -> Backend:
    """The backend the settings choose: PostgreSQL when MEMORY_DATABASE_URL is set, else SQLite."""
    return POSTGRES if settings.database_url is not None else SQLITE


def database_url(settings: Settings) -> str:
    """MEMORY_DATABASE_URL's value, for a backend that needs one."""
    if settings.database_url is None:
        raise ValueError("MEMORY_DATABASE_URL is not set")
    return settings.database_url.get_secret_value()
