"""The authorization server of this server's sites, as the MCP SDK's `OAuthAuthorizationServerProvider`.

The SDK's handlers (see `routes`) parse and check every request: PKCE S256, the redirect URI and the
client a code was issued to, the expiry of codes and refresh tokens, RFC 6749 error responses. They call
this provider for what is ours: where clients, requests, codes and grants live (the OAuthStore, digests
only), the consent step in between (`begin_consent`, `approve`, `deny`, used by the consent page), codes
used once, refresh tokens rotated with replay detection, and revocation of whole grants.

Presenting a used code, or a refresh token that was rotated away, means a copy of it is in other hands:
the grant it belongs to is revoked (RFC 6749 §10.5, OAuth 2.1 §4.3.1), so whoever holds its tokens loses
them, the legitimate client signs in again.

Registration and authorization need no credential, so what they store is bounded (`Capacity`): a
registration's size (see `clients`), a `state` of at most MAX_STATE characters, registrations that never
signed in (each forgotten after `unused_client_s`) and requests waiting on the consent page (each forgotten
after `request_s`), each kind capped in all, per network and per address (`sources`). A new one past a share
takes the place of the oldest of whoever holds the most (`memory_server.storage.oauth_admission`), so a flood
from some addresses costs others nothing; a registration is refused (503, Retry-After) only when every
candidate is in the middle of a sign-in.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlencode

import anyio
from fastmcp.server.auth.redirect_validation import build_client_redirect
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl, ConfigDict, ValidationError

from memory_server.api.oauth.clients import RegisteredClient, check_registration
from memory_server.api.oauth.sources import current_source
from memory_server.auth.oauth import (
    ACCESS_PREFIX,
    CODE_PREFIX,
    MAX_SECRET_LENGTH,
    REFRESH_PREFIX,
    canonical_resource,
    digest,
    new_grant_id,
    new_secret,
)
from memory_server.auth.principal import SCOPES
from memory_server.errors import InvalidParameters, Unavailable
from memory_server.storage.oauth_records import (
    ACCESS,
    REFRESH,
    Admission,
    Bounds,
    IssuedToken,
    NewGrant,
    OAuthClient,
    OAuthCode,
    PendingAuthorization,
    Quota,
)
from memory_server.storage.protocols import OAuthStore
from memory_server.timestamps import now_rfc3339

log = logging.getLogger("memory_server.oauth")

T = TypeVar("T")
CONSENT_PATH = "/oauth/consent"
S256_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")  # BASE64URL(SHA-256(verifier)), unpadded (RFC 7636 §4.2)
MAX_STATE = 1024  # clients send 20-100 characters; the whole request is stored until the owner answers


@dataclass(frozen=True, slots=True)
class Lifetimes:
    access_s: int = 3600
    refresh_s: int = 30 * 86400
    code_s: int = 60
    request_s: int = 600  # how long the consent page waits for the owner to sign in
    unused_client_s: int = 86400  # how long a registration that never signed in is kept


@dataclass(frozen=True, slots=True)
class Capacity:
    """What callers without a credential can make the store hold, at most (the defaults of settings.py)."""

    unused_clients: Quota = Quota(total=10_000, per_network=1000, per_address=100)
    pending: Quota = Quota(total=1000, per_network=100, per_address=10)


@dataclass(frozen=True, slots=True)
class ConsentView:
    """What the consent page shows of a pending request."""

    client_id: str
    client_name: str
    redirect_uri: str
    requested_scopes: tuple[str, ...]
    csrf_hash: str | None


class IssuedCode(AuthorizationCode):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    stored: OAuthCode


class GrantRefreshToken(RefreshToken):
    grant_id: str


class GrantAccessToken(AccessToken):
    grant_id: str


class SiteAuthorizationServer(OAuthAuthorizationServerProvider[IssuedCode, GrantRefreshToken, GrantAccessToken]):
    def __init__(
        self,
        store: OAuthStore,
        *,
        issuer: str,
        resource: str,
        lifetimes: Lifetimes | None = None,
        capacity: Capacity | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self.issuer = issuer  # exactly as the metadata's `issuer` (RFC 9207 compares strings)
        self.resource = resource
        self.lifetimes = lifetimes or Lifetimes()
        self.capacity = capacity or Capacity()
        self._clock = clock

    # --- clients ----------------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> RegisteredClient | None:
        stored = await _run(self._store.client, client_id)
        if stored is None or (stored.granted_at is None and stored.created_at < self._unused_since()):
            return None  # never signed in, and expired (removed at the next registration)
        try:
            return RegisteredClient.model_validate_json(stored.metadata).model_copy(
                update={"secret_hash": stored.secret_hash}
            )
        except ValidationError:  # written by this code, so only a damaged row gets here
            log.warning("the stored registration of an OAuth client does not parse; treating it as unknown")
            return None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        metadata = check_registration(client_info)
        secret = client_info.client_secret
        try:
            RegisteredClient.model_validate_json(metadata)
        except ValidationError as exc:
            raise RegistrationError("invalid_client_metadata", str(exc.errors()[0]["msg"])) from None
        source = current_source()
        client = OAuthClient(
            client_id=client_info.client_id,
            secret_hash=digest(secret) if secret else None,
            client_name=client_info.client_name,
            metadata=metadata,
            created_at=self._clock(),
            source=source,
        )

        def add() -> Admission:
            self._store.forget_unused_clients(registered_before=self._unused_since())
            return self._store.add_client(client, quota=self.capacity.unused_clients)

        admission = await _run(add)
        if admission.evicted:
            log.debug(
                "a client registration from %s took the place of %d unused ones", source.address, admission.evicted
            )
        if not admission.added:
            retry_after = _seconds_until(admission.retry_at, client.created_at)
            log.warning(
                "a client registration from %s was refused: every registration that has not signed in and may "
                "make room is in the middle of a sign-in (retry in %d s)",
                source.address,
                retry_after,
            )
            refusal = Unavailable(
                f"too many registered clients are in the middle of a sign-in; retry in {retry_after} s"
            )
            refusal.retry_after = retry_after
            raise refusal

    def _unused_since(self) -> float:
        """Registrations older than this that never signed in are expired."""
        return self._clock() - self.lifetimes.unused_client_s

    # --- authorization: the request waits for the owner on the consent page -----------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and not self._ours(params.resource):
            raise AuthorizeError("invalid_target", f"this server issues tokens for {self.resource} only")
        if not S256_CHALLENGE.fullmatch(params.code_challenge):
            raise AuthorizeError("invalid_request", "code_challenge must be S256: 43 base64url characters")
        if params.state is not None and len(params.state) > MAX_STATE:
            raise AuthorizeError("invalid_request", f"state is longer than {MAX_STATE} characters")
        request_id = new_secret()
        now, source = self._clock(), current_source()
        pending = PendingAuthorization(
            client_id=client.client_id,
            params=params.model_dump_json(),
            expires_at=now + self.lifetimes.request_s,
            source=source,
        )
        quota = self.capacity.pending
        admission = await _run(lambda: self._store.add_request(digest(request_id), pending, now=now, quota=quota))
        if admission.evicted:
            log.debug(
                "an authorization request from %s took the place of %d older ones", source.address, admission.evicted
            )
        if not admission.added:  # the store makes room for every request; kept should that ever change
            raise AuthorizeError("temporarily_unavailable", "too many sign-ins are waiting; retry in a minute")
        return f"{self.issuer}{CONSENT_PATH}?{urlencode({'request': request_id})}"

    async def consent_view(self, request_id: str) -> ConsentView | None:
        """The pending request behind a consent page, or None if it expired, was used or never existed."""
        found = await self._pending(request_id, take=False)
        if found is None:
            return None
        pending, params = found
        client = await self.get_client(pending.client_id)
        if client is None:
            return None
        return ConsentView(
            client_id=client.client_id,
            client_name=client.client_name or client.client_id,
            redirect_uri=str(params.redirect_uri),
            requested_scopes=tuple(params.scopes or SCOPES),
            csrf_hash=pending.csrf_hash,
        )

    async def begin_consent(self, request_id: str) -> tuple[ConsentView, str] | None:
        """The view and a new CSRF token for the form (its digest is stored with the request)."""
        view = await self.consent_view(request_id)
        if view is None:
            return None
        csrf = new_secret()
        if not await _run(lambda: self._store.set_request_csrf(digest(request_id), digest(csrf), now=self._clock())):
            return None
        return view, csrf

    async def approve(self, request_id: str, site_id: int, bounds: Bounds) -> str | None:
        """Issue a code for what the owner granted; the URL to send the browser to (None: request gone)."""
        found = await self._pending(request_id, take=True)
        if found is None:
            return None
        pending, params = found
        allowed = set(params.scopes or SCOPES)
        if not bounds.scopes or not set(bounds.scopes) <= allowed:
            raise InvalidParameters("the granted scopes must be some of the requested ones")
        code = new_secret(CODE_PREFIX)
        now = self._clock()
        stored = OAuthCode(
            client_id=pending.client_id,
            site_id=site_id,
            bounds=bounds,
            resource=self.resource,
            code_challenge=params.code_challenge,
            redirect_uri=str(params.redirect_uri),
            redirect_uri_explicit=params.redirect_uri_provided_explicitly,
            expires_at=now + self.lifetimes.code_s,
        )
        if not await _run(lambda: self._store.add_code(digest(code), stored, now=now)):
            return None  # the site was deleted meanwhile
        return self._redirect(params, {"code": code})

    async def deny(self, request_id: str) -> str | None:
        found = await self._pending(request_id, take=True)
        if found is None:
            return None
        return self._redirect(found[1], {"error": "access_denied", "error_description": "the site owner denied access"})

    async def _pending(self, request_id: str, *, take: bool) -> tuple[PendingAuthorization, AuthorizationParams] | None:
        if not request_id or len(request_id) > MAX_SECRET_LENGTH:
            return None
        key, now = digest(request_id), self._clock()
        pending = await _run(lambda: (self._store.take_request if take else self._store.request)(key, now=now))
        if pending is None:
            return None
        return pending, AuthorizationParams.model_validate_json(pending.params)

    def _redirect(self, params: AuthorizationParams, values: dict[str, str]) -> str:
        if params.state is not None:
            values["state"] = params.state  # passed through unchanged (the client's CSRF check)
        return build_client_redirect(str(params.redirect_uri), values, iss=self.issuer)

    # --- the token endpoint -----------------------------------------------------------------------

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> IssuedCode | None:
        if not authorization_code.startswith(CODE_PREFIX) or len(authorization_code) > MAX_SECRET_LENGTH:
            return None
        stored = await _run(self._store.code, digest(authorization_code))
        if stored is None or stored.client_id != client.client_id or not self._ours(stored.resource):
            return None
        if stored.used:
            await self._replayed(stored.grant_id, "an authorization code was presented again")
            return None
        return IssuedCode(
            code=authorization_code,
            scopes=list(stored.bounds.scopes),
            expires_at=stored.expires_at,
            client_id=stored.client_id,
            code_challenge=stored.code_challenge,
            redirect_uri=AnyUrl(stored.redirect_uri),
            redirect_uri_provided_explicitly=stored.redirect_uri_explicit,
            resource=stored.resource,
            stored=stored,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: IssuedCode
    ) -> OAuthToken:
        stored, now = authorization_code.stored, self._clock()
        grant = NewGrant(
            id=new_grant_id(),
            site_id=stored.site_id,
            client_id=stored.client_id,
            bounds=stored.bounds,
            resource=stored.resource,
            created_at=now_rfc3339(),
            expires_at=now + self.lifetimes.refresh_s,
        )
        answer, tokens = self._new_tokens(stored.bounds.scopes, stored.bounds.scopes, now)
        key = digest(authorization_code.code)
        if not await _run(lambda: self._store.redeem_code(key, grant, tokens, now=now)):
            again = await _run(self._store.code, key)  # a concurrent exchange won: a replay all the same
            if again is not None and again.used:
                await self._replayed(again.grant_id, "an authorization code was exchanged twice at once")
            raise TokenError("invalid_grant", "the authorization code was already used or has expired")
        return answer

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> GrantRefreshToken | None:
        if not refresh_token.startswith(REFRESH_PREFIX) or len(refresh_token) > MAX_SECRET_LENGTH:
            return None
        record = await _run(self._store.token, digest(refresh_token))
        if record is None or record.kind != REFRESH or record.grant.client_id != client.client_id:
            return None
        if record.rotated:
            await self._replayed(record.grant.id, "a refresh token was used again after it was rotated")
            return None
        if record.grant.revoked_at or record.expires_at <= self._clock() or not self._ours(record.grant.resource):
            return None  # a grant for another resource (MEMORY_PUBLIC_URL changed) is not refreshed here
        return GrantRefreshToken(
            token=refresh_token,
            client_id=record.grant.client_id,
            scopes=list(record.scopes),
            expires_at=int(record.expires_at),
            resource=record.grant.resource,
            grant_id=record.grant.id,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: GrantRefreshToken, scopes: list[str]
    ) -> OAuthToken:
        now = self._clock()
        answer, tokens = self._new_tokens(tuple(scopes), tuple(refresh_token.scopes), now)
        key, until = digest(refresh_token.token), now + self.lifetimes.refresh_s
        if not await _run(lambda: self._store.rotate_refresh(key, tokens, now=now, grant_expires_at=until)):
            await self._replayed(refresh_token.grant_id, "a refresh token was used twice at once")
            raise TokenError("invalid_grant", "the refresh token was already used; sign in again")
        return answer

    def _new_tokens(
        self, scopes: tuple[str, ...], refresh_scopes: tuple[str, ...], now: float
    ) -> tuple[OAuthToken, list[IssuedToken]]:
        access, refresh = new_secret(ACCESS_PREFIX), new_secret(REFRESH_PREFIX)
        life = self.lifetimes
        tokens = [
            IssuedToken(digest(access), ACCESS, scopes, now + life.access_s),
            IssuedToken(digest(refresh), REFRESH, refresh_scopes, now + life.refresh_s),
        ]
        answer = OAuthToken(
            access_token=access, expires_in=life.access_s, scope=" ".join(scopes), refresh_token=refresh
        )
        return answer, tokens

    def _ours(self, resource: str) -> bool:
        return canonical_resource(resource) == canonical_resource(self.resource)

    async def _replayed(self, grant_id: str | None, what: str) -> None:
        if grant_id is not None and await _run(self._store.revoke_grant, grant_id):
            log.warning("%s: OAuth grant %s is revoked", what, grant_id)

    # --- access tokens and revocation -------------------------------------------------------------

    async def load_access_token(self, token: str) -> GrantAccessToken | None:
        """For revocation: an access token of an unrevoked grant, expired or not (`expires_at` says which).
        Requests to /mcp and /v1 are checked by the server's Authenticator instead."""
        if not token.startswith(ACCESS_PREFIX) or len(token) > MAX_SECRET_LENGTH:
            return None
        record = await _run(self._store.token, digest(token))
        if record is None or record.kind != ACCESS or record.grant.revoked_at:
            return None
        return GrantAccessToken(
            token=token,
            client_id=record.grant.client_id,
            scopes=list(record.scopes),
            expires_at=int(record.expires_at),
            resource=record.grant.resource,
            grant_id=record.grant.id,
        )

    async def revoke_token(self, token: GrantAccessToken | GrantRefreshToken) -> None:
        """RFC 7009: either token of a grant ends the whole grant (its other tokens with it)."""
        await _run(self._store.revoke_grant, token.grant_id)


def _seconds_until(at: float | None, now: float) -> int:
    """Retry-After for room that is sure at `at` (unix seconds): at least 1."""
    return max(1, math.ceil(at - now)) if at is not None else 1


async def _run(work: Callable[..., T], *args: object) -> T:
    """The stores block (SQLite, PostgreSQL): call them from a worker thread, never on the event loop."""
    return await anyio.to_thread.run_sync(lambda: work(*args))
