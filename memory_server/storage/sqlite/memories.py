"""Saved memories on SQLite: rows, their FTS5 lexical index, and the words they bring.

A memory is committed first, with its embedding and `indexed = 0` (the outbox, see outbox.py); the vector
index is written after the commit. Deleting a row queues its id in `index_deletions` by trigger, so the
index drops the point even if the process dies before it could.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memory_server.errors import InvalidParameters
from memory_server.storage import memory_sql
from memory_server.storage.chains import MAX_CHAIN, Chains, chain_sql, newest_of, relink
from memory_server.storage.listing import order_column
from memory_server.storage.memory_rows import COLUMNS, attribute_values, stored, vector_blob
from memory_server.storage.records import (
    BY_CREATED,
    CREATED,
    Document,
    Inserted,
    Kept,
    NewMemory,
    StoredMemory,
    ToIndex,
    Words,
)
from memory_server.storage.scope import Scope
from memory_server.storage.scope_sql import SQLITE, marks, scope_sql
from memory_server.storage.sqlite.lexicon import insert_terms, update_terms
from memory_server.storage.sqlite.words import store_words
from memory_server.storage.sqlite.writer import Readers, Writer
from memory_server.timestamps import now_rfc3339

REWRITE_BATCH = 1000  # memories whose terms one transaction of `rewrite_terms` writes again
PROVENANCE_FILTERS = ("source", "agent", "conversation_id")  # provenance keys a listing can filter on


class SqliteMemoryStore:
    def __init__(self, writer: Writer, readers: Readers) -> None:
        self._writer = writer
        self._readers = readers

    # --- writes -----------------------------------------------------------------------------------

    def find_duplicate(self, site_id: int, dedup_key: str) -> str | None:
        return find_duplicate(self._readers.get(), site_id, dedup_key)

    def decided(self, site_id: int, memory: NewMemory, kept: Kept | None) -> Inserted | None:
        return decided(self._readers.get(), site_id, memory, kept)

    def insert(
        self, site_id: int, batch: Sequence[tuple[NewMemory, Document, Kept | None]], words: Words
    ) -> list[Inserted]:
        def insert_all(conn: sqlite3.Connection) -> list[Inserted]:
            store_words(conn, site_id, words, batch[0][1].model if batch else "")
            return [insert(conn, site_id, memory, document, kept) for memory, document, kept in batch]

        return self._writer.run_sync(insert_all)

    def insert_turns(
        self, at: ToIndex, next_seq: int, skipped: int, batch: Sequence[tuple[NewMemory, Document]], words: Words
    ) -> list[Inserted] | None:
        def insert_all(conn: sqlite3.Connection) -> list[Inserted] | None:
            row = conn.execute(
                "SELECT indexed_seq, first_recorded_at, deleting FROM conversations"
                " WHERE site_id = ? AND conversation_id = ?",
                (at.site_id, at.conversation_id),
            ).fetchone()
            if row is None or row[2] or int(row[0]) != at.indexed_seq or row[1] != at.first_recorded_at:
                return None
            store_words(conn, at.site_id, words, batch[0][1].model if batch else "")
            inserted = [insert(conn, at.site_id, memory, document) for memory, document in batch]
            conn.execute(
                "UPDATE conversations SET indexed_seq = ?, index_skipped = index_skipped + ?"
                " WHERE site_id = ? AND conversation_id = ?",
                (next_seq, skipped, at.site_id, at.conversation_id),
            )
            return inserted

        return self._writer.run_sync(insert_all)

    def update(
        self,
        site_id: int,
        reference: str,
        memory: NewMemory,
        *,
        based_on: Mapping[str, Any],
        document: Document | None,
        words: Words,
    ) -> int | None:
        def write(conn: sqlite3.Connection) -> int | None:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM memories m WHERE m.site_id = ? AND m.reference = ?", (site_id, reference)
            ).fetchone()
            if row is None:
                return None
            now = stored(row)
            row_id = now.id
            memory_sql.check_update(conn, site_id, reference, now, memory, based_on)
            assignments, values = memory_sql.update_assignments(memory, document)
            if document is not None:
                update_terms(conn, [(document.terms, row_id)])
                store_words(conn, site_id, words, document.model)
            conn.execute(f"UPDATE memories SET {assignments} WHERE site_id = ? AND id = ?", (*values, site_id, row_id))
            relink(Chains(conn), site_id, reference, now, memory)
            return row_id

        return self._writer.run_sync(write)

    def delete(self, scope: Scope, reference: str) -> int | None:
        def delete(conn: sqlite3.Connection) -> int | None:
            where, args = scope_sql(scope, SQLITE)
            found = conn.execute(
                f"SELECT m.id, m.supersedes, m.superseded_by FROM memories m WHERE m.reference = ? AND {where}",
                (reference, *args),
            ).fetchone()
            if found is None:
                return None
            Chains(conn).bridge(scope.site_id, reference, found[1], found[2])
            conn.execute("DELETE FROM memories WHERE id = ?", (found[0],))
            return int(found[0])

        return self._writer.run_sync(delete)

    # --- reads ------------------------------------------------------------------------------------

    def get(self, scope: Scope, reference: str) -> StoredMemory | None:
        where, args = scope_sql(scope, SQLITE)
        row = (
            self._readers.get()
            .execute(f"SELECT {COLUMNS} FROM memories m WHERE m.reference = ? AND {where}", (reference, *args))
            .fetchone()
        )
        return stored(row) if row else None

    def page(
        self,
        scope: Scope,
        *,
        location: str | None,
        provenance: dict[str, str],
        limit: int,
        after: tuple[str, int] | None,
        occurred_after: str | None = None,
        occurred_before: str | None = None,
        order: str = BY_CREATED,
    ) -> tuple[list[StoredMemory], tuple[str, int] | None]:
        """Keyset pagination on (created_at, id) or (occurred_at, id): rows written while a client pages never
        shift a page, and every row present throughout is returned exactly once."""
        column = order_column(order)
        where, args = self._listed(scope, location, provenance, occurred_after, occurred_before)
        if after is not None:
            where += f" AND (m.{column} < ? OR (m.{column} = ? AND m.id < ?))"
            args += [after[0], after[0], after[1]]
        found = (
            self._readers.get()
            .execute(
                f"SELECT {COLUMNS} FROM memories m WHERE {where} ORDER BY m.{column} DESC, m.id DESC LIMIT ?",
                (*args, limit + 1),
            )
            .fetchall()
        )
        page = [stored(row) for row in found[:limit]]
        following = (getattr(page[-1], column), page[-1].id) if len(found) > limit else None
        return page, following

    def count_listed(
        self,
        scope: Scope,
        *,
        location: str | None,
        provenance: dict[str, str],
        up_to: int,
        occurred_after: str | None = None,
        occurred_before: str | None = None,
    ) -> int:
        where, args = self._listed(scope, location, provenance, occurred_after, occurred_before)
        return int(
            self._readers.get()
            .execute(f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT ?)", (*args, up_to + 1))
            .fetchone()[0]
        )

    @staticmethod
    def _listed(
        scope: Scope,
        location: str | None,
        provenance: dict[str, str],
        occurred_after: str | None,
        occurred_before: str | None,
    ) -> tuple[str, list[object]]:
        """The condition of a listing: the scope, the filing place, the provenance and the occurred window."""
        where, args = scope_sql(scope.within(occurred_after=occurred_after, occurred_before=occurred_before), SQLITE)
        if location is not None:
            where += " AND m.location = ?"
            args.append(location)
        for key in sorted(provenance):
            if key not in PROVENANCE_FILTERS:
                raise InvalidParameters(f"cannot filter on provenance.{key}")
            where += f" AND json_extract(m.provenance, '$.{key}') = ?"
            args.append(provenance[key])
        return where, args

    def occurred_per_day(self, scope: Scope, since: str, before: str) -> list[tuple[str, int]]:
        where, args = scope_sql(scope.within(occurred_after=since, occurred_before=before), SQLITE)
        rows = (
            self._readers.get()
            .execute(
                f"SELECT substr(m.occurred_at, 1, 10) AS day, count(*) FROM memories m WHERE {where}"
                " GROUP BY day ORDER BY day",
                args,
            )
            .fetchall()
        )
        return [(str(row[0]), int(row[1])) for row in rows]

    def newest(self, scope: Scope, references: Sequence[str]) -> dict[str, StoredMemory]:
        if not references:
            return {}
        where, args = scope_sql(scope, SQLITE)
        # +site_id: with three references or more the planner would walk the site's index, not theirs.
        starts = chain_sql(f"IN ({marks(references)})", site="+c.site_id")
        rows = (
            self._readers.get()
            .execute(
                f"{starts} SELECT chain.start, chain.depth, {COLUMNS} FROM chain"
                f" JOIN memories m ON m.site_id = ? AND m.reference = chain.ref WHERE {where}",
                [scope.site_id, *references, scope.site_id, MAX_CHAIN, scope.site_id, *args],
            )
            .fetchall()
        )
        return newest_of([(row["start"], row["depth"], stored(row)) for row in rows])

    def purge_expired(self, at: str, limit: int) -> list[int]:
        def purge(conn: sqlite3.Connection) -> list[int]:
            rows = conn.execute(
                "SELECT id, site_id, reference, supersedes, superseded_by FROM memories"
                " WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
                (at, limit),
            ).fetchall()
            chains = Chains(conn)
            for row_id, site_id, reference, older, newer in rows:
                chains.bridge(site_id, reference, older, newer)
                conn.execute("DELETE FROM memories WHERE id = ?", (row_id,))
            return [int(row[0]) for row in rows]

        return self._writer.run_sync(purge)

    def chain_head(self, site_id: int, reference: str) -> str | None:
        return Chains(self._readers.get()).head(site_id, reference)

    def by_ids(self, ids: Sequence[int]) -> dict[int, StoredMemory]:
        if not ids:
            return {}
        rows = (
            self._readers.get()
            .execute(f"SELECT {COLUMNS} FROM memories m WHERE m.id IN ({marks(ids)})", list(ids))
            .fetchall()
        )
        return {int(row["id"]): stored(row) for row in rows}

    def replaced(self, site_id: int, ids: Sequence[int]) -> dict[int, str | None]:
        if not ids:
            return {}
        rows = (
            self._readers.get()
            .execute(
                # NOT INDEXED: by rowid; with many ids the planner would walk the whole site's index.
                f"SELECT id, valid_to FROM memories NOT INDEXED WHERE site_id = ? AND id IN ({marks(ids)})"
                " AND superseded_by IS NOT NULL",
                [site_id, *ids],
            )
            .fetchall()
        )
        return {int(row[0]): row[1] for row in rows}

    def count(self) -> int:
        return int(self._readers.get().execute("SELECT count(*) FROM memories").fetchone()[0])

    def terms_version(self) -> int:
        row = self._readers.get().execute("SELECT value FROM meta WHERE key = 'terms_version'").fetchone()
        return int(row[0]) if row else 1

    def rewrite_terms(
        self, terms: Callable[[str, str | None], str], version: int, *, batch: int = REWRITE_BATCH
    ) -> int:
        def rewrite(after: int) -> tuple[int, int] | None:
            def work(conn: sqlite3.Connection) -> tuple[int, int] | None:
                rows = conn.execute(
                    "SELECT m.id, m.content, m.occurred_at, f.terms FROM memories m"
                    " JOIN memories_fts f ON f.rowid = m.id WHERE m.id > ? ORDER BY m.id LIMIT ?",
                    (after, batch),
                ).fetchall()
                if not rows:
                    return None
                changed = [
                    (new, row_id)
                    for row_id, content, occurred_at, old in rows
                    if (new := terms(content, occurred_at)) != old
                ]
                update_terms(conn, changed)
                return int(rows[-1][0]), len(changed)

            return self._writer.run_sync(work)

        after, total = 0, 0
        while (done := rewrite(after)) is not None:
            after, total = done[0], total + done[1]
        self._writer.run_sync(
            lambda conn: conn.execute(
                "INSERT INTO meta (key, value) VALUES ('terms_version', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(version),),
            )
        )
        return total


def find_duplicate(conn: sqlite3.Connection, site_id: int, dedup_key: str) -> str | None:
    return memory_sql.find_duplicate(conn, site_id, dedup_key)


def decided(conn: sqlite3.Connection, site_id: int, memory: NewMemory, kept: Kept | None) -> Inserted | None:
    return memory_sql.decided(conn, site_id, memory, kept)


def insert(
    conn: sqlite3.Connection, site_id: int, memory: NewMemory, document: Document, kept: Kept | None = None
) -> Inserted:
    """Insert inside the caller's write transaction, unless stored rows decide otherwise (see Inserted)."""
    outcome = decided(conn, site_id, memory, kept)
    if outcome is not None:
        return outcome
    live, kept = kept is None, kept or Kept()
    reference = kept.reference or f"mem_{uuid.uuid4().hex}"
    created_at = kept.created_at or now_rfc3339()
    conversation_id, seq = memory.conversation_position
    cur = conn.execute(
        "INSERT INTO memories (content, type, location, project, team, bucket, tags, metadata, provenance,"
        " occurred_at, reference, site_id, created_at, updated_at, dedup_key, conversation_id,"
        " conversation_seq, vector, vector_model, supersedes, superseded_by, valid_to, expires_at, kind, indexed)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0)",
        (
            *attribute_values(memory),
            reference,
            site_id,
            created_at,
            kept.updated_at or created_at,
            memory.dedup_key,
            conversation_id,
            seq,
            vector_blob(document.vector),
            document.model,
            memory.supersedes,
            kept.superseded_by,
            kept.valid_to,
            memory.expires_at,
            memory.kind,
        ),
    )
    row_id = int(cur.lastrowid or 0)
    insert_terms(conn, row_id, site_id, document.terms)
    conn.execute("DELETE FROM index_deletions WHERE id = ?", (row_id,))
    if live and memory.supersedes is not None:  # an import keeps the links it read instead
        Chains(conn).link(site_id, reference, memory.occurred_at, memory.supersedes)
    return Inserted(row_id, reference, CREATED)
