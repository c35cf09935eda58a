"""Shared fixtures: real SQLite files on tmp_path, the real app served by uvicorn on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
from fastmcp import Client

from memory_server.api.app import create_app
from memory_server.auth import admin as auth
from memory_server.services import Services, open_services
from memory_server.settings import Settings
from memory_server.storage.backends import BACKENDS, POSTGRES, SQLITE, backend_of, database_url
from memory_server.storage.factory import open_storage

from tests import backends

pytest_plugins = ["tests.conftest_embeddings", "tests.postgres"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def admin(settings: Settings, work: Any) -> Any:
    """Run `work(sites)` on the settings' store, as the CLI's site and token commands do."""
    storage = open_storage(settings)
    try:
        return work(storage.sites)
    finally:
        storage.close()


@dataclass
class LiveServer:
    settings: Settings
    url: str  # the MCP endpoint
    base: str  # scheme://host:port
    site: str
    secret: str

    @property
    def basic(self) -> httpx2.BasicAuth:
        return httpx2.BasicAuth(self.site, self.secret)

    def basic_header(self, site: str | None = None, secret: str | None = None) -> str:
        raw = f"{site or self.site}:{secret or self.secret}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    def client(self, auth: Any = None) -> Client:
        return Client(self.url, auth=auth if auth is not None else self.basic)

    def save(self, content: str, **fields: Any) -> None:
        """Remember a memory through REST, as the site (POST /v1/memories)."""
        response = httpx2.post(
            f"{self.base}/v1/memories", json={"content": content, **fields}, auth=self.basic, timeout=60
        )
        assert response.status_code == 201, response.text

    def recalled(self, query: str, limit: int = 10) -> list[str]:
        """The contents POST /v1/recall returns for the query, best first."""
        response = httpx2.post(
            f"{self.base}/v1/recall", json={"query": query, "limit": limit}, auth=self.basic, timeout=60
        )
        assert response.status_code == 200, response.text
        return [hit["content"] for hit in response.json()["results"]]

    def create_site(self, name: str) -> str:
        return admin(self.settings, lambda sites: auth.create_site(sites, name))

    def create_token(self, *, scopes: list[str], site: str | None = None, **bounds: Any) -> tuple[str, str]:
        return admin(self.settings, lambda sites: auth.create_token(sites, site or self.site, scopes=scopes, **bounds))


class ThreadedServer:
    """uvicorn in a background thread: real sockets, real HTTP, in this process."""

    def __init__(self, app: Any, port: int) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Settings for a data directory; on PostgreSQL (a contract suite's second run) with its own database."""
    url = backends.current.database_url(data_dir)
    if url is not None and "database_url" not in overrides:
        overrides["database_url"] = url
    return Settings(data_dir=data_dir, **overrides)


@pytest.fixture
def services(tmp_path: Path, embedder: Any) -> Iterator[Services]:
    """The server's services on a fresh data directory, the memories loaded (a module may define its own)."""
    services = open_services(make_settings(tmp_path / "data"))
    services.load_memories(embedder=embedder)
    try:
        yield services
    finally:
        services.close()


def query(settings: Settings, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of `sql` (`?` placeholders) read straight from the settings' authority, SQLite or PostgreSQL:
    the oracle tests check stored state against."""
    if backend_of(settings) is SQLITE:
        with contextlib.closing(sqlite3.connect(settings.db_path)) as db:
            return db.execute(sql, args).fetchall()
    import psycopg

    with psycopg.connect(database_url(settings), autocommit=True) as conn:
        return [tuple(row) for row in conn.execute(sql.replace("?", "%s"), args).fetchall()]  # type: ignore[arg-type]


def index_backlog(settings: Settings) -> int:
    """What the data directory's vector index does not hold yet: the outbox's rows on SQLite; on PostgreSQL
    the changes of the authority its follower has not applied (`follow.json` beside the index)."""
    if not backend_of(settings).shared:  # the outbox keeps the index
        [(pending,)] = query(settings, "SELECT count(*) FROM memories WHERE indexed = 0")
        [(deletions,)] = query(settings, "SELECT count(*) FROM index_deletions")
        return int(pending) + int(deletions)
    [(newest,)] = query(settings, "SELECT seq FROM memory_change_counter")
    try:
        mark = int(json.loads((settings.index_path / "follow.json").read_text())["mark"])
    except (OSError, ValueError, KeyError):
        return int(newest)
    return int(newest) - mark


def execute(settings: Settings, sql: str, *args: Any) -> None:
    """Change stored state behind the server's back (as damage, a clock step or an operator would)."""
    if backend_of(settings) is SQLITE:
        with contextlib.closing(sqlite3.connect(settings.db_path)) as db, db:
            db.execute(sql, args)
        return
    import psycopg

    with psycopg.connect(database_url(settings), autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), args)  # type: ignore[arg-type]


# --- storage backends: a module marked `backends` runs on SQLite and on PostgreSQL ------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "backends: run the module's tests on every storage backend")
    config.addinivalue_line("markers", "sqlite_only: a test of SQLite itself (files, its backup), in a backends module")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "storage_backend" not in metafunc.fixturenames or metafunc.definition.get_closest_marker("backends") is None:
        return
    chosen = (SQLITE,) if metafunc.definition.get_closest_marker("sqlite_only") else BACKENDS
    names = [backend.name for backend in chosen]  # the ids: [sqlite], [postgres]
    metafunc.parametrize("storage_backend", names, indirect=True, scope="module")


@pytest.fixture(scope="module", autouse=True)
def storage_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The storage backend of this module's tests ("sqlite" unless the module is marked `backends`).
    Module-scoped fixtures that open storage must request it, so they are made again per backend."""
    name = getattr(request, "param", SQLITE.name)
    if name != POSTGRES.name:
        yield name
        return
    from tests.postgres import PostgresDatabases

    databases = PostgresDatabases(request.getfixturevalue("postgres_server"))
    backends.current.use("postgres", databases.create)
    try:
        yield name
    finally:
        backends.current.use("sqlite")
        databases.drop_all()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data")


def wait_ready(base: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        response = httpx2.get(f"{base}/readyz")
        if response.status_code == 200:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not ready: {response.text}")
        time.sleep(0.05)


@contextlib.contextmanager
def serve(settings: Settings, embedder: Any, *, index: Any = None, site: str = "acme") -> Iterator[LiveServer]:
    """The real app on a real port, with the session's embedder; yields once /readyz says ready."""
    secret = admin(settings, lambda sites: auth.create_site(sites, site))
    port = free_port()
    app = create_app(settings, embedder=embedder, index=index)
    with ThreadedServer(app, port):
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        yield LiveServer(settings, f"{base}/mcp", base, site, secret)


@pytest.fixture
def live(settings: Settings, embedder: Any) -> Iterator[LiveServer]:
    with serve(settings, embedder) as server:
        yield server
