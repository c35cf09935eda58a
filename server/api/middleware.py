"""ASGI middleware in front of /mcp and /v1: browser checks, authentication and the request size limit.

`BrowserGuard` refuses, before anything runs, what only a browser tricked by another site would send: an
`Origin` that is not in MEMORY_ALLOWED_ORIGINS (requests without one, from non-browser clients, are not
affected), and, when the server listens on a loopback address, a `Host` that is not a loopback name (DNS
rebinding: a page of evil.example re-pointed at 127.0.0.1 sends `Host: evil.example`). Both get 403.

Authentication happens in `AuthMiddleware`, before any tool runs: no or invalid credentials get HTTP 401
with a `WWW-Authenticate` challenge that also names the OAuth protected resource metadata (RFC 9728), where
clients that cannot send a fixed header find how to sign in. An OAuth access token is one more credential
kind of the same Authenticator, so /mcp and /v1 treat it as a Bearer token with its grant's scopes. A valid
credential becomes a Principal in the ASGI scope's state, where tools and REST routes read it. A credential
verified before is settled on the event loop at once; every other one is checked on one dedicated thread (a
burst of guesses costs at most one core, and scrypt's 16 MiB buffers are reused by that one thread instead
of piling up in every worker thread's malloc arena), and a client address with too many recent failures
gets 429 with `Retry-After` without its credential being checked at all.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.auth.authenticator import Authenticator
from server.auth.principal import Principal
from server.errors import AppError, Forbidden, PayloadTooLarge, RateLimited, Unauthorized, Unavailable

log = logging.getLogger("memory_server.http")


CHALLENGE = 'Basic realm="memory-server", charset="UTF-8", Bearer realm="memory-server"'
PROTECTED_PREFIXES = ("/mcp", "/v1")


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
SIGN_IN_WINDOW_S = 60.0
TRACKED_ADDRESSES = 10_000  # addresses whose failures are remembered (the oldest are forgotten first)


def challenge(resource_metadata: str | None = None, *, invalid_token: bool = False) -> str:
    """The WWW-Authenticate of a 401: Bearer first, naming the protected resource metadata (RFC 9728 §5.1),
    where OAuth clients discover how to sign in (some read only a header that starts with Bearer), then
    Basic for the site credential. `invalid_token`: a Bearer token was presented and refused (RFC 6750)."""
    bearer = 'Bearer realm="memory-server"'
    if invalid_token:
        bearer += ', error="invalid_token"'
    if resource_metadata:
        bearer += f', resource_metadata="{resource_metadata}"'
    return f'{bearer}, Basic realm="memory-server", charset="UTF-8"'


async def send_error(send: Send, error: AppError, *, www_authenticate: str = CHALLENGE) -> None:
    body = json.dumps(error.to_dict()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if isinstance(error, Unauthorized):
        headers.append((b"www-authenticate", www_authenticate.encode()))
    if isinstance(error, (RateLimited, Unavailable)):
        headers.append((b"retry-after", str(error.retry_after).encode()))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _host_name(host_header: str) -> str:
    """`Host` without its port: "127.0.0.1:8765" -> "127.0.0.1", "[::1]:8765" -> "[::1]"."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class BrowserGuard:
    """403 for a foreign `Origin` on /mcp and /v1, and for a non-loopback `Host` on a loopback server."""

    def __init__(self, app: ASGIApp, *, allowed_origins: frozenset[str], loopback_only: bool,
                 public_host: str | None = None) -> None:
        self.app = app
        self._allowed_origins = allowed_origins
        self._loopback_only = loopback_only
        # MEMORY_PUBLIC_URL's host (a reverse proxy on this machine passing the public Host through)
        self._hosts = LOOPBACK_NAMES | ({public_host.lower()} if public_host else set())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await send_error(send, Forbidden(refusal))
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> str | None:
        if self._loopback_only:
            host = _header(scope, b"host")
            if host is None or _host_name(host) not in self._hosts:
                return ("this server listens on a loopback address and answers only requests for localhost, "
                        "127.0.0.1, [::1] or the host of MEMORY_PUBLIC_URL (Host header)")
        origin = _header(scope, b"origin")
        if origin is not None and scope["path"].startswith(PROTECTED_PREFIXES):
            if origin.strip().lower().rstrip("/") not in self._allowed_origins:
                return (f"requests from the web origin {origin[:200]!r} are not allowed; add it to "
                        "MEMORY_ALLOWED_ORIGINS to let pages of that origin call this server")
        return None


class SignInGuard:
    """Failed sign-ins per client address over the last minute, and the one thread that verifies secrets.

    A verification in progress counts as a failure until it succeeds, so a burst of concurrent guesses from
    one address is cut off at the limit too, not only a sequence of them. Requests carrying a credential
    that is already being verified wait for that verification instead of starting another (sixteen clients
    signing in at once with one credential cost one scrypt and one attempt)."""

    def __init__(self, *, failures_per_minute: int) -> None:
        self._limit = failures_per_minute
        self._attempts: OrderedDict[str, deque[float]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[Principal]] = {}
        self._verifier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sign-in")

    async def check(self, address: str, header: str, authenticate: Callable[[str], Principal]) -> Principal:
        key = hashlib.sha256(f"{address}\n{header}".encode()).hexdigest()
        pending = self._pending.get(key)
        if pending is None:
            mark = self._begin(address)
            pending = asyncio.wrap_future(self._verifier.submit(authenticate, header))
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._finished(key, address, mark, done))
        return await asyncio.shield(pending)  # a caller that goes away does not cancel the others' answer

    def _finished(self, key: str, address: str, mark: float, done: asyncio.Future[Principal]) -> None:
        self._pending.pop(key, None)
        if not done.cancelled() and done.exception() is None:  # a failure stays counted
            attempts = self._attempts.get(address)
            if attempts is not None and mark in attempts:
                attempts.remove(mark)

    def _recent(self, address: str, now: float) -> deque[float]:
        attempts = self._attempts.get(address)
        if attempts is None:
            attempts = self._attempts[address] = deque()
            while len(self._attempts) > TRACKED_ADDRESSES:
                self._attempts.popitem(last=False)
        self._attempts.move_to_end(address)
        while attempts and attempts[0] <= now - SIGN_IN_WINDOW_S:
            attempts.popleft()
        return attempts

    def _begin(self, address: str) -> float:
        """Count an attempt from `address`, or raise RateLimited; returns the attempt's mark."""
        now = time.monotonic()
        attempts = self._recent(address, now)
        if len(attempts) >= self._limit:
            retry_after = max(1, math.ceil(attempts[0] + SIGN_IN_WINDOW_S - now))
            raise RateLimited(f"too many failed sign-ins from this address; retry in {retry_after} s",
                              retry_after=retry_after)
        attempts.append(now)
        return now

    def close(self) -> None:
        self._verifier.shutdown(wait=False, cancel_futures=True)


class AuthMiddleware:
    def __init__(self, app: ASGIApp, *, authenticator: Authenticator, max_body: int, sign_in: SignInGuard,
                 resource_metadata: str | None = None) -> None:
        self.app = app
        self._authenticator = authenticator
        self._max_body = max_body
        self._sign_in = sign_in
        self._challenges = (challenge(resource_metadata), challenge(resource_metadata, invalid_token=True))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIXES):
            await self.app(scope, receive, send)
            return
        header = _header(scope, b"authorization")
        authenticator = self._authenticator
        # A credential seen before is settled on the loop; anything else (and every failure) on the sign-in
        # thread, after the address's failure count is checked.
        principal = authenticator.authenticate_nowait(header)
        if principal is None:
            try:
                principal = await self._sign_in_slowly(authenticator, header, scope)
            except AppError as exc:
                bearer = (header or "").strip()[:7].lower() == "bearer "
                await send_error(send, exc, www_authenticate=self._challenges[bearer])
                return
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body:
            await send_error(send, PayloadTooLarge(f"request body over {self._max_body} bytes"))
            return
        body = await read_body(receive, self._max_body)
        if body is None:
            await send_error(send, PayloadTooLarge(f"request body over {self._max_body} bytes"))
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, replay_body(body, receive), send)

    async def _sign_in_slowly(self, authenticator: Authenticator, header: str | None, scope: Scope) -> Principal:
        if not header:  # nothing was tried: not a failed sign-in (clients probe before sending credentials)
            raise Unauthorized("credentials required (Basic or Bearer)")
        client = scope.get("client")
        return await self._sign_in.check(client[0] if client else "unknown", header, authenticator.authenticate)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """Read the whole body, or None once it grows past `limit` (a chunked body has no Content-Length)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay_body(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def wrapped() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the app expects

    return wrapped
