"""The console's pages: Jinja2 templates rendered on the server, HTML-escaped everywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from memory_server.api.console.sessions import Session
from memory_server.auth.principal import WRITE
from memory_server.errors import AppError, RateLimited
from memory_server.version import __version__

TEMPLATES = Path(__file__).resolve().parent / "templates"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def when(value: str | None) -> str:
    """An RFC3339 timestamp shortened for a table: 2026-05-08 14:00:00 UTC."""
    if not value:
        return "-"
    return value.replace("T", " ", 1).split(".")[0].removesuffix("Z") + " UTC"


class Renderer:
    def __init__(self) -> None:
        self.env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(["html"]),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(pretty=pretty, when=when)
        self.env.globals["version"] = __version__

    def page(
        self,
        request: Request,
        template: str,
        *,
        session: Session | None = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
        **context: Any,
    ) -> HTMLResponse:
        """A page; `session` (a console Session, or None before sign-in) decides the navigation shown."""
        principal = session.principal if session is not None else None
        context.setdefault("error", None)
        html = self.env.get_template(template).render(
            request=request,
            path=request.url.path,
            principal=principal,
            csrf=session.csrf if session is not None else context.pop("csrf", ""),
            can_write=principal is not None and WRITE in principal.scopes,
            is_basic=principal is not None and principal.is_basic,
            **context,
        )
        return HTMLResponse(html, status_code=status, headers=headers)

    def error(self, request: Request, error: AppError, *, session: Session | None = None) -> HTMLResponse:
        headers = {"Retry-After": str(error.retry_after)} if isinstance(error, RateLimited) else None
        return self.page(request, "error.html", session=session, status=error.status, headers=headers, error=error)
