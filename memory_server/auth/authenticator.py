"""Credentials -> Principal. Basic (one per site, full access), Bearer tokens (scoped, bounded) and OAuth
access tokens (a grant's scopes and bounds, bound to this server's /mcp resource).

Verified Basic credentials are cached by (site, stored hash, digest of the presented secret): a rotation or
deletion changes or removes the stored hash, so CLI changes take effect on the next request. Every request
still reads its site (or token), since the CLI changes credentials from another process; an OAuth access
token's row and grant are read on every request too, so a revocation through any replica counts at once.
A token that was issued but no longer holds (revoked, expired) is refused as `StaleCredential`, which the
sign-in limit does not count as a failure.

`authenticate_nowait` settles a credential verified before on the event loop (the store reads without
waiting); whatever it cannot settle at once goes to `authenticate` in a thread, so failures (and their
scrypt) never run on the loop.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading
import time
from collections.abc import Callable

from memory_server.auth.oauth import ACCESS_PREFIX, MAX_SECRET_LENGTH, StaleCredential, access_principal, digest
from memory_server.auth.principal import Principal, site_principal
from memory_server.auth.secrets import TOKEN_PREFIX, dummy_hash, token_hash, verify_secret
from memory_server.auth.usage import UsageLog
from memory_server.errors import AppError, Unauthorized
from memory_server.storage.protocols import OAuthStore, SiteStore
from memory_server.storage.records import TokenRecord, WouldBlock

VERIFIED_CACHE = 10_000


class Authenticator:
    """Who a request is: a site's Basic credential, a scoped token or an OAuth access token, checked against
    the stores on every request."""

    def __init__(
        self,
        sites: SiteStore,
        *,
        nowait: bool = False,
        oauth: OAuthStore | None = None,
        resource: str = "",
        clock: Callable[[], float] = time.time,
        usage: UsageLog | None = None,
    ) -> None:
        self._sites = sites
        self._usage = usage  # records when each token and grant was last used (None: not recorded)
        self._oauth = oauth  # None: OAuth access tokens are not accepted (e.g. a CLI's authenticator)
        self._resource = resource  # the audience OAuth access tokens must have been issued for
        self._clock = clock
        self.nowait = nowait  # may authenticate_nowait read the store on the event loop (a server: yes)
        self._verified: set[tuple[int, str, str]] = set()
        self._lock = threading.Lock()

    def authenticate(self, header: str | None) -> Principal:
        """Blocking (a store read, maybe one scrypt): call it from a worker thread."""
        principal = self._authenticate(header, settle=True, nowait=False)
        if principal is None:  # settle=True always decides; here for the type checker
            raise Unauthorized("invalid credentials")
        return principal

    def authenticate_nowait(self, header: str | None) -> Principal | None:
        """The Principal for a credential verified before, read without waiting for anything; None when that
        cannot be decided at once (anything but a known good credential, a lock): ask `authenticate`."""
        if not self.nowait:
            return None
        try:
            return self._authenticate(header, settle=False, nowait=True)
        except (AppError, WouldBlock):
            return None

    def authenticate_known(self, header: str | None) -> Principal | None:
        """The Principal for a credential verified before, or None; never a scrypt, but the store is read as
        `authenticate` reads it (blocking: from a worker thread). What `authenticate_nowait` decides on the
        event loop where the store answers at once (SQLite), for a store that never does (PostgreSQL)."""
        try:
            return self._authenticate(header, settle=False, nowait=False)
        except AppError:
            return None

    def _authenticate(self, header: str | None, *, settle: bool, nowait: bool) -> Principal | None:
        if not header:
            raise Unauthorized("credentials required (Basic or Bearer)")
        scheme, _, value = header.strip().partition(" ")
        scheme, value = scheme.lower(), value.strip()
        if scheme == "basic":
            return self._basic(value, settle=settle, nowait=nowait)
        if scheme == "bearer":
            return self._bearer(value, nowait=nowait)
        raise Unauthorized("unsupported authorization scheme; use Basic or Bearer")

    def _basic(self, value: str, *, settle: bool, nowait: bool) -> Principal | None:
        """settle=False: decide only a credential verified before (no scrypt); else None."""
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise Unauthorized("malformed Basic credentials") from None
        username, sep, secret = decoded.partition(":")
        if not sep or not username or not secret:
            raise Unauthorized("malformed Basic credentials")
        credential = self._sites.credential(username, nowait=nowait)
        if credential is None:
            if not settle:
                return None
            # Spend the same time as a real check (one scrypt) so a timing probe cannot enumerate site names.
            verify_secret(secret, dummy_hash())
            raise Unauthorized("invalid credentials")
        key = (credential.site_id, credential.secret_hash, hashlib.sha256(secret.encode()).hexdigest())
        with self._lock:
            known = key in self._verified
        if not known:
            if not settle:
                return None
            if not verify_secret(secret, credential.secret_hash):
                raise Unauthorized("invalid credentials")
            with self._lock:
                if len(self._verified) > VERIFIED_CACHE:
                    self._verified.clear()
                self._verified.add(key)
        return site_principal(credential.site_id, credential.name)

    def _bearer(self, value: str, *, nowait: bool) -> Principal:
        if len(value) > MAX_SECRET_LENGTH:
            raise Unauthorized("invalid token")
        if value.startswith(ACCESS_PREFIX) and self._oauth is not None:
            record = self._oauth.token(digest(value), nowait=nowait)
            if record is None:
                raise Unauthorized("invalid or revoked token")
            principal = access_principal(record, resource=self._resource, now=self._clock())
            if self._usage is not None:
                self._usage.grant_used(record.grant.id)
            return principal
        if not value.startswith(TOKEN_PREFIX):
            raise Unauthorized("invalid token")
        token = self._sites.token(token_hash(value), nowait=nowait)
        if token is None:
            raise Unauthorized("invalid or revoked token")
        if token.revoked_at:
            raise StaleCredential("invalid or revoked token")  # same words: a probe learns nothing more
        if self._usage is not None:
            self._usage.token_used(token.id)
        return token_principal(token)

    # --- sessions signed in with a credential (the console) -----------------------------------------

    def binding(self, header: str) -> tuple[str, str] | None:
        """For a credential `authenticate` has just accepted: (kind, what a session signed in with it is bound
        to), read again from the store without verifying anything: a digest of the site's stored secret hash
        (only while this exact secret is known to match it) or the token's hash. None if it no longer holds.
        Blocking."""
        scheme, _, value = header.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer":
            token = self._sites.token(token_hash(value))
            return ("bearer", token_hash(value)) if token is not None and not token.revoked_at else None
        try:
            username, _, secret = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        credential = self._sites.credential(username)
        if credential is None:
            return None
        key = (credential.site_id, credential.secret_hash, hashlib.sha256(secret.encode()).hexdigest())
        with self._lock:
            known = key in self._verified
        return ("basic", secret_digest(credential.secret_hash)) if known else None

    def resume(self, kind: str, site: str, site_id: int, bound_to: str) -> Principal | None:
        """The principal of a session bound to a credential, if that credential still stands as it was: the
        site's secret not rotated (nor the site deleted), the token not revoked. Blocking."""
        if kind == "basic":
            credential = self._sites.credential(site)
            if (
                credential is None
                or credential.site_id != site_id
                or not hmac.compare_digest(secret_digest(credential.secret_hash), bound_to)
            ):
                return None
            return site_principal(credential.site_id, credential.name)
        if kind == "bearer":
            token = self._sites.token(bound_to)
            if token is None or token.revoked_at or token.site_id != site_id:
                return None
            if self._usage is not None:
                self._usage.token_used(token.id)  # a console session signed in with it uses it too
            return token_principal(token)
        return None


def secret_digest(secret_hash: str) -> str:
    """What a Basic session is bound to: changes whenever the stored secret does (a rotation)."""
    return hashlib.sha256(f"console-session\0{secret_hash}".encode()).hexdigest()


def token_principal(token: TokenRecord) -> Principal:
    return Principal(
        site_id=token.site_id,
        site=token.site,
        kind="bearer",
        scopes=frozenset(token.scopes),
        teams=_bound(token.teams),
        projects=_bound(token.projects),
        buckets=_bound(token.buckets),
    )


def _bound(values: tuple[str, ...] | None) -> frozenset[str] | None:
    return frozenset(values) if values else None
