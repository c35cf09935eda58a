"""OAuth clients, authorization requests, codes, grants and tokens on PostgreSQL (schema step 5).

Any number of servers share these rows, so each check-and-change is decided by row locks, in READ COMMITTED:
a conditional UPDATE (or DELETE) waits for a concurrent one on the same row to commit, then evaluates its
condition again on the committed row, so of two servers racing for one request, code or refresh token
exactly one wins and the other stores nothing.

Locks are always taken in one order, site, grant, then code or token, so no two of these transactions
deadlock: redeeming a code holds its site (FOR KEY SHARE) before claiming the code; rotating a refresh token
holds its grant (FOR UPDATE) before claiming the token; deleting a site holds the site, then deletes its
grants before their tokens. A code is thus never stored or redeemed for a site being deleted, and no token
is added to a grant once its deletion began.

Sign-in reads never wait on the event loop: `token(nowait=True)` raises WouldBlock, as sites.py does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from memory_server.storage.oauth_admission import CLIENTS, REQUESTS, Refused, Run, admit
from memory_server.storage.oauth_records import (
    CODE_REPLAY_WINDOW_S,
    REFRESH,
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
from memory_server.storage.postgres.database import Conn, Database
from memory_server.storage.records import WouldBlock
from memory_server.timestamps import now_rfc3339, rfc3339_at

Row = dict[str, Any]
# Transaction-level advisory locks: admissions under the caps (oauth_admission.py) count, choose and insert
# one at a time across every server, so no two pass a share together.
CLIENTS_LOCK, REQUESTS_LOCK = 0x6F61_7563, 0x6F61_7571


class PostgresOAuthStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- clients ----------------------------------------------------------------------------------

    def add_client(self, client: OAuthClient, *, quota: Quota | None = None) -> Admission:
        def add(conn: Conn) -> Admission:
            if quota is not None:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [CLIENTS_LOCK])  # one admission at a time
            if conn.execute("SELECT 1 FROM oauth_clients WHERE client_id = %s", [client.client_id]).fetchone():
                return Admission(True)  # a retry after a lost COMMIT finds its own row: added all the same
            taken = 0 if quota is None else admit(_runner(conn), "%s", CLIENTS, client.source, quota, client.created_at)
            conn.execute(
                f"INSERT INTO oauth_clients ({CLIENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                client_values(client),
            )
            return Admission(True, evicted=taken)

        return _admitted(lambda: self._db.write(add, idempotent=True))

    def client(self, client_id: str) -> OAuthClient | None:
        row = self._one("SELECT * FROM oauth_clients WHERE client_id = %s", [client_id])
        if row is None:
            return None
        return client_of(row)

    def forget_unused_clients(self, *, registered_before: float) -> int:
        return self._db.write(
            lambda conn: (
                conn.execute(
                    "DELETE FROM oauth_clients WHERE granted_at IS NULL AND created_at < %s", [registered_before]
                ).rowcount
            ),
            single=True,
            idempotent=True,
        )

    # --- authorization requests -------------------------------------------------------------------

    def add_request(
        self, request_hash: str, request: PendingAuthorization, *, now: float, quota: Quota | None = None
    ) -> Admission:
        def add(conn: Conn) -> Admission:
            if quota is not None:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [REQUESTS_LOCK])  # one admission at a time
            if conn.execute("SELECT 1 FROM oauth_requests WHERE request_hash = %s", [request_hash]).fetchone():
                return Admission(True)  # a retry after a lost COMMIT finds its own row: added all the same
            conn.execute("DELETE FROM oauth_requests WHERE expires_at <= %s", [now])
            taken = 0 if quota is None else admit(_runner(conn), "%s", REQUESTS, request.source, quota, now)
            conn.execute(
                f"INSERT INTO oauth_requests ({REQUEST_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                request_values(request_hash, request),
            )
            return Admission(True, evicted=taken)

        return _admitted(lambda: self._db.write(add, idempotent=True))

    def request(self, request_hash: str, *, now: float) -> PendingAuthorization | None:
        row = self._one("SELECT * FROM oauth_requests WHERE request_hash = %s AND expires_at > %s", [request_hash, now])
        return pending_of(row) if row else None

    def set_request_csrf(self, request_hash: str, csrf_hash: str, *, now: float) -> bool:
        return self._db.write(
            lambda conn: (
                conn.execute(
                    "UPDATE oauth_requests SET csrf_hash = %s WHERE request_hash = %s AND expires_at > %s",
                    [csrf_hash, request_hash, now],
                ).rowcount
                > 0
            ),
            single=True,
            idempotent=True,
        )

    def take_request(self, request_hash: str, *, now: float) -> PendingAuthorization | None:
        # A concurrent DELETE of the row waits for this one's COMMIT, then finds nothing to return.
        row = self._db.write(
            lambda conn: (
                _cursor(conn)
                .execute("DELETE FROM oauth_requests WHERE request_hash = %s RETURNING *", [request_hash])
                .fetchone()
            ),
            single=True,
        )
        return pending_of(row) if row is not None and float(row["expires_at"]) > now else None

    # --- codes ------------------------------------------------------------------------------------

    def add_code(self, code_hash: str, code: OAuthCode, *, now: float) -> bool:
        def add(conn: Conn) -> bool:
            # The site's row lock (shared) keeps a concurrent delete_site waiting until this code is stored, so
            # that it deletes the code too; a site deleted first is not found.
            if conn.execute("SELECT 1 FROM sites WHERE id = %s FOR KEY SHARE", [code.site_id]).fetchone() is None:
                return False
            conn.execute("DELETE FROM oauth_codes WHERE expires_at <= %s", [now - CODE_REPLAY_WINDOW_S])
            conn.execute(
                f"INSERT INTO oauth_codes ({CODE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                code_values(code_hash, code),
            )
            return True

        return self._db.write(add)

    def code(self, code_hash: str) -> OAuthCode | None:
        row = self._one("SELECT * FROM oauth_codes WHERE code_hash = %s", [code_hash])
        if row is None:
            return None
        return code_of(row)

    def redeem_code(self, code_hash: str, grant: NewGrant, tokens: Sequence[IssuedToken], *, now: float) -> bool:
        def redeem(conn: Conn) -> bool:
            site = conn.execute(
                "SELECT s.id FROM oauth_codes c JOIN sites s ON s.id = c.site_id"
                " WHERE c.code_hash = %s FOR KEY SHARE OF s",
                [code_hash],
            ).fetchone()
            if site is None:
                return False
            # The claim: of two servers exchanging the code at once, the second waits for the first's COMMIT
            # and then finds the code used.
            claimed = conn.execute(
                "UPDATE oauth_codes SET grant_id = %s WHERE code_hash = %s AND grant_id IS NULL AND expires_at > %s"
                " RETURNING code_hash",
                [grant.id, code_hash, now],
            ).fetchone()
            if claimed is None:
                return False
            conn.execute(
                f"INSERT INTO oauth_grants ({GRANT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                grant_values(grant, last_used_at=rfc3339_at(now)),
            )
            _insert_tokens(conn, grant.id, tokens)
            # Last: a client's row is locked after the site, code and grant (forget_unused_clients locks no
            # other row, so the order holds).
            conn.execute("UPDATE oauth_clients SET granted_at = %s WHERE client_id = %s", [now, grant.client_id])
            return True

        return self._db.write(redeem)

    # --- tokens and grants ------------------------------------------------------------------------

    def token(self, token_hash: str, *, nowait: bool = False) -> OAuthTokenRecord | None:
        if nowait:
            raise WouldBlock("a PostgreSQL read waits on the network")
        row = self._one(f"{TOKENS} WHERE t.token_hash = %s", [token_hash])
        if row is None:
            return None
        return token_of(row)

    def rotate_refresh(
        self, token_hash: str, tokens: Sequence[IssuedToken], *, now: float, grant_expires_at: float
    ) -> bool:
        def rotate(conn: Conn) -> bool:
            # The grant's row lock orders every refresh of it (and its revocation, and its site's deletion):
            # a server that waited here sees the grant as the other left it (revoked, deleted: no row).
            grant = conn.execute(
                "SELECT g.id FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id"
                " WHERE t.token_hash = %s AND g.revoked_at IS NULL FOR UPDATE OF g",
                [token_hash],
            ).fetchone()
            if grant is None:
                return False
            # The claim, under the grant's lock: a refresh token that another server rotated meanwhile is
            # found rotated (each statement reads what was committed before it began).
            claimed = conn.execute(
                "UPDATE oauth_tokens SET rotated = 1 WHERE token_hash = %s AND kind = %s AND rotated = 0"
                " AND expires_at > %s RETURNING grant_id",
                [token_hash, REFRESH, now],
            ).fetchone()
            if claimed is None:
                return False
            grant_id = str(claimed[0])
            conn.execute("DELETE FROM oauth_tokens WHERE grant_id = %s AND expires_at <= %s", [grant_id, now])
            conn.execute(
                "UPDATE oauth_grants SET expires_at = %s, last_used_at = %s WHERE id = %s",
                [grant_expires_at, rfc3339_at(now), grant_id],
            )
            _insert_tokens(conn, grant_id, tokens)
            return True

        return self._db.write(rotate)

    def grants(self, site_id: int) -> list[OAuthGrant]:
        rows = self._db.read(
            lambda conn: (
                _cursor(conn)
                .execute(f"{GRANTS} WHERE g.site_id = %s ORDER BY g.created_at, g.id", [site_id])
                .fetchall()
            )
        )
        return [grant_of(row) for row in rows]

    def revoke_grant(self, grant_id: str) -> bool:
        return self._db.write(
            lambda conn: (
                conn.execute(
                    "UPDATE oauth_grants SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL",
                    [now_rfc3339(), grant_id],
                ).rowcount
                > 0
            ),
            single=True,
        )

    def mark_grant_used(self, grant_id: str, at: str) -> None:
        self._db.write(
            lambda conn: conn.execute(
                "UPDATE oauth_grants SET last_used_at = %s WHERE id = %s AND (last_used_at IS NULL "
                "OR last_used_at < %s)",
                [at, grant_id, at],
            ),
            single=True,
            idempotent=True,
        )

    def _one(self, sql: str, args: list[Any]) -> Row | None:
        return self._db.read(lambda conn: _cursor(conn).execute(sql, args).fetchone())


def delete_site_rows(conn: Conn, site_id: int) -> None:
    """Delete a site's codes, grants and tokens, inside delete_site's transaction (the site's row is locked
    FOR UPDATE already, so no code or grant of it is added meanwhile). The grants go first: their row locks
    wait for refreshes in progress, and no refresh starts after, so the tokens statement (which reads what
    was committed before it began) finds every token of them."""
    grants = [
        str(row[0])
        for row in conn.execute("DELETE FROM oauth_grants WHERE site_id = %s RETURNING id", [site_id]).fetchall()
    ]
    if grants:
        conn.execute("DELETE FROM oauth_tokens WHERE grant_id = ANY(%s::text[])", [grants])
    conn.execute("DELETE FROM oauth_codes WHERE site_id = %s", [site_id])


def _runner(conn: Conn) -> Run:
    def run(sql: str, args: Sequence[object]) -> Sequence[Sequence[Any]]:
        cursor = conn.execute(sql, list(args))
        return cursor.fetchall() if cursor.description is not None else []  # a DELETE returns no rows

    return run


def _admitted(add: Callable[[], Admission]) -> Admission:
    """A refused admission raised inside its transaction, which rolled back: nothing was taken or added."""
    try:
        return add()
    except Refused as refused:
        return Admission(False, retry_at=refused.retry_at)


def _cursor(conn: Conn) -> psycopg.Cursor[Row]:
    return conn.cursor(row_factory=dict_row)


def _insert_tokens(conn: Conn, grant_id: str, tokens: Sequence[IssuedToken]) -> None:
    if not tokens:
        return
    conn.execute(
        "INSERT INTO oauth_tokens (token_hash, grant_id, kind, scopes, expires_at)"
        " SELECT t.token_hash, %s, t.kind, t.scopes, t.expires_at"
        " FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[]) AS t (token_hash, kind, scopes, expires_at)",
        [
            grant_id,
            [t.token_hash for t in tokens],
            [t.kind for t in tokens],
            [json_list(t.scopes) for t in tokens],
            [t.expires_at for t in tokens],
        ],
    )
