"""The reads recall ranks from, on PostgreSQL: visible memories, their vectors and terms, lexical prefetches.

Matching is on `memories_fts.tokens` (FTS5's tokens of the analysed terms, GIN-indexed): a query term is a
phrase of its tokens, as FTS5 reads a quoted term. The prefetch's ranking is FTS5's bm25() over the site's
statistics alone (memory_server/storage/site_bm25.py), computed over the site's matching rows; the caller keeps
those rows few (terms whose postings in the site add up to a few thousand), so the rows and the site's
totals are read in one snapshot and scored there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np

from memory_server.storage.fts5 import fts_tokens
from memory_server.storage.postgres.database import Conn, Database
from memory_server.storage.records import CandidateRow
from memory_server.storage.scope import Scope
from memory_server.storage.scope_sql import POSTGRES, scope_sql
from memory_server.storage.site_bm25 import SiteRow, site_bm25_order


def _match(phrases: Sequence[list[str]]) -> tuple[str, list[object]]:
    """A condition on `f.tokens` that rows holding any phrase's tokens meet; exact when every phrase is one
    token, else a superset that `instances` narrows."""
    singles = sorted({phrase[0] for phrase in phrases if len(phrase) == 1})
    longer = sorted({tuple(phrase) for phrase in phrases if len(phrase) > 1})
    clauses = (["f.tokens && %s::text[]"] if singles else []) + ["f.tokens @> %s::text[]"] * len(longer)
    return "(" + " OR ".join(clauses) + ")", [*([singles] if singles else []), *(list(p) for p in longer)]


CHUNK = 500  # rows read at a time by `newest`


class PostgresCandidateStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def visible_count(self, scope: Scope, up_to: int) -> int:
        where, args = scope_sql(scope, POSTGRES)
        # Counted only up to the limit: a full count would walk every visible row of a large site.
        row = self._db.read(
            lambda conn: conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT %s) AS v", [*args, up_to + 1]
            ).fetchone()
        )
        return int(row[0]) if row else 0

    def load(
        self,
        scope: Scope,
        ids: Sequence[int] | None,
        model: str,
        cached: Callable[[int, str], bool],
        up_to: int | None = None,
    ) -> tuple[list[tuple[int, str]], list[CandidateRow]]:
        """The visible memories embedded with `model` (all, or those of `ids`), in id order; and the rows of
        those `cached(id, updated_at)` does not already hold, read in the same snapshot."""
        where, args = scope_sql(scope, POSTGRES)
        if ids is not None:
            where += " AND m.id = ANY(%s::bigint[])"
            args.append(list(ids))
        limit = f" LIMIT {int(up_to) + 1}" if up_to is not None else ""

        def read(conn: Conn) -> tuple[list[tuple[int, str]], list[CandidateRow]]:
            # Sorted here: ORDER BY with a LIMIT may walk the primary key rather than the scope's index.
            visible = sorted(
                (int(row_id), str(updated_at))
                for row_id, updated_at in conn.execute(
                    f"SELECT m.id, m.updated_at FROM memories m WHERE {where} AND m.vector_model = %s"
                    f" AND m.vector IS NOT NULL{limit}",
                    [*args, model],
                ).fetchall()
            )
            if up_to is not None and len(visible) > up_to:
                return visible, []
            missing = [row_id for row_id, updated_at in visible if not cached(row_id, updated_at)]
            return visible, _candidate_rows(conn, missing, scope.site_id) if missing else []

        return self._db.read(read, snapshot=True)

    def newest(self, model: str, limit: int) -> Iterator[list[CandidateRow]]:
        """The rows of the newest `limit` memories embedded with `model`, in id order, CHUNK at a time."""
        ids = sorted(
            int(r[0])
            for r in self._db.read(
                lambda conn: conn.execute(
                    "SELECT id FROM memories WHERE vector_model = %s AND vector IS NOT NULL ORDER BY id DESC LIMIT %s",
                    [model, limit],
                ).fetchall()
            )
        )
        for start in range(0, len(ids), CHUNK):
            yield self._db.read(partial(_candidate_rows, ids=ids[start : start + CHUNK]))

    def next_expiry(self, scope: Scope) -> str | None:
        where, args = scope_sql(scope, POSTGRES)
        row = self._db.read(
            lambda conn: conn.execute(f"SELECT min(m.expires_at) FROM memories m WHERE {where}", args).fetchone()
        )
        return str(row[0]) if row and row[0] is not None else None

    def bucket_sizes(self, model: str) -> list[tuple[int, str | None, int]]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT site_id, bucket, count(*), max(id) AS newest FROM memories WHERE vector_model = %s"
                " AND vector IS NOT NULL GROUP BY site_id, bucket ORDER BY newest DESC",
                [model],
            ).fetchall()
        )
        return [(int(site_id), bucket, int(n)) for site_id, bucket, n, _ in rows]

    def doc_freqs(self, site_id: int, terms: Sequence[str], up_to: int | None = None) -> dict[str, int]:
        """The site's rows holding each term as one token (what FTS5's vocabulary counts: the term is not
        tokenized). Counting visits every matching row (a common term's at 100k: ~100 ms, the first recalls'
        p95 after a start), hence `up_to`."""
        limit = "" if up_to is None else f" LIMIT {int(up_to) + 1}"
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT q.t, (SELECT count(*) FROM (SELECT 1 FROM memories_fts f WHERE f.site_id = %s"
                f" AND f.tokens @> ARRAY[q.t]{limit}) AS holding) FROM unnest(%s::text[]) AS q (t)",
                [site_id, list(terms)],
            ).fetchall()
        )
        return {term: 0 for term in terms} | {str(term): int(n) for term, n in rows}

    def site_size(self, site_id: int) -> int:
        row = self._db.read(
            lambda conn: conn.execute("SELECT rows FROM memory_lexicon WHERE site_id = %s", [site_id]).fetchone()
        )
        return int(row[0]) if row else 0

    def best_by_terms(self, scope: Scope, terms: Sequence[str], limit: int) -> list[int]:
        phrases = [fts_tokens(term) for term in terms]
        live = [phrase for phrase in phrases if phrase]
        if not live or limit == 0:
            return []
        where, args = scope_sql(scope, POSTGRES)
        match, match_args = _match(live)

        def read(conn: Conn) -> list[int]:
            totals = conn.execute("SELECT rows, tokens FROM memory_lexicon WHERE site_id = %s", [scope.site_id])
            found = totals.fetchone()
            # Every row of the site holding a phrase counts in its statistics; the scope's, with a vector
            # (without one, no candidate), are ranked.
            rows = [
                SiteRow(int(row_id), list(tokens), bool(visible))
                for row_id, tokens, visible in conn.execute(
                    f"SELECT f.id, f.tokens, (m.vector IS NOT NULL AND {where}) FROM memories_fts f"
                    f" JOIN memories m ON m.site_id = f.site_id AND m.id = f.id WHERE f.site_id = %s AND {match}",
                    [*args, scope.site_id, *match_args],
                ).fetchall()
            ]
            return site_bm25_order(rows, phrases, (int(found[0]), int(found[1])) if found else (0, 0), limit)

        return self._db.read(read, snapshot=True)

    def neighbours(self, site_id: int, ids: Sequence[int], reach: int) -> set[int]:
        if not ids:
            return set()
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT n.id FROM memories m JOIN memories n ON n.site_id = m.site_id"
                " AND n.conversation_id = m.conversation_id"
                " AND n.conversation_seq BETWEEN m.conversation_seq - %s AND m.conversation_seq + %s"
                " WHERE m.site_id = %s AND m.id = ANY(%s::bigint[]) AND m.conversation_id IS NOT NULL",
                [reach, reach, site_id, list(ids)],
            ).fetchall()
        )
        return {int(r[0]) for r in rows}


def _candidate_rows(conn: Conn, ids: Sequence[int], site_id: int | None = None) -> list[CandidateRow]:
    """The rows of `ids` (of one site when given: a recall's; start-up's warming reads every site's)."""
    site = "" if site_id is None else "m.site_id = %s AND "
    found: list[tuple[Any, ...]] = (
        conn.cursor(binary=True)
        .execute(
            "SELECT m.id, m.site_id, m.updated_at, m.content, m.occurred_at, m.conversation_id, m.conversation_seq,"
            " m.vector, f.terms FROM memories m JOIN memories_fts f ON f.site_id = m.site_id AND f.id = m.id"
            f" WHERE {site}m.id = ANY(%s::bigint[]) AND m.vector IS NOT NULL ORDER BY m.id",
            [*([] if site_id is None else [site_id]), list(ids)],
        )
        .fetchall()
    )
    return [
        CandidateRow(
            id=int(row_id),
            site_id=int(site_id),
            updated_at=str(updated_at),
            content=str(content),
            occurred_at=str(occurred_at),
            conversation_id=conversation_id,
            seq=None if seq is None else int(seq),
            vector=np.frombuffer(blob, dtype=np.float32),
            terms=str(terms).split(),
        )
        for row_id, site_id, updated_at, content, occurred_at, conversation_id, seq, blob, terms in found
    ]
