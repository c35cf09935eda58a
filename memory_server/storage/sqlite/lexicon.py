"""Each site's lexical statistics on SQLite: a memory's lexical row written with its site and FTS5 length, and
the reads that rank a site's lexical prefetch by its own statistics.

FTS5 keeps one set of statistics for its whole table (the rows, their average length, each term's rows), and
its bm25() ranks by them. A site's recall must rank by the site's alone, or another site's writes would move
it: so each lexical row's site and length are kept beside it (`memories_fts_sizes`), each site's totals by
trigger (`memory_lexicon`, schema step 17). While one site holds every row, FTS5's statistics are that
site's, and FTS5 ranks as it always did; otherwise the site's matching rows are read and ranked by its own
statistics (memory_server/storage/site_bm25.py), as PostgreSQL ranks them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from memory_server.storage.fts5 import fts_tokens
from memory_server.storage.site_bm25 import SiteRow

CHUNK = 500  # ids per IN (...) list


def fts_phrase(term: str) -> str:
    """An analysed term as an FTS5 string literal (terms are \\w+ runs, but quote them anyway)."""
    return '"' + term.replace('"', '""') + '"'


def insert_terms(conn: sqlite3.Connection, row_id: int, site_id: int, terms: str) -> None:
    """A new memory's lexical row, inside the transaction writing it."""
    conn.execute("INSERT INTO memories_fts (rowid, terms) VALUES (?, ?)", (row_id, terms))
    conn.execute(
        "INSERT INTO memories_fts_sizes (id, site_id, size) VALUES (?, ?, ?)", (row_id, site_id, len(fts_tokens(terms)))
    )


def update_terms(conn: sqlite3.Connection, changed: Sequence[tuple[str, int]]) -> None:
    """(terms, id): memories' lexical rows written again, inside the caller's transaction."""
    conn.executemany("UPDATE memories_fts SET terms = ? WHERE rowid = ?", changed)
    conn.executemany(
        "UPDATE memories_fts_sizes SET size = ? WHERE id = ?", [(len(fts_tokens(t)), row_id) for t, row_id in changed]
    )


def site_totals(conn: sqlite3.Connection, site_id: int) -> tuple[int, int]:
    """(lexical rows, their tokens) of the site."""
    row = conn.execute("SELECT rows, tokens FROM memory_lexicon WHERE site_id = ?", (site_id,)).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def alone(conn: sqlite3.Connection, site_id: int) -> bool:
    """Whether the site holds every lexical row: FTS5's statistics are then the site's own."""
    row = conn.execute("SELECT 1 FROM memory_lexicon WHERE site_id != ? AND rows > 0 LIMIT 1", (site_id,)).fetchone()
    return row is None


def site_doc_freqs(conn: sqlite3.Connection, site_id: int, tokens: Sequence[str], up_to: int | None) -> dict[str, int]:
    """How many of the site's lexical rows hold each token, counted up to `up_to` + 1. Only a token FTS5 holds
    as it is counts (as in FTS5's vocabulary): MATCH would tokenize anything else into other tokens."""
    limit = -1 if up_to is None else up_to + 1
    return {
        token: int(
            conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM memories_fts f CROSS JOIN memories_fts_sizes s ON s.id = f.rowid"
                " WHERE memories_fts MATCH ? AND s.site_id = ? LIMIT ?)",
                (fts_phrase(token), site_id, limit),
            ).fetchone()[0]
        )
        if fts_tokens(token) == [token]
        else 0
        for token in tokens
    }


def site_rows(
    conn: sqlite3.Connection, site_id: int, terms: Sequence[str], where: str, args: list[object]
) -> list[SiteRow]:
    """The site's lexical rows holding any of `terms`, each with whether the scope (`where` on `m`) sees it."""
    found = conn.execute(
        "SELECT f.rowid, f.terms FROM memories_fts f CROSS JOIN memories_fts_sizes s ON s.id = f.rowid"
        " WHERE memories_fts MATCH ? AND s.site_id = ?",
        (" OR ".join(fts_phrase(t) for t in terms), site_id),
    ).fetchall()
    ids = [int(row[0]) for row in found]
    seen: set[int] = set()
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        marks = ",".join("?" * len(chunk))
        # The scope tested in the index keyed by id that holds every column it tests (schema step 12).
        seen.update(
            int(r[0])
            for r in conn.execute(
                f"SELECT m.id FROM memories m INDEXED BY memories_scope_by_id WHERE m.id IN ({marks})"
                f" AND m.vector IS NOT NULL AND {where}",
                [*chunk, *args],
            ).fetchall()
        )
    return [SiteRow(row_id, fts_tokens(str(terms)), row_id in seen) for row_id, terms in found]
