"""Opaque page cursors: a short JSON list, URL-safe base64 without padding.

Callers check the decoded fields themselves; anything malformed is the same `invalid_parameters`.
"""

from __future__ import annotations

import base64
import binascii
import json

from memory_server.errors import InvalidParameters
from memory_server.values import json_is_storable


def invalid() -> InvalidParameters:
    return InvalidParameters("cursor is not one this server issued")


def encode(fields: list[object]) -> str:
    raw = json.dumps(fields, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: object, *, max_length: int, count: int) -> list[object]:
    """The `count` fields of a cursor this server issued, or invalid_parameters."""
    if not isinstance(cursor, str) or not 1 <= len(cursor) <= max_length:
        raise invalid()
    try:
        fields = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError, binascii.Error):
        raise invalid() from None
    # A forged cursor may carry a lone surrogate or a NUL, which not every backend can bind.
    if not isinstance(fields, list) or len(fields) != count or not json_is_storable(fields):
        raise invalid()
    return fields
