"""Values clients send that storage can hold: text of valid Unicode without NUL, JSON nested to a sane depth.

JSON may escape a lone surrogate (`"\\ud800"`) and Python decodes it into a `str` that cannot be encoded as
UTF-8, so no store can write it. JSON may also escape NUL (`"\\u0000"`): SQLite stores it, but PostgreSQL's
text cannot hold it (nor its jsonb, even escaped), so a memory holding it would be accepted by one backend
and refused by the other. Such input can never succeed everywhere, so it is `invalid_parameters` at
validation time on every backend, never an `unavailable` from deep inside a write. Log payloads are the
exception (`check_json_text` with `nul_allowed`): they are stored as the JSON text appended, escapes and all,
which every backend holds.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memory_server.errors import InvalidParameters

MAX_DEPTH = 64  # deeper JSON is almost certainly a mistake or an attack on recursive decoders
NUL = "\x00"
# How json.dumps writes a NUL: "\u0000" after an even number of backslashes (an odd number is the text `\u0000`).
NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
LONE_SURROGATE = "a lone UTF-16 surrogate (\\ud800-\\udfff); text must be valid Unicode"
NUL_CHARACTER = "the NUL character (U+0000), which stored text cannot contain"


def within_depth(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether a JSON value nests at most `limit` levels (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return True


def is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_fault(text: str) -> str | None:
    """What keeps `text` out of storage (a lone surrogate, a NUL), or None."""
    if not is_unicode(text):
        return LONE_SURROGATE
    if NUL in text:
        return NUL_CHARACTER
    return None


def check_text(name: str, text: str) -> str:
    """`text` if every backend can store it, else invalid_parameters naming the field."""
    fault = text_fault(text)
    if fault is not None:
        raise InvalidParameters(f"{name} holds {fault}")
    return text


def json_text_fault(serialized: str, *, nul_allowed: bool = False) -> str | None:
    """The same for JSON as `json.dumps(value, ensure_ascii=False)` wrote it (keys and nested strings too):
    a lone surrogate is written as is, a NUL as the escape `\\u0000`."""
    if not is_unicode(serialized):
        return LONE_SURROGATE
    if not nul_allowed and "\\u0000" in serialized and NUL_ESCAPE.search(serialized):
        return NUL_CHARACTER
    return None


def check_json_text(name: str, serialized: str, *, nul_allowed: bool = False) -> str:
    fault = json_text_fault(serialized, nul_allowed=nul_allowed)
    if fault is not None:
        raise InvalidParameters(f"{name} holds {fault}")
    return serialized


def check_json(name: str, value: Any) -> Any:
    """A JSON value whose every string (keys included) every backend can store."""
    try:
        serialized = json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return value  # not this check's business: the caller's JSON validation reports it
    check_json_text(name, serialized)
    return value


def json_is_storable(value: Any) -> bool:
    """Whether every string in a JSON value (keys included) is valid Unicode without NUL."""
    try:
        check_json("value", value)
    except InvalidParameters:
        return False
    return True
