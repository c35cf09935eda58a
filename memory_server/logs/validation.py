"""What a conversation log accepts: the conversation id rule, the item and batch limits, the cursor of
a conversation listing. Validation happens before any write, so bad input changes nothing. A payload is
JSON text and keeps any character JSON can escape, NUL included; the text of an idempotency key cannot hold
one (memory_server/values.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from memory_server.errors import InvalidParameters, PayloadTooLarge
from memory_server.storage import cursors
from memory_server.values import MAX_DEPTH, check_json_text, check_text, within_depth

CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
CONVERSATION_ID_RULE = "8-64 characters of [A-Za-z0-9_-]"
MAX_ITEMS = 1000
MAX_KEY_LENGTH = 128
MAX_CURSOR_INT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogLimits:
    max_payload_bytes: int
    max_batch_bytes: int


def check_conversation_id(value: object) -> str:
    # fullmatch: with match(), `$` also accepts a trailing newline ("conv-0001\n").
    if not isinstance(value, str) or not CONVERSATION_ID.fullmatch(value):
        raise InvalidParameters(f"conversation_id must be {CONVERSATION_ID_RULE}")
    return value


def serialize_items(items: object, limits: LogLimits) -> list[str]:
    """Validate a batch and return each payload as compact JSON text, keys in their original order."""
    if not isinstance(items, list):
        raise InvalidParameters("items must be a list of JSON objects")
    if not 1 <= len(items) <= MAX_ITEMS:
        raise InvalidParameters(f"items must hold 1-{MAX_ITEMS} objects (got {len(items)})")
    texts: list[str] = []
    total = 0
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidParameters(f"items[{position}] must be a JSON object")
        if not within_depth(item):
            raise InvalidParameters(f"items[{position}] is nested deeper than {MAX_DEPTH} levels")
        try:
            text = json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (ValueError, TypeError) as exc:
            raise InvalidParameters(f"items[{position}] is not valid JSON: {exc}") from None
        # Stored as this text, where a NUL is the escape \u0000: every backend holds it, so it is kept.
        size = len(check_json_text(f"items[{position}]", text, nul_allowed=True).encode("utf-8"))
        if size > limits.max_payload_bytes:
            raise PayloadTooLarge(
                f"items[{position}] is {size} bytes serialized; the limit is {limits.max_payload_bytes}"
            )
        total += size
        if total > limits.max_batch_bytes:
            raise PayloadTooLarge(f"the batch exceeds {limits.max_batch_bytes} bytes serialized")
        texts.append(text)
    return texts


def check_idempotency_key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_LENGTH:
        raise InvalidParameters(f"idempotency_key must be a string of 1-{MAX_KEY_LENGTH} characters")
    return check_text("idempotency_key", value)


def encode_cursor(after: tuple[int, str]) -> str:
    return cursors.encode([after[0], after[1]])


def decode_cursor(cursor: object) -> tuple[int, str]:
    activity_us, conversation_id = cursors.decode(cursor, max_length=200, count=2)
    if (
        not isinstance(activity_us, int)
        or isinstance(activity_us, bool)
        or not 0 <= activity_us <= MAX_CURSOR_INT
        or not isinstance(conversation_id, str)
    ):
        raise cursors.invalid()
    return activity_us, conversation_id
