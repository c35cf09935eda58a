"""ASGI middleware in front of /mcp and /v1: authentication and the request size limit.

Authentication happens here, before any tool runs: no or invalid credentials get HTTP 401 with a
`WWW-Authenticate` challenge. A valid credential becomes a Principal in the ASGI scope's state, where
tools and REST routes read it.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable

import anyio

from server.auth import Authenticator
from server.errors import AppError, PayloadTooLarge, Unauthorized, Unavailable

log = logging.getLogger("memory_server.http")

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]

CHALLENGE = 'Basic realm="memory-server", charset="UTF-8", Bearer realm="memory-server"'
PROTECTED_PREFIXES = ("/mcp", "/v1")


async def send_error(send: Callable[[dict], Awaitable[None]], error: AppError) -> None:
    body = json.dumps(error.to_dict()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if isinstance(error, Unauthorized):
        headers.append((b"www-authenticate", CHALLENGE.encode()))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class AuthMiddleware:
    def __init__(self, app: ASGIApp, *, authenticator: Callable[[], Authenticator | None], max_body: int) -> None:
        self.app = app
        self._authenticator = authenticator
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIXES):
            await self.app(scope, receive, send)
            return
        header = _header(scope, b"authorization")
        authenticator = self._authenticator()
        if authenticator is None:
            await send_error(send, Unavailable("the server is starting"))
            return
        # A credential seen before is settled on the loop; anything else (and every failure) in a thread.
        principal = authenticator.authenticate_nowait(header)
        if principal is None:
            try:
                principal = await anyio.to_thread.run_sync(authenticator.authenticate, header)
            except AppError as exc:
                await send_error(send, exc)
                return
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body:
            await send_error(send, PayloadTooLarge(f"request body over {self._max_body} bytes"))
            return
        body = await _read_body(receive, self._max_body)
        if body is None:
            await send_error(send, PayloadTooLarge(f"request body over {self._max_body} bytes"))
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, _replay(body, receive), send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """Read the whole body, or None once it grows past `limit` (a chunked body has no Content-Length)."""
    chunks, size = [], 0
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


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def wrapped() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the app expects

    return wrapped
