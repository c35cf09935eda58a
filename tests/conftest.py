"""Shared fixtures: real SQLite files on tmp_path, the real app served by uvicorn on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import socket
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

from server.api.app import create_app
from server.auth import admin as auth
from server.settings import Settings
from server.storage.factory import open_storage

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

    def create_site(self, name: str) -> str:
        return admin(self.settings, lambda sites: auth.create_site(sites, name))

    def create_token(self, *, scopes: list[str], site: str | None = None, **bounds: Any) -> tuple[str, str]:
        return admin(
            self.settings, lambda sites: auth.create_token(sites, site or self.site, scopes=scopes, **bounds)
        )


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
    return Settings(data_dir=data_dir, **overrides)


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
