"""Every failure of a tool call becomes an error result carrying its code (see results.py); anything
unexpected is logged with its traceback and reaches the client only as a generic `unavailable`."""

from __future__ import annotations

import logging

import mcp_types as mt
import pydantic
from fastmcp.exceptions import DisabledError, NotFoundError
from fastmcp.exceptions import ValidationError as FastMCPValidationError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult

from memory_server.api.failures import unexpected
from memory_server.api.mcp.results import error_result, validation_message
from memory_server.errors import AppError, InvalidParameters
from memory_server.storage.health import StorageHealth

# pydantic's words for a call's arguments ("Missing required keyword only argument": the tools are made from
# functions with keyword-only parameters) said in the terms of an MCP tool call.
ARGUMENT_ERRORS = {
    "missing_keyword_only_argument": "missing required argument '{}'",
    "missing_argument": "missing required argument '{}'",
    "missing": "missing required argument '{}'",
    "unexpected_keyword_argument": "unknown argument '{}'",
}


def arguments_message(exc: BaseException) -> str:
    """What is wrong with a tool call's arguments, one clause per problem."""
    cause = exc.__cause__ if isinstance(exc.__cause__, pydantic.ValidationError) else exc
    if not isinstance(cause, pydantic.ValidationError):
        return validation_message(exc)
    parts = []
    for err in cause.errors(include_url=False, include_input=False):
        where = [str(p) for p in err.get("loc", ()) if p != "call"]
        template = ARGUMENT_ERRORS.get(err["type"])
        if template is not None and len(where) == 1:
            parts.append(template.format(where[0]))
        else:
            parts.append(f"{'.'.join(where) or 'arguments'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class ExpectedErrorFilter(logging.Filter):
    """fastmcp logs every exception a tool raises with its traceback; an AppError is an answer to the
    client (bad input, missing scope...), not a server fault, so it is not logged as one."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, AppError) or isinstance(getattr(error, "__cause__", None), AppError))


def quiet_expected_errors() -> None:
    fastmcp_logger = logging.getLogger("fastmcp.server.server")
    if not any(isinstance(f, ExpectedErrorFilter) for f in fastmcp_logger.filters):
        fastmcp_logger.addFilter(ExpectedErrorFilter())


class ErrorMiddleware(Middleware):
    def __init__(self, health: StorageHealth | None = None) -> None:
        self._health = health

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        try:
            return await call_next(context)
        except AppError as exc:
            return error_result(exc)
        except (FastMCPValidationError, pydantic.ValidationError) as exc:
            return error_result(InvalidParameters(arguments_message(exc)))
        except (NotFoundError, DisabledError):  # a tool name this server does not offer: the caller's mistake
            return error_result(InvalidParameters(f"unknown tool {context.message.name!r}"))
        except Exception as exc:
            cause = exc.__cause__
            if isinstance(cause, AppError):
                return error_result(cause)
            if isinstance(cause, pydantic.ValidationError):
                return error_result(InvalidParameters(arguments_message(cause)))
            if isinstance(cause, RecursionError):
                return error_result(InvalidParameters("arguments are nested too deeply"))
            return error_result(unexpected(exc, health=self._health, where=f"tool {context.message.name!r}"))
