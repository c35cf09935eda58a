"""OAuth grants as credentials: the secrets the authorization server hands out, the Principal an access
token stands for, and the administration of grants (`token list`, `token revoke`).

Every secret is 256 random bits with a prefix that says what it is (so the authenticator knows an OAuth
access token from a `token create` one, and secret scanners recognise them), and is stored only as its
SHA-256 digest: a slow hash buys nothing against a 256-bit search, as for Bearer tokens.
"""

from __future__ import annotations

import hashlib
import secrets
from urllib.parse import urlsplit

from memory_server.auth.principal import Principal
from memory_server.errors import NotFound, Unauthorized
from memory_server.storage.oauth_records import ACCESS, OAuthGrant, OAuthTokenRecord
from memory_server.storage.protocols import OAuthStore

ACCESS_PREFIX = "msa_"  # sent as `Authorization: Bearer msa_…`
REFRESH_PREFIX = "msr_"
CODE_PREFIX = "msc_"
CLIENT_SECRET_PREFIX = "mcs_"
GRANT_PREFIX = "oa_"  # grant ids, as `token list` shows them and `token revoke` takes them
MAX_SECRET_LENGTH = 200  # anything longer is not one of ours: refused before it is hashed or looked up


class StaleCredential(Unauthorized):
    """A credential this server did issue, refused because it no longer holds (revoked, expired, issued for
    another resource): whoever presents it knows a real secret, so it counts as no failed sign-in."""


def new_secret(prefix: str = "") -> str:
    return f"{prefix}{secrets.token_urlsafe(32)}"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_grant_id() -> str:
    return f"{GRANT_PREFIX}{secrets.token_hex(6)}"


def canonical_resource(uri: str) -> str:
    """A resource URI compared as RFC 8707 clients spell it: scheme and host case-free, no trailing slash."""
    parts = urlsplit(uri.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def access_principal(record: OAuthTokenRecord, *, resource: str, now: float) -> Principal:
    """The Principal of an access token: its grant's site, scopes and bounds, exactly as a Bearer token
    with them. Refused: another kind of token, a revoked grant, an expired token, another audience."""
    grant = record.grant
    if record.kind != ACCESS:
        raise Unauthorized("invalid token (a refresh token goes to the token endpoint, not here)")
    if grant.revoked_at:
        raise StaleCredential("this token's grant was revoked; sign in again")
    if record.expires_at <= now:
        raise StaleCredential("the access token expired; refresh it or sign in again")
    if canonical_resource(grant.resource) != canonical_resource(resource):
        raise StaleCredential(f"this token was issued for another resource, not {resource}")
    bounds = grant.bounds
    return Principal(
        site_id=grant.site_id,
        site=grant.site,
        kind="oauth",
        scopes=frozenset(record.scopes) & frozenset(bounds.scopes),
        teams=_bound(bounds.teams),
        projects=_bound(bounds.projects),
        buckets=_bound(bounds.buckets),
    )


def _bound(values: tuple[str, ...] | None) -> frozenset[str] | None:
    return frozenset(values) if values else None


def is_grant_id(value: str) -> bool:
    return value.startswith(GRANT_PREFIX)


def list_grants(oauth: OAuthStore, site_id: int) -> list[OAuthGrant]:
    return oauth.grants(site_id)


def revoke_grant(oauth: OAuthStore, grant_id: str) -> None:
    if not oauth.revoke_grant(grant_id):
        raise NotFound(f"no active OAuth grant with id {grant_id!r}")
