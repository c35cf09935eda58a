"""ASGI middleware in front of /mcp and /v1: browser checks, authentication and the request size limit.

`BrowserGuard` refuses, before anything runs, what only a browser tricked by another site would send: an
`Origin` that is not in MEMORY_ALLOWED_ORIGINS (requests without one, from non-browser clients, are not
affected), and, when the server listens on a loopback address, a `Host` that is not a loopback name (DNS
rebinding: a page of evil.example re-pointed at 127.0.0.1 sends `Host: evil.example`). Both get 403.

Authentication happens in `AuthMiddleware`, before any tool runs and before the body is read: no or invalid
credentials get HTTP 401 with a `WWW-Authenticate` challenge that also names the OAuth protected resource
metadata (RFC 9728), where clients that cannot send a fixed header find how to sign in. An OAuth access
token is one more credential kind of the same Authenticator, so /mcp and /v1 treat it as a Bearer token
with its grant's scopes. A valid credential becomes a Principal in the ASGI scope's state, where tools and
REST routes read it. A credential verified before is settled on the event loop at once; every other one is
checked on one dedicated thread (a burst of guesses costs at most one core, and scrypt's 16 MiB buffers are
reused by that one thread instead of piling up in every worker thread's malloc arena), and a client address
(an IPv6 one by its /64) with too many recent failures gets 429 with `Retry-After` without its credential
being verified (one verified before is still recognised, without a scrypt, on any storage). A credential
this server issued that no longer holds (a revoked or expired token) is refused without counting: it is no
guess at a secret.

Every body is read whole before the app sees it (bounded by MEMORY_MAX_REQUEST_BYTES), the console's forms
too: a client that goes away before its body is complete is logged at DEBUG and answered with nothing,
rather than handing a truncated body to the app.
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

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_server.auth.authenticator import Authenticator
from memory_server.auth.oauth import StaleCredential
from memory_server.auth.principal import Principal
from memory_server.errors import AppError, Forbidden, PayloadTooLarge, RateLimited, Unauthorized, Unavailable

log = logging.getLogger("memory_server.http")


CHALLENGE = 'Basic realm="memory-server", charset="UTF-8", Bearer realm="memory-server"'
PROTECTED_PREFIXES = ("/mcp", "/v1")
WHOLE_BODY_PREFIXES = ("/ui/",)  # not authenticated here (the console has its sessions), but read whole


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
WINDOW_S = 60.0
TRACKED_ADDRESSES = 10_000  # addresses whose events are remembered (the oldest are forgotten first)


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

    def __init__(
        self, app: ASGIApp, *, allowed_origins: frozenset[str], loopback_only: bool, public_host: str | None = None
    ) -> None:
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
                return (
                    "this server listens on a loopback address and answers only requests for localhost, "
                    "127.0.0.1, [::1] or the host of MEMORY_PUBLIC_URL (Host header)"
                )
        origin = _header(scope, b"origin")
        if origin is not None and scope["path"].startswith(PROTECTED_PREFIXES):
            if origin.strip().lower().rstrip("/") not in self._allowed_origins:
                return (
                    f"requests from the web origin {origin[:200]!r} are not allowed; add it to "
                    "MEMORY_ALLOWED_ORIGINS to let pages of that origin call this server"
                )
        return None


def client_key(address: str) -> str:
    """What a client address is limited by: an IPv4 address, or the /64 network of an IPv6 one (a single
    host is routinely given a whole /64, and would otherwise get 2^64 fresh limits)."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


class AddressWindow:
    """Events per client address over the last minute; `take` refuses one past `per_minute` with RateLimited."""

    def __init__(self, per_minute: int, refusal: str) -> None:
        self._limit = per_minute
        self._refusal = refusal  # what the 429 says, before "; retry in N s"
        self._events: OrderedDict[str, deque[float]] = OrderedDict()

    def take(self, address: str) -> float:
        """Count an event from `address`, or raise RateLimited (counting nothing); returns its mark."""
        now = time.monotonic()
        events = self._recent(client_key(address), now)
        if len(events) >= self._limit:
            retry_after = max(1, math.ceil(events[0] + WINDOW_S - now))
            raise RateLimited(f"{self._refusal}; retry in {retry_after} s", retry_after=retry_after)
        events.append(now)
        return now

    def give_back(self, address: str, mark: float) -> None:
        """Uncount an event `take` counted (it turned out not to be one: a sign-in that succeeded)."""
        events = self._events.get(client_key(address))
        if events is not None and mark in events:
            events.remove(mark)

    def _recent(self, key: str, now: float) -> deque[float]:
        events = self._events.get(key)
        if events is None:
            events = self._events[key] = deque()
            while len(self._events) > TRACKED_ADDRESSES:
                self._events.popitem(last=False)
        self._events.move_to_end(key)
        while events and events[0] <= now - WINDOW_S:
            events.popleft()
        return events


class SignInGuard:
    """Failed sign-ins per client address over the last minute, and the one thread that verifies secrets.

    A verification in progress counts as a failure until it succeeds, so a burst of concurrent guesses from
    one address is cut off at the limit too, not only a sequence of them. Requests carrying a credential
    that is already being verified wait for that verification instead of starting another (sixteen clients
    signing in at once with one credential cost one scrypt and one attempt). A credential refused as
    `StaleCredential` (a revoked or expired token of this server's) is not counted: no secret was guessed."""

    def __init__(self, *, failures_per_minute: int) -> None:
        self._failures = AddressWindow(failures_per_minute, "too many failed sign-ins from this address")
        self._pending: dict[str, asyncio.Future[Principal]] = {}
        self._verifier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sign-in")

    async def check(
        self,
        address: str,
        header: str,
        authenticate: Callable[[str], Principal],
        *,
        known: Callable[[str], Principal | None] | None = None,
    ) -> Principal:
        """The Principal of `header` (`authenticate` on the sign-in thread), or AppError. From an address over
        the limit: RateLimited, unless `known` (blocking, no scrypt, on a worker thread) recognises a
        credential verified before: the owner of a secret is not locked out by someone guessing it."""
        key = hashlib.sha256(f"{address}\n{header}".encode()).hexdigest()
        pending = self._pending.get(key)
        if pending is None:
            try:
                mark = self._failures.take(address)
            except RateLimited:
                principal = await anyio.to_thread.run_sync(known, header) if known is not None else None
                if principal is None:
                    raise
                return principal
            pending = asyncio.wrap_future(self._verifier.submit(authenticate, header))
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._finished(key, address, mark, done))
        return await asyncio.shield(pending)  # a caller that goes away does not cancel the others' answer

    def _finished(self, key: str, address: str, mark: float, done: asyncio.Future[Principal]) -> None:
        self._pending.pop(key, None)
        if done.cancelled():
            return
        failure = done.exception()
        if failure is None or isinstance(failure, StaleCredential):  # a guess stays counted
            self._failures.give_back(address, mark)

    def close(self) -> None:
        self._verifier.shutdown(wait=False, cancel_futures=True)


class AuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticator: Authenticator,
        max_body: int,
        sign_in: SignInGuard,
        resource_metadata: str | None = None,
    ) -> None:
        self.app = app
        self._authenticator = authenticator
        self._max_body = max_body
        self._sign_in = sign_in
        self._challenges = (challenge(resource_metadata), challenge(resource_metadata, invalid_token=True))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith((*PROTECTED_PREFIXES, *WHOLE_BODY_PREFIXES)):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"].startswith(WHOLE_BODY_PREFIXES):
            await self._whole_body(scope, receive, send)
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
        # Known before the body is read: the connection guards shed unauthenticated slow bodies first.
        scope.setdefault("state", {})["principal"] = principal
        await self._whole_body(scope, receive, send)

    async def _whole_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body:
            await send_error(send, PayloadTooLarge(f"request body over {self._max_body} bytes"))
            return
        try:
            body = await read_body(receive, self._max_body)
        except ClientGone:
            log.debug(
                "%s %s: the client went away before its request body was complete", scope.get("method"), scope["path"]
            )
            return
        if body is None:
            await send_error(send, PayloadTooLarge(f"request body over {self._max_body} bytes"))
            return
        await self.app(scope, replay_body(body, receive), send)

    async def _sign_in_slowly(self, authenticator: Authenticator, header: str | None, scope: Scope) -> Principal:
        if not header:  # nothing was tried: not a failed sign-in (clients probe before sending credentials)
            raise Unauthorized("credentials required (Basic or Bearer)")
        client = scope.get("client")
        return await self._sign_in.check(
            client[0] if client else "unknown",
            header,
            authenticator.authenticate,
            known=authenticator.authenticate_known,
        )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


class ClientGone(Exception):
    """The client closed its connection before its request body was complete."""


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """Read the whole body, or None once it grows past `limit` (a chunked body has no Content-Length).
    ClientGone if the client disconnects first: a body cut short is never taken for a whole one."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone()
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
