"""Conversation logs on SQLite.

`seq` is assigned inside the append's write transaction from the conversation's `item_count`, and the
transaction holds SQLite's write lock (BEGIN IMMEDIATE), so concurrent appenders — threads of this process
or other processes on the same file — can never produce a gap or a repeated seq. A batch is one
transaction: all of it is visible, or none.

A deletion (memory_server/storage/deletion.py) marks the conversation row `deleting` in one transaction; reads
skip a marked conversation, appends to it wait, and purge steps remove its rows a budget at a time. Every
step is one job of the writer, so appends to other conversations run between any two of them.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from memory_server.errors import Unavailable
from memory_server.storage.deletion import DAY_US, after_deletion, deleting_message, unlinked_provenance
from memory_server.storage.log_import import new_batches, plan_import
from memory_server.storage.records import (
    AppendAck,
    ConversationDeleting,
    ConversationPage,
    ConversationSummary,
    IndexingProgress,
    LogDeletion,
    PurgeStep,
    RawItem,
    ToIndex,
)
from memory_server.storage.sqlite.writer import Readers, Writer
from memory_server.timestamps import now_rfc3339

MAX_SQLITE_INT = 2**63 - 1  # larger Python ints cannot be bound as SQLite parameters
# The items of a conversation, unless it is being deleted (site_id, conversation_id bound twice).
VISIBLE_ITEMS = (
    "FROM log_items WHERE site_id = ? AND conversation_id = ? AND NOT EXISTS (SELECT 1 FROM"
    " conversations c WHERE c.site_id = ? AND c.conversation_id = ? AND c.deleting = 1)"
)


class SqliteLogStore:
    def __init__(self, writer: Writer, readers: Readers) -> None:
        self._writer = writer
        self._readers = readers

    async def append(
        self,
        site_id: int,
        conversation_id: str,
        payloads: Sequence[str],
        idempotency_key: str | None,
        *,
        index: bool | None = None,
        bucket: str | None = None,
    ) -> AppendAck:
        return await after_deletion(
            lambda: self._writer.run(
                lambda conn: append_batch(
                    conn, site_id, conversation_id, payloads, idempotency_key, index=index, bucket=bucket
                )
            ),
            conversation_id,
        )

    def tail(self, site_id: int, conversation_id: str, count: int) -> list[RawItem]:
        rows: list[RawItem] = (
            self._tuples()
            .execute(
                f"SELECT seq, recorded_at, payload {VISIBLE_ITEMS} ORDER BY seq DESC LIMIT ?",
                (site_id, conversation_id, site_id, conversation_id, count),
            )
            .fetchall()
        )
        rows.reverse()
        return rows

    def replay(self, site_id: int, conversation_id: str, offset: int, limit: int) -> list[RawItem]:
        if offset > MAX_SQLITE_INT:  # past the end of any log (and not bindable): an empty page
            return []
        rows: list[RawItem] = (
            self._tuples()
            .execute(
                f"SELECT seq, recorded_at, payload {VISIBLE_ITEMS} AND seq >= ? ORDER BY seq LIMIT ?",
                (site_id, conversation_id, site_id, conversation_id, offset, limit),
            )
            .fetchall()
        )
        return rows

    def _tuples(self) -> sqlite3.Cursor:
        # Plain tuples: building a sqlite3.Row per item costs as much as the query itself on 1000-item pages.
        cursor = self._readers.get().cursor()
        cursor.row_factory = None
        return cursor

    def conversations(self, site_id: int, limit: int, after: tuple[int, str] | None) -> ConversationPage:
        sql = (
            "SELECT conversation_id, item_count, first_recorded_at, last_recorded_at, last_activity_us"
            " FROM conversations WHERE site_id = ? AND deleting = 0"
        )
        args: list[Any] = [site_id]
        if after is not None:
            sql += " AND (last_activity_us < ? OR (last_activity_us = ? AND conversation_id < ?))"
            args += [after[0], after[0], after[1]]
        sql += " ORDER BY last_activity_us DESC, conversation_id DESC LIMIT ?"
        rows = self._readers.get().execute(sql, (*args, limit + 1)).fetchall()
        page = rows[:limit]
        following = (int(page[-1]["last_activity_us"]), str(page[-1]["conversation_id"])) if len(rows) > limit else None
        summaries = [
            ConversationSummary(
                conversation_id=r["conversation_id"],
                item_count=r["item_count"],
                first_recorded_at=r["first_recorded_at"],
                last_recorded_at=r["last_recorded_at"],
            )
            for r in page
        ]
        return ConversationPage(summaries, following)

    def count_conversations(self, site_id: int) -> int:
        row = self._readers.get().execute("SELECT count(*) FROM conversations WHERE site_id = ?", (site_id,)).fetchone()
        return int(row[0])

    def import_items(
        self,
        site_id: int,
        conversation_id: str,
        items: Sequence[RawItem],
        *,
        index: bool | None = None,
        bucket: str | None = None,
    ) -> list[str]:
        return self._writer.run_sync(
            lambda conn: import_log_items(conn, site_id, conversation_id, items, index=index, bucket=bucket)
        )

    # --- deletion ---------------------------------------------------------------------------------

    def delete_conversation(self, site_id: int, conversation_id: str) -> LogDeletion | None:
        def mark(conn: sqlite3.Connection) -> LogDeletion | None:
            row = conn.execute(
                "SELECT item_count, deleting FROM conversations WHERE site_id = ? AND conversation_id = ?",
                (site_id, conversation_id),
            ).fetchone()
            if row is None:
                return None
            if not row[1]:
                conn.execute(
                    "UPDATE conversations SET deleting = 1 WHERE site_id = ? AND conversation_id = ?",
                    (site_id, conversation_id),
                )
            turns, linked = held_by(conn, site_id, conversation_id)
            return LogDeletion(conversation_id, int(row[0]), started=not row[1], turns=turns, linked=linked)

        return self._writer.run_sync(mark)

    def expire(self, now_us: int, limit: int) -> int:
        def mark(conn: sqlite3.Connection) -> int:
            marked = 0
            for site_id, days in conn.execute(
                "SELECT id, log_retention_days FROM sites WHERE log_retention_days IS NOT NULL ORDER BY id"
            ).fetchall():
                if marked >= limit:
                    break
                # The activity index gives the oldest first; the row is checked again as it is marked.
                marked += conn.execute(
                    "UPDATE conversations SET deleting = 1 WHERE site_id = ? AND conversation_id IN ("
                    " SELECT conversation_id FROM conversations WHERE site_id = ? AND last_activity_us < ?"
                    " AND deleting = 0 ORDER BY last_activity_us LIMIT ?)",
                    (site_id, site_id, now_us - int(days) * DAY_US, limit - marked),
                ).rowcount
            return marked

        return self._writer.run_sync(mark)

    def purging(self, limit: int) -> list[tuple[int, str]]:
        rows = (
            self._readers.get()
            .execute("SELECT site_id, conversation_id FROM conversations WHERE deleting = 1 LIMIT ?", (limit,))
            .fetchall()
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    def purge_step(self, site_id: int, conversation_id: str, budget: int) -> PurgeStep:
        return self._writer.run_sync(lambda conn: purge_step(conn, site_id, conversation_id, budget))

    # --- indexing of log items (memory_server/logs/indexing.py) ------------------------------------------------

    def to_index(self, limit: int) -> list[ToIndex]:
        rows = (
            self._readers.get()
            .execute(
                "SELECT site_id, conversation_id, indexed_seq, item_count, first_recorded_at, bucket FROM conversations"
                " WHERE indexing = 1 AND indexed_seq < item_count AND deleting = 0 LIMIT ?",
                (limit,),
            )
            .fetchall()
        )
        return [ToIndex(int(r[0]), str(r[1]), int(r[2]), int(r[3]), str(r[4]), r[5]) for r in rows]

    def index_waiting(self) -> int:
        row = (
            self._readers.get()
            .execute(
                "SELECT coalesce(sum(item_count - indexed_seq), 0) FROM conversations"
                " WHERE indexing = 1 AND indexed_seq < item_count"
            )
            .fetchone()
        )
        return int(row[0])

    def index_progress(self, site_id: int) -> IndexingProgress:
        row = (
            self._readers.get()
            .execute(
                "SELECT coalesce(sum(CASE WHEN indexing = 1 THEN item_count - indexed_seq ELSE 0 END), 0),"
                " coalesce(sum(indexed_seq), 0), coalesce(sum(index_skipped), 0) FROM conversations"
                " WHERE site_id = ? AND deleting = 0",
                (site_id,),
            )
            .fetchone()
        )
        return IndexingProgress(waiting=int(row[0]), indexed=int(row[1]), skipped=int(row[2]))

    def mark_for_indexing(self, site_id: int, active_since_us: int) -> int:
        return self._writer.run_sync(
            lambda conn: (
                conn.execute(
                    "UPDATE conversations SET indexing = 1 WHERE site_id = ? AND last_activity_us >= ? AND indexing = 0"
                    " AND coalesce(index_choice, 1) = 1 AND EXISTS (SELECT 1 FROM sites WHERE id = ? "
                    "AND index_logs = 1)",
                    (site_id, active_since_us, site_id),
                ).rowcount
            )
        )


def append_batch(
    conn: sqlite3.Connection,
    site_id: int,
    conversation_id: str,
    payloads: Sequence[str],
    idempotency_key: str | None,
    *,
    recorded_at: str | None = None,
    index: bool | None = None,
    bucket: str | None = None,
) -> AppendAck:
    """Append one batch inside the caller's write transaction; return the acknowledgement.
    ConversationDeleting if the conversation is being deleted (nothing is written). `index`: the
    conversation's own choice to index its items (kept for later appends; None: as before, a new conversation
    as its site); `bucket`: the bucket of its indexed turns."""
    row = conn.execute(
        "SELECT item_count, deleting FROM conversations WHERE site_id = ? AND conversation_id = ?",
        (site_id, conversation_id),
    ).fetchone()
    if row is not None and row[1]:
        raise ConversationDeleting(conversation_id)
    if idempotency_key is not None:
        prior = conn.execute(
            "SELECT first_seq, last_seq, count, recorded_at FROM append_keys"
            " WHERE site_id = ? AND conversation_id = ? AND idempotency_key = ?",
            (site_id, conversation_id, idempotency_key),
        ).fetchone()
        if prior is not None:
            return AppendAck(
                conversation_id=conversation_id,
                first_seq=prior[0],
                last_seq=prior[1],
                count=prior[2],
                recorded_at=prior[3],
                duplicate=True,
            )
    first_seq = row[0] if row else 0
    # A new conversation is indexed as its site says, unless the append chooses; an append that chooses
    # decides for the conversation from then on.
    indexing = bool(index) if index is not None or row is not None else site_indexes_logs(conn, site_id)
    recorded_at = recorded_at or now_rfc3339()
    # Strictly increasing per site in commit order (we hold the write lock), so "newest activity first"
    # holds even if two commits share a microsecond or the wall clock steps back.
    latest = conn.execute("SELECT MAX(last_activity_us) FROM conversations WHERE site_id = ?", (site_id,)).fetchone()[0]
    activity_us = max(time.time_ns() // 1000, (latest or 0) + 1)
    conn.executemany(
        "INSERT INTO log_items (site_id, conversation_id, seq, recorded_at, payload) VALUES (?, ?, ?, ?, ?)",
        [(site_id, conversation_id, first_seq + i, recorded_at, text) for i, text in enumerate(payloads)],
    )
    count = len(payloads)
    conn.execute(
        "INSERT INTO conversations (site_id, conversation_id, item_count, first_recorded_at, last_recorded_at,"
        " last_activity_us, index_choice, indexing, bucket) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (site_id, conversation_id) DO UPDATE SET item_count = item_count + excluded.item_count,"
        " last_recorded_at = excluded.last_recorded_at, last_activity_us = excluded.last_activity_us,"
        " index_choice = coalesce(excluded.index_choice, index_choice),"
        " indexing = CASE WHEN excluded.index_choice IS NULL THEN indexing ELSE excluded.index_choice END,"
        " bucket = coalesce(excluded.bucket, bucket)",
        (site_id, conversation_id, count, recorded_at, recorded_at, activity_us, index, indexing, bucket),
    )
    last_seq = first_seq + count - 1
    if idempotency_key is not None:
        conn.execute(
            "INSERT INTO append_keys (site_id, conversation_id, idempotency_key, first_seq, last_seq, count,"
            " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (site_id, conversation_id, idempotency_key, first_seq, last_seq, count, recorded_at),
        )
    return AppendAck(
        conversation_id=conversation_id,
        first_seq=first_seq,
        last_seq=last_seq,
        count=count,
        recorded_at=recorded_at,
        duplicate=False,
    )


def site_indexes_logs(conn: sqlite3.Connection, site_id: int) -> bool:
    row = conn.execute("SELECT index_logs FROM sites WHERE id = ?", (site_id,)).fetchone()
    return bool(row and row[0])


def import_log_items(
    conn: sqlite3.Connection,
    site_id: int,
    conversation_id: str,
    items: Sequence[RawItem],
    *,
    index: bool | None = None,
    bucket: str | None = None,
) -> list[str]:
    """Import one conversation's items `(seq, recorded_at, payload text)` inside the caller's write transaction;
    one outcome per item (memory_server.storage.log_import.plan_import)."""
    row = conn.execute(
        "SELECT item_count, deleting FROM conversations WHERE site_id = ? AND conversation_id = ?",
        (site_id, conversation_id),
    ).fetchone()
    if row is not None and row[1]:
        raise Unavailable(deleting_message(conversation_id))
    count = int(row[0]) if row else 0
    stored: dict[int, str] = {}
    for seq in sorted({seq for seq, _, _ in items if seq < count}):
        row = conn.execute(
            "SELECT payload FROM log_items WHERE site_id = ? AND conversation_id = ? AND seq = ?",
            (site_id, conversation_id, seq),
        ).fetchone()
        if row is not None:
            stored[seq] = row[0]
    outcomes, new = plan_import(conversation_id, count, stored, items)
    for batch in new_batches(new):
        append_batch(
            conn,
            site_id,
            conversation_id,
            [text for _, _, text in batch],
            None,
            recorded_at=batch[0][1],
            index=index,
            bucket=bucket,
        )
    return outcomes


def held_by(conn: sqlite3.Connection, site_id: int, conversation_id: str) -> tuple[int, int]:
    """A conversation's indexed turns and the other memories linked to it, as `purge_step` finds them."""
    turns = conn.execute(
        "SELECT count(*) FROM memories WHERE site_id = ? AND conversation_id = ? AND kind = 'turn'",
        (site_id, conversation_id),
    ).fetchone()[0]
    linked = conn.execute(
        "SELECT count(*) FROM memories WHERE site_id = ? AND kind != 'turn'"
        " AND json_extract(provenance, '$.conversation_id') = ?",
        (site_id, conversation_id),
    ).fetchone()[0]
    return int(turns), int(linked)


def purge_step(conn: sqlite3.Connection, site_id: int, conversation_id: str, budget: int) -> PurgeStep:
    """One purge transaction of a conversation marked deleting: up to `budget` rows, memory links first, then
    items, then idempotency keys; when they all fit, the conversation row goes too (done)."""
    row = conn.execute(
        "SELECT deleting FROM conversations WHERE site_id = ? AND conversation_id = ?", (site_id, conversation_id)
    ).fetchone()
    if row is None or not row[0]:  # finished by another purger (or never marked): nothing of it is left
        return PurgeStep(unlinked=0, items=0, keys=0, done=True)
    # Its indexed turns first (each queued for removal from the vector index by trigger).
    turns = conn.execute(
        "DELETE FROM memories WHERE id IN (SELECT id FROM memories WHERE site_id = ? AND conversation_id = ?"
        " AND kind = 'turn' LIMIT ?)",
        (site_id, conversation_id, budget),
    ).rowcount
    budget -= turns
    if budget <= 0:
        return PurgeStep(unlinked=0, items=0, keys=0, done=False, turns=turns)
    linked = conn.execute(
        "SELECT id, provenance FROM memories WHERE site_id = ? AND json_extract(provenance, '$.conversation_id') = ?"
        " LIMIT ?",
        (site_id, conversation_id, budget),
    ).fetchall()
    now = now_rfc3339()
    conn.executemany(
        "UPDATE memories SET provenance = ?, conversation_id = NULL, conversation_seq = NULL,"
        " updated_at = ? WHERE id = ?",
        [(unlinked_provenance(p), now, i) for i, p in linked],
    )
    left = budget - len(linked)
    items = keys = 0
    if left > 0:
        items = conn.execute(
            "DELETE FROM log_items WHERE site_id = ? AND conversation_id = ? AND seq IN (SELECT seq FROM log_items"
            " WHERE site_id = ? AND conversation_id = ? ORDER BY seq LIMIT ?)",
            (site_id, conversation_id, site_id, conversation_id, left),
        ).rowcount
        left -= items
    if left > 0:
        keys = conn.execute(
            "DELETE FROM append_keys WHERE site_id = ? AND conversation_id = ? AND idempotency_key IN (SELECT"
            " idempotency_key FROM append_keys WHERE site_id = ? AND conversation_id = ? LIMIT ?)",
            (site_id, conversation_id, site_id, conversation_id, left),
        ).rowcount
        left -= keys
    done = left > 0  # each kind came short of its share: none of it is left
    if done:
        conn.execute("DELETE FROM conversations WHERE site_id = ? AND conversation_id = ?", (site_id, conversation_id))
    return PurgeStep(unlinked=len(linked), items=items, keys=keys, done=done, turns=turns)
