"""The storage backend a contract suite runs on, and the PostgreSQL database of each data directory.

A module marked `pytest.mark.backends` runs every test on each backend of `memory_server.storage.backends`,
SQLite and again PostgreSQL (the `storage_backend` fixture of conftest.py switches `current` per module and
parameter). On PostgreSQL each data directory a
test uses gets its own new database, as it would get its own SQLite file, so `make_settings`, the CLI
(`procs.run_cli`) and server processes (`procs.ServerProcess`) all find the same authority for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


class Backend:
    def __init__(self) -> None:
        self.name = "sqlite"
        self._create: Callable[[], str] | None = None
        self._urls: dict[Path, str] = {}
        self._sqlite: set[Path] = set()

    def keep_on_sqlite(self, data_dir: Path) -> None:
        """This data directory's authority is SQLite whatever the backend (the source of a move)."""
        self._sqlite.add(Path(data_dir).absolute())

    def use(self, name: str, create: Callable[[], str] | None = None) -> None:
        """Switch backend; `create` makes a new empty PostgreSQL database and returns its URL."""
        self.name, self._create, self._urls, self._sqlite = name, create, {}, set()

    def database_url(self, data_dir: Path) -> str | None:
        """The PostgreSQL database standing for this data directory (None on SQLite)."""
        key = Path(data_dir).absolute()
        if self.name != "postgres" or self._create is None or key in self._sqlite:
            return None
        if key not in self._urls:
            self._urls[key] = self._create()
        return self._urls[key]

    def env(self, data_dir: Path | None) -> dict[str, str]:
        """MEMORY_DATABASE_URL for a child process working on `data_dir`, when on PostgreSQL."""
        url = self.database_url(data_dir) if data_dir is not None else None
        return {"MEMORY_DATABASE_URL": url} if url else {}


current = Backend()
