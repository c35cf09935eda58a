"""Sites and tokens on SQLite.

Sign-in reads a site's (or token's) row on every request, since the CLI changes credentials from another
process. `nowait=True` reads on a connection that never waits for a lock (one indexed read of a tiny table
costs ~15 µs, a hop to a worker thread ~45 µs): the sign-in middleware settles known credentials on the
event loop with it, and asks again from a thread when it raises WouldBlock.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from memory_server.errors import InvalidParameters
from memory_server.storage.records import SessionRecord, SiteCredential, SiteRecord, TokenRecord, WouldBlock
from memory_server.storage.site_rows import SESSION_COLUMNS, TOKEN_COLUMNS, bound_json, session_of, token_of
from memory_server.storage.sqlite.connection import connect
from memory_server.storage.sqlite.schema import SITE_TABLES
from memory_server.storage.sqlite.writer import Readers, Writer
from memory_server.timestamps import now_rfc3339


class SqliteSiteStore:
    def __init__(self, writer: Writer, readers: Readers, path: Path) -> None:
        self._writer = writer
        self._readers = readers
        self._path = path
        self._nowait = threading.local()  # one non-waiting connection per event-loop thread

    # --- administration ---------------------------------------------------------------------------

    def create_site(self, name: str, secret_hash: str) -> int:
        def create(conn: sqlite3.Connection) -> int:
            if conn.execute("SELECT 1 FROM sites WHERE name = ?", (name,)).fetchone():
                raise InvalidParameters(f"site {name!r} already exists")
            cur = conn.execute(
                "INSERT INTO sites (name, secret_hash, created_at) VALUES (?, ?, ?)", (name, secret_hash, now_rfc3339())
            )
            return int(cur.lastrowid or 0)

        return self._writer.run_sync(create)

    def set_secret(self, name: str, secret_hash: str) -> bool:
        return self._writer.run_sync(
            lambda conn: (
                conn.execute("UPDATE sites SET secret_hash = ? WHERE name = ?", (secret_hash, name)).rowcount > 0
            )
        )

    def site_id(self, name: str) -> int | None:
        row = self._readers.get().execute("SELECT id FROM sites WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else None

    def sites(self) -> list[SiteRecord]:
        rows = (
            self._readers.get()
            .execute("SELECT id, name, created_at, log_retention_days, index_logs FROM sites ORDER BY name")
            .fetchall()
        )
        return [
            SiteRecord(int(r["id"]), r["name"], r["created_at"], r["log_retention_days"], bool(r["index_logs"]))
            for r in rows
        ]

    def set_log_retention(self, name: str, days: int | None) -> bool:
        return self._writer.run_sync(
            lambda conn: (
                conn.execute("UPDATE sites SET log_retention_days = ? WHERE name = ?", (days, name)).rowcount > 0
            )
        )

    def set_log_indexing(self, name: str, on: bool) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT id FROM sites WHERE name = ?", (name,)).fetchone()
            if row is None:
                return False
            conn.execute("UPDATE sites SET index_logs = ? WHERE id = ?", (int(on), row[0]))
            # The conversations that follow their site (not those an append chose for).
            conn.execute(
                "UPDATE conversations SET indexing = ? WHERE site_id = ? AND index_choice IS NULL AND indexing != ?",
                (int(on), row[0], int(on)),
            )
            return True

        return self._writer.run_sync(write)

    def delete_site(self, name: str) -> bool:
        """Delete a site, its tokens and all its data (the index drops the orphaned points at start-up)."""

        def delete(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT id FROM sites WHERE name = ?", (name,)).fetchone()
            if row is None:
                return False
            for table in SITE_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE site_id = ?", (row[0],))
            conn.execute("DELETE FROM sites WHERE id = ?", (row[0],))
            return True

        return self._writer.run_sync(delete)

    def add_token(self, token: TokenRecord, token_hash: str) -> None:
        self._writer.run_sync(
            lambda conn: conn.execute(
                "INSERT INTO tokens (id, site_id, token_hash, scopes, teams, projects, buckets, created_at, label)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    token.id,
                    token.site_id,
                    token_hash,
                    json.dumps(sorted(token.scopes)),
                    bound_json(token.teams),
                    bound_json(token.projects),
                    bound_json(token.buckets),
                    token.created_at,
                    token.label,
                ),
            )
        )

    def tokens(self, site_id: int) -> list[TokenRecord]:
        rows = (
            self._readers.get()
            .execute(
                f"SELECT {TOKEN_COLUMNS} FROM tokens t JOIN sites s ON s.id = t.site_id WHERE t.site_id = ?"
                " ORDER BY t.created_at",
                (site_id,),
            )
            .fetchall()
        )
        return [token_of(row) for row in rows]

    def revoke_token(self, token_id: str) -> bool:
        return self._writer.run_sync(
            lambda conn: (
                conn.execute(
                    "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now_rfc3339(), token_id)
                ).rowcount
                > 0
            )
        )

    def mark_token_used(self, token_id: str, at: str) -> None:
        self._writer.run_sync(
            lambda conn: conn.execute(
                "UPDATE tokens SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)",
                (at, token_id, at),
            )
        )

    # --- console sessions -------------------------------------------------------------------------

    def add_session(self, session: SessionRecord) -> None:
        self._writer.run_sync(
            lambda conn: conn.execute(
                "INSERT INTO console_sessions (id_hash, site_id, site, kind, credential, created_at, seen_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    session.id_hash,
                    session.site_id,
                    session.site,
                    session.kind,
                    session.credential,
                    session.created_at,
                    session.seen_at,
                ),
            )
        )

    def session(self, id_hash: str) -> SessionRecord | None:
        row = (
            self._readers.get()
            .execute(f"SELECT {SESSION_COLUMNS} FROM console_sessions WHERE id_hash = ?", (id_hash,))
            .fetchone()
        )
        if row is None:
            return None
        return session_of(row)

    def touch_session(self, id_hash: str, seen_at: float) -> None:
        self._writer.run_sync(
            lambda conn: conn.execute(
                "UPDATE console_sessions SET seen_at = max(seen_at, ?) WHERE id_hash = ?", (seen_at, id_hash)
            )
        )

    def delete_session(self, id_hash: str) -> None:
        self._writer.run_sync(lambda conn: conn.execute("DELETE FROM console_sessions WHERE id_hash = ?", (id_hash,)))

    def prune_sessions(self, *, seen_before: float, created_before: float) -> int:
        return self._writer.run_sync(
            lambda conn: (
                conn.execute(
                    "DELETE FROM console_sessions WHERE seen_at < ? OR created_at < ?", (seen_before, created_before)
                ).rowcount
            )
        )

    # --- sign-in ----------------------------------------------------------------------------------

    def credential(self, name: str, *, nowait: bool = False) -> SiteCredential | None:
        row = self._read(nowait, "SELECT id, name, secret_hash FROM sites WHERE name = ?", (name,))
        return SiteCredential(int(row["id"]), row["name"], row["secret_hash"]) if row else None

    def token(self, token_hash: str, *, nowait: bool = False) -> TokenRecord | None:
        row = self._read(
            nowait,
            f"SELECT {TOKEN_COLUMNS} FROM tokens t JOIN sites s ON s.id = t.site_id WHERE t.token_hash = ?",
            (token_hash,),
        )
        return token_of(row) if row else None

    def _read(self, nowait: bool, sql: str, args: tuple[object, ...]) -> sqlite3.Row | None:
        if not nowait:
            row: sqlite3.Row | None = self._readers.get().execute(sql, args).fetchone()
            return row
        conn = getattr(self._nowait, "conn", None)
        try:
            if conn is None:
                conn = self._nowait.conn = connect(self._path, readonly=True)
                conn.execute("PRAGMA busy_timeout = 0")  # SQLITE_BUSY at once rather than block the loop
            row = conn.execute(sql, args).fetchone()
            return row
        except sqlite3.Error as exc:
            raise WouldBlock(str(exc)) from exc
