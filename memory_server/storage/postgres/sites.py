"""Sites, tokens and console sessions on PostgreSQL.

Sign-in reads a site's (or token's) row on every request, since the CLI changes credentials from another
process (or server). A read from PostgreSQL always waits on the network, so `nowait=True` raises WouldBlock at
once: the sign-in middleware then asks again from a worker thread, never blocking the event loop.
"""

from __future__ import annotations

import json

from psycopg.rows import dict_row

from memory_server.errors import InvalidParameters
from memory_server.storage.postgres.database import Conn, Database
from memory_server.storage.postgres.oauth import delete_site_rows
from memory_server.storage.postgres.schema import SITE_TABLES
from memory_server.storage.records import SessionRecord, SiteCredential, SiteRecord, TokenRecord, WouldBlock
from memory_server.storage.site_rows import SESSION_COLUMNS, TOKEN_COLUMNS, bound_json, session_of, token_of
from memory_server.timestamps import now_rfc3339


class PostgresSiteStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- administration ---------------------------------------------------------------------------

    def create_site(self, name: str, secret_hash: str) -> int:
        row = self._db.write(
            lambda conn: conn.execute(
                "INSERT INTO sites (name, secret_hash, created_at) VALUES (%s, %s, %s)"
                " ON CONFLICT (name) DO NOTHING RETURNING id",
                [name, secret_hash, now_rfc3339()],
            ).fetchone(),
            single=True,
        )
        if row is None:
            raise InvalidParameters(f"site {name!r} already exists")
        return int(row[0])

    def set_secret(self, name: str, secret_hash: str) -> bool:
        return self._db.write(
            lambda conn: (
                conn.execute("UPDATE sites SET secret_hash = %s WHERE name = %s", [secret_hash, name]).rowcount > 0
            ),
            single=True,
            idempotent=True,
        )

    def site_id(self, name: str) -> int | None:
        row = self._db.read(lambda conn: conn.execute("SELECT id FROM sites WHERE name = %s", [name]).fetchone())
        return int(row[0]) if row else None

    def sites(self) -> list[SiteRecord]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT id, name, created_at, log_retention_days, index_logs FROM sites ORDER BY name"
            ).fetchall()
        )
        return [
            SiteRecord(int(r[0]), str(r[1]), str(r[2]), None if r[3] is None else int(r[3]), bool(r[4])) for r in rows
        ]

    def set_log_indexing(self, name: str, on: bool) -> bool:
        def write(conn: Conn) -> bool:
            row = conn.execute("UPDATE sites SET index_logs = %s WHERE name = %s RETURNING id", [on, name]).fetchone()
            if row is None:
                return False
            # The conversations that follow their site (not those an append chose for). One created meanwhile
            # by an append that read the former setting is found by the indexer (PostgresLogStore.
            # mark_for_indexing).
            conn.execute(
                "UPDATE conversations SET indexing = %s WHERE site_id = %s AND index_choice IS NULL AND indexing != %s",
                [on, row[0], on],
            )
            return True

        return self._db.write(write, idempotent=True)

    def set_log_retention(self, name: str, days: int | None) -> bool:
        return self._db.write(
            lambda conn: (
                conn.execute("UPDATE sites SET log_retention_days = %s WHERE name = %s", [days, name]).rowcount > 0
            ),
            single=True,
            idempotent=True,
        )

    def delete_site(self, name: str) -> bool:
        """Delete a site, its tokens, OAuth grants and all its data (the index drops the orphaned points at
        start-up)."""
        return self._db.write(lambda conn: delete_site(conn, name))

    def add_token(self, token: TokenRecord, token_hash: str) -> None:
        self._db.write(
            lambda conn: conn.execute(
                "INSERT INTO tokens (id, site_id, token_hash, scopes, teams, projects, buckets, created_at, label)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    token.id,
                    token.site_id,
                    token_hash,
                    json.dumps(sorted(token.scopes)),
                    bound_json(token.teams),
                    bound_json(token.projects),
                    bound_json(token.buckets),
                    token.created_at,
                    token.label,
                ],
            ),
            single=True,
        )

    def tokens(self, site_id: int) -> list[TokenRecord]:
        rows = self._db.read(
            lambda conn: (
                conn.cursor(row_factory=dict_row)
                .execute(
                    f"SELECT {TOKEN_COLUMNS} FROM tokens t JOIN sites s ON s.id = t.site_id WHERE t.site_id = %s"
                    " ORDER BY t.created_at, t.id",
                    [site_id],
                )
                .fetchall()
            )
        )
        return [token_of(row) for row in rows]

    def revoke_token(self, token_id: str) -> bool:
        return self._db.write(
            lambda conn: (
                conn.execute(
                    "UPDATE tokens SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL", [now_rfc3339(), token_id]
                ).rowcount
                > 0
            ),
            single=True,
        )

    def mark_token_used(self, token_id: str, at: str) -> None:
        # Only ever later: replicas recording uses of one token at once never move it back.
        self._db.write(
            lambda conn: conn.execute(
                "UPDATE tokens SET last_used_at = %s WHERE id = %s AND (last_used_at IS NULL OR last_used_at < %s)",
                [at, token_id, at],
            ),
            single=True,
            idempotent=True,
        )

    # --- console sessions -------------------------------------------------------------------------

    def add_session(self, session: SessionRecord) -> None:
        # An id hash is a digest of 256 random bits: a row already there is this one, from a retry after a
        # lost COMMIT.
        self._db.write(
            lambda conn: conn.execute(
                "INSERT INTO console_sessions (id_hash, site_id, site, kind, credential, created_at, seen_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id_hash) DO NOTHING",
                [
                    session.id_hash,
                    session.site_id,
                    session.site,
                    session.kind,
                    session.credential,
                    session.created_at,
                    session.seen_at,
                ],
            ),
            single=True,
            idempotent=True,
        )

    def session(self, id_hash: str) -> SessionRecord | None:
        row = self._db.read(
            lambda conn: (
                conn.cursor(row_factory=dict_row)
                .execute(f"SELECT {SESSION_COLUMNS} FROM console_sessions WHERE id_hash = %s", [id_hash])
                .fetchone()
            )
        )
        if row is None:
            return None
        return session_of(row)

    def touch_session(self, id_hash: str, seen_at: float) -> None:
        # GREATEST: replicas touching one session at once never move its activity back.
        self._db.write(
            lambda conn: conn.execute(
                "UPDATE console_sessions SET seen_at = GREATEST(seen_at, %s) WHERE id_hash = %s", [seen_at, id_hash]
            ),
            single=True,
            idempotent=True,
        )

    def delete_session(self, id_hash: str) -> None:
        self._db.write(
            lambda conn: conn.execute("DELETE FROM console_sessions WHERE id_hash = %s", [id_hash]),
            single=True,
            idempotent=True,
        )

    def prune_sessions(self, *, seen_before: float, created_before: float) -> int:
        return self._db.write(
            lambda conn: (
                conn.execute(
                    "DELETE FROM console_sessions WHERE seen_at < %s OR created_at < %s", [seen_before, created_before]
                ).rowcount
            ),
            single=True,
            idempotent=True,
        )

    # --- sign-in ----------------------------------------------------------------------------------

    def credential(self, name: str, *, nowait: bool = False) -> SiteCredential | None:
        if nowait:
            raise WouldBlock("a PostgreSQL read waits on the network")
        row = self._db.read(
            lambda conn: conn.execute("SELECT id, name, secret_hash FROM sites WHERE name = %s", [name]).fetchone()
        )
        return SiteCredential(int(row[0]), str(row[1]), str(row[2])) if row else None

    def token(self, token_hash: str, *, nowait: bool = False) -> TokenRecord | None:
        if nowait:
            raise WouldBlock("a PostgreSQL read waits on the network")
        row = self._db.read(
            lambda conn: (
                conn.cursor(row_factory=dict_row)
                .execute(
                    f"SELECT {TOKEN_COLUMNS} FROM tokens t JOIN sites s ON s.id = t.site_id WHERE t.token_hash = %s",
                    [token_hash],
                )
                .fetchone()
            )
        )
        return token_of(row) if row else None


def delete_site(conn: Conn, name: str) -> bool:
    row = conn.execute("SELECT id FROM sites WHERE name = %s FOR UPDATE", [name]).fetchone()
    if row is None:
        return False
    site_id = int(row[0])
    # The lexical rows first, in one statement: left to the foreign key's cascade, each memory's would be a
    # statement of its own (and a write of the site's totals row each).
    conn.execute("DELETE FROM memories_fts WHERE site_id = %s", [site_id])
    for table in SITE_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE site_id = %s", [site_id])  # memories: queued for the index
    delete_site_rows(conn, site_id)  # OAuth codes, grants and their tokens
    conn.execute("DELETE FROM sites WHERE id = %s", [site_id])
    return True
