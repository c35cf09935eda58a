"""Console sessions: kept in the authority, bound to the credential they were signed in with.

The browser holds a random 256-bit session id in an HttpOnly cookie; the authority keeps only its SHA-256,
with the site and what the credential was (a digest of the site's stored secret hash, or the token's hash),
so every replica on one authority knows every session, and a leaked database signs nobody in. Each request
finds the credential again: a rotated secret, a deleted site or a revoked token ends the session at once.
A session also ends after IDLE_S without a request and ABSOLUTE_S after sign-in, whichever comes first.

CSRF: every change carries a token derived from the session id (hidden field or X-CSRF-Token header).
It cannot be forged without the cookie, and knowing it gives nobody the cookie. Before sign-in, the same
derivation from a short-lived random cookie protects the sign-in form itself.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

import anyio

from memory_server.auth.authenticator import Authenticator
from memory_server.auth.principal import Principal
from memory_server.storage.protocols import SiteStore
from memory_server.storage.records import SessionRecord

SESSION_COOKIE = "memory_console"
SIGN_IN_COOKIE = "memory_console_sign_in"
IDLE_S = 2 * 3600
ABSOLUTE_S = 12 * 3600
SIGN_IN_FORM_S = 3600  # how long a sign-in form stays valid
TOUCH_EVERY_S = 60  # activity is written at most this often per session (one write, not one per request)
MAX_ID_LENGTH = 100


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def id_hash(secret: str) -> str:
    return hashlib.sha256(f"console-session-id\0{secret}".encode()).hexdigest()


def csrf_token(secret: str) -> str:
    """The CSRF token of a session (or of a sign-in form), derived from its cookie's secret."""
    return hashlib.sha256(f"console-csrf\0{secret}".encode()).hexdigest()


def csrf_ok(secret: str | None, presented: str | None) -> bool:
    if not secret or not presented or len(secret) > MAX_ID_LENGTH:
        return False
    return hmac.compare_digest(csrf_token(secret), presented)


@dataclass(frozen=True, slots=True)
class Session:
    secret: str  # the cookie's value
    principal: Principal
    created_at: float

    @property
    def csrf(self) -> str:
        return csrf_token(self.secret)


class ConsoleSessions:
    def __init__(self, sites: SiteStore, authenticator: Authenticator) -> None:
        self._sites = sites
        self._authenticator = authenticator

    async def start(self, principal: Principal, binding: tuple[str, str]) -> str:
        """A new session for a principal just signed in; returns the secret for its cookie."""
        kind, bound_to = binding
        secret, now = new_secret(), time.time()
        record = SessionRecord(
            id_hash=id_hash(secret),
            site_id=principal.site_id,
            site=principal.site,
            kind=kind,
            credential=bound_to,
            created_at=now,
            seen_at=now,
        )

        def write() -> None:
            self._sites.prune_sessions(seen_before=now - IDLE_S, created_before=now - ABSOLUTE_S)
            self._sites.add_session(record)

        await anyio.to_thread.run_sync(write)
        return secret

    async def resume(self, secret: str | None) -> Session | None:
        """The live session of this cookie, or None (absent, unknown, expired, or its credential changed)."""
        if not secret or len(secret) > MAX_ID_LENGTH:
            return None
        return await anyio.to_thread.run_sync(self._resume, secret)

    def _resume(self, secret: str) -> Session | None:
        key = id_hash(secret)
        record = self._sites.session(key)
        if record is None:
            return None
        now = time.time()
        principal = None
        if now - record.seen_at <= IDLE_S and now - record.created_at <= ABSOLUTE_S:
            principal = self._authenticator.resume(record.kind, record.site, record.site_id, record.credential)
        if principal is None:
            self._sites.delete_session(key)
            return None
        if now - record.seen_at >= TOUCH_EVERY_S:
            self._sites.touch_session(key, now)
        return Session(secret=secret, principal=principal, created_at=record.created_at)

    async def end(self, secret: str | None) -> None:
        if secret and len(secret) <= MAX_ID_LENGTH:
            await anyio.to_thread.run_sync(self._sites.delete_session, id_hash(secret))
