"""Conversation logs on PostgreSQL.

An append is one statement (one round trip, its own transaction): it upserts the conversation's counter row
(`conversations.item_count`) and takes its seqs from the RETURNING, inserts the items from one array, and
records the idempotency key. The counter row's lock orders concurrent appenders to a conversation, from any
number of servers, until COMMIT: seqs are gapless and never repeated, and the batch is all or nothing.

The batch's `recorded_at` is the database clock read once the counter row is held, so it never goes back
within a conversation (whichever server appends). With an idempotency key, a key already committed answers
the original acknowledgement at once; a concurrent appender with the same key waits on the key's unique
index, fails when the first commits, and its retry finds the key (duplicate: true).

A deletion (memory_server/storage/deletion.py) marks the counter row `deleting` under its lock. An append's upsert
only moves a row that is not marked (ON CONFLICT ... WHERE sees the latest committed row, whatever the
statement's snapshot), so an append waiting on the lock either committed before the mark, or finds it and
waits for the purge; the purge's last step deletes the row, and the next append starts a new log at seq 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory_server.errors import Unavailable
from memory_server.storage.deletion import DAY_US, after_deletion, deleting_message, unlinked_provenance
from memory_server.storage.log_import import new_batches, plan_import
from memory_server.storage.postgres.database import AsyncConn, Conn, Database
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
from memory_server.timestamps import now_rfc3339

MAX_BIGINT = 2**63 - 1
IMPORT_TRIES = 5
# Reads see no item of a conversation being deleted.
NOT_DELETING = (
    "NOT EXISTS (SELECT 1 FROM conversations d WHERE d.site_id = {site} AND d.conversation_id = {cid} AND d.deleting)"
)

# The database clock as RFC3339 with microseconds (now_rfc3339's format), and in microseconds.
_TEXT = "to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
_MICROS = "(extract(epoch FROM {0}) * 1000000)::bigint"
# Strictly after every other conversation of the site's activity, as on SQLite (best effort across servers:
# the site's other conversations are not locked).
_ACTIVITY = "GREATEST({0}, coalesce((SELECT max(last_activity_us) FROM conversations WHERE site_id = %(site)s), 0) + 1)"

# Whether a new conversation's items are indexed: the append's choice, else its site's setting.
_INDEXING = "coalesce(%(choice)s::boolean, (SELECT s.index_logs FROM sites s WHERE s.id = %(site)s), false)"
_UPSERT = f"""
    INSERT INTO conversations AS c (site_id, conversation_id, item_count, first_recorded_at, last_recorded_at,
                                    last_activity_us, index_choice, indexing, bucket)
    SELECT %(site)s, %(cid)s, %(n)s, {_TEXT.format("ts")}, {_TEXT.format("ts")},
           {_ACTIVITY.format(_MICROS.format("ts"))}, %(choice)s::boolean, {_INDEXING}, %(bucket)s::text
    FROM clock {{gate}}
    ON CONFLICT (site_id, conversation_id) DO UPDATE SET
        item_count = c.item_count + excluded.item_count,
        last_recorded_at = {_TEXT.format("clock_timestamp()")},
        last_activity_us = GREATEST({_MICROS.format("clock_timestamp()")}, c.last_activity_us + 1,
                                    excluded.last_activity_us),
        index_choice = coalesce(excluded.index_choice, c.index_choice),
        indexing = coalesce(excluded.index_choice, c.indexing),
        bucket = coalesce(excluded.bucket, c.bucket)
    WHERE NOT c.deleting
    RETURNING c.item_count - %(n)s AS first_seq, c.last_recorded_at AS recorded_at
"""
_ITEMS = """
    INSERT INTO log_items (site_id, conversation_id, seq, recorded_at, payload)
    SELECT %(site)s, %(cid)s, conv.first_seq + p.ord - 1, conv.recorded_at, p.payload
    FROM conv, unnest(%(payloads)s::text[]) WITH ORDINALITY AS p (payload, ord)
"""
APPEND = f"""
    WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS ts),
    conv AS ({_UPSERT.format(gate="")}),
    items AS ({_ITEMS})
    SELECT first_seq, first_seq + %(n)s - 1, %(n)s, recorded_at, false FROM conv
"""
APPEND_KEYED = f"""
    WITH prior AS (
        SELECT first_seq, last_seq, count, recorded_at FROM append_keys
        WHERE site_id = %(site)s AND conversation_id = %(cid)s AND idempotency_key = %(key)s
          AND {NOT_DELETING.format(site="%(site)s", cid="%(cid)s")}
    ),
    clock AS MATERIALIZED (SELECT clock_timestamp() AS ts),
    conv AS ({_UPSERT.format(gate="WHERE NOT EXISTS (SELECT 1 FROM prior)")}),
    items AS ({_ITEMS}),
    keyed AS (
        INSERT INTO append_keys (site_id, conversation_id, idempotency_key, first_seq, last_seq, count,
                                 recorded_at)
        SELECT %(site)s, %(cid)s, %(key)s, first_seq, first_seq + %(n)s - 1, %(n)s, recorded_at FROM conv
    )
    SELECT first_seq, first_seq + %(n)s - 1, %(n)s, recorded_at, false FROM conv
    UNION ALL
    SELECT first_seq, last_seq, count, recorded_at, true FROM prior
"""
# An imported batch keeps its recorded_at; its seqs must be the ones the file gives (checked by the caller).
IMPORT = f"""
    WITH conv AS (
        INSERT INTO conversations AS c (site_id, conversation_id, item_count, first_recorded_at,
                                        last_recorded_at, last_activity_us, index_choice, indexing, bucket)
        VALUES (%(site)s, %(cid)s, %(n)s, %(at)s, %(at)s, {_ACTIVITY.format(_MICROS.format("clock_timestamp()"))},
                %(choice)s::boolean, {_INDEXING}, %(bucket)s::text)
        ON CONFLICT (site_id, conversation_id) DO UPDATE SET
            item_count = c.item_count + excluded.item_count,
            last_recorded_at = excluded.last_recorded_at,
            last_activity_us = GREATEST(excluded.last_activity_us, c.last_activity_us + 1),
            index_choice = coalesce(excluded.index_choice, c.index_choice),
            indexing = coalesce(excluded.index_choice, c.indexing),
            bucket = coalesce(excluded.bucket, c.bucket)
        RETURNING c.item_count - %(n)s AS first_seq, %(at)s::text AS recorded_at
    ),
    items AS ({_ITEMS})
    SELECT first_seq FROM conv
"""


class RacedImport(Exception):
    """An appender moved the conversation on between reading its count and writing the import."""


class PostgresLogStore:
    def __init__(self, db: Database) -> None:
        self._db = db

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
        params: dict[str, Any] = {
            "site": site_id,
            "cid": conversation_id,
            "n": len(payloads),
            "payloads": list(payloads),
            "key": idempotency_key,
            "choice": index,
            "bucket": bucket,
        }
        sql = APPEND if idempotency_key is None else APPEND_KEYED

        async def run(conn: AsyncConn) -> AppendAck:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
            if row is None:  # the upsert found the row marked: nothing was written
                raise ConversationDeleting(conversation_id)
            return AppendAck(
                conversation_id=conversation_id,
                first_seq=int(row[0]),
                last_seq=int(row[1]),
                count=int(row[2]),
                recorded_at=str(row[3]),
                duplicate=bool(row[4]),
            )

        # With a key, running it again after a lost COMMIT answers the first acknowledgement: idempotent.
        return await after_deletion(
            lambda: self._db.run_async(run, idempotent=idempotency_key is not None), conversation_id
        )

    def tail(self, site_id: int, conversation_id: str, count: int) -> list[RawItem]:
        rows = self._items(
            "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = %s"
            f" AND conversation_id = %s AND {NOT_DELETING.format(site='%s', cid='%s')}"
            " ORDER BY seq DESC LIMIT %s",
            [site_id, conversation_id, site_id, conversation_id, count],
        )
        rows.reverse()
        return rows

    def replay(self, site_id: int, conversation_id: str, offset: int, limit: int) -> list[RawItem]:
        if offset > MAX_BIGINT:  # past the end of any log (and not bindable): an empty page
            return []
        return self._items(
            "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = %s"
            f" AND conversation_id = %s AND {NOT_DELETING.format(site='%s', cid='%s')}"
            " AND seq >= %s ORDER BY seq LIMIT %s",
            [site_id, conversation_id, site_id, conversation_id, offset, limit],
        )

    def _items(self, sql: str, args: list[object]) -> list[RawItem]:
        rows = self._db.read(lambda conn: conn.execute(sql, args).fetchall())
        return [(int(seq), str(at), str(payload)) for seq, at, payload in rows]

    def conversations(self, site_id: int, limit: int, after: tuple[int, str] | None) -> ConversationPage:
        sql = (
            "SELECT conversation_id, item_count, first_recorded_at, last_recorded_at, last_activity_us"
            " FROM conversations WHERE site_id = %s AND NOT deleting"
        )
        args: list[Any] = [site_id]
        if after is not None:
            sql += " AND (last_activity_us < %s OR (last_activity_us = %s AND conversation_id < %s))"
            args += [after[0], after[0], after[1]]
        sql += " ORDER BY last_activity_us DESC, conversation_id DESC LIMIT %s"
        rows = self._db.read(lambda conn: conn.execute(sql, [*args, limit + 1]).fetchall())
        page = rows[:limit]
        following = (int(page[-1][4]), str(page[-1][0])) if len(rows) > limit else None
        summaries = [
            ConversationSummary(
                conversation_id=str(r[0]), item_count=int(r[1]), first_recorded_at=str(r[2]), last_recorded_at=str(r[3])
            )
            for r in page
        ]
        return ConversationPage(summaries, following)

    def count_conversations(self, site_id: int) -> int:
        row = self._db.read(
            lambda conn: conn.execute("SELECT count(*) FROM conversations WHERE site_id = %s", [site_id]).fetchone()
        )
        return int(row[0]) if row else 0

    def import_items(
        self,
        site_id: int,
        conversation_id: str,
        items: Sequence[RawItem],
        *,
        index: bool | None = None,
        bucket: str | None = None,
    ) -> list[str]:
        for _ in range(IMPORT_TRIES):
            try:
                return self._db.write(
                    lambda conn: import_log_items(conn, site_id, conversation_id, items, index=index, bucket=bucket)
                )
            except RacedImport:
                continue  # rolled back: read the conversation again
        raise Unavailable(f"conversation {conversation_id} kept changing while it was imported; retry")

    # --- deletion ---------------------------------------------------------------------------------

    def delete_conversation(self, site_id: int, conversation_id: str) -> LogDeletion | None:
        def mark(conn: Conn) -> LogDeletion | None:
            row = conn.execute(
                "SELECT item_count, deleting FROM conversations WHERE site_id = %s AND conversation_id = %s FOR UPDATE",
                [site_id, conversation_id],
            ).fetchone()
            if row is None:
                return None
            if not row[1]:
                conn.execute(
                    "UPDATE conversations SET deleting = true WHERE site_id = %s AND conversation_id = %s",
                    [site_id, conversation_id],
                )
            turns, linked = held_by(conn, site_id, conversation_id)
            return LogDeletion(conversation_id, int(row[0]), started=not row[1], turns=turns, linked=linked)

        # Run again after a lost COMMIT, it finds the mark: the same deletion.
        return self._db.write(mark, idempotent=True)

    def expire(self, now_us: int, limit: int) -> int:
        def mark(conn: Conn) -> int:
            marked = 0
            for site_id, days in conn.execute(
                "SELECT id, log_retention_days FROM sites WHERE log_retention_days IS NOT NULL ORDER BY id"
            ).fetchall():
                if marked >= limit:
                    break
                cutoff = now_us - int(days) * DAY_US
                # Rows an append holds are active anyway (skipped); the outer conditions are checked again on
                # the latest version of each row as it is marked.
                marked += conn.execute(
                    "UPDATE conversations SET deleting = true WHERE site_id = %s AND last_activity_us < %s"
                    " AND NOT deleting AND conversation_id IN (SELECT conversation_id FROM conversations"
                    " WHERE site_id = %s AND last_activity_us < %s AND NOT deleting ORDER BY last_activity_us"
                    " LIMIT %s FOR UPDATE SKIP LOCKED)",
                    [site_id, cutoff, site_id, cutoff, limit - marked],
                ).rowcount
            return marked

        return self._db.write(mark, idempotent=True)

    def purging(self, limit: int) -> list[tuple[int, str]]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT site_id, conversation_id FROM conversations WHERE deleting LIMIT %s", [limit]
            ).fetchall()
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    def purge_step(self, site_id: int, conversation_id: str, budget: int) -> PurgeStep:
        # Each run removes whatever is left: running it again after a lost COMMIT does no harm.
        return self._db.write(lambda conn: purge_step(conn, site_id, conversation_id, budget), idempotent=True)

    # --- indexing of log items (memory_server/logs/indexing.py) ------------------------------------------------

    def to_index(self, limit: int) -> list[ToIndex]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT site_id, conversation_id, indexed_seq, item_count, first_recorded_at, bucket FROM conversations"
                " WHERE indexing AND indexed_seq < item_count AND NOT deleting LIMIT %s",
                [limit],
            ).fetchall()
        )
        return [ToIndex(int(r[0]), str(r[1]), int(r[2]), int(r[3]), str(r[4]), r[5]) for r in rows]

    def index_waiting(self) -> int:
        row = self._db.read(
            lambda conn: conn.execute(
                "SELECT coalesce(sum(item_count - indexed_seq), 0) FROM conversations"
                " WHERE indexing AND indexed_seq < item_count"
            ).fetchone()
        )
        return int(row[0]) if row else 0

    def index_progress(self, site_id: int) -> IndexingProgress:
        row = self._db.read(
            lambda conn: conn.execute(
                "SELECT coalesce(sum(CASE WHEN indexing THEN item_count - indexed_seq ELSE 0 END), 0),"
                " coalesce(sum(indexed_seq), 0), coalesce(sum(index_skipped), 0) FROM conversations"
                " WHERE site_id = %s AND NOT deleting",
                [site_id],
            ).fetchone()
        )
        return IndexingProgress(*(int(v) for v in row)) if row else IndexingProgress()

    def mark_for_indexing(self, site_id: int, active_since_us: int) -> int:
        # An append that created a conversation while its site's setting was being turned on may have read the
        # former setting after the setting's own sweep of the conversations: this finds it.
        return self._db.write(
            lambda conn: (
                conn.execute(
                    "UPDATE conversations SET indexing = true WHERE site_id = %s AND last_activity_us >= %s"
                    " AND NOT indexing AND coalesce(index_choice, true)"
                    " AND EXISTS (SELECT 1 FROM sites WHERE id = %s AND index_logs)",
                    [site_id, active_since_us, site_id],
                ).rowcount
            ),
            single=True,
            idempotent=True,
        )


def import_log_items(
    conn: Conn,
    site_id: int,
    conversation_id: str,
    items: Sequence[RawItem],
    *,
    index: bool | None = None,
    bucket: str | None = None,
) -> list[str]:
    """Import one conversation's items inside the caller's transaction; one outcome per item
    (memory_server.storage.log_import.plan_import)."""
    # Locked: appenders wait until the import commits. A conversation that does not exist yet has no row to
    # lock, so the import checks that its seqs are still the next ones (RacedImport).
    row = conn.execute(
        "SELECT item_count, deleting FROM conversations WHERE site_id = %s AND conversation_id = %s FOR UPDATE",
        [site_id, conversation_id],
    ).fetchone()
    if row is not None and row[1]:
        raise Unavailable(deleting_message(conversation_id))
    count = int(row[0]) if row else 0
    known = sorted({seq for seq, _, _ in items if seq < count})
    stored: dict[int, str] = (
        dict(
            conn.execute(
                "SELECT seq, payload FROM log_items WHERE site_id = %s AND conversation_id = %s AND seq = ANY(%s)",
                [site_id, conversation_id, known],
            ).fetchall()
        )
        if known
        else {}
    )
    outcomes, new = plan_import(conversation_id, count, stored, items)
    for batch in new_batches(new):
        first = conn.execute(
            IMPORT,
            {
                "site": site_id,
                "cid": conversation_id,
                "n": len(batch),
                "at": batch[0][1],
                "payloads": [text for _, _, text in batch],
                "choice": index,
                "bucket": bucket,
            },
        ).fetchone()
        if first is None or int(first[0]) != batch[0][0]:
            raise RacedImport(conversation_id)
    return outcomes


def held_by(conn: Conn, site_id: int, conversation_id: str) -> tuple[int, int]:
    """A conversation's indexed turns and the other memories linked to it, as `purge_step` finds them."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE kind = 'turn' AND conversation_id = %s),"
        " count(*) FILTER (WHERE kind <> 'turn' AND (provenance::jsonb) ->> 'conversation_id' = %s"
        " AND jsonb_typeof(provenance::jsonb -> 'conversation_id') = 'string')"
        " FROM memories WHERE site_id = %s",
        [conversation_id, conversation_id, site_id],
    ).fetchone()
    return (int(row[0]), int(row[1])) if row is not None else (0, 0)


def purge_step(conn: Conn, site_id: int, conversation_id: str, budget: int) -> PurgeStep:
    """One purge transaction, as on SQLite (memory_server.storage.sqlite.logs.purge_step). The row lock orders purgers
    on several servers, and keeps appends to the conversation waiting."""
    row = conn.execute(
        "SELECT deleting FROM conversations WHERE site_id = %s AND conversation_id = %s FOR UPDATE",
        [site_id, conversation_id],
    ).fetchone()
    if row is None or not row[0]:
        return PurgeStep(unlinked=0, items=0, keys=0, done=True)
    # Its indexed turns first (each queued for removal from the vector index by trigger).
    turns = conn.execute(
        "DELETE FROM memories WHERE id = ANY(ARRAY(SELECT id FROM memories WHERE site_id = %s AND conversation_id = %s"
        " AND kind = 'turn' LIMIT %s))",
        [site_id, conversation_id, budget],
    ).rowcount
    budget -= turns
    if budget <= 0:
        return PurgeStep(unlinked=0, items=0, keys=0, done=False, turns=turns)
    linked = conn.execute(
        "SELECT id, provenance FROM memories WHERE site_id = %s AND (provenance::jsonb) ->> 'conversation_id' = %s"
        " AND jsonb_typeof(provenance::jsonb -> 'conversation_id') = 'string' LIMIT %s FOR UPDATE",
        [site_id, conversation_id, budget],
    ).fetchall()
    if linked:
        conn.execute(
            "UPDATE memories m SET provenance = u.provenance, conversation_id = NULL,"
            " conversation_seq = NULL, updated_at = %s FROM unnest(%s::bigint[], %s::text[])"
            " AS u (id, provenance) WHERE m.id = u.id",
            [now_rfc3339(), [int(i) for i, _ in linked], [unlinked_provenance(str(p)) for _, p in linked]],
        )
    left = budget - len(linked)
    items = keys = 0
    if left > 0:
        # By row address: with `seq IN (subquery)` the planner, misled by a log grown since the last ANALYZE,
        # may re-run the subquery for every row of the conversation (seconds per step at 20k items).
        items = conn.execute(
            "DELETE FROM log_items WHERE ctid = ANY(ARRAY(SELECT ctid FROM log_items WHERE site_id = %s"
            " AND conversation_id = %s ORDER BY seq LIMIT %s))",
            [site_id, conversation_id, left],
        ).rowcount
        left -= items
    if left > 0:
        keys = conn.execute(
            "DELETE FROM append_keys WHERE ctid = ANY(ARRAY(SELECT ctid FROM append_keys WHERE site_id = %s"
            " AND conversation_id = %s LIMIT %s))",
            [site_id, conversation_id, left],
        ).rowcount
        left -= keys
    done = left > 0
    if done:
        conn.execute(
            "DELETE FROM conversations WHERE site_id = %s AND conversation_id = %s", [site_id, conversation_id]
        )
    return PurgeStep(unlinked=len(linked), items=items, keys=keys, done=done, turns=turns)
