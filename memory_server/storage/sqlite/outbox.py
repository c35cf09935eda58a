"""The outbox to the vector index, on SQLite: `memories.indexed` and the `index_deletions` queue."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence

import numpy as np

from memory_server.storage.records import ChangePage, IndexRow, collapse_changes
from memory_server.storage.sqlite.scope import marks
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
        conn = self._readers.get()
        found: set[int] = set()
        for start in range(0, len(ids), CHUNK):
            chunk = list(ids[start : start + CHUNK])
            found |= {
                int(r[0])
                for r in conn.execute(f"SELECT id FROM memories WHERE id IN ({marks(chunk)})", chunk).fetchall()
            }
        return found

    def change_mark(self) -> int:
        row = self._readers.get().execute("SELECT seq FROM sqlite_sequence WHERE name = 'memory_changes'").fetchone()
        return int(row[0]) if row is not None else 0

    def ids_after(self, after: int, limit: int) -> list[int]:
        return [
            int(r[0])
            for r in self._readers.get()
            .execute("SELECT id FROM memories WHERE id > ? ORDER BY id LIMIT ?", (after, limit))
            .fetchall()
        ]

    def changes(self, after: int, limit: int) -> ChangePage:
        conn = self._readers.get()
        conn.execute("BEGIN")  # one snapshot: the rows, and whether the ones before them are still kept
        try:
            rows = conn.execute(
                "SELECT seq, id, deleted, changed_at FROM memory_changes WHERE seq > ? ORDER BY seq LIMIT ?",
                (after, limit),
            ).fetchall()
            first = conn.execute("SELECT min(seq) FROM memory_changes").fetchone()[0]
            newest = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'memory_changes'").fetchone()
            at = conn.execute("SELECT changed_at FROM memory_changes WHERE seq = ?", (after,)).fetchone()
        finally:
            conn.execute("COMMIT")
        mark = int(newest[0]) if newest is not None else 0
        truncated = (after < mark and (first is None or int(first) > after + 1)) or after > mark
        return collapse_changes(
            [(int(r[0]), int(r[1]), bool(r[2]), float(r[3])) for r in rows],
            after,
            limit,
            truncated,
            float(at[0]) if at else None,
        )

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
