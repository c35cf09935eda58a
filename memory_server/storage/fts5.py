"""FTS5's tokens of a text: what SQLite's lexical index (`memories_fts`) holds for it, and what PostgreSQL's
lexical tables are made to hold so that both rank alike (memory_server/storage/site_bm25.py).

The analysed terms (memory_server.ranking.lexical) are almost always plain ASCII words, which `unicode61` splits
on every non-alphanumeric byte and lowercases. Anything else is tokenized by an in-memory FTS5 table of the same
Python sqlite3 the SQLite backend runs on: `remove_diacritics 2` folds accents ("acadêm" is `academ`), and
combining marks that are not accents separate tokens (a Hindi word is several).
"""

from __future__ import annotations

import re
import sqlite3
import threading

# Must stay the tokenizer of SQLite's memories_fts (memory_server/storage/sqlite/schema.py).
TOKENIZER = "unicode61 remove_diacritics 2"

_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+")
_local = threading.local()


def fts_tokens(text: str) -> list[str]:
    """The tokens FTS5 indexes for `text`, in order."""
    if text.isascii():
        return [token.lower() for token in _ASCII_TOKEN.findall(text)]
    return _fts5_tokens(text)


def _fts5_tokens(text: str) -> list[str]:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:")
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5 (terms, tokenize = '{TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab (t, 'instance')")
        _local.conn = conn
    conn.execute("INSERT INTO t (rowid, terms) VALUES (1, ?)", (text,))
    try:
        return [str(row[0]) for row in conn.execute('SELECT term FROM v ORDER BY "offset"')]
    finally:
        conn.execute("DELETE FROM t")
