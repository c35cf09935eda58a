"""The OAuth authorization server's state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memory_server.storage.oauth_records import (
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


class OAuthStore(Protocol):
    """The authorization server's state: clients, pending requests, codes, grants and their tokens.

    Keys are SHA-256 hex digests of the secrets (see `oauth_records`); `now` is the caller's clock. Every
    read goes to the authority (no caching), so a revocation is seen by every replica on its next request.
    Deleting a site deletes its codes, grants and tokens (not the clients: they belong to no site)."""

    def add_client(self, client: OAuthClient, *, quota: Quota | None = None) -> Admission:
        """Store a registered client. Under `quota` (of the clients that never signed in, granted_at None),
        making room as `oauth_admission` says: taking the oldest unused client of the largest holder among
        those with no unexpired request or code; refused, storing and taking nothing, if none may be taken."""
        ...

    def client(self, client_id: str) -> OAuthClient | None: ...

    def forget_unused_clients(self, *, registered_before: float) -> int:
        """Delete the clients registered before `registered_before` that never signed in; how many."""
        ...

    def add_request(
        self, request_hash: str, request: PendingAuthorization, *, now: float, quota: Quota | None = None
    ) -> Admission:
        """Store a pending authorization request (and forget the expired ones). Under `quota` (of the unexpired
        ones), making room as `oauth_admission` says: taking the oldest (one whose page was never opened
        first) of the largest holder; never refused."""
        ...

    def request(self, request_hash: str, *, now: float) -> PendingAuthorization | None:
        """The pending request, or None if there is none or it expired."""
        ...

    def set_request_csrf(self, request_hash: str, csrf_hash: str, *, now: float) -> bool:
        """Replace the request's CSRF token digest; False if the request is gone or expired."""
        ...

    def take_request(self, request_hash: str, *, now: float) -> PendingAuthorization | None:
        """Delete the request and return it: of concurrent callers exactly one gets it. None if it was gone
        or expired."""
        ...

    def add_code(self, code_hash: str, code: OAuthCode, *, now: float) -> bool:
        """Store an unused code (and forget codes expired long enough that a replay no longer matters);
        False, storing nothing, if its site no longer exists."""
        ...

    def code(self, code_hash: str) -> OAuthCode | None:
        """The code, used or not, expired or not (the caller decides)."""
        ...

    def redeem_code(self, code_hash: str, grant: NewGrant, tokens: Sequence[IssuedToken], *, now: float) -> bool:
        """Atomically: if the code exists, is unused, has not expired and its site exists, mark it used by
        `grant`, store the grant (last used `now`) and its tokens, mark its client as signed in (granted_at
        `now`), and return True. Otherwise store nothing: False."""
        ...

    def token(self, token_hash: str, *, nowait: bool = False) -> OAuthTokenRecord | None:
        """An access or refresh token with its grant, for sign-in and refresh. nowait: as `SiteStore.token`."""
        ...

    def rotate_refresh(
        self, token_hash: str, tokens: Sequence[IssuedToken], *, now: float, grant_expires_at: float
    ) -> bool:
        """Atomically: if this refresh token exists, was never rotated, has not expired and its grant is
        not revoked, mark it rotated, store `tokens` for the same grant, move the grant's expiry to
        `grant_expires_at` and its last use to `now` (and forget the grant's expired tokens); True.
        Otherwise store nothing: False."""
        ...

    def grants(self, site_id: int) -> list[OAuthGrant]:
        """The site's grants, oldest first, revoked ones included."""
        ...

    def revoke_grant(self, grant_id: str) -> bool:
        """Revoke a grant (every token of it stops working); False if there is no such unrevoked grant."""
        ...

    def mark_grant_used(self, grant_id: str, at: str) -> None:
        """Record a use of one of the grant's access tokens: last_used_at becomes the later of the stored one
        and `at` (RFC3339)."""
        ...
