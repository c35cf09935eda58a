"""Request bodies sent slowly, against a real server process over real sockets: a flood of connections that
send a complete head and then trickle their body (to /register and /ui/sign-in, which need no credential)
holds every slot of MEMORY_MAX_CONNECTIONS, yet a client with a credential is answered, an authenticated
upload in progress keeps its connection, a body below the minimum rate is cut off long before the body
timeout, and one sent at an ordinary pace is not. A console sign-in whose body the client cuts short is no
server error.

Each slow connection sends `Expect: 100-continue` and waits for the `100 Continue` the server sends when
the application starts reading the body: then its request is known to be running, so the flood holds the
slots it claims before the legitimate client comes (no sleeps, no race with the server's accept loop).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from procs import ServerProcess, parse_fields, run_cli, server_env

CAP = 24  # MEMORY_MAX_CONNECTIONS of these servers: small, so a modest flood fills it
FLOOD = 36
LENGTH = 60_000
TRICKLE = b" "  # what slow bodies send a byte at a time: leading blanks, so an upload's JSON stays valid


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Path, tuple[str, str]]]:
    data = tmp_path / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    yield data, ("acme", secret)


def serve(data: Path, **settings: str) -> ServerProcess:
    # Registrations are limited per address too (429 before the body is read): out of the way here.
    return ServerProcess(
        data,
        env=server_env(
            MEMORY_MAX_CONNECTIONS=str(CAP),
            MEMORY_LOG_LEVEL="INFO",
            MEMORY_OAUTH_REQUESTS_PER_MINUTE="1000",
            **settings,
        ),
    )


def basic(auth: tuple[str, str]) -> str:
    return str(httpx2.BasicAuth(*auth)._auth_header)


def slow_body(
    port: int, path: str, *, authorization: str | None = None, content_type: str = "application/x-www-form-urlencoded"
) -> socket.socket | None:
    """A connection whose request head is complete and whose body has begun (one byte of LENGTH): the socket
    once the server answered `100 Continue` (its application is reading the body), None if the server
    closed the connection instead."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {LENGTH}\r\nExpect: 100-continue\r\n"
    )
    if authorization:
        head += f"Authorization: {authorization}\r\n"
    try:
        sock.sendall((head + "\r\n").encode())
        answer = sock.recv(4096)
        if not answer.startswith(b"HTTP/1.1 100"):
            sock.close()
            return None
        sock.sendall(TRICKLE)
    except OSError:
        sock.close()
        return None
    return sock


def is_open(sock: socket.socket) -> bool:
    """The server has not closed it: a byte more can be sent and nothing (no EOF) comes back at once."""
    try:
        sock.sendall(TRICKLE)
        sock.settimeout(0.2)
        return sock.recv(1) != b""
    except TimeoutError:
        return True
    except OSError:
        return False


def closed_within(sock: socket.socket, seconds: float, *, trickle: float = 1.0) -> float | None:
    """Send a byte every `trickle` seconds until the server closes the connection: how long that took, or None
    if it was still open after `seconds`."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            sock.sendall(TRICKLE)
            sock.settimeout(trickle)
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - start
    return None


def test_a_client_with_a_credential_is_answered_while_slow_bodies_hold_every_slot(
    site: tuple[Path, tuple[str, str]],
) -> None:
    data, auth = site
    # No minimum rate here: only the connection cap's choice keeps the legitimate client in.
    with serve(data, MEMORY_BODY_MIN_RATE="0") as server:
        with httpx2.Client(timeout=10) as http:  # the credential verified once, as a client that signed in
            assert http.get(f"{server.base}/v1/conversations", auth=auth).status_code == 200
        upload = slow_body(
            server.port,
            "/v1/conversations/conv-upload-1/items",
            authorization=basic(auth),
            content_type="application/json",
        )
        assert upload is not None
        flood = [slow_body(server.port, ("/register", "/ui/sign-in")[i % 2]) for i in range(FLOOD)]
        try:
            for _ in range(10):
                with httpx2.Client(timeout=10) as http:  # a new connection each time, as a new client
                    assert http.get(f"{server.base}/v1/conversations", auth=auth).status_code == 200
            assert sum(sock is not None for sock in flood) == FLOOD, "each slow body got in, shedding an older one"
            open_now = [sock for sock in flood if sock is not None and is_open(sock)]
            assert len(open_now) < CAP, "the flood's oldest connections made room"
            assert open_now, "the newest slow bodies are still being read"
            # The authenticated upload kept its connection: the unauthenticated bodies went first. It finishes.
            assert is_open(upload)
            body = b'{"items": [{"role": "user", "content": "hi"}]}'
            upload.sendall(body.ljust(LENGTH - 2, b" "))  # the two blanks sent so far, and the rest
            upload.settimeout(30)
            assert re.match(rb"HTTP/1.1 (200|201)", upload.recv(4096))
        finally:
            upload.close()
            for sock in flood:
                if sock is not None:
                    sock.close()


def test_a_body_below_the_minimum_rate_is_cut_off_before_the_body_timeout(site: tuple[Path, tuple[str, str]]) -> None:
    data, auth = site
    with serve(data, MEMORY_BODY_TIMEOUT_S="120", MEMORY_BODY_MIN_RATE="1000") as server:
        trickled = slow_body(server.port, "/ui/sign-in")
        assert trickled is not None
        try:
            took = closed_within(trickled, 60.0)
        finally:
            trickled.close()
        assert took is not None, "a body sent a byte a second was still read after a minute"
        assert took < 30, took  # 5 s of grace, then 1,000 bytes owed per second: far from the 120 s timeout

        # A body at an ordinary pace (40 KB/s, in pieces) is read whole and answered.
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        try:
            body = b'{"items": [{"role": "user", "content": "steady"}]}'.ljust(200_000, b" ")
            sock.sendall(
                f"POST /v1/conversations/conv-steady-1/items HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                f"Authorization: {basic(auth)}\r\n\r\n".encode()
            )
            for start in range(0, len(body), 8000):
                sock.sendall(body[start : start + 8000])
                time.sleep(0.2)
            assert re.match(rb"HTTP/1.1 (200|201)", sock.recv(4096))
        finally:
            sock.close()


def test_a_console_sign_in_cut_short_is_no_server_error(site: tuple[Path, tuple[str, str]]) -> None:
    data, _ = site
    with serve(data) as server:
        for _ in range(3):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(
                b"POST /ui/sign-in HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n"
                b"csrf=x&site=acme&sec"
            )
            sock.close()
        with httpx2.Client(timeout=10) as http:
            deadline = time.monotonic() + 30
            while True:  # the three requests end on the server's side when it sees the disconnects
                metrics = http.get(f"{server.base}/metrics").text
                counted = re.findall(
                    r'memory_server_http_requests_total\{[^}]*route="[^"]*sign-in"[^}]*'
                    r'status="(\d+)"\} (\S+)',
                    metrics,
                )
                if sum(float(n) for _, n in counted) >= 3 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        statuses = {status for status, _ in counted}
        assert statuses == {"499"}, counted  # the client went away: not a 5xx
        log = server.log()
        assert "Traceback" not in log and "ERROR" not in log, log[-3000:]
