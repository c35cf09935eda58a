"""Every REST failure as `{"error": {"code", "message", "retryable"}}` with its code's status (docs/spec.md,
"Errors").

FastAPI's own failures are mapped onto those codes: request validation and malformed JSON -> 422
invalid_parameters, unknown route -> 404 not_found, a known path with the wrong method -> 405 (with Allow)
and code not_found, anything unexpected -> 503 unavailable (logged with its traceback, never sent).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memory_server.api.failures import unexpected
from memory_server.api.middleware import CHALLENGE
from memory_server.api.schemas import ErrorBody
from memory_server.errors import (
    AppError,
    InvalidParameters,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    Unauthorized,
    Unavailable,
)

log = logging.getLogger("memory_server.rest")

HANDLED = "_memory_server_rest_handled"
MAX_LISTED_ERRORS = 10


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    described = {
        401: "unauthorized: missing or invalid credentials (with a WWW-Authenticate challenge)",
        403: "forbidden: the credential lacks the scope or bound",
        404: "not_found",
        413: "payload_too_large: item, batch, content or request over the configured limits",
        422: "invalid_parameters, or unprocessable_parameters (a Bearer caller on a Basic-only route)",
        429: "rate_limited: too many failed sign-ins from this client address; retry after Retry-After seconds",
        503: "unavailable: storage busy, model loading, index down, shutting down; safe to retry",
    }
    out: dict[int | str, dict[str, Any]] = {
        status: {"model": ErrorBody, "description": described[status]} for status in statuses
    }
    if 401 in out:
        out[401]["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "The challenge."}}
    for status in (429, 503):
        if status in out:
            out[status]["headers"] = {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}}
    return out


COMMON = (401, 403, 413, 422, 429, 503)


def error_response(
    error: AppError, *, status: int | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    headers = dict(headers or {})
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = CHALLENGE
    if isinstance(error, (RateLimited, Unavailable)):
        headers["Retry-After"] = str(error.retry_after)
    return JSONResponse(error.to_dict(), status_code=status or error.status, headers=headers)


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:  # pydantic's error dicts
    parts = []
    for err in list(errors)[:MAX_LISTED_ERRORS]:
        loc = [str(p) for p in err.get("loc", ())]
        where = ".".join(loc) or "request"
        kind = err.get("type", "")
        if kind == "json_invalid":
            ctx = err.get("ctx") or {}
            parts.append(f"body: malformed JSON ({ctx.get('error', 'decode error')})")
        elif kind == "missing" and loc == ["body"]:
            parts.append("body: a JSON object is required (Content-Type: application/json)")
        elif loc == ["body"] and isinstance(err.get("input"), (bytes, str)):
            parts.append("body: must be a JSON object sent with Content-Type: application/json")
        elif kind == "missing":
            parts.append(f"{where}: is required")
        else:
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
    extra = len(list(errors)) - MAX_LISTED_ERRORS
    if extra > 0:
        parts.append(f"and {extra} more")
    return "; ".join(parts) or "invalid request"


async def app_error(request: Request, exc: AppError) -> JSONResponse:
    return error_response(exc)


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(InvalidParameters(validation_message(exc.errors())))


async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 404:
        return error_response(NotFound(f"no route {where}"))
    if exc.status_code == 405:
        allow = ", ".join(_allowed_methods(request)) or (exc.headers or {}).get("Allow", "")
        return error_response(
            NotFound(f"{request.method} is not supported here; allowed: {allow}"), status=405, headers={"Allow": allow}
        )
    if exc.status_code == 413:
        return error_response(PayloadTooLarge("request body too large"))
    if exc.status_code == 400:  # FastAPI could not read the body (e.g. not UTF-8)
        return error_response(
            InvalidParameters("body: could not be read as JSON (not UTF-8 text, or nested too deeply)")
        )
    if exc.status_code == 401:
        return error_response(Unauthorized("credentials required (Basic or Bearer)"))
    if exc.status_code < 500:
        return error_response(InvalidParameters(f"{where}: {exc.detail}"))
    return error_response(Unavailable("the request could not be served; retry later"))


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route offers on this path (Starlette reports only the first matching route's)."""
    methods: set[str] = set()
    for route in getattr(request.app.state, "route_table", ()):
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(request.scope["path"]):
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    # Starlette re-raises the exception once this response is sent; RestApp then knows it was handled.
    exc.__dict__[HANDLED] = True
    if isinstance(exc, RecursionError):
        return error_response(InvalidParameters("the request is nested too deeply"))
    return error_response(
        unexpected(exc, health=request.app.state.health, where=f"REST {request.method} {request.url.path}")
    )


def install(api: FastAPI) -> None:
    """Map every failure of the FastAPI app onto the contract's error body."""
    # Starlette types every handler as taking Exception; each here is registered for its own class.
    api.add_exception_handler(AppError, app_error)  # type: ignore[arg-type]
    api.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    api.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    api.add_exception_handler(Exception, unexpected_error)
