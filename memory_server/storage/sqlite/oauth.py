"""OAuth clients, authorization requests, codes, grants and tokens on SQLite (schema step 5).

Each check-and-change (taking a request, redeeming a code, rotating a refresh token) is one job on the
writer thread inside `BEGIN IMMEDIATE`, so of two racing callers, in this process or another, exactly one
wins. Token reads for sign-in may use a connection that never waits (as `SqliteSiteStore.token` does).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from memory_server.storage.oauth_admission import CLIENTS, REQUESTS, Refused, Run, admit
from memory_server.storage.oauth_records import (
    CODE_REPLAY_WINDOW_S,
    Admission,
    IssuedToken,
    NewGrant,
    OAuthClient,
    OAuthCode,
    OAuthGrant,
    OAuthTokenRecord,
    PendingAuthorization,
    Quota,
)
from memory_server.storage.oauth_rows import (
    CLIENT_COLUMNS,
    CODE_COLUMNS,
    GRANT_COLUMNS,
    GRANTS,
    REQUEST_COLUMNS,
    TOKENS,
    client_of,
    client_values,
    code_of,
    code_values,
    grant_of,
    grant_values,
    json_list,
    pending_of,
    request_values,
    token_of,
)
from memory_server.storage.records import WouldBlock
from memory_server.storage.sqlite.connection import connect
from memory_server.storage.sqlite.writer import Readers, Writer
from memory_server.timestamps import now_rfc3339, rfc3339_at


class SqliteOAuthStore:
    def __init__(self, writer: Writer, readers: Readers, path: Path) -> None:
        self._writer = writer
        self._readers = readers
        self._path = path
        self._nowait = threading.local()

    # --- clients ----------------------------------------------------------------------------------

    def add_client(self, client: OAuthClient, *, quota: Quota | None = None) -> Admission:
        def add(conn: sqlite3.Connection) -> Admission:
            taken = 0 if quota is None else admit(_runner(conn), "?", CLIENTS, client.source, quota, client.created_at)
            conn.execute(
                f"INSERT INTO oauth_clients ({CLIENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                client_values(client),
            )
            return Admission(True, evicted=taken)

        return _admitted(lambda: self._writer.run_sync(add))

    def client(self, client_id: str) -> OAuthClient | None:
        row = self._readers.get().execute("SELECT * FROM oauth_clients WHERE client_id = ?", (client_id,)).fetchone()
        if row is None:
            return None
        return client_of(row)

    def forget_unused_clients(self, *, registered_before: float) -> int:
        return self._writer.run_sync(
            lambda conn: (
                conn.execute(
                    "DELETE FROM oauth_clients WHERE granted_at IS NULL AND created_at < ?", (registered_before,)
                ).rowcount
            )
        )

    # --- authorization requests -------------------------------------------------------------------

    def add_request(
        self, request_hash: str, request: PendingAuthorization, *, now: float, quota: Quota | None = None
    ) -> Admission:
        def add(conn: sqlite3.Connection) -> Admission:
            conn.execute("DELETE FROM oauth_requests WHERE expires_at <= ?", (now,))
            taken = 0 if quota is None else admit(_runner(conn), "?", REQUESTS, request.source, quota, now)
            conn.execute(
                f"INSERT INTO oauth_requests ({REQUEST_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                request_values(request_hash, request),
            )
            return Admission(True, evicted=taken)

        return _admitted(lambda: self._writer.run_sync(add))

    def request(self, request_hash: str, *, now: float) -> PendingAuthorization | None:
        row = (
            self._readers.get()
            .execute("SELECT * FROM oauth_requests WHERE request_hash = ? AND expires_at > ?", (request_hash, now))
            .fetchone()
        )
        return pending_of(row) if row else None

    def set_request_csrf(self, request_hash: str, csrf_hash: str, *, now: float) -> bool:
        return self._writer.run_sync(
            lambda conn: (
                conn.execute(
                    "UPDATE oauth_requests SET csrf_hash = ? WHERE request_hash = ? AND expires_at > ?",
                    (csrf_hash, request_hash, now),
                ).rowcount
                > 0
            )
        )

    def take_request(self, request_hash: str, *, now: float) -> PendingAuthorization | None:
        def take(conn: sqlite3.Connection) -> PendingAuthorization | None:
            row = conn.execute(
                "DELETE FROM oauth_requests WHERE request_hash = ? RETURNING *", (request_hash,)
            ).fetchone()
            return pending_of(row) if row is not None and float(row["expires_at"]) > now else None

        return self._writer.run_sync(take)

    # --- codes ------------------------------------------------------------------------------------

    def add_code(self, code_hash: str, code: OAuthCode, *, now: float) -> bool:
        def add(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM oauth_codes WHERE expires_at <= ?", (now - CODE_REPLAY_WINDOW_S,))
            if conn.execute("SELECT 1 FROM sites WHERE id = ?", (code.site_id,)).fetchone() is None:
                return False
            conn.execute(
                f"INSERT INTO oauth_codes ({CODE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                code_values(code_hash, code),
            )
            return True

        return self._writer.run_sync(add)

    def code(self, code_hash: str) -> OAuthCode | None:
        row = self._readers.get().execute("SELECT * FROM oauth_codes WHERE code_hash = ?", (code_hash,)).fetchone()
        if row is None:
            return None
        return code_of(row)

    def redeem_code(self, code_hash: str, grant: NewGrant, tokens: Sequence[IssuedToken], *, now: float) -> bool:
        def redeem(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT c.grant_id, c.expires_at FROM oauth_codes c JOIN sites s ON s.id = c.site_id"
                " WHERE c.code_hash = ?",
                (code_hash,),
            ).fetchone()
            if row is None or row["grant_id"] is not None or float(row["expires_at"]) <= now:
                return False
            conn.execute("UPDATE oauth_codes SET grant_id = ? WHERE code_hash = ?", (grant.id, code_hash))
            conn.execute(
                f"INSERT INTO oauth_grants ({GRANT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                grant_values(grant, last_used_at=rfc3339_at(now)),
            )
            _insert_tokens(conn, grant.id, tokens)
            conn.execute("UPDATE oauth_clients SET granted_at = ? WHERE client_id = ?", (now, grant.client_id))
            return True

        return self._writer.run_sync(redeem)

    # --- tokens and grants ------------------------------------------------------------------------

    def token(self, token_hash: str, *, nowait: bool = False) -> OAuthTokenRecord | None:
        row = self._read(nowait, f"{TOKENS} WHERE t.token_hash = ?", (token_hash,))
        if row is None:
            return None
        return token_of(row)

    def rotate_refresh(
        self, token_hash: str, tokens: Sequence[IssuedToken], *, now: float, grant_expires_at: float
    ) -> bool:
        def rotate(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT t.grant_id FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id"
                " WHERE t.token_hash = ? AND t.kind = 'refresh' AND t.rotated = 0 AND t.expires_at > ?"
                " AND g.revoked_at IS NULL",
                (token_hash, now),
            ).fetchone()
            if row is None:
                return False
            grant_id = row["grant_id"]
            conn.execute("UPDATE oauth_tokens SET rotated = 1 WHERE token_hash = ?", (token_hash,))
            conn.execute("DELETE FROM oauth_tokens WHERE grant_id = ? AND expires_at <= ?", (grant_id, now))
            conn.execute(
                "UPDATE oauth_grants SET expires_at = ?, last_used_at = ? WHERE id = ?",
                (grant_expires_at, rfc3339_at(now), grant_id),
            )
            _insert_tokens(conn, grant_id, tokens)
            return True

        return self._writer.run_sync(rotate)

    def grants(self, site_id: int) -> list[OAuthGrant]:
        rows = (
            self._readers.get()
            .execute(f"{GRANTS} WHERE g.site_id = ? ORDER BY g.created_at, g.id", (site_id,))
            .fetchall()
        )
        return [grant_of(row) for row in rows]

    def revoke_grant(self, grant_id: str) -> bool:
        return self._writer.run_sync(
            lambda conn: (
                conn.execute(
                    "UPDATE oauth_grants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                    (now_rfc3339(), grant_id),
                ).rowcount
                > 0
            )
        )

    def mark_grant_used(self, grant_id: str, at: str) -> None:
        self._writer.run_sync(
            lambda conn: conn.execute(
                "UPDATE oauth_grants SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)",
                (at, grant_id, at),
            )
        )

    def _read(self, nowait: bool, sql: str, args: tuple[object, ...]) -> sqlite3.Row | None:
        if not nowait:
            row: sqlite3.Row | None = self._readers.get().execute(sql, args).fetchone()
            return row
        conn = getattr(self._nowait, "conn", None)
        try:
            if conn is None:
                conn = self._nowait.conn = connect(self._path, readonly=True)
                conn.execute("PRAGMA busy_timeout = 0")  # SQLITE_BUSY at once rather than block the event loop
            row = conn.execute(sql, args).fetchone()
            return row
        except sqlite3.Error as exc:
            raise WouldBlock(str(exc)) from exc


def _runner(conn: sqlite3.Connection) -> Run:
    return lambda sql, args: conn.execute(sql, tuple(args)).fetchall()


def _admitted(add: Callable[[], Admission]) -> Admission:
    """The writer rolls a refused admission back (its job raised): nothing was taken or added."""
    try:
        return add()
    except Refused as refused:
        return Admission(False, retry_at=refused.retry_at)


def _insert_tokens(conn: sqlite3.Connection, grant_id: str, tokens: Sequence[IssuedToken]) -> None:
    conn.executemany(
        "INSERT INTO oauth_tokens (token_hash, grant_id, kind, scopes, expires_at) VALUES (?,?,?,?,?)",
        [(t.token_hash, grant_id, t.kind, json_list(t.scopes), t.expires_at) for t in tokens],
    )
