"""The reads recall ranks from, on PostgreSQL: visible memories, their vectors and terms, lexical prefetches.

Matching is on `memories_fts.tokens` (FTS5's tokens of the analysed terms, GIN-indexed): a query term is a
phrase of its tokens, as FTS5 reads a quoted term. The prefetch's ranking is FTS5's bm25(), computed over
the matching rows (lexicon.py); the caller keeps those rows few (terms whose postings add up to about a
thousand), so the rows, the phrase counts and the table totals are read in one snapshot and scored here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from server.storage.postgres.database import Conn, Database
from server.storage.postgres.lexicon import bm25_order, fts_tokens, instances
from server.storage.postgres.scope import scope_sql
from server.storage.records import CandidateRow, Scope

CHUNK = 500  # rows per page of a newest-first walk


def _match(phrases: Sequence[list[str]], *, every: bool) -> tuple[str, list[object]]:
    """A condition on `f.tokens` that rows holding every (or any) phrase's tokens meet; exact when every
    phrase is one token, else a superset that `instances` narrows."""
    if every:
        return "f.tokens @> %s::text[]", [sorted({token for phrase in phrases for token in phrase})]
    singles = sorted({phrase[0] for phrase in phrases if len(phrase) == 1})
    longer = sorted({tuple(phrase) for phrase in phrases if len(phrase) > 1})
    clauses = (["f.tokens && %s::text[]"] if singles else []) + ["f.tokens @> %s::text[]"] * len(longer)
    return "(" + " OR ".join(clauses) + ")", [*([singles] if singles else []), *(list(p) for p in longer)]


def _holds(tokens: list[str], phrases: Sequence[list[str]], *, every: bool) -> bool:
    found = (instances(tokens, phrase) > 0 for phrase in phrases)
    return all(found) if every else any(found)


class PostgresCandidateStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def visible_count(self, scope: Scope, up_to: int) -> int:
        where, args = scope_sql(scope)
        # Counted only up to the limit: a full count would walk every visible row of a large site.
        row = self._db.read(lambda conn: conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT %s) AS v",
            [*args, up_to + 1]).fetchone())
        return int(row[0]) if row else 0

    def load(self, scope: Scope, ids: Sequence[int] | None, model: str,
             cached: Callable[[int, str], bool]) -> tuple[list[int], list[CandidateRow]]:
        """The visible memories embedded with `model` (all, or those of `ids`), in id order; and the rows of
        those `cached(id, updated_at)` does not already hold, read in the same snapshot."""
        where, args = scope_sql(scope)
        if ids is not None:
            where += " AND m.id = ANY(%s::bigint[])"
            args.append(list(ids))

        def read(conn: Conn) -> tuple[list[int], list[CandidateRow]]:
            visible = conn.execute(
                f"SELECT m.id, m.updated_at FROM memories m WHERE {where} AND m.vector_model = %s"
                " AND m.vector IS NOT NULL ORDER BY m.id", [*args, model]).fetchall()
            missing = [int(row_id) for row_id, updated_at in visible if not cached(int(row_id), str(updated_at))]
            return [int(row_id) for row_id, _ in visible], _candidate_rows(conn, missing) if missing else []

        return self._db.read(read, snapshot=True)

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """Rows holding each term as one token (what FTS5's vocabulary counts: the term is not tokenized)."""
        rows = self._db.read(lambda conn: conn.execute(
            "SELECT q.t, (SELECT count(*) FROM memories_fts f WHERE f.tokens @> ARRAY[q.t])"
            " FROM unnest(%s::text[]) AS q (t)", [list(terms)]).fetchall())
        return {term: 0 for term in terms} | {str(term): int(n) for term, n in rows}

    def top_id(self) -> int:
        row = self._db.read(lambda conn: conn.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone())
        return int(row[0]) if row else 0

    def best_by_terms(self, scope: Scope, terms: Sequence[str], limit: int) -> list[int]:
        phrases = [fts_tokens(term) for term in terms]
        live = [phrase for phrase in phrases if phrase]
        if not live or limit == 0:
            return []
        where, args = scope_sql(scope, "m")
        match, match_args = _match(live, every=False)

        def read(conn: Conn) -> list[int]:
            totals = conn.execute("SELECT rows, tokens FROM memories_fts_totals").fetchone()
            hits = _phrase_hits(conn, phrases)
            rows = {int(row_id): list(tokens) for row_id, tokens in conn.execute(
                f"SELECT f.id, f.tokens FROM memories_fts f JOIN memories m ON m.id = f.id WHERE {match} AND {where}",
                [*match_args, *args]).fetchall()}
            return bm25_order(rows, phrases, hits, (int(totals[0]), int(totals[1])) if totals else (0, 0), limit)

        return self._db.read(read, snapshot=True)

    def newest_with_terms(self, scope: Scope, terms: Sequence[str], *, every: bool, limit: int,
                          examine: int, exclude: set[int]) -> list[int]:
        """The newest `examine` matching memories of all sites, in pages, keeping those the scope sees."""
        phrases = [fts_tokens(term) for term in terms]
        if (every and not all(phrases)) or not any(phrases) or limit <= 0:
            return []  # a phrase of no tokens matches nothing
        live = [phrase for phrase in phrases if phrase]
        return self._db.read(lambda conn: _newest(conn, scope, live, every=every, limit=limit, examine=examine,
                                                  exclude=exclude))

    def neighbours(self, ids: Sequence[int], reach: int) -> set[int]:
        if not ids:
            return set()
        rows = self._db.read(lambda conn: conn.execute(
            "SELECT n.id FROM memories m JOIN memories n ON n.site_id = m.site_id"
            " AND n.conversation_id = m.conversation_id"
            " AND n.conversation_seq BETWEEN m.conversation_seq - %s AND m.conversation_seq + %s"
            " WHERE m.id = ANY(%s::bigint[]) AND m.conversation_id IS NOT NULL",
            [reach, reach, list(ids)]).fetchall())
        return {int(r[0]) for r in rows}


def _newest(conn: Conn, scope: Scope, phrases: list[list[str]], *, every: bool, limit: int, examine: int,
            exclude: set[int]) -> list[int]:
    match, match_args = _match(phrases, every=every)
    verify = any(len(phrase) > 1 for phrase in phrases)  # else the condition is the match itself
    visible, scope_args = scope_sql(scope)
    found: list[int] = []
    examined, before = 0, None
    while len(found) < limit and examined < examine:
        page = CHUNK if verify else min(CHUNK, examine - examined)
        after = "" if before is None else " AND f.id < %s"
        rows = conn.execute(
            f"SELECT f.id, {visible} AS visible, {'f.tokens' if verify else 'NULL'} FROM memories_fts f"
            f" JOIN memories m ON m.id = f.id WHERE {match}{after} ORDER BY f.id DESC LIMIT %s",
            [*scope_args, *match_args, *([] if before is None else [before]), page]).fetchall()
        for row_id, seen, tokens in rows:
            before = int(row_id)
            if verify and not _holds(list(tokens), phrases, every=every):
                continue
            examined += 1
            if examined > examine:
                break
            if seen and before not in exclude:
                found.append(before)
                if len(found) >= limit:
                    break
        if len(rows) < page:  # past the oldest match
            break
    return found


def _phrase_hits(conn: Conn, phrases: Sequence[list[str]]) -> list[int]:
    """How many rows of the whole table hold each phrase (FTS5's count for its idf)."""
    singles = [phrase[0] for phrase in phrases if len(phrase) == 1]
    counts: dict[str, int] = {}
    if singles:
        counts = {str(t): int(n) for t, n in conn.execute(
            "SELECT q.t, (SELECT count(*) FROM memories_fts f WHERE f.tokens @> ARRAY[q.t])"
            " FROM unnest(%s::text[]) AS q (t)", [sorted(set(singles))]).fetchall()}
    hits: list[int] = []
    for phrase in phrases:
        if len(phrase) == 1:
            hits.append(counts.get(phrase[0], 0))
        elif not phrase:
            hits.append(0)
        else:
            rows = conn.execute("SELECT f.tokens FROM memories_fts f WHERE f.tokens @> %s::text[]",
                                [phrase]).fetchall()
            hits.append(sum(1 for (tokens,) in rows if instances(list(tokens), phrase)))
    return hits


def _candidate_rows(conn: Conn, ids: Sequence[int]) -> list[CandidateRow]:
    found: list[tuple[Any, ...]] = conn.cursor(binary=True).execute(
        "SELECT m.id, m.updated_at, m.content, m.occurred_at, m.conversation_id, m.conversation_seq, m.vector,"
        " f.terms FROM memories m JOIN memories_fts f ON f.id = m.id"
        " WHERE m.id = ANY(%s::bigint[]) AND m.vector IS NOT NULL ORDER BY m.id", [list(ids)]).fetchall()
    return [CandidateRow(id=int(row_id), updated_at=str(updated_at), content=str(content),
                         occurred_at=str(occurred_at), conversation_id=conversation_id,
                         seq=None if seq is None else int(seq), vector=np.frombuffer(blob, dtype=np.float32),
                         terms=str(terms).split())
            for row_id, updated_at, content, occurred_at, conversation_id, seq, blob, terms in found]
