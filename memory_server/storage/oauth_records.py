"""What the OAuth store takes and gives back: plain typed records, the same for every storage backend.

Every secret (a client secret, an authorization request's id and its CSRF token, a code, a token) reaches
the store only as its SHA-256 hex digest: the store never holds anything a client could present. Times
are unix seconds (floats) given by the caller, so every replica judges expiry by the same rule and tests
can use a clock of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

ACCESS, REFRESH = "access", "refresh"

# Used codes are kept this long after they expire, so that presenting one again still revokes its grant.
CODE_REPLAY_WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True)
class Bounds:
    """The scopes and bounds of a grant: what `token create` takes (None: unbounded)."""

    scopes: tuple[str, ...]
    teams: tuple[str, ...] | None = None
    projects: tuple[str, ...] | None = None
    buckets: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Source:
    """Where an anonymous request came from, as the caps share it out: the client's address (an IPv6 one
    by its /64) and its network (an IPv4 /24, an IPv6 /48). Empty: not known (stored before it was kept)."""

    address: str = ""
    network: str = ""


@dataclass(frozen=True, slots=True)
class Quota:
    """How many rows of one kind callers without a credential may make the store hold: in all, from one
    network, from one address. Beyond a share, the new row takes the place of an older one (see the store)."""

    total: int
    per_network: int
    per_address: int


@dataclass(frozen=True, slots=True)
class Admission:
    """What adding a row under a Quota did: `added`, after removing `evicted` older rows to make room; or
    not added (nothing removed), and `retry_at` (unix seconds) is when room is sure to have been made."""

    added: bool
    evicted: int = 0
    retry_at: float | None = None


@dataclass(frozen=True, slots=True)
class OAuthClient:
    """A dynamically registered client (RFC 7591)."""

    client_id: str
    secret_hash: str | None  # None: a public client (token_endpoint_auth_method "none")
    client_name: str | None
    metadata: str  # JSON: the registered metadata, without the secret
    created_at: float
    granted_at: float | None = None  # when a code of it was last exchanged; None: it never signed in
    source: Source = Source()  # who registered it


@dataclass(frozen=True, slots=True)
class PendingAuthorization:
    """An authorization request waiting for the site owner on the consent page."""

    client_id: str
    params: str  # JSON: the validated request (redirect URI, PKCE challenge, state, scopes, resource)
    expires_at: float
    csrf_hash: str | None = None  # the consent form's CSRF token, once the page was shown
    source: Source = Source()  # who asked


@dataclass(frozen=True, slots=True)
class OAuthCode:
    """An authorization code: what the owner granted, waiting to be exchanged once."""

    client_id: str
    site_id: int
    bounds: Bounds
    resource: str
    code_challenge: str  # PKCE S256
    redirect_uri: str
    redirect_uri_explicit: bool  # the request named it (then the token request must repeat it)
    expires_at: float
    used: bool = False
    grant_id: str | None = None  # the grant it was exchanged for (revoked if the code is presented again)


@dataclass(frozen=True, slots=True)
class NewGrant:
    id: str
    site_id: int
    client_id: str
    bounds: Bounds
    resource: str
    created_at: str  # RFC 3339
    expires_at: float  # when its current refresh token expires (moved on by every refresh)


@dataclass(frozen=True, slots=True)
class OAuthGrant:
    """What a site's owner granted a client: listed by `token list`, ended by `token revoke`."""

    id: str
    site_id: int
    site: str
    client_id: str
    client_name: str | None
    bounds: Bounds
    resource: str
    created_at: str
    expires_at: float
    revoked_at: str | None
    last_used_at: str | None = None  # RFC3339, to the minute (memory_server/auth/usage.py); None: never used


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """An access or refresh token of a grant, as stored."""

    token_hash: str
    kind: str  # ACCESS or REFRESH
    scopes: tuple[str, ...]  # an access token may carry fewer than its grant (a narrowed refresh)
    expires_at: float


@dataclass(frozen=True, slots=True)
class OAuthTokenRecord:
    """A stored token with its grant (revoked grants included: the caller refuses them)."""

    grant: OAuthGrant
    kind: str
    scopes: tuple[str, ...]
    expires_at: float
    rotated: bool  # a refresh token that was exchanged already: presenting it again is a replay
