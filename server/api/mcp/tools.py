"""What every MCP tool shares: who is calling, how arguments are typed, how failures become results.

Errors. Tools raise `AppError`s; `ErrorMiddleware` turns them (and argument-validation failures) into MCP
error results: `isError: true` and one text block `code: message`, with no structured content. The MCP
spec makes structured content conform to the tool's output schema, and the TypeScript SDK 1.x (the MCP
Inspector, most desktop clients) validates it even on error results, so an `{"error": ...}` object there
reached those clients as a -32602 schema exception instead of the error. Anything unexpected is logged
with its traceback and reaches the client only as a generic `unavailable`.

Arguments. One rule for every tool: a value must have the JSON type the input schema declares. A string
is never a number ("5" is not 5), a boolean never a number, a number never a string, a string never an
array. A number with no fractional part is an integer, as in JSON Schema (5.0 is 5; 5.5 is not an
integer). An optional parameter is its plain type in the schema (no `anyOf`, no `null`): leave it out to
leave it unset (or at its default); an explicit null means the same. A required parameter is never null.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any, Callable, TypeVar

import pydantic
from fastmcp import FastMCP
from fastmcp.exceptions import DisabledError, NotFoundError
from fastmcp.exceptions import ValidationError as FastMCPValidationError
from fastmcp.server.dependencies import get_http_request
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools.base import Tool, ToolResult
from fastmcp.utilities.types import NotSet, NotSetT
from mcp_types import ToolAnnotations
from pydantic_core import PydanticUseDefault

from server.auth.core import Principal
from server.storage.sqlite.db import StorageHealth
from server.errors import AppError, InvalidParameters, Unauthorized
from server.api.failures import unexpected

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
    """`code: message` as the only content; no structured content (see the module docstring)."""
    return ToolResult(content=str(error), is_error=True)


def ok_result(structured: dict[str, Any], text: str | None = None) -> ToolResult:
    if text is None:
        text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
    return ToolResult(content=text, structured_content=structured)


def text_result(text: str) -> ToolResult:
    """A text-only answer, for a tool registered without an output schema."""
    return ToolResult(content=text)


# --- argument types -------------------------------------------------------------------------------------


def _whole_number(value: object) -> object:
    """JSON Schema's integer: a number whose fractional part is zero (5.0 is 5, as JSON.stringify and JSON
    Schema validators see it). Anything else is left for strict validation to accept or reject."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _null_is_default(value: object) -> object:
    if value is None:
        raise PydanticUseDefault()
    return value


# Put after the `Field(..., strict=True)` of an `int` parameter (after it, so the schema keeps
# minimum/maximum): strict rejects "5" and true, this admits 5.0.
WHOLE_NUMBER = pydantic.BeforeValidator(_whole_number)
# For a parameter with a default that is not None: an explicit null means the default, as absence does.
NULL_IS_DEFAULT = pydantic.BeforeValidator(_null_is_default)


def plain_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """The input schema with each optional parameter as its plain type: `anyOf: [T, null]` becomes T and
    `default: null` goes. Some clients send a list parameter as a string when they see `anyOf`, and several
    LLM providers' function calling rejects or mangles it; absence already says "unset"."""
    plain = copy.deepcopy(schema)
    for prop in plain.get("properties", {}).values():
        branches = prop.get("anyOf")
        if isinstance(branches, list):
            kept = [branch for branch in branches if branch != {"type": "null"}]
            if len(kept) == 1 and len(kept) < len(branches):
                merged = {**kept[0], **{key: value for key, value in prop.items() if key != "anyOf"}}
                prop.clear()
                prop.update(sorted(merged.items()))  # the order pydantic writes the other parameters in
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    leftover = _nullable_paths(plain)
    if leftover:  # a parameter type this rewrite does not flatten: fix the annotation, never ship it
        raise ValueError(f"input schema still has anyOf or null at {leftover}")
    return plain


def _nullable_paths(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict):
        found = [path or "/"] if "anyOf" in node or node.get("type") == "null" else []
        for key, value in node.items():
            found += _nullable_paths(value, f"{path}/{key}")
        return found
    if isinstance(node, list):
        return [p for i, item in enumerate(node) for p in _nullable_paths(item, f"{path}/{i}")]
    return []


F = TypeVar("F", bound=Callable[..., Any])


def tool(
    mcp: FastMCP, *, name: str | None = None, description: str, annotations: dict[str, Any],
    output_schema: dict[str, Any] | NotSetT | None = NotSet,
) -> Callable[[F], F]:
    """Register a function as a tool, like `@mcp.tool`, with `plain_parameters` applied to its schema."""

    def register(fn: F) -> F:
        made = Tool.from_function(fn, name=name, description=description, annotations=ToolAnnotations(**annotations),
                                  output_schema=output_schema, task=False)
        made.parameters = plain_parameters(made.parameters)
        mcp.add_tool(made)
        return fn

    return register


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
    def __init__(self, health: StorageHealth | None = None) -> None:
        self._health = health

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
            return error_result(unexpected(exc, health=self._health, where=f"tool {context.message.name!r}"))
