"""Conversation logs on SQLite.

`seq` is assigned inside the append's write transaction from the conversation's `item_count`, and the
transaction holds SQLite's write lock (BEGIN IMMEDIATE), so concurrent appenders — threads of this process
or other processes on the same file — can never produce a gap or a repeated seq. A batch is one
transaction: all of it is visible, or none.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from server.storage.records import (
    APPENDED,
    PRESENT,
    AppendAck,
    ConversationPage,
    ConversationSummary,
    RawItem,
    now_rfc3339,
)
from server.storage.sqlite.writer import Readers, Writer

MAX_SQLITE_INT = 2**63 - 1  # larger Python ints cannot be bound as SQLite parameters

class SqliteLogStore:
    def __init__(self, writer: Writer, readers: Readers) -> None:
        self._writer = writer
        self._readers = readers

    async def append(self, site_id: int, conversation_id: str, payloads: Sequence[str],
                     idempotency_key: str | None) -> AppendAck:
        return await self._writer.run(
            lambda conn: append_batch(conn, site_id, conversation_id, payloads, idempotency_key))

    def tail(self, site_id: int, conversation_id: str, count: int) -> list[RawItem]:
        rows: list[RawItem] = self._tuples().execute(
            "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = ? AND conversation_id = ?"
            " ORDER BY seq DESC LIMIT ?",
            (site_id, conversation_id, count),
        ).fetchall()
        rows.reverse()
        return rows

    def replay(self, site_id: int, conversation_id: str, offset: int, limit: int) -> list[RawItem]:
        if offset > MAX_SQLITE_INT:  # past the end of any log (and not bindable): an empty page
            return []
        rows: list[RawItem] = self._tuples().execute(
            "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = ? AND conversation_id = ?"
            " AND seq >= ? ORDER BY seq LIMIT ?",
            (site_id, conversation_id, offset, limit),
        ).fetchall()
        return rows

    def _tuples(self) -> sqlite3.Cursor:
        # Plain tuples: building a sqlite3.Row per item costs as much as the query itself on 1000-item pages.
        cursor = self._readers.get().cursor()
        cursor.row_factory = None
        return cursor

    def conversations(self, site_id: int, limit: int, after: tuple[int, str] | None) -> ConversationPage:
        sql = ("SELECT conversation_id, item_count, first_recorded_at, last_recorded_at, last_activity_us"
               " FROM conversations WHERE site_id = ?")
        args: list[Any] = [site_id]
        if after is not None:
            sql += " AND (last_activity_us < ? OR (last_activity_us = ? AND conversation_id < ?))"
            args += [after[0], after[0], after[1]]
        sql += " ORDER BY last_activity_us DESC, conversation_id DESC LIMIT ?"
        rows = self._readers.get().execute(sql, (*args, limit + 1)).fetchall()
        page = rows[:limit]
        following = (int(page[-1]["last_activity_us"]), str(page[-1]["conversation_id"])) if len(rows) > limit \
            else None
        summaries = [ConversationSummary(conversation_id=r["conversation_id"], item_count=r["item_count"],
                                         first_recorded_at=r["first_recorded_at"],
                                         last_recorded_at=r["last_recorded_at"]) for r in page]
        return ConversationPage(summaries, following)

    def count_conversations(self, site_id: int) -> int:
        row = self._readers.get().execute("SELECT count(*) FROM conversations WHERE site_id = ?",
                                          (site_id,)).fetchone()
        return int(row[0])

    def import_items(self, site_id: int, conversation_id: str, items: Sequence[RawItem]) -> list[str]:
        return self._writer.run_sync(lambda conn: import_log_items(conn, site_id, conversation_id, items))


def append_batch(conn: sqlite3.Connection, site_id: int, conversation_id: str, payloads: Sequence[str],
                 idempotency_key: str | None, *, recorded_at: str | None = None) -> AppendAck:
    """Append one batch inside the caller's write transaction; return the acknowledgement."""
    if idempotency_key is not None:
        prior = conn.execute(
            "SELECT first_seq, last_seq, count, recorded_at FROM append_keys"
            " WHERE site_id = ? AND conversation_id = ? AND idempotency_key = ?",
            (site_id, conversation_id, idempotency_key),
        ).fetchone()
        if prior is not None:
            return AppendAck(conversation_id=conversation_id, first_seq=prior[0], last_seq=prior[1],
                             count=prior[2], recorded_at=prior[3], duplicate=True)
    row = conn.execute("SELECT item_count FROM conversations WHERE site_id = ? AND conversation_id = ?",
                       (site_id, conversation_id)).fetchone()
    first_seq = row[0] if row else 0
    recorded_at = recorded_at or now_rfc3339()
    # Strictly increasing per site in commit order (we hold the write lock), so "newest activity first"
    # holds even if two commits share a microsecond or the wall clock steps back.
    latest = conn.execute("SELECT MAX(last_activity_us) FROM conversations WHERE site_id = ?",
                          (site_id,)).fetchone()[0]
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
    last_seq = first_seq + count - 1
    if idempotency_key is not None:
        conn.execute(
            "INSERT INTO append_keys (site_id, conversation_id, idempotency_key, first_seq, last_seq, count,"
            " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (site_id, conversation_id, idempotency_key, first_seq, last_seq, count, recorded_at),
        )
    return AppendAck(conversation_id=conversation_id, first_seq=first_seq, last_seq=last_seq, count=count,
                     recorded_at=recorded_at, duplicate=False)


def import_log_items(conn: sqlite3.Connection, site_id: int, conversation_id: str,
                     items: Sequence[RawItem]) -> list[str]:
    """Import one conversation's items `(seq, recorded_at, payload text)` inside the caller's write transaction.

    Returns one outcome per item: "appended", "present" (that seq holds the identical payload), or an
    error message (a different payload at that seq, or a seq that would leave a gap). New items must
    continue the conversation: seq == its item count. Consecutive new items sharing a recorded_at go in
    as one batch, so each keeps its recorded_at and the batches keep their boundaries.
    """
    row = conn.execute("SELECT item_count FROM conversations WHERE site_id = ? AND conversation_id = ?",
                       (site_id, conversation_id)).fetchone()
    count = int(row[0]) if row else 0
    outcomes: list[str] = []
    new: list[RawItem] = []
    for seq, recorded_at, text in items:
        if seq < count:
            stored = conn.execute(
                "SELECT payload FROM log_items WHERE site_id = ? AND conversation_id = ? AND seq = ?",
                (site_id, conversation_id, seq),
            ).fetchone()
            if stored is not None and same_payload(stored[0], text):
                outcomes.append(PRESENT)
            else:
                outcomes.append(f"conflict: conversation {conversation_id} already has a different item at seq {seq}")
        elif seq == count + len(new):
            new.append((seq, recorded_at, text))
            outcomes.append(APPENDED)
        elif seq < count + len(new):  # the same seq twice in this run of lines
            if new[seq - count][2] == text:
                outcomes.append(PRESENT)
            else:
                outcomes.append(f"conflict: seq {seq} of conversation {conversation_id} appears twice in the file "
                                "with different payloads")
        else:
            outcomes.append(f"gap: conversation {conversation_id} has {count + len(new)} items, so the next seq "
                            f"must be {count + len(new)}, not {seq}")
    start = 0
    while start < len(new):
        end = start + 1
        while end < len(new) and new[end][1] == new[start][1]:
            end += 1
        append_batch(conn, site_id, conversation_id, [text for _, _, text in new[start:end]], None,
                     recorded_at=new[start][1])
        start = end
    return outcomes


def same_payload(stored: str, text: str) -> bool:
    """Whether a stored payload is the imported one: the same JSON, keys in the same order."""
    if stored == text:
        return True
    try:  # stored by some other writer in another spacing: compare the canonical forms
        return json.dumps(json.loads(stored), ensure_ascii=False, separators=(",", ":"), allow_nan=False) == text
    except ValueError:
        return False
