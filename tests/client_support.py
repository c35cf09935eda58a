"""Helpers for the memory_client suites: sites and tokens made with the real CLI, and network faults made
with real sockets on 127.0.0.1 (a proxy that loses answers, a listener that never answers)."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from conftest import free_port
from procs import parse_fields, run_cli

SITE = "acme"


@dataclass
class Site:
    data_dir: Path
    name: str
    secret: str

    @property
    def auth(self) -> tuple[str, str]:
        return (self.name, self.secret)

    def token(self, *scopes: str, extra: tuple[str, ...] = ()) -> str:
        args = ["token", "create", "--site", self.name]
        for scope in scopes:
            args += ["--scope", scope]
        result = run_cli(*args, *extra, data_dir=self.data_dir)
        assert result.returncode == 0, result.stderr
        return parse_fields(result.stdout)["token"]


def create_site(data_dir: Path, name: str = SITE) -> Site:
    result = run_cli("site", "create", name, data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    return Site(data_dir, name, parse_fields(result.stdout)["secret"])


class FlakyProxy:
    """A TCP proxy to 127.0.0.1:`upstream`. After `drop_next(n)`, the next n answers from upstream are
    swallowed: the request has reached the server (and been committed), and the client's connection is
    closed before it reads a byte of the answer -- an acknowledgement lost on the way."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.dropped = 0
        self._drops = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_next(self, n: int = 1) -> None:
        with self._lock:
            self._drops += n

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream), timeout=30)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        try:
            while data := upstream.recv(65536):
                with self._lock:
                    drop = self._drops > 0
                    if drop:
                        self._drops -= 1
                        self.dropped += 1
                if drop:
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()


class SilentListener:
    """Accepts TCP connections and never answers: every request times out."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._listener.close()
        for conn in self._held:
            conn.close()
