"""Single-word vectors of each site's vocabulary on SQLite (`memory_words`), and how far a backfill got."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from memory_server.storage.memory_rows import vector_blob
from memory_server.storage.records import Words
from memory_server.storage.scope_sql import marks
from memory_server.storage.sqlite.outbox import CHUNK
from memory_server.storage.sqlite.writer import Readers, Writer


class SqliteWordStore:
    def __init__(self, writer: Writer, readers: Readers) -> None:
        self._writer = writer
        self._readers = readers

    def all_words(self, model: str) -> Iterator[tuple[int, str, np.ndarray]]:
        for site_id, word, blob in (
            self._readers.get()
            .execute("SELECT site_id, word, vector FROM memory_words WHERE model = ?", (model,))
            .fetchall()
        ):
            yield int(site_id), str(word), np.frombuffer(blob, dtype=np.float32)

    def backfill_mark(self, model: str) -> int:
        done = self._readers.get().execute("SELECT model, through_id FROM memory_words_backfill").fetchone()
        return int(done[1]) if done is not None and done[0] == model else 0

    def texts_after(self, after_id: int, limit: int) -> list[tuple[int, int, str, str]]:
        return [
            (int(r[0]), int(r[1]), str(r[2]), str(r[3]))
            for r in self._readers.get()
            .execute(
                "SELECT id, site_id, content, occurred_at FROM memories WHERE id > ? ORDER BY id LIMIT ?",
                (after_id, limit),
            )
            .fetchall()
        ]

    def save_backfill(self, words: Iterable[tuple[int, Words]], model: str, through_id: int) -> None:
        batch = list(words)

        def save(conn: sqlite3.Connection) -> None:
            for site_id, site_words in batch:
                store_words(conn, site_id, site_words, model)
            conn.execute(
                "INSERT OR REPLACE INTO memory_words_backfill (id, model, through_id) VALUES (1, ?, ?)",
                (model, through_id),
            )

        self._writer.run_sync(save)

    def vectors(self, site_id: int, words: Sequence[str], model: str) -> Words:
        found: dict[str, np.ndarray] = {}
        conn = self._readers.get()
        for start in range(0, len(words), CHUNK):
            chunk = list(words[start : start + CHUNK])
            for word, blob in conn.execute(
                f"SELECT word, vector FROM memory_words WHERE site_id = ? AND model = ? AND word IN ({marks(chunk)})",
                (site_id, model, *chunk),
            ).fetchall():
                found[str(word)] = np.frombuffer(blob, dtype=np.float32)
        if not found:
            return Words()
        return Words(tuple(found), np.stack(list(found.values())))


def store_words(conn: sqlite3.Connection, site_id: int, words: Words, model: str) -> None:
    """Write a site's new word vectors inside the caller's transaction (the one saving their memory)."""
    if not words.words or words.vectors is None:
        return
    conn.executemany(
        "INSERT OR REPLACE INTO memory_words (site_id, word, model, vector) VALUES (?, ?, ?, ?)",
        [(site_id, w, model, vector_blob(v)) for w, v in zip(words.words, words.vectors, strict=True)],
    )
