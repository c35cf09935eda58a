"""Connections that cannot hold the server hostage, against a real server process under a 256-descriptor
limit: hundreds of connections that never send a byte, a request head trickled in, a body sent at a byte a
second. Each is cut off while a legitimate client keeps getting answers."""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from procs import ServerProcess, parse_fields, run_cli, server_env

DESCRIPTORS = 256
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 3.0


def limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[ServerProcess, tuple[str, str]]]:
    data = tmp_path / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    env = server_env(
        MEMORY_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT), MEMORY_BODY_TIMEOUT_S=str(BODY_TIMEOUT), MEMORY_KEEP_ALIVE_S="2"
    )
    process = ServerProcess(data, env=env, preexec=limit_descriptors)
    process.start()
    try:
        yield process, ("acme", secret)
    finally:
        process.kill()


def legitimate_request(process: ServerProcess, auth: tuple[str, str]) -> httpx2.Response:
    """A fresh connection, as a new client makes it."""
    with httpx2.Client(timeout=10) as http:
        return http.get(f"{process.base}/v1/conversations", auth=auth)


def closed_by_server(sock: socket.socket, within: float) -> float | None:
    """Seconds until the server closed `sock` (EOF or reset), or None if it was still open after `within`."""
    sock.settimeout(within)
    start = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - start


def test_a_flood_of_idle_connections_does_not_lock_out_clients(guarded: tuple[ServerProcess, tuple[str, str]]) -> None:
    process, auth = guarded
    assert legitimate_request(process, auth).status_code == 200
    idle = []
    try:
        for _ in range(300):  # more than the process has descriptors
            idle.append(socket.create_connection(("127.0.0.1", process.port), timeout=10))
        # While all 300 are open (the oldest are being shed to make room), new clients get answers.
        for _ in range(20):
            assert legitimate_request(process, auth).status_code == 200
        # And the idle ones are all closed by the server within the header timeout (plus slack).
        time.sleep(HEADER_TIMEOUT + 1.0)
        assert all(closed_by_server(sock, within=1.0) is not None for sock in idle)
    finally:
        for sock in idle:
            sock.close()
    assert legitimate_request(process, auth).status_code == 200
    assert "Too many open files" not in process.log()


def test_a_request_head_trickled_in_is_cut_off(guarded: tuple[ServerProcess, tuple[str, str]]) -> None:
    process, auth = guarded
    sock = socket.create_connection(("127.0.0.1", process.port), timeout=10)
    try:
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        deadline = time.monotonic() + HEADER_TIMEOUT + 3
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                sock.send(head[:1] if head else b"a")
                head = head[1:]
            except OSError:
                closed = True
                break
            closed = closed_by_server(sock, within=0.5) is not None
            assert legitimate_request(process, auth).status_code == 200
        assert closed, "a head sent a byte at a time was held past the header timeout"
    finally:
        sock.close()


def test_a_body_sent_a_byte_a_second_is_cut_off(guarded: tuple[ServerProcess, tuple[str, str]]) -> None:
    process, auth = guarded
    sock = socket.create_connection(("127.0.0.1", process.port), timeout=10)
    try:
        basic = httpx2.BasicAuth(*auth)._auth_header
        sock.sendall(
            b"POST /v1/conversations/conv-slow-body1/items HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100000\r\n" + f"Authorization: {basic}\r\n\r\n".encode()
        )
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < BODY_TIMEOUT + 4 and not closed:
            try:
                sock.send(b"{")
            except OSError:
                closed = True
                break
            closed = closed_by_server(sock, within=1.0) is not None
        assert closed, "a body trickled in was read for longer than the body timeout"
        assert time.monotonic() - started < BODY_TIMEOUT + 4
        assert legitimate_request(process, auth).status_code == 200
    finally:
        sock.close()


def test_an_idle_keep_alive_connection_is_closed(guarded: tuple[ServerProcess, tuple[str, str]]) -> None:
    process, auth = guarded
    sock = socket.create_connection(("127.0.0.1", process.port), timeout=10)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert b"200 OK" in sock.recv(4096)
        assert closed_by_server(sock, within=5.0) is not None  # MEMORY_KEEP_ALIVE_S=2
    finally:
        sock.close()
