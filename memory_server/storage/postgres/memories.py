"""Saved memories on PostgreSQL: rows, their lexical index rows, and the words they bring.

As on SQLite, a memory is committed first, with its embedding and `indexed = 0` (the outbox, outbox.py); the
vector index is written after the commit, and a deleted row is queued in `index_deletions` by trigger.

Two servers may insert the same memory at once: the unique (site, dedup key) index makes the second wait
for the first's COMMIT, then `ON CONFLICT DO NOTHING` lets it decide again from the committed row (a
duplicate), as SQLite's single writer would. A batch's lexical rows go in last, in one statement, so the
site's totals row BM25 needs is locked only for the moment before COMMIT.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from psycopg.rows import dict_row

from memory_server.errors import InvalidParameters, Unavailable
from memory_server.storage import memory_sql
from memory_server.storage.chains import MAX_CHAIN, Chains, chain_sql, newest_of, relink
from memory_server.storage.fts5 import fts_tokens
from memory_server.storage.listing import order_column
from memory_server.storage.memory_rows import COLUMNS, attribute_values, stored, vector_blob
from memory_server.storage.postgres.database import Conn, Database
from memory_server.storage.postgres.words import store_words
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
from memory_server.storage.scope_sql import POSTGRES, scope_sql
from memory_server.timestamps import now_rfc3339

REWRITE_BATCH = 1000  # memories whose terms one transaction of `rewrite_terms` writes again
PROVENANCE_FILTERS = ("source", "agent", "conversation_id")  # provenance keys a listing can filter on
ATTRIBUTES = "content, type, location, project, team, bucket, tags, metadata, provenance, occurred_at"
INSERT_FTS = (
    "INSERT INTO memories_fts (site_id, id, terms, tokens) SELECT %s, r.id, r.terms, string_to_array(r.tokens, ' ')"
    " FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS r (id, terms, tokens)"
)


class PostgresMemoryStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- writes -----------------------------------------------------------------------------------

    def find_duplicate(self, site_id: int, dedup_key: str) -> str | None:
        return self._db.read(lambda conn: find_duplicate(conn, site_id, dedup_key))

    def decided(self, site_id: int, memory: NewMemory, kept: Kept | None) -> Inserted | None:
        return self._db.read(lambda conn: decided(conn, site_id, memory, kept))

    def insert(
        self, site_id: int, batch: Sequence[tuple[NewMemory, Document, Kept | None]], words: Words
    ) -> list[Inserted]:
        def insert_all(conn: Conn) -> list[Inserted]:
            store_words(conn, site_id, words, batch[0][1].model if batch else "")
            outcomes = [insert(conn, site_id, memory, document, kept) for memory, document, kept in batch]
            created = [
                (o.row_id, d.terms) for o, (_, d, _) in zip(outcomes, batch, strict=True) if o.row_id is not None
            ]
            if created:
                conn.execute(
                    INSERT_FTS,
                    [
                        site_id,
                        [row_id for row_id, _ in created],
                        [terms for _, terms in created],
                        [" ".join(fts_tokens(terms)) for _, terms in created],
                    ],
                )
            return outcomes

        return self._db.write(insert_all)

    def insert_turns(
        self, at: ToIndex, next_seq: int, skipped: int, batch: Sequence[tuple[NewMemory, Document]], words: Words
    ) -> list[Inserted] | None:
        def insert_all(conn: Conn) -> list[Inserted] | None:
            # The conversation's row lock orders indexers (of several servers) and a deletion's mark.
            row = conn.execute(
                "SELECT indexed_seq, first_recorded_at, deleting FROM conversations"
                " WHERE site_id = %s AND conversation_id = %s FOR UPDATE",
                [at.site_id, at.conversation_id],
            ).fetchone()
            if row is None or row[2] or int(row[0]) != at.indexed_seq or row[1] != at.first_recorded_at:
                return None
            store_words(conn, at.site_id, words, batch[0][1].model if batch else "")
            outcomes = [insert(conn, at.site_id, memory, document) for memory, document in batch]
            created = [(o.row_id, d.terms) for o, (_, d) in zip(outcomes, batch, strict=True) if o.row_id is not None]
            if created:
                conn.execute(
                    INSERT_FTS,
                    [
                        at.site_id,
                        [row_id for row_id, _ in created],
                        [terms for _, terms in created],
                        [" ".join(fts_tokens(terms)) for _, terms in created],
                    ],
                )
            conn.execute(
                "UPDATE conversations SET indexed_seq = %s, index_skipped = index_skipped + %s"
                " WHERE site_id = %s AND conversation_id = %s",
                [next_seq, skipped, at.site_id, at.conversation_id],
            )
            return outcomes

        return self._db.write(insert_all)

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
        return self._db.write(lambda conn: update(conn, site_id, reference, memory, based_on, document, words))

    def delete(self, scope: Scope, reference: str) -> int | None:
        where, args = scope_sql(scope, POSTGRES)

        def delete(conn: Conn) -> int | None:
            found = conn.execute(
                f"SELECT m.id, m.supersedes, m.superseded_by FROM memories m"
                f" WHERE m.reference = %s AND {where} FOR UPDATE",
                [reference, *args],
            ).fetchone()
            if found is None:
                return None
            chains(conn).bridge(scope.site_id, reference, found[1], found[2])
            # The lexical row goes by cascade, the id is queued for the index by trigger.
            conn.execute("DELETE FROM memories WHERE site_id = %s AND id = %s", [scope.site_id, found[0]])
            return int(found[0])

        return self._db.write(delete)

    # --- reads ------------------------------------------------------------------------------------

    def get(self, scope: Scope, reference: str) -> StoredMemory | None:
        where, args = scope_sql(scope, POSTGRES)
        rows = self._rows(f"SELECT {COLUMNS} FROM memories m WHERE m.reference = %s AND {where}", [reference, *args])
        return rows[0] if rows else None

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
            where += f" AND (m.{column} < %s OR (m.{column} = %s AND m.id < %s))"
            args += [after[0], after[0], after[1]]
        found = self._rows(
            f"SELECT {COLUMNS} FROM memories m WHERE {where} ORDER BY m.{column} DESC, m.id DESC LIMIT %s",
            [*args, limit + 1],
        )
        page = found[:limit]
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
        row = self._db.read(
            lambda conn: conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT %s) AS v", [*args, up_to + 1]
            ).fetchone()
        )
        return int(row[0]) if row else 0

    @staticmethod
    def _listed(
        scope: Scope,
        location: str | None,
        provenance: dict[str, str],
        occurred_after: str | None,
        occurred_before: str | None,
    ) -> tuple[str, list[object]]:
        """The condition of a listing: the scope, the filing place, the provenance and the occurred window."""
        where, args = scope_sql(scope.within(occurred_after=occurred_after, occurred_before=occurred_before), POSTGRES)
        if location is not None:
            where += " AND m.location = %s"
            args.append(location)
        for key in sorted(provenance):
            if key not in PROVENANCE_FILTERS:
                raise InvalidParameters(f"cannot filter on provenance.{key}")
            # SQLite's json_extract gives a JSON string as text and anything else as another type: only a
            # string can equal the (text) filter.
            where += " AND jsonb_typeof(m.provenance::jsonb -> %s) = 'string' AND m.provenance::jsonb ->> %s = %s"
            args += [key, key, provenance[key]]
        return where, args

    def occurred_per_day(self, scope: Scope, since: str, before: str) -> list[tuple[str, int]]:
        where, args = scope_sql(scope.within(occurred_after=since, occurred_before=before), POSTGRES)
        rows = self._db.read(
            lambda conn: conn.execute(
                f"SELECT substr(m.occurred_at, 1, 10) AS day, count(*) FROM memories m WHERE {where}"
                " GROUP BY day ORDER BY day",
                args,
            ).fetchall()
        )
        return [(str(row[0]), int(row[1])) for row in rows]

    def newest(self, scope: Scope, references: Sequence[str]) -> dict[str, StoredMemory]:
        if not references:
            return {}
        where, args = scope_sql(scope, POSTGRES)
        sql = (
            chain_sql("= ANY(?::text[])").replace("?", "%s") + "SELECT chain.start, chain.depth, "
            f"{COLUMNS} FROM chain JOIN memories m ON m.site_id = %s AND m.reference = chain.ref WHERE {where}"
        )
        rows = self._db.read(
            lambda conn: (
                conn.cursor(row_factory=dict_row)
                .execute(sql, [scope.site_id, list(references), scope.site_id, MAX_CHAIN, scope.site_id, *args])
                .fetchall()
            )
        )
        return newest_of([(str(row["start"]), int(row["depth"]), stored(row)) for row in rows])

    def purge_expired(self, at: str, limit: int) -> list[int]:
        def purge(conn: Conn) -> list[int]:
            # SKIP LOCKED: replicas purging at once take different rows instead of waiting on each other.
            rows = conn.execute(
                "SELECT id, site_id, reference, supersedes, superseded_by FROM memories"
                " WHERE expires_at <= %s ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED",
                [at, limit],
            ).fetchall()
            links = chains(conn)
            for _, site_id, reference, older, newer in rows:
                links.bridge(int(site_id), str(reference), older, newer)
            if rows:
                conn.execute("DELETE FROM memories WHERE id = ANY(%s::bigint[])", [[int(r[0]) for r in rows]])
            return [int(row[0]) for row in rows]

        return self._db.write(purge)

    def chain_head(self, site_id: int, reference: str) -> str | None:
        return self._db.read(lambda conn: chains(conn).head(site_id, reference))

    def by_ids(self, ids: Sequence[int]) -> dict[int, StoredMemory]:
        if not ids:
            return {}
        rows = self._rows(f"SELECT {COLUMNS} FROM memories m WHERE m.id = ANY(%s::bigint[])", [list(ids)])
        return {row.id: row for row in rows}

    def replaced(self, site_id: int, ids: Sequence[int]) -> dict[int, str | None]:
        if not ids:
            return {}
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT id, valid_to FROM memories WHERE site_id = %s AND id = ANY(%s::bigint[])"
                " AND superseded_by IS NOT NULL",
                [site_id, list(ids)],
            ).fetchall()
        )
        return {int(row[0]): row[1] for row in rows}

    def count(self) -> int:
        row = self._db.read(lambda conn: conn.execute("SELECT count(*) FROM memories").fetchone())
        return int(row[0]) if row else 0

    def terms_version(self) -> int:
        row = self._db.read(lambda conn: conn.execute("SELECT value FROM meta WHERE key = 'terms_version'").fetchone())
        return int(row[0]) if row else 1

    def rewrite_terms(
        self, terms: Callable[[str, str | None], str], version: int, *, batch: int = REWRITE_BATCH
    ) -> int:
        def rewrite(after: int) -> tuple[int, int] | None:
            def work(conn: Conn) -> tuple[int, int] | None:
                # The rows locked while their terms are worked out: a change of one meanwhile waits, then writes
                # its own terms over these.
                rows = conn.execute(
                    "SELECT m.id, m.site_id, m.content, m.occurred_at, f.terms FROM memories m JOIN memories_fts f"
                    " ON f.site_id = m.site_id AND f.id = m.id WHERE m.id > %s ORDER BY m.id LIMIT %s FOR UPDATE OF m",
                    [after, batch],
                ).fetchall()
                if not rows:
                    return None
                changed = [
                    (row_id, site_id, new)
                    for row_id, site_id, content, occurred_at, old in rows
                    if (new := terms(content, occurred_at)) != old
                ]
                for row_id, site_id, new in changed:
                    conn.execute(
                        "UPDATE memories_fts SET terms = %s, tokens = %s WHERE site_id = %s AND id = %s",
                        [new, fts_tokens(new), site_id, row_id],
                    )
                return int(rows[-1][0]), len(changed)

            return self._db.write(work, idempotent=True)

        after, total = 0, 0
        while (done := rewrite(after)) is not None:
            after, total = done[0], total + done[1]
        self._db.write(
            lambda conn: conn.execute(
                "INSERT INTO meta (key, value) VALUES ('terms_version', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [str(version)],
            ),
            single=True,
            idempotent=True,
        )
        return total

    def _rows(self, sql: str, args: list[Any]) -> list[StoredMemory]:
        return self._db.read(
            lambda conn: [stored(row) for row in conn.cursor(row_factory=dict_row).execute(sql, args).fetchall()]
        )


def find_duplicate(conn: Conn, site_id: int, dedup_key: str) -> str | None:
    return memory_sql.find_duplicate(conn, site_id, dedup_key, mark="%s")


def decided(conn: Conn, site_id: int, memory: NewMemory, kept: Kept | None) -> Inserted | None:
    return memory_sql.decided(conn, site_id, memory, kept, mark="%s")


def insert(conn: Conn, site_id: int, memory: NewMemory, document: Document, kept: Kept | None = None) -> Inserted:
    """Insert the memory's row inside the caller's transaction (its lexical row is the caller's), unless
    stored rows decide otherwise (see Inserted)."""
    outcome = decided(conn, site_id, memory, kept)
    if outcome is not None:
        return outcome
    live, kept = kept is None, kept or Kept()
    reference = kept.reference or f"mem_{uuid.uuid4().hex}"
    created_at = kept.created_at or now_rfc3339()
    conversation_id, seq = memory.conversation_position
    row = conn.execute(
        f"INSERT INTO memories ({ATTRIBUTES}, reference, site_id, created_at, updated_at, dedup_key,"
        " conversation_id, conversation_seq, vector, vector_model, supersedes, superseded_by, valid_to, expires_at,"
        " kind, indexed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
        " %s, %s, %s, 0) ON CONFLICT DO NOTHING RETURNING id",
        [
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
        ],
    ).fetchone()
    if row is not None:
        # Ids are never reused here (an identity column), so no queued deletion can name this one.
        if live and memory.supersedes is not None:  # an import keeps the links it read instead
            chains(conn).link(site_id, reference, memory.occurred_at, memory.supersedes)
        return Inserted(int(row[0]), reference, CREATED)
    # A concurrent transaction committed this memory (or reference) while this one waited on the index.
    outcome = decided(conn, site_id, memory, kept)
    if outcome is None:
        raise Unavailable("a concurrent write of the same memory did not settle; retry")
    return outcome


def update(
    conn: Conn,
    site_id: int,
    reference: str,
    memory: NewMemory,
    based_on: Mapping[str, Any],
    document: Document | None,
    words: Words,
) -> int | None:
    """PostgresMemoryStore.update inside the caller's transaction (the row locked until COMMIT)."""
    row = (
        conn.cursor(row_factory=dict_row)
        .execute(
            f"SELECT {COLUMNS} FROM memories m WHERE m.site_id = %s AND m.reference = %s FOR UPDATE",
            [site_id, reference],
        )
        .fetchone()
    )
    if row is None:
        return None
    now = stored(row)
    memory_sql.check_update(conn, site_id, reference, now, memory, based_on, mark="%s")
    assignments, values = memory_sql.update_assignments(memory, document, mark="%s")
    if document is not None:
        store_words(conn, site_id, words, document.model)
    conn.execute(f"UPDATE memories SET {assignments} WHERE site_id = %s AND id = %s", [*values, site_id, now.id])
    if document is not None:
        conn.execute(
            "UPDATE memories_fts SET terms = %s, tokens = %s WHERE site_id = %s AND id = %s",
            [document.terms, fts_tokens(document.terms), site_id, now.id],
        )
    relink(chains(conn), site_id, reference, now, memory)
    return now.id


def chains(conn: Conn) -> Chains:
    # A row about to be linked is locked: two writers superseding it at once serialise, and the second finds
    # it superseded (StaleRow) and resolves the chain again.
    return Chains(conn, mark="%s", lock=" FOR UPDATE")
