"""Single-word vectors of each site's vocabulary on PostgreSQL (`memory_words`), and how far a backfill got."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from memory_server.storage.memory_rows import vector_blob
from memory_server.storage.postgres.database import Conn, Database
from memory_server.storage.records import Words


class PostgresWordStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def all_words(self, model: str) -> Iterator[tuple[int, str, np.ndarray]]:
        rows = self._db.read(
            lambda conn: (
                conn.cursor(binary=True)
                .execute("SELECT site_id, word, vector FROM memory_words WHERE model = %s", [model])
                .fetchall()
            )
        )
        for site_id, word, blob in rows:
            yield int(site_id), str(word), np.frombuffer(blob, dtype=np.float32)

    def backfill_mark(self, model: str) -> int:
        done = self._db.read(
            lambda conn: conn.execute("SELECT model, through_id FROM memory_words_backfill").fetchone()
        )
        return int(done[1]) if done is not None and done[0] == model else 0

    def texts_after(self, after_id: int, limit: int) -> list[tuple[int, int, str, str]]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT id, site_id, content, occurred_at FROM memories WHERE id > %s ORDER BY id LIMIT %s",
                [after_id, limit],
            ).fetchall()
        )
        return [(int(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in rows]

    def save_backfill(self, words: Iterable[tuple[int, Words]], model: str, through_id: int) -> None:
        batch = list(words)

        def save(conn: Conn) -> None:
            for site_id, site_words in batch:
                store_words(conn, site_id, site_words, model)
            conn.execute(
                "INSERT INTO memory_words_backfill (id, model, through_id) VALUES (1, %s, %s)"
                " ON CONFLICT (id) DO UPDATE SET model = excluded.model, through_id = excluded.through_id",
                [model, through_id],
            )

        self._db.write(save, idempotent=True)

    def vectors(self, site_id: int, words: Sequence[str], model: str) -> Words:
        if not words:
            return Words()
        rows = self._db.read(
            lambda conn: (
                conn.cursor(binary=True)
                .execute(
                    "SELECT word, vector FROM memory_words WHERE site_id = %s AND model = %s AND "
                    "word = ANY(%s::text[])",
                    [site_id, model, list(words)],
                )
                .fetchall()
            )
        )
        if not rows:
            return Words()
        return Words(
            tuple(str(word) for word, _ in rows), np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
        )


def store_words(conn: Conn, site_id: int, words: Words, model: str) -> None:
    """Write a site's new word vectors inside the caller's transaction (the one saving their memory)."""
    if not words.words or words.vectors is None:
        return
    # The last vector of a repeated word wins, as with SQLite's INSERT OR REPLACE.
    latest = dict(zip(words.words, (vector_blob(v) for v in words.vectors), strict=True))
    conn.execute(
        "INSERT INTO memory_words (site_id, word, model, vector) SELECT %s, w.word, %s, w.vector"
        " FROM unnest(%s::text[], %s::bytea[]) AS w (word, vector)"
        " ON CONFLICT (site_id, word) DO UPDATE SET model = excluded.model, vector = excluded.vector",
        [site_id, model, list(latest), list(latest.values())],
    )
