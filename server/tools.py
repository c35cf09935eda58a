"""What every MCP tool shares: who is calling, and how failures become `code: message` results.

Tools raise `AppError`s; `ErrorMiddleware` turns them (and argument-validation failures) into MCP error
results carrying the SPEC code first in the text and as `{"error": {...}}` structured content. Anything
unexpected is logged with its traceback and reaches the client only as a generic `unavailable`.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

import pydantic
from fastmcp.exceptions import DisabledError, NotFoundError
from fastmcp.exceptions import ValidationError as FastMCPValidationError
from fastmcp.server.dependencies import get_http_request
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult

from server.auth import Principal
from server.errors import AppError, InvalidParameters, Unauthorized, Unavailable

log = logging.getLogger("memory_server.tools")


def principal_resolver(local: Callable[[], Principal] | None) -> Callable[[], Principal]:
    """Over HTTP the auth middleware put the Principal in the request state; over stdio it is `local`."""

    def current() -> Principal:
        try:
            request = get_http_request()
        except RuntimeError:
            request = None
        if request is not None:
            principal = getattr(request.state, "principal", None)
            if principal is None:  # the auth middleware always sets it; never trust its absence
                raise Unauthorized("credentials required")
            return principal
        if local is None:
            raise Unauthorized("credentials required")
        return local()

    return current


def error_result(error: AppError) -> ToolResult:
    return ToolResult(content=str(error), structured_content=error.to_dict(), is_error=True)


def ok_result(structured: dict[str, Any], text: str | None = None) -> ToolResult:
    if text is None:
        text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
    return ToolResult(content=text, structured_content=structured)


def _validation_message(exc: BaseException) -> str:
    cause = exc.__cause__ if isinstance(exc.__cause__, pydantic.ValidationError) else exc
    if isinstance(cause, pydantic.ValidationError):
        parts = []
        for err in cause.errors(include_url=False, include_input=False):
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "call") or "arguments"
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return "; ".join(parts)
    return str(exc).splitlines()[0] if str(exc) else "invalid arguments"


class ExpectedErrorFilter(logging.Filter):
    """fastmcp logs every exception a tool raises with its traceback; an AppError is an answer to the
    client (bad input, missing scope...), not a server fault, so it is not logged as one."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, AppError)


def quiet_expected_errors() -> None:
    fastmcp_logger = logging.getLogger("fastmcp.server.server")
    if not any(isinstance(f, ExpectedErrorFilter) for f in fastmcp_logger.filters):
        fastmcp_logger.addFilter(ExpectedErrorFilter())


class ErrorMiddleware(Middleware):
    async def on_call_tool(self, context: MiddlewareContext, call_next: Any) -> Any:
        try:
            return await call_next(context)
        except AppError as exc:
            return error_result(exc)
        except (FastMCPValidationError, pydantic.ValidationError) as exc:
            return error_result(InvalidParameters(_validation_message(exc)))
        except (NotFoundError, DisabledError):  # a tool name this server does not offer: the caller's mistake
            return error_result(InvalidParameters(f"unknown tool {context.message.name!r}"))
        except Exception as exc:
            cause = exc.__cause__
            if isinstance(cause, AppError):
                return error_result(cause)
            if isinstance(cause, pydantic.ValidationError):
                return error_result(InvalidParameters(_validation_message(cause)))
            if isinstance(cause, RecursionError):
                return error_result(InvalidParameters("arguments are nested too deeply"))
            log.exception("tool failed unexpectedly")
            return error_result(Unavailable("internal error; it has been logged, retry later"))
