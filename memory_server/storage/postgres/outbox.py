"""The outbox to the vector index, on PostgreSQL: `memories.indexed` and the `index_deletions` queue.

Every write here is idempotent (marking, clearing, storing a vector again changes nothing), so each is
retried even when the connection broke after COMMIT was sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory_server.storage import change_feed as feed
from memory_server.storage.postgres.database import Conn, Database
from memory_server.storage.records import ChangePage, IndexRow


class PostgresOutboxStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def backlog(self) -> int:
        row = self._db.read(
            lambda conn: conn.execute(
                "SELECT (SELECT count(*) FROM memories WHERE indexed = 0) + (SELECT count(*) FROM index_deletions)"
            ).fetchone()
        )
        return int(row[0]) if row else 0

    def unindexed(self, limit: int) -> list[int]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT id FROM memories WHERE indexed = 0 ORDER BY id LIMIT %s", [limit]
            ).fetchall()
        )
        return [int(r[0]) for r in rows]

    def deletions(self) -> list[int]:
        rows = self._db.read(lambda conn: conn.execute("SELECT id FROM index_deletions ORDER BY id").fetchall())
        return [int(r[0]) for r in rows]

    def index_rows(self, ids: Sequence[int]) -> list[IndexRow]:
        if not ids:
            return []
        rows = self._db.read(
            lambda conn: (
                conn.cursor(binary=True)
                .execute(
                    "SELECT id, site_id, team, project, bucket, type, tags, vector, vector_model, updated_at, content,"
                    " occurred_at, valid_to, expires_at, CASE WHEN kind = 'turn' THEN conversation_seq END AS turn_seq"
                    " FROM memories WHERE id = ANY(%s::bigint[]) ORDER BY id",
                    [list(ids)],
                )
                .fetchall()
            )
        )
        return [_index_row(row) for row in rows]

    def set_vectors(self, vectors: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        if not vectors:
            return
        self._db.write(
            lambda conn: conn.execute(
                "UPDATE memories m SET vector = v.vector, vector_model = %s"
                " FROM unnest(%s::bigint[], %s::text[], %s::bytea[]) AS v (id, updated_at, vector)"
                " WHERE m.id = v.id AND m.updated_at = v.updated_at",
                [
                    model,
                    [i for i, _, _ in vectors],
                    [u for _, u, _ in vectors],
                    [np.asarray(x, dtype=np.float32).tobytes() for _, _, x in vectors],
                ],
            ),
            single=True,
            idempotent=True,
        )

    def mark_indexed(self, versions: Sequence[tuple[int, str]]) -> None:
        if not versions:
            return
        self._db.write(
            lambda conn: conn.execute(
                "UPDATE memories m SET indexed = 1 FROM unnest(%s::bigint[], %s::text[]) AS v (id, updated_at)"
                " WHERE m.id = v.id AND m.updated_at = v.updated_at",
                [[i for i, _ in versions], [u for _, u in versions]],
            ),
            single=True,
            idempotent=True,
        )

    def clear_deletions(self, ids: Sequence[int]) -> None:
        if not ids:
            return
        self._db.write(
            lambda conn: conn.execute("DELETE FROM index_deletions WHERE id = ANY(%s::bigint[])", [list(ids)]),
            single=True,
            idempotent=True,
        )

    def mark_all_unindexed(self) -> None:
        self._db.write(
            lambda conn: conn.execute("UPDATE memories SET indexed = 0 WHERE indexed = 1"), single=True, idempotent=True
        )

    def clear_all_deletions(self) -> None:
        self._db.write(lambda conn: conn.execute("DELETE FROM index_deletions"), single=True, idempotent=True)

    def present(self, ids: Sequence[int]) -> set[int]:
        if not ids:
            return set()
        rows = self._db.read(
            lambda conn: conn.execute("SELECT id FROM memories WHERE id = ANY(%s::bigint[])", [list(ids)]).fetchall()
        )
        return {int(r[0]) for r in rows}

    def sites_of(self, ids: Sequence[int]) -> set[int]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT DISTINCT site_id FROM memories WHERE id = ANY(%s::bigint[])", [list(ids)]
            ).fetchall()
        )
        return {int(r[0]) for r in rows}

    def change_mark(self, site_id: int | None = None) -> int:
        row = self._db.read(
            lambda conn: (
                conn.execute(feed.TOTAL_MARK).fetchone()
                if site_id is None
                else conn.execute(feed.sql(feed.SITE_MARK, "%s"), [site_id]).fetchone()
            )
        )
        return int(row[0]) if row else 0

    def change_marks(self, since: float | None = None) -> tuple[dict[int, int], float]:
        def read(conn: Conn) -> tuple[list[tuple[Any, ...]], Any]:
            found = (
                conn.execute(feed.ALL_MARKS)
                if since is None
                else conn.execute(feed.sql(feed.RECENT_MARKS, "%s"), [since])
            ).fetchall()
            clock = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
            return found, clock[0] if clock else 0.0

        found, clock = self._db.read(read, snapshot=True)
        return {int(site_id): int(seq) for site_id, seq in found}, float(clock)

    def ids_after(self, after: int, limit: int) -> list[int]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT id FROM memories WHERE id > %s ORDER BY id LIMIT %s", [after, limit]
            ).fetchall()
        )
        return [int(r[0]) for r in rows]

    def changes(self, site_id: int, after: int, limit: int) -> ChangePage:
        def read(conn: Conn) -> ChangePage:
            rows = conn.execute(feed.sql(feed.PAGE, "%s"), [site_id, after, limit]).fetchall()
            first = conn.execute(feed.sql(feed.FIRST, "%s"), [site_id]).fetchone()
            newest = conn.execute(feed.sql(feed.SITE_MARK, "%s"), [site_id]).fetchone()
            at = conn.execute(feed.sql(feed.MADE_AT, "%s"), [site_id, after]).fetchone()
            return feed.change_page(
                rows, first[0] if first else None, newest[0] if newest else None, at[0] if at else None, after, limit
            )

        # One snapshot: the rows, whether the ones before them are still kept, and when `after` was made.
        return self._db.read(read, snapshot=True)

    def prune_changes(self, older_than_s: float) -> int:
        cut = time.time() - older_than_s
        return int(
            self._db.write(
                lambda conn: conn.execute("DELETE FROM memory_changes WHERE changed_at < %s", [cut]).rowcount,
                single=True,
                idempotent=True,
            )
        )

    def counts(self) -> tuple[int, int, int]:
        row = self._db.read(
            lambda conn: conn.execute(
                "SELECT count(*) FILTER (WHERE indexed = 1), count(*) FILTER (WHERE indexed = 0),"
                " (SELECT count(*) FROM index_deletions) FROM memories"
            ).fetchone()
        )
        return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)


def _index_row(row: tuple[Any, ...]) -> IndexRow:
    blob = row[7]
    return IndexRow(
        id=int(row[0]),
        site_id=int(row[1]),
        team=row[2],
        project=row[3],
        bucket=str(row[4]),
        type=str(row[5]),
        tags=tuple(json.loads(row[6])),
        vector=np.frombuffer(blob, dtype=np.float32) if blob is not None else None,
        vector_model=row[8],
        updated_at=str(row[9]),
        content=str(row[10]),
        occurred_at=str(row[11]),
        valid_to=None if row[12] is None else str(row[12]),
        expires_at=None if row[13] is None else str(row[13]),
        turn_seq=None if row[14] is None else int(row[14]),
    )
