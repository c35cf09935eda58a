"""Conversation logs on SQLite: append, recall (tail), replay (by position), list.

`seq` is assigned inside the append's write transaction from the conversation's `item_count`, and the
transaction holds SQLite's write lock (BEGIN IMMEDIATE), so concurrent appenders — threads of this process
or other processes on the same file — can never produce a gap or a repeated seq. A batch is one
transaction: all of it is visible, or none.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from server.storage import cursors
from server.auth.core import now_rfc3339
from server.storage.sqlite.db import Readers, Writer
from server.errors import InvalidParameters, PayloadTooLarge
from server.text import check_unicode

CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
MAX_ITEMS = 1000
MAX_DEPTH = 64  # deeper JSON is almost certainly a mistake or an attack on recursive decoders
MAX_SQLITE_INT = 2**63 - 1  # larger Python ints cannot be bound as SQLite parameters


@dataclass(frozen=True, slots=True)
class LogLimits:
    max_payload_bytes: int
    max_batch_bytes: int


def check_conversation_id(value: object) -> str:
    # fullmatch: with match(), `$` also accepts a trailing newline ("conv-0001\n").
    if not isinstance(value, str) or not CONVERSATION_ID.fullmatch(value):
        raise InvalidParameters("conversation_id must be 8-64 characters of [A-Za-z0-9_-]")
    return value


def check_bound(name: str, value: object, low: int, high: int | None) -> int:
    # bool is an int subclass in Python; JSON true is not a count.
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidParameters(f"{name} must be an integer")
    if value < low or (high is not None and value > high):
        upper = f" and {high}" if high is not None else ""
        raise InvalidParameters(f"{name} must be between {low}{upper}" if upper else f"{name} must be >= {low}")
    return value


def _depth_ok(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return True


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
        if not _depth_ok(item):
            raise InvalidParameters(f"items[{position}] is nested deeper than {MAX_DEPTH} levels")
        try:
            text = json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (ValueError, TypeError) as exc:
            raise InvalidParameters(f"items[{position}] is not valid JSON: {exc}") from None
        size = len(check_unicode(f"items[{position}]", text).encode("utf-8"))
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
    if not isinstance(value, str) or not 1 <= len(value) <= 128:
        raise InvalidParameters("idempotency_key must be a string of 1-128 characters")
    return check_unicode("idempotency_key", value)


# (seq, recorded_at, payload JSON text as stored: always `serialize_items` output)
RawItem = tuple[int, str, str]


def _item(row: RawItem) -> dict[str, Any]:
    return {"seq": row[0], "recorded_at": row[1], "payload": json.loads(row[2])}


class LogStore:
    def __init__(self, writer: Writer, readers: Readers, limits: LogLimits) -> None:
        self._writer = writer
        self._readers = readers
        self._limits = limits

    # -- validation happens before any write, so bad input changes nothing --

    def prepare_append(
        self, conversation_id: object, items: object, idempotency_key: object = None
    ) -> tuple[str, list[str], str | None]:
        return (
            check_conversation_id(conversation_id),
            serialize_items(items, self._limits),
            check_idempotency_key(idempotency_key),
        )

    async def append(
        self, site_id: int, conversation_id: str, payloads: list[str], idempotency_key: str | None
    ) -> dict[str, Any]:
        return await self._writer.run(
            lambda conn: append_batch(conn, site_id, conversation_id, payloads, idempotency_key)
        )

    def recall(self, site_id: int, conversation_id: str, count: int) -> list[dict[str, Any]]:
        return [_item(row) for row in self.recall_rows(site_id, conversation_id, count)]

    def replay(self, site_id: int, conversation_id: str, offset: int, limit: int) -> list[dict[str, Any]]:
        return [_item(row) for row in self.replay_rows(site_id, conversation_id, offset, limit)]

    # The *_rows forms keep each payload as its stored JSON text, for callers that write it out again
    # without needing the parsed value (the MCP fast path in server.api.mcp.log_tools).

    def recall_rows(self, site_id: int, conversation_id: str, count: int) -> list[RawItem]:
        rows = self._tuples().execute(
            "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = ? AND conversation_id = ?"
            " ORDER BY seq DESC LIMIT ?",
            (site_id, conversation_id, count),
        ).fetchall()
        rows.reverse()
        return rows

    def replay_rows(self, site_id: int, conversation_id: str, offset: int, limit: int) -> list[RawItem]:
        if offset > MAX_SQLITE_INT:  # past the end of any log (and not bindable): an empty page
            return []
        return self._tuples().execute(
            "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = ? AND conversation_id = ?"
            " AND seq >= ? ORDER BY seq LIMIT ?",
            (site_id, conversation_id, offset, limit),
        ).fetchall()

    def _tuples(self) -> sqlite3.Cursor:
        # Plain tuples: building a sqlite3.Row per item costs as much as the query itself on 1000-item pages.
        cursor = self._readers.get().cursor()
        cursor.row_factory = None
        return cursor

    def list(self, site_id: int, limit: int, cursor: str | None) -> dict[str, Any]:
        after = decode_cursor(cursor) if cursor is not None else None
        sql = (
            "SELECT conversation_id, item_count, first_recorded_at, last_recorded_at, last_activity_us"
            " FROM conversations WHERE site_id = ?"
        )
        args: list[Any] = [site_id]
        if after is not None:
            sql += " AND (last_activity_us < ? OR (last_activity_us = ? AND conversation_id < ?))"
            args += [after[0], after[0], after[1]]
        sql += " ORDER BY last_activity_us DESC, conversation_id DESC LIMIT ?"
        rows = self._readers.get().execute(sql, (*args, limit + 1)).fetchall()
        page = rows[:limit]
        next_cursor = None
        if len(rows) > limit:
            last = page[-1]
            next_cursor = encode_cursor(last["last_activity_us"], last["conversation_id"])
        return {
            "conversations": [
                {
                    "conversation_id": r["conversation_id"],
                    "item_count": r["item_count"],
                    "first_recorded_at": r["first_recorded_at"],
                    "last_recorded_at": r["last_recorded_at"],
                }
                for r in page
            ],
            "next_cursor": next_cursor,
        }


def append_batch(
    conn: sqlite3.Connection,
    site_id: int,
    conversation_id: str,
    payloads: list[str],
    idempotency_key: str | None,
    *,
    recorded_at: str | None = None,
) -> dict[str, Any]:
    """Append one batch inside the caller's write transaction; return the acknowledgement."""
    if idempotency_key is not None:
        prior = conn.execute(
            "SELECT first_seq, last_seq, count, recorded_at FROM append_keys"
            " WHERE site_id = ? AND conversation_id = ? AND idempotency_key = ?",
            (site_id, conversation_id, idempotency_key),
        ).fetchone()
        if prior is not None:
            return {"conversation_id": conversation_id, **dict(prior), "duplicate": True}
    row = conn.execute(
        "SELECT item_count FROM conversations WHERE site_id = ? AND conversation_id = ?",
        (site_id, conversation_id),
    ).fetchone()
    first_seq = row[0] if row else 0
    recorded_at = recorded_at or now_rfc3339()
    # Strictly increasing per site in commit order (we hold the write lock), so "newest activity first"
    # holds even if two commits share a microsecond or the wall clock steps back.
    latest = conn.execute(
        "SELECT MAX(last_activity_us) FROM conversations WHERE site_id = ?", (site_id,)
    ).fetchone()[0]
    activity_us = max(time.time_ns() // 1000, (latest or 0) + 1)
    conn.executemany(
        "INSERT INTO log_items (site_id, conversation_id, seq, recorded_at, payload) VALUES (?, ?, ?, ?, ?)",
        [(site_id, conversation_id, first_seq + i, recorded_at, text) for i, text in enumerate(payloads)],
    )
    count = len(payloads)
    conn.execute(
        "INSERT INTO conversations (site_id, conversation_id, item_count, first_recorded_at, last_recorded_at,"
        " last_activity_us) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (site_id, conversation_id) DO UPDATE SET item_count = item_count + excluded.item_count,"
        " last_recorded_at = excluded.last_recorded_at, last_activity_us = excluded.last_activity_us",
        (site_id, conversation_id, count, recorded_at, recorded_at, activity_us),
    )
    ack = {
        "conversation_id": conversation_id,
        "first_seq": first_seq,
        "last_seq": first_seq + count - 1,
        "count": count,
        "recorded_at": recorded_at,
    }
    if idempotency_key is not None:
        conn.execute(
            "INSERT INTO append_keys (site_id, conversation_id, idempotency_key, first_seq, last_seq, count,"
            " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (site_id, conversation_id, idempotency_key, first_seq, ack["last_seq"], count, recorded_at),
        )
    return {**ack, "duplicate": False}


def encode_cursor(activity_us: int, conversation_id: str) -> str:
    return cursors.encode([activity_us, conversation_id])


def decode_cursor(cursor: object) -> tuple[int, str]:
    activity_us, conversation_id = cursors.decode(cursor, max_length=200, count=2)
    if (
        not isinstance(activity_us, int)
        or isinstance(activity_us, bool)
        or not 0 <= activity_us <= MAX_SQLITE_INT
        or not isinstance(conversation_id, str)
    ):
        raise cursors.invalid()
    return activity_us, conversation_id
