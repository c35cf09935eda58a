"""Values clients send that storage can hold: valid Unicode, and JSON nested to a sane depth.

JSON may escape a lone surrogate (`"\\ud800"`) and Python decodes it into a `str` that cannot be encoded as
UTF-8, so SQLite (and every other store) refuses it at write time. Such input can never succeed, so it is
`invalid_parameters` at validation time, never an `unavailable` from deep inside a write.
"""

from __future__ import annotations

import json
from typing import Any

from server.errors import InvalidParameters

MAX_DEPTH = 64  # deeper JSON is almost certainly a mistake or an attack on recursive decoders


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


def _not_unicode(name: str) -> InvalidParameters:
    return InvalidParameters(f"{name} holds a lone UTF-16 surrogate (\\ud800-\\udfff); text must be valid Unicode")


def check_unicode(name: str, text: str) -> str:
    if not is_unicode(text):
        raise _not_unicode(name)
    return text


def check_json_unicode(name: str, value: Any) -> Any:
    if not json_is_unicode(value):
        raise _not_unicode(name)
    return value


def json_is_unicode(value: Any) -> bool:
    """Whether every string in a JSON value (keys included) is valid Unicode."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except (ValueError, TypeError, RecursionError):
        return True  # not this check's business: the caller's JSON validation reports it
    return True
