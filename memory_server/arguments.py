"""The one rule for arguments, whatever the transport: a value has the JSON type its schema declares.

A string is never a number ("5" is not 5), a boolean never a number, a number never a string, a string
never an array. A number with no fractional part is an integer, as in JSON Schema (5.0 is 5; 5.5 is not an
integer). An optional parameter is its plain type: leave it out to leave it unset (or at its default); an
explicit null means the same. A required parameter is never null.

Each operation's parameters are a `Params` model (memory_server.logs.params, memory_server.memories.params): the one
place their bounds, defaults and descriptions are written. MCP tools, REST routes and the MCP fast path
all validate through these models. Descriptions may name configured limits as `{max_payload}`-style fields,
filled in from the settings when a transport publishes its schema (`describe`).
"""

from __future__ import annotations

import re
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticUseDefault

from memory_server.settings import Settings


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


# Put after the `Field(...)` of an `int` parameter (after it, so the schema keeps minimum/maximum): strict
# validation rejects "5" and true, this admits 5.0.
WHOLE_NUMBER = pydantic.BeforeValidator(_whole_number)
# For a parameter with a default that is not None: an explicit null means the default, as absence does.
NULL_IS_DEFAULT = pydantic.BeforeValidator(_null_is_default)


class Params(BaseModel):
    """An operation's parameters: unknown names are refused, and every value has its declared JSON type
    (strict; a REST query model relaxes that, since a query string carries only text)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def size_text(size: int) -> str:
    """262144 -> "256 KiB": a configured byte limit as a person reads it."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def limits(settings: Settings) -> dict[str, str]:
    """The configured values descriptions may name."""
    return {
        "max_payload": size_text(settings.max_payload_bytes),
        "max_batch": size_text(settings.max_batch_bytes),
        "max_content": size_text(settings.max_content_bytes),
        "min_score": f"{settings.search_min_score}",
        "context_header": settings.context_header,
    }


_FIELD = re.compile(r"\{(max_payload|max_batch|max_content|min_score|context_header)\}")


def describe(text: str, settings: Settings) -> str:
    """A description with its `{name}` fields (those of `limits`) filled in; other braces are left alone."""
    if "{" not in text:
        return text
    values = limits(settings)
    return _FIELD.sub(lambda m: values[m.group(1)], text)


def described_schema(schema: Any, settings: Settings) -> Any:
    """A JSON schema (or OpenAPI document) with every description's fields filled in."""
    if isinstance(schema, dict):
        return {
            key: describe(value, settings)
            if key == "description" and isinstance(value, str)
            else described_schema(value, settings)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [described_schema(item, settings) for item in schema]
    return schema
