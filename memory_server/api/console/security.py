"""What every console response carries, and the checks on where a console request came from.

The console's pages run no inline script or style and load nothing from elsewhere, so the policy can be
strict: a script injected into a memory's content (rendered escaped anyway) would not run. Pages hold a
site's memories: never cached, never framed, never leaked through a Referer.

Cross-site requests: the session cookie is SameSite=Strict (a page elsewhere cannot make the browser send
it), every change needs the session's CSRF token, and on top of both a request whose `Origin` names another
host, or a change a browser marks as cross-site (`Sec-Fetch-Site`), is refused before anything runs.
BrowserGuard's Host check (DNS rebinding) covers /ui/ as every path; its MEMORY_ALLOWED_ORIGINS list is for
pages calling /mcp and /v1, and does not let another origin into the console.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_server.errors import Forbidden

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
STATIC_PREFIX = "/static/"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class SecurityHeaders:
    """Adds the console's headers to every response under /ui/ (errors and static files too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].removeprefix(scope.get("root_path", "")).startswith(STATIC_PREFIX)
        cache = b"public, max-age=3600" if static else b"no-store"

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in HEADERS} | {b"cache-control"}
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": [*headers, *HEADERS, (b"cache-control", cache)]}
            await send(message)

        await self.app(scope, receive, with_headers)


def refuse_cross_site(request: Request) -> None:
    """403 for a request another site's page made: an Origin of another host, or a change not marked
    same-origin. Under `Referrer-Policy: no-referrer` a browser sends `Origin: null` even with its own form
    posts, so a change with a null (or no) Origin must be marked same-origin by `Sec-Fetch-Site` instead."""
    origin = (request.headers.get("origin") or "").strip().lower()
    fetch_site = request.headers.get("sec-fetch-site")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", "").strip().lower():
        raise Forbidden("the console answers only its own pages (this request came from another origin)")
    if request.method in SAFE_METHODS:
        return
    if fetch_site is not None and fetch_site != "same-origin":
        raise Forbidden("the console accepts changes only from its own pages")
    if origin == "null" and fetch_site is None:
        raise Forbidden("the console accepts changes only from its own pages (this one has an opaque origin)")


def is_https(request: Request) -> bool:
    """The request came over HTTPS (to uvicorn, or to a trusted proxy that said so: X-Forwarded-Proto)."""
    return request.url.scheme == "https"


def set_cookie(response: Response, request: Request, name: str, value: str, *, max_age: int, path: str) -> None:
    response.set_cookie(
        name, value, max_age=max_age, path=path, httponly=True, samesite="strict", secure=is_https(request)
    )


def clear_cookie(response: Response, request: Request, name: str, *, path: str) -> None:
    response.delete_cookie(name, path=path, httponly=True, samesite="strict", secure=is_https(request))
