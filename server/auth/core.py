"""Credentials -> Principal. Basic (one per site, full access) and Bearer tokens (scoped, bounded).

The Basic secret is stored as an scrypt hash; tokens are 256-bit random strings stored as SHA-256
(a brute-force search of a 256-bit space is hopeless, so a slow hash buys nothing and costs every request).
Verified Basic credentials are cached by (site, stored hash, digest of the presented secret): a rotation or
deletion changes or removes the stored hash, so CLI changes take effect on the next request.

Every request still reads its site (or token) row, since the CLI changes credentials from another process.
`authenticate_nowait` does that read on the event loop for credentials verified before, on a connection
that never waits for a lock: one indexed read of a tiny table costs ~15 µs, a hop to a worker thread ~45 µs
of CPU (a quarter of a log append's server time). Whatever it cannot settle at once goes to `authenticate`
in a thread, so failures (and their scrypt) never run on the loop.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from server.errors import AppError, Forbidden, InvalidParameters, NotFound, Unauthorized

READ = "memory:read"
WRITE = "memory:write"
SCOPES = (READ, WRITE)

SITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
TOKEN_PREFIX = "mst_"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a site, how they authenticated, what they may do and where."""

    site_id: int
    site: str
    kind: str  # "basic", "bearer" or "local" (stdio)
    scopes: frozenset[str]
    teams: frozenset[str] | None = None  # None: unbounded
    projects: frozenset[str] | None = None
    buckets: frozenset[str] | None = None

    @property
    def is_basic(self) -> bool:
        return self.kind in ("basic", "local")

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise Forbidden(f"this credential lacks the {scope} scope")

    @property
    def bounded(self) -> bool:
        return any(b is not None for b in (self.teams, self.projects, self.buckets))


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def hash_secret(secret: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, dklen=32, **_SCRYPT)
    return f"scrypt${_SCRYPT['n']}${_SCRYPT['r']}${_SCRYPT['p']}${salt.hex()}${digest.hex()}"


def verify_secret(secret: str, stored: str) -> bool:
    try:
        _, n, r, p, salt, digest = stored.split("$")
        candidate = hashlib.scrypt(
            secret.encode(), salt=bytes.fromhex(salt), dklen=32, n=int(n), r=int(r), p=int(p)
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(candidate.hex(), digest)


_DUMMY_HASH: list[str] = []


def _dummy_hash() -> str:
    """A fixed scrypt hash to verify against for unknown users (hashing a fresh one would cost 2 scrypts)."""
    if not _DUMMY_HASH:
        _DUMMY_HASH.append(hash_secret(secrets.token_urlsafe(24)))
    return _DUMMY_HASH[0]


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _validate_site_name(name: str) -> None:
    if not isinstance(name, str) or not SITE_NAME.fullmatch(name):  # match() would accept "name\n"
        raise InvalidParameters("site name must be 1-64 characters of [A-Za-z0-9_-], starting alphanumeric")


# --- administration (CLI); each function runs inside a write transaction ---------------------------


def create_site(conn: sqlite3.Connection, name: str) -> str:
    """Create a site; return its Basic secret (shown once)."""
    _validate_site_name(name)
    if conn.execute("SELECT 1 FROM sites WHERE name = ?", (name,)).fetchone():
        raise InvalidParameters(f"site {name!r} already exists")
    secret = secrets.token_urlsafe(24)
    conn.execute(
        "INSERT INTO sites (name, secret_hash, created_at) VALUES (?, ?, ?)",
        (name, hash_secret(secret), now_rfc3339()),
    )
    return secret


def rotate_site(conn: sqlite3.Connection, name: str) -> str:
    secret = secrets.token_urlsafe(24)
    cur = conn.execute("UPDATE sites SET secret_hash = ? WHERE name = ?", (hash_secret(secret), name))
    if cur.rowcount == 0:
        raise NotFound(f"no site named {name!r}")
    return secret


def site_id(conn: sqlite3.Connection, name: str) -> int:
    row = conn.execute("SELECT id FROM sites WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise NotFound(f"no site named {name!r}")
    return int(row[0])


def list_sites(conn: sqlite3.Connection) -> list[dict[str, object]]:
    rows = conn.execute("SELECT id, name, created_at FROM sites ORDER BY name").fetchall()
    return [dict(row) for row in rows]


def create_token(
    conn: sqlite3.Connection,
    site: str,
    *,
    scopes: list[str],
    teams: list[str] | None = None,
    projects: list[str] | None = None,
    buckets: list[str] | None = None,
) -> tuple[str, str]:
    """Mint a Bearer token; return (id, token). The token is shown once and stored hashed."""
    if not scopes:
        raise InvalidParameters("a token needs at least one scope")
    for scope in scopes:
        if scope not in SCOPES:
            raise InvalidParameters(f"unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    sid = site_id(conn, site)
    token_id = secrets.token_hex(6)
    token = f"{TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
    conn.execute(
        "INSERT INTO tokens (id, site_id, token_hash, scopes, teams, projects, buckets, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            token_id,
            sid,
            _token_hash(token),
            json.dumps(sorted(set(scopes))),
            _bound_json(teams),
            _bound_json(projects),
            _bound_json(buckets),
            now_rfc3339(),
        ),
    )
    return token_id, token


def _bound_json(values: list[str] | None) -> str | None:
    return json.dumps(sorted(set(values))) if values else None


def list_tokens(conn: sqlite3.Connection, site: str) -> list[dict[str, object]]:
    sid = site_id(conn, site)
    rows = conn.execute(
        "SELECT id, scopes, teams, projects, buckets, created_at, revoked_at FROM tokens"
        " WHERE site_id = ? ORDER BY created_at",
        (sid,),
    ).fetchall()
    return [
        {
            **dict(row),
            **{k: json.loads(row[k]) if row[k] else None for k in ("scopes", "teams", "projects", "buckets")},
        }
        for row in rows
    ]


def revoke_token(conn: sqlite3.Connection, token_id: str) -> None:
    cur = conn.execute(
        "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now_rfc3339(), token_id)
    )
    if cur.rowcount == 0:
        raise NotFound(f"no active token with id {token_id!r}")


def ensure_site(conn: sqlite3.Connection, name: str) -> tuple[int, str | None]:
    """Return (site id, new secret or None if the site already existed)."""
    row = conn.execute("SELECT id FROM sites WHERE name = ?", (name,)).fetchone()
    if row is not None:
        return int(row[0]), None
    secret = create_site(conn, name)
    return site_id(conn, name), secret


# --- authentication (every HTTP request) ------------------------------------------------------------


class Authenticator:
    """Turns an Authorization header into a Principal, or raises Unauthorized."""

    def __init__(self, connection: "callable[[], sqlite3.Connection]") -> None:  # type: ignore[valid-type]
        self._connection = connection
        self._verified: dict[tuple[int, str, str], None] = {}
        self._lock = threading.Lock()
        self._nowait_path: Path | None = None
        self._nowait = threading.local()  # one non-waiting connection per event-loop thread

    def allow_nowait(self, db_path: Path) -> None:
        """Let `authenticate_nowait` read this database (the server's; off by default)."""
        self._nowait_path = db_path

    def authenticate(self, header: str | None) -> Principal:
        """Blocking (SQLite, maybe one scrypt): call it from a worker thread."""
        return self._authenticate(header, self._connection(), settle=True)  # type: ignore[return-value]

    def authenticate_nowait(self, header: str | None) -> Principal | None:
        """The Principal for a credential verified before, read without waiting for anything; None when that
        cannot be decided at once (anything but a known good credential, a lock): ask `authenticate`."""
        if self._nowait_path is None:
            return None
        try:
            conn = getattr(self._nowait, "conn", None)
            if conn is None:
                from server.storage.sqlite.db import connect

                conn = self._nowait.conn = connect(self._nowait_path, readonly=True)
                conn.execute("PRAGMA busy_timeout = 0")  # SQLITE_BUSY at once rather than block the loop
            return self._authenticate(header, conn, settle=False)
        except (AppError, sqlite3.Error):
            return None

    def _authenticate(self, header: str | None, conn: sqlite3.Connection, *, settle: bool) -> Principal | None:
        if not header:
            raise Unauthorized("credentials required (Basic or Bearer)")
        scheme, _, value = header.strip().partition(" ")
        scheme = scheme.lower()
        value = value.strip()
        if scheme == "basic":
            return self._basic(value, conn, settle=settle)
        if scheme == "bearer":
            return self._bearer(value, conn)
        raise Unauthorized("unsupported authorization scheme; use Basic or Bearer")

    def _basic(self, value: str, conn: sqlite3.Connection, *, settle: bool) -> Principal | None:
        """settle=False: decide only a credential verified before (no scrypt); else None."""
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise Unauthorized("malformed Basic credentials") from None
        username, sep, secret = decoded.partition(":")
        if not sep or not username or not secret:
            raise Unauthorized("malformed Basic credentials")
        row = conn.execute("SELECT id, name, secret_hash FROM sites WHERE name = ?", (username,)).fetchone()
        if row is None:
            if not settle:
                return None
            # Spend the same time as a real check (one scrypt) so a timing probe cannot enumerate site names.
            verify_secret(secret, _dummy_hash())
            raise Unauthorized("invalid credentials")
        key = (int(row["id"]), row["secret_hash"], hashlib.sha256(secret.encode()).hexdigest())
        with self._lock:
            known = key in self._verified
        if not known:
            if not settle:
                return None
            if not verify_secret(secret, row["secret_hash"]):
                raise Unauthorized("invalid credentials")
            with self._lock:
                if len(self._verified) > 10_000:
                    self._verified.clear()
                self._verified[key] = None
        return Principal(site_id=int(row["id"]), site=row["name"], kind="basic", scopes=frozenset(SCOPES))

    def _bearer(self, value: str, conn: sqlite3.Connection) -> Principal:
        if not value.startswith(TOKEN_PREFIX) or len(value) > 200:
            raise Unauthorized("invalid token")
        digest = _token_hash(value)
        row = conn.execute(
            "SELECT t.token_hash, t.scopes, t.teams, t.projects, t.buckets, t.revoked_at, s.id AS site_id,"
            " s.name AS site FROM tokens t JOIN sites s ON s.id = t.site_id WHERE t.token_hash = ?",
            (digest,),
        ).fetchone()
        if row is None or not hmac.compare_digest(row["token_hash"], digest) or row["revoked_at"]:
            raise Unauthorized("invalid or revoked token")
        return Principal(
            site_id=int(row["site_id"]),
            site=row["site"],
            kind="bearer",
            scopes=frozenset(json.loads(row["scopes"])),
            teams=_bound(row["teams"]),
            projects=_bound(row["projects"]),
            buckets=_bound(row["buckets"]),
        )


def _bound(raw: str | None) -> frozenset[str] | None:
    return frozenset(json.loads(raw)) if raw else None


def delete_site(conn: sqlite3.Connection, name: str) -> None:
    """Delete a site, its tokens and all its data (the index drops orphaned points at start-up)."""
    from server.storage.sqlite.db import SITE_TABLES

    sid = site_id(conn, name)
    for table in SITE_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE site_id = ?", (sid,))
    conn.execute("DELETE FROM sites WHERE id = ?", (sid,))
