"""The reads recall ranks from, on SQLite: visible memories, their vectors and terms, and FTS5 prefetches.

The analysed terms of each memory are an FTS5 column (`memories_fts`, tokenizer `unicode61`, the terms
already stemmed by memory_server.ranking.lexical), so FTS5 matching and the Python scorer see the same terms.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from memory_server.storage.fts5 import fts_tokens
from memory_server.storage.records import CandidateRow
from memory_server.storage.scope import Scope
from memory_server.storage.scope_sql import SQLITE, marks, scope_sql
from memory_server.storage.site_bm25 import site_bm25_order
from memory_server.storage.sqlite.lexicon import alone, fts_phrase, site_doc_freqs, site_rows, site_totals
from memory_server.storage.sqlite.writer import Readers

# The database file is read a page at a time, not memory-mapped: mapped, the pages recall touched counted in
# the server's RSS (240 MB at 100k memories, once start-up had read the newest into the candidate cache),
# while since the covering index and the held candidate sets (memory_server/retrieval/candidates.py) a recall
# rarely reads a row. Measured at 100k in-process, embedding aside, p50 mapped -> unmapped: whole site 5.7 ->
# 6.1 ms, a bucket 2.3 -> 2.5 ms, a 30-day window (4,100 memories, read whole) 26.3 -> 28.5 ms.
CHUNK = 500  # ids per IN (...) list


class SqliteCandidateStore:
    def __init__(self, readers: Readers) -> None:
        self._readers = readers

    def _reader(self) -> sqlite3.Connection:
        return self._readers.get()

    def visible_count(self, scope: Scope, up_to: int) -> int:
        where, args = scope_sql(scope, SQLITE)
        # Counted only up to the limit: a full count would walk every visible row of a large site.
        return int(
            self._reader()
            .execute(f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT ?)", [*args, up_to + 1])
            .fetchone()[0]
        )

    def load(
        self,
        scope: Scope,
        ids: Sequence[int] | None,
        model: str,
        cached: Callable[[int, str], bool],
        up_to: int | None = None,
    ) -> tuple[list[tuple[int, str]], list[CandidateRow]]:
        """The visible memories embedded with `model` (all, or those of `ids`), in id order; and the rows of
        those `cached(id, updated_at)` does not already hold. One read transaction: the ids and the rows are
        of one state of the database."""
        conn = self._reader()
        where, args = scope_sql(scope, SQLITE)
        source = "memories m"
        if ids is not None:
            # NOT INDEXED: the ids are looked up by rowid; otherwise the planner may walk the whole site
            # through an index on site_id.
            source = "memories m NOT INDEXED"
            where += f" AND m.id IN ({marks(ids)})"
            args += list(ids)
        # Sorted here, not by ORDER BY: with a LIMIT the planner may walk the whole table in rowid order.
        limit = f" LIMIT {int(up_to) + 1}" if up_to is not None else ""
        cursor = conn.cursor()
        cursor.row_factory = None  # plain tuples: up to thousands of rows per recall
        with _snapshot(conn):
            visible: list[tuple[int, str]] = sorted(
                cursor.execute(
                    f"SELECT m.id, m.updated_at FROM {source} WHERE {where} AND m.vector_model = ?"
                    f" AND m.vector IS NOT NULL{limit}",
                    [*args, model],
                ).fetchall()
            )
            if up_to is not None and len(visible) > up_to:
                return visible, []
            missing = [row_id for row_id, updated_at in visible if not cached(row_id, updated_at)]
            rows = [
                row
                for start in range(0, len(missing), CHUNK)
                for row in _candidate_rows(cursor, missing[start : start + CHUNK])
            ]
        return visible, rows

    def newest(self, model: str, limit: int) -> Iterator[list[CandidateRow]]:
        """The rows of the newest `limit` memories embedded with `model`, in id order, CHUNK at a time."""
        conn = self._reader()
        ids = sorted(
            int(r[0])
            for r in conn.execute(
                "SELECT id FROM memories WHERE vector_model = ? AND vector IS NOT NULL ORDER BY id DESC LIMIT ?",
                (model, limit),
            ).fetchall()
        )
        cursor = conn.cursor()
        cursor.row_factory = None
        for start in range(0, len(ids), CHUNK):
            yield _candidate_rows(cursor, ids[start : start + CHUNK])

    def next_expiry(self, scope: Scope) -> str | None:
        where, args = scope_sql(scope, SQLITE)
        row = self._reader().execute(f"SELECT min(m.expires_at) FROM memories m WHERE {where}", args).fetchone()
        return row[0] if row else None

    def bucket_sizes(self, model: str) -> list[tuple[int, str | None, int]]:
        return [
            (int(site_id), bucket, int(n))
            for site_id, bucket, n, _ in self._reader()
            .execute(
                "SELECT site_id, bucket, count(*), max(id) AS newest FROM memories WHERE vector_model = ?"
                " AND vector IS NOT NULL GROUP BY site_id, bucket ORDER BY newest DESC",
                (model,),
            )
            .fetchall()
        ]

    def doc_freqs(self, site_id: int, terms: Sequence[str], up_to: int | None = None) -> dict[str, int]:
        """The site's rows holding each token, capped at `up_to` + 1 as the other backend counts. While the site
        holds every row, from FTS5's vocabulary, read through a per-connection temp table (fts5vocab walks only
        these terms' doclists, without scoring)."""
        conn = self._reader()
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memories_fts_terms USING fts5vocab(main, 'memories_fts', 'row')"
        )
        with _snapshot(conn):
            if not alone(conn, site_id):
                return {term: 0 for term in terms} | site_doc_freqs(conn, site_id, terms, up_to)
            found = conn.execute(
                f"SELECT term, doc FROM temp.memories_fts_terms WHERE term IN ({marks(terms)})", list(terms)
            ).fetchall()
        cap = float("inf") if up_to is None else up_to + 1
        return {term: 0 for term in terms} | {row[0]: int(min(int(row[1]), cap)) for row in found}

    def site_size(self, site_id: int) -> int:
        return site_totals(self._reader(), site_id)[0]

    def best_by_terms(self, scope: Scope, terms: Sequence[str], limit: int) -> list[int]:
        conn = self._reader()
        where, args = scope_sql(scope, SQLITE)
        with _snapshot(conn):
            if not alone(conn, scope.site_id):
                phrases = [fts_tokens(term) for term in terms]
                rows = site_rows(conn, scope.site_id, terms, where, args)
                return site_bm25_order(rows, phrases, site_totals(conn, scope.site_id), limit)
            # CROSS JOIN keeps FTS5 the outer loop: driven from `memories`, the planner would run the MATCH once
            # per visible row. Each match is tested against the scope in `memories_scope_by_id` (schema step
            # 12), which the planner would pass over for the rowid; a memory without a vector is no candidate.
            return [
                int(r[0])
                for r in conn.execute(
                    "SELECT m.id FROM memories_fts f CROSS JOIN memories m INDEXED BY "
                    "memories_scope_by_id ON m.id = f.rowid WHERE memories_fts MATCH ? AND m.vector IS NOT NULL"
                    f" AND {where} ORDER BY bm25(memories_fts) LIMIT ?",
                    [" OR ".join(fts_phrase(t) for t in terms), *args, limit],
                ).fetchall()
            ]

    def neighbours(self, site_id: int, ids: Sequence[int], reach: int) -> set[int]:
        if not ids:
            return set()
        found = (
            self._reader()
            .execute(
                # NOT INDEXED: m by rowid (see _candidate_rows); n by its conversation.
                "SELECT n.id FROM memories m NOT INDEXED JOIN memories n ON n.site_id = m.site_id"
                " AND n.conversation_id = m.conversation_id"
                " AND n.conversation_seq BETWEEN m.conversation_seq - ? AND m.conversation_seq + ?"
                f" WHERE m.id IN ({marks(ids)}) AND m.site_id = ? AND m.conversation_id IS NOT NULL",
                [reach, reach, *ids, site_id],
            )
            .fetchall()
        )
        return {int(r[0]) for r in found}


def _candidate_rows(cursor: sqlite3.Cursor, ids: Sequence[int]) -> list[CandidateRow]:
    # NOT INDEXED: looked up by rowid, never by walking an index of the site.
    found = cursor.execute(
        "SELECT m.id, m.site_id, m.updated_at, m.content, m.occurred_at, m.conversation_id, m.conversation_seq,"
        f" m.vector FROM memories m NOT INDEXED WHERE m.id IN ({marks(ids)})",
        list(ids),
    ).fetchall()
    # A second query rather than a join: joining the FTS5 table re-opens its cursor for every row (about 5x
    # slower than this rowid IN list).
    terms: dict[int, str] = dict(
        cursor.execute(f"SELECT rowid, terms FROM memories_fts WHERE rowid IN ({marks(ids)})", list(ids)).fetchall()
    )
    return [
        CandidateRow(
            id=row_id,
            site_id=site_id,
            updated_at=updated_at,
            content=content,
            occurred_at=occurred_at,
            conversation_id=conversation_id,
            seq=seq,
            vector=np.frombuffer(blob, dtype=np.float32),
            terms=terms[row_id].split(),
        )
        for row_id, site_id, updated_at, content, occurred_at, conversation_id, seq, blob in found
        if row_id in terms and blob is not None
    ]


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction around several SELECTs (WAL: they all see the same commit)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")
