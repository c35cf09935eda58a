"""Reading console forms and query strings into the operations' own parameter models.

Every form validates through the same models the MCP tools and REST routes use (memory_server.memories.params,
memory_server.logs.params): a value the console cannot parse (a date, JSON, a number) goes to the model as given,
so the model's own message says what is wrong, exactly as on the other transports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import pydantic
from starlette.requests import Request

from memory_server.arguments import Params
from memory_server.errors import InvalidParameters, PayloadTooLarge
from memory_server.memories.validation import check_word

P = TypeVar("P", bound=Params)
MAX_FIELDS = 200
DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
FORM_TYPE = "application/x-www-form-urlencoded"


class Form:
    """The fields of a form or query string: the last value of a name, or all of them."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def get(self, name: str, default: str = "") -> str:
        values = self.all(name)
        return values[-1] if values else default

    def all(self, name: str) -> list[str]:
        return [value for key, value in self._pairs if key == name]

    def given(self, name: str) -> str | None:
        """The value, stripped, or None when absent or blank."""
        value = self.get(name).strip()
        return value or None


def query_form(request: Request) -> Form:
    return Form(list(request.query_params.multi_items()))


async def read_form(request: Request, *, limit: int) -> Form:
    """The urlencoded body of a POST (what browsers and htmx send), at most `limit` bytes."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != FORM_TYPE:
        raise InvalidParameters(f"console forms are sent as {FORM_TYPE}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"request body over {limit} bytes")
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS, errors="strict")
    except UnicodeDecodeError:
        raise InvalidParameters("the form is not valid UTF-8 text") from None
    except ValueError:
        raise InvalidParameters(f"the form has more than {MAX_FIELDS} fields") from None
    return Form(pairs)


def validated(model: type[P], data: Mapping[str, Any], *, text_values: bool = False) -> P:
    """`model` from `data`, or invalid_parameters naming each bad field (as REST words it). `text_values`:
    numbers may come as text (query strings), as REST's query models allow."""
    try:
        return model.model_validate(dict(data), strict=False if text_values else None)
    except pydantic.ValidationError as exc:
        parts = []
        for err in exc.errors(include_url=False, include_input=False)[:10]:
            where = ".".join(str(p) for p in err.get("loc", ())) or "form"
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        raise InvalidParameters("; ".join(parts) or "invalid form") from None


def words(text: str) -> list[str]:
    """A list typed as "a, b c" (commas or spaces between the words)."""
    return [word for word in re.split(r"[\s,]+", text) if word]


def bound_words(name: str, text: str) -> list[str] | None:
    """A token's bound on teams, projects or buckets: short words, as memories are filed (None: unbounded)."""
    values = words(text)
    for value in values:
        check_word(f"each of the {name}", value, optional=False)
    return values or None


def json_object(name: str, text: str) -> dict[str, Any] | None:
    """A JSON object typed into a field; blank is None (reset). The model checks depth, size and Unicode."""
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidParameters(f"{name} must be a JSON object (it is not valid JSON)") from None
    if not isinstance(value, dict):
        raise InvalidParameters(f"{name} must be a JSON object")
    return value


def day_start(text: str | None, *, next_day: bool = False) -> str | None:
    """A date input's "YYYY-MM-DD" as the RFC3339 instant its day starts (UTC), or the next day's start (an
    inclusive "to" date as an exclusive bound). Anything else is passed on for the model to judge."""
    if text is None or not DAY.fullmatch(text):
        return text
    try:
        day = date.fromisoformat(text)
    except ValueError:
        return text
    try:
        day += timedelta(days=1 if next_day else 0)
    except OverflowError:
        return None  # 9999-12-31 has no next day: no upper bound
    return f"{day.isoformat()}T00:00:00Z"
