"""The web console at /ui/: server-rendered pages over the same operations as MCP and REST.

A third transport, thin like the other two: each page reads its form into an operation's parameter model and
calls that operation (memory_server.operations) with the signed-in principal, so a token's scopes and bounds
apply here exactly as they do over REST. Sessions and CSRF: memory_server.api.console.sessions; headers and
cross-site checks: memory_server.api.console.security. Pages: memories, logs, access, status (one module each).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from memory_server.api.console.forms import Form, read_form
from memory_server.api.console.render import Renderer
from memory_server.api.console.security import SAFE_METHODS, SecurityHeaders, clear_cookie, refuse_cross_site
from memory_server.api.console.sessions import SESSION_COOKIE, ConsoleSessions, Session, csrf_ok
from memory_server.api.failures import unexpected
from memory_server.api.middleware import SignInGuard
from memory_server.auth.principal import Principal
from memory_server.errors import AppError, Forbidden, NotFound
from memory_server.services import Services

log = logging.getLogger("memory_server.console")

STATIC = Path(__file__).resolve().parent / "static"
ROOT = "/ui"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


@dataclass
class Console:
    """What every page needs: the services, the sign-in guard shared with Basic, sessions, templates."""

    services: Services
    sign_in: SignInGuard
    sessions: ConsoleSessions
    render: Renderer
    max_form: int

    def fail(self, request: Request, exc: Exception, session: Session | None = None) -> Response:
        """A failure as a page with its error code and message; anything unexpected is logged, never shown."""
        if not isinstance(exc, AppError):
            exc = unexpected(
                exc, health=self.services.storage.health, where=f"console {request.method} {request.url.path}"
            )
        return self.render.error(request, exc, session=session)


@dataclass(frozen=True)
class Visit:
    """One signed-in request: who, its form (POST) or query string, and the console."""

    request: Request
    session: Session
    form: Form
    console: Console

    @property
    def principal(self) -> Principal:
        return self.session.principal

    def page(self, template: str, *, status: int = 200, **context: Any) -> Response:  # template values
        return self.console.render.page(self.request, template, session=self.session, status=status, **context)


Handler = Callable[[Visit], Awaitable[Response]]


def signed_in(console: Console, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A page that needs a session: without one, the sign-in page (then back here). A change (POST) must
    carry the session's CSRF token, checked before the form is looked at."""

    async def endpoint(request: Request) -> Response:
        session = None
        try:
            refuse_cross_site(request)
            session = await console.sessions.resume(request.cookies.get(SESSION_COOKIE))
            if session is None:
                return to_sign_in(request)
            form = Form(list(request.query_params.multi_items()))
            if request.method not in SAFE_METHODS:
                form = await read_form(request, limit=console.max_form)
                presented = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)
                if not csrf_ok(session.secret, presented):
                    raise Forbidden(
                        "this change lacks the console's CSRF token for your session; reload the page and try again"
                    )
            return await handler(Visit(request, session, form, console))
        except Exception as exc:  # every failure becomes a page; nothing reaches the client as a 500
            return console.fail(request, exc, session)

    return endpoint


def to_sign_in(request: Request) -> Response:
    """Off to the sign-in page, coming back to this page afterwards (GET only: a form's data is not kept)."""
    query = {"next": request.url.path} if request.method == "GET" else {}
    if request.cookies.get(SESSION_COOKIE):
        query["ended"] = "1"  # the cookie named a session that is gone: the sign-in page says why
    target = f"{ROOT}/sign-in" + (f"?{urlencode(query, safe='/')}" if query else "")
    response: Response = RedirectResponse(target, status_code=303)
    if request.headers.get("hx-request"):
        response = Response(status_code=204, headers={"HX-Redirect": target})  # a whole page, not a fragment
    if request.cookies.get(SESSION_COOKIE):
        clear_cookie(response, request, SESSION_COOKIE, path=ROOT)
    return response


def console_app(services: Services, *, sign_in: SignInGuard) -> ASGIApp:
    """The console as one ASGI app, to be mounted at /ui."""
    from memory_server.api.console import access, logs, memories, status

    console = Console(
        services=services,
        sign_in=sign_in,
        sessions=ConsoleSessions(services.storage.sites, services.authenticator),
        render=Renderer(),
        max_form=services.settings.max_request_bytes,
    )

    async def home(request: Request) -> Response:
        return RedirectResponse(f"{ROOT}/memories", status_code=303)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        error = NotFound(
            f"no console page {request.url.path}"
            if status == 404
            else f"{request.method} is not supported on {request.url.path}"
        )
        response = console.render.error(request, error)
        response.status_code = status
        return response

    routes: list[BaseRoute] = [
        Route("/", home),
        *access.routes(console),
        *memories.routes(console),
        *logs.routes(console),
        *status.routes(console),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    return SecurityHeaders(app)
