"""Request logs, request ids, HTTP metrics, `/metrics` and the readiness checks behind `/readyz`.

One access-log line per HTTP request (logger `memory_server.access`) with: request id, method, path
(never the query string), status, duration, client address, and the principal's site and auth kind when
known. Never the Authorization header, a secret, a token, or any request or response body. Health probes
(`/healthz`, `/readyz`, `/metrics`) log at DEBUG so polling does not drown the log; 5xx at WARNING.

The request id is the caller's `X-Request-ID` when it is sane (1-128 of `[A-Za-z0-9._:-]`), else a new
one; it is echoed in the response's `X-Request-ID` header and, while the request runs, added to every
JSON log line (`memory_server.logging_setup.RequestIdFilter`), so a tool's error line can be matched with its
request.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Mount, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_server.api.metrics import CONTENT_TYPE, Metrics
from memory_server.logging_setup import current_request_id

access_log = logging.getLogger("memory_server.access")


REQUEST_ID_HEADER = b"x-request-id"
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
UNMATCHED = "unmatched"
MAX_LOGGED_PATH = 256
# How long /readyz waits for the SQLite writer to take and release the write lock.
WRITER_PROBE_TIMEOUT_S = 2.0


class RequestObservabilityMiddleware:
    """The outermost middleware: request id, access log line, HTTP metrics."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics | None = None) -> None:
        self.app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        pristine = dict(scope)  # routing rewrites path_params/root_path in place; match templates on this
        scope.setdefault("state", {})["request_id"] = request_id
        status: int | None = None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != REQUEST_ID_HEADER]
                message = {**message, "headers": [*headers, (REQUEST_ID_HEADER, request_id.encode())]}
            await send(message)

        token = current_request_id.set(request_id)
        start = time.perf_counter()
        failed = False
        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            failed = True
            raise
        finally:
            seconds = time.perf_counter() - start
            current_request_id.reset(token)
            # No response at all: 500 if the app raised, else the client went away first (nginx's 499).
            final = status if status is not None else (500 if failed else 499)
            self._record(scope, pristine, request_id, final, seconds)

    def _record(self, scope: Scope, pristine: Scope, request_id: str, status: int, seconds: float) -> None:
        method = scope.get("method", "")
        method = method if method in METHODS else "OTHER"
        if self._metrics is not None:
            try:
                self._metrics.observe_http(method, route_template(pristine), status, seconds)
            except Exception:  # metrics must never break a response
                access_log.debug("route template lookup failed", exc_info=True)
        principal = (scope.get("state") or {}).get("principal")
        path = _loggable_path(scope.get("path", ""))
        client = scope.get("client")
        fields = {
            "request_id": request_id,
            "method": method,
            "path": path,
            "status": status,
            "duration_ms": round(seconds * 1000, 2),
            "site": getattr(principal, "site", None),
            "auth": getattr(principal, "kind", None) or _presented_scheme(scope, status),
            "client": client[0] if client else None,
        }
        if path in PROBE_PATHS:  # polled every few seconds; /readyz's body says why it is not ready
            level = logging.DEBUG
        elif status >= 500:
            level = logging.WARNING
        else:
            level = logging.INFO
        access_log.log(
            level,
            "%s %s %s %.1fms id=%s site=%s auth=%s",
            method,
            path,
            status,
            fields["duration_ms"],
            request_id,
            fields["site"] or "-",
            fields["auth"],
            extra=fields,
        )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _request_id(scope: Scope) -> str:
    incoming = _header(scope, REQUEST_ID_HEADER)
    if incoming is not None and SANE_REQUEST_ID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


def _presented_scheme(scope: Scope, status: int) -> str:
    """For requests without a principal: which scheme was offered (never the credential itself), and
    whether it was refused or, with a 503, could not be checked (the store unavailable: nothing was refused)."""
    header = _header(scope, b"authorization")
    if not header:
        return "none"
    scheme = header.strip().partition(" ")[0].lower()
    outcome = "unavailable" if status == 503 else "rejected"
    return f"{scheme}-{outcome}" if scheme in ("basic", "bearer") else f"other-{outcome}"


def _loggable_path(path: str) -> str:
    """The path only (the query string is never logged), cut short, control characters escaped so a
    crafted path cannot forge log lines."""
    if len(path) > MAX_LOGGED_PATH:
        path = path[:MAX_LOGGED_PATH] + "..."
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in path)


def route_template(scope: Scope) -> str:
    """The route a request matched, as its template (`/v1/memories/{reference}`), or `unmatched`.
    Walks the app's routes like Starlette's router does, into mounted apps; a mounted app whose routes
    cannot be walked (the REST app wraps FastAPI) is matched against the paths of its OpenAPI document."""
    return _match(_routes_of(scope.get("app")), scope, "") or UNMATCHED


def _routes_of(app: Any) -> list[Any]:  # Any: an app or ASGI wrapper, walked by its attributes
    """The routes of an app, looking through ASGI wrappers that keep the routed app as `.app` or `.api`."""
    for _ in range(5):
        if app is None:
            return []
        routes = getattr(app, "routes", None)
        if routes:
            return list(routes)
        app = getattr(app, "api", None) or getattr(app, "app", None)
    return []


def _match(routes: list[Any], scope: Scope, prefix: str) -> str | None:
    partial: str | None = None
    for route in routes:
        path, app = getattr(route, "path", None), getattr(route, "app", None)
        plain = isinstance(path, str) and not isinstance(route, Mount)
        if not plain and app is None:
            continue  # neither a route nor a way into an app (FastAPI's included routers): see the OpenAPI match
        try:
            match, child = route.matches(scope)
        except Exception:
            continue
        if match == Match.NONE:
            continue
        if not plain:  # a Mount, or a custom route handing a whole subtree to another app (the REST app)
            below = prefix + (path if isinstance(path, str) else "")
            inner = _routes_of(app)
            # None from all three: that app took the request and answers 404 itself.
            return (
                _match(inner, {**scope, **child}, below)
                or _match(inner, scope, prefix)  # apps that route on the full path
                or _openapi_match(app, scope, below)
            )
        if match == Match.FULL:
            return prefix + str(path)
        partial = partial or prefix + str(path)  # the path matched but not the method: a 405
    return partial


_openapi_cache: dict[int, tuple[object, list[tuple[re.Pattern[str], str, frozenset[str]]]]] = {}


def _openapi_match(app: Any, scope: Scope, mount_prefix: str) -> str | None:
    openapi = getattr(app, "openapi", None)
    if not callable(openapi):
        return None
    document = openapi()
    cached = _openapi_cache.get(id(app))
    if cached is None or cached[0] is not document:
        compiled = []
        for template, item in (document.get("paths") or {}).items():
            allowed: set[str] = {m.upper() for m in item if m.upper() in METHODS}
            if "GET" in allowed:
                allowed.add("HEAD")
            compiled.append((compile_path(template)[0], template, frozenset(allowed)))
        cached = _openapi_cache[id(app)] = (document, compiled)
    path = scope.get("path", "")
    below = path[len(mount_prefix) :] if path.startswith(mount_prefix) else None
    partial: str | None = None
    for regex, template, methods in cached[1]:
        # Paths in the document may be full (the REST app routes on /v1/...) or relative to the mount.
        for candidate, label in ((path, template), (below, mount_prefix + template)):
            if candidate is not None and regex.match(candidate):
                if scope.get("method") in methods:
                    return label
                partial = partial or label
    return partial


# --- /metrics ------------------------------------------------------------------------------------------


def metrics_endpoint(metrics: Metrics) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        body = await anyio.to_thread.run_sync(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE)

    return endpoint
