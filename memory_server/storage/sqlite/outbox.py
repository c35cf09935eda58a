"""The outbox to the vector index, on SQLite: `memories.indexed` and the `index_deletions` queue."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from memory_server.storage import change_feed as feed
from memory_server.storage.records import ChangePage, IndexRow
from memory_server.storage.scope_sql import marks
from memory_server.storage.sqlite.writer import Readers, Writer

CHUNK = 500  # ids per IN (...) list


class SqliteOutboxStore:
    def __init__(self, writer: Writer, readers: Readers) -> None:
        self._writer = writer
        self._readers = readers

    def backlog(self) -> int:
        conn = self._readers.get()
        pending = conn.execute("SELECT count(*) FROM memories WHERE indexed = 0").fetchone()[0]
        deletions = conn.execute("SELECT count(*) FROM index_deletions").fetchone()[0]
        return int(pending) + int(deletions)

    def unindexed(self, limit: int) -> list[int]:
        return [
            int(r[0])
            for r in self._readers.get()
            .execute("SELECT id FROM memories WHERE indexed = 0 ORDER BY id LIMIT ?", (limit,))
            .fetchall()
        ]

    def deletions(self) -> list[int]:
        return [int(r[0]) for r in self._readers.get().execute("SELECT id FROM index_deletions").fetchall()]

    def index_rows(self, ids: Sequence[int]) -> list[IndexRow]:
        conn = self._readers.get()
        found: list[IndexRow] = []
        for start in range(0, len(ids), CHUNK):
            chunk = list(ids[start : start + CHUNK])
            found += [
                _index_row(row)
                for row in conn.execute(
                    "SELECT id, site_id, team, project, bucket, type, tags, vector, vector_model, updated_at, content,"
                    " occurred_at, valid_to, expires_at, CASE WHEN kind = 'turn' THEN conversation_seq END AS turn_seq"
                    f" FROM memories WHERE id IN ({marks(chunk)})",
                    chunk,
                ).fetchall()
            ]
        return found

    # Each write job runs its statement on the writer thread and returns nothing of it (see writer.detached).

    def set_vectors(self, vectors: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        self._run(
            "UPDATE memories SET vector = ?, vector_model = ? WHERE id = ? AND updated_at = ?",
            [
                (np.asarray(vector, dtype=np.float32).tobytes(), model, row_id, updated_at)
                for row_id, updated_at, vector in vectors
            ],
        )

    def mark_indexed(self, versions: Sequence[tuple[int, str]]) -> None:
        self._run("UPDATE memories SET indexed = 1 WHERE id = ? AND updated_at = ?", list(versions))

    def clear_deletions(self, ids: Sequence[int]) -> None:
        self._run("DELETE FROM index_deletions WHERE id = ?", [(i,) for i in ids])

    def mark_all_unindexed(self) -> None:
        self._run("UPDATE memories SET indexed = 0 WHERE indexed = 1", [()])

    def clear_all_deletions(self) -> None:
        self._run("DELETE FROM index_deletions", [()])

    def _run(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        def job(conn: sqlite3.Connection) -> None:
            conn.executemany(sql, rows).close()

        self._writer.run_sync(job)

    def present(self, ids: Sequence[int]) -> set[int]:
        return self._ints("SELECT id FROM memories WHERE id IN ({})", ids)

    def sites_of(self, ids: Sequence[int]) -> set[int]:
        return self._ints("SELECT DISTINCT site_id FROM memories WHERE id IN ({})", ids)

    def _ints(self, sql: str, ids: Sequence[int]) -> set[int]:
        """The integers `sql` (its `{}`: the placeholders of one chunk of `ids`) reads, over every chunk."""
        conn = self._readers.get()
        found: set[int] = set()
        for start in range(0, len(ids), CHUNK):
            chunk = list(ids[start : start + CHUNK])
            found |= {int(r[0]) for r in conn.execute(sql.format(marks(chunk)), chunk)}
        return found

    def change_mark(self, site_id: int | None = None) -> int:
        conn = self._readers.get()
        row = (
            conn.execute(feed.TOTAL_MARK).fetchone()
            if site_id is None
            else conn.execute(feed.sql(feed.SITE_MARK, "?"), (site_id,)).fetchone()
        )
        return int(row[0]) if row is not None else 0

    def change_marks(self, since: float | None = None) -> tuple[dict[int, int], float]:
        conn = self._readers.get()
        with _snapshot(conn):
            found = (
                conn.execute(feed.ALL_MARKS)
                if since is None
                else conn.execute(feed.sql(feed.RECENT_MARKS, "?"), (since,))
            ).fetchall()
            clock = conn.execute("SELECT (julianday('now') - 2440587.5) * 86400.0").fetchone()[0]
        return {int(site_id): int(seq) for site_id, seq in found}, float(clock)

    def ids_after(self, after: int, limit: int) -> list[int]:
        return [
            int(r[0])
            for r in self._readers.get()
            .execute("SELECT id FROM memories WHERE id > ? ORDER BY id LIMIT ?", (after, limit))
            .fetchall()
        ]

    def changes(self, site_id: int, after: int, limit: int) -> ChangePage:
        conn = self._readers.get()
        with _snapshot(conn):  # one snapshot: the rows, and whether the ones before them are still kept
            rows = conn.execute(feed.sql(feed.PAGE, "?"), (site_id, after, limit)).fetchall()
            first = conn.execute(feed.sql(feed.FIRST, "?"), (site_id,)).fetchone()[0]
            newest = conn.execute(feed.sql(feed.SITE_MARK, "?"), (site_id,)).fetchone()
            at = conn.execute(feed.sql(feed.MADE_AT, "?"), (site_id, after)).fetchone()
        return feed.change_page(rows, first, newest[0] if newest else None, at[0] if at else None, after, limit)

    def prune_changes(self, older_than_s: float) -> int:
        cut = time.time() - older_than_s
        return int(
            self._writer.run_sync(
                lambda conn: conn.execute("DELETE FROM memory_changes WHERE changed_at < ?", (cut,)).rowcount
            )
        )

    def counts(self) -> tuple[int, int, int]:
        conn = self._readers.get()
        indexed, pending = conn.execute(
            "SELECT coalesce(sum(indexed = 1), 0), coalesce(sum(indexed = 0), 0) FROM memories"
        ).fetchone()
        deletions = conn.execute("SELECT count(*) FROM index_deletions").fetchone()[0]
        return int(indexed), int(pending), int(deletions)


def _index_row(row: sqlite3.Row) -> IndexRow:
    blob = row["vector"]
    return IndexRow(
        id=int(row["id"]),
        site_id=int(row["site_id"]),
        team=row["team"],
        project=row["project"],
        bucket=row["bucket"],
        type=row["type"],
        tags=tuple(json.loads(row["tags"])),
        vector=np.frombuffer(blob, dtype=np.float32) if blob is not None else None,
        vector_model=row["vector_model"],
        updated_at=row["updated_at"],
        content=row["content"],
        occurred_at=row["occurred_at"],
        valid_to=row["valid_to"],
        expires_at=row["expires_at"],
        turn_seq=row["turn_seq"],
    )


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction around several SELECTs (WAL: they all see the same commit)."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")
