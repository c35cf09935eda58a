"""Sites, their tokens and settings, and console sessions."""

from __future__ import annotations

from typing import Protocol

from memory_server.storage.records import SessionRecord, SiteCredential, SiteRecord, TokenRecord


class SiteStore(Protocol):
    def create_site(self, name: str, secret_hash: str) -> int:
        """The new site's id; InvalidParameters if the name is taken."""
        ...

    def set_secret(self, name: str, secret_hash: str) -> bool:
        """Replace a site's secret hash; False if there is no such site."""
        ...

    def site_id(self, name: str) -> int | None: ...

    def sites(self) -> list[SiteRecord]: ...

    def set_log_indexing(self, name: str, on: bool) -> bool:
        """Index the site's log items, or stop (its conversations that chose for themselves keep their
        choice); False if there is no such site. Turned on, the items already logged are indexed too."""
        ...

    def set_log_retention(self, name: str, days: int | None) -> bool:
        """Keep the site's conversation logs `days` after their last activity (None: until deleted); False
        if there is no such site."""
        ...

    def delete_site(self, name: str) -> bool:
        """Delete a site with its tokens and every memory and log of it; False if there is no such site."""
        ...

    def credential(self, name: str, *, nowait: bool = False) -> SiteCredential | None:
        """The site's secret hash for sign-in. nowait: answer only if it needs no waiting, else WouldBlock."""
        ...

    def add_token(self, token: TokenRecord, token_hash: str) -> None: ...

    def tokens(self, site_id: int) -> list[TokenRecord]: ...

    def revoke_token(self, token_id: str) -> bool:
        """False if there is no such active token."""
        ...

    def mark_token_used(self, token_id: str, at: str) -> None:
        """Record a use of the token: last_used_at becomes the later of the stored one and `at` (RFC3339)."""
        ...

    def token(self, token_hash: str, *, nowait: bool = False) -> TokenRecord | None:
        """The token with this hash, for sign-in (revoked ones included: the caller refuses them)."""
        ...

    # Console sessions: kept in the authority so every replica on it honours them; ended by deletion.

    def add_session(self, session: SessionRecord) -> None: ...

    def session(self, id_hash: str) -> SessionRecord | None:
        """The session with this id hash, expired or not (the caller decides)."""
        ...

    def touch_session(self, id_hash: str, seen_at: float) -> None:
        """Record activity: seen_at becomes the later of the stored one and this (unix seconds)."""
        ...

    def delete_session(self, id_hash: str) -> None:
        """End a session (nothing happens if there is none)."""
        ...

    def prune_sessions(self, *, seen_before: float, created_before: float) -> int:
        """Delete sessions idle since before `seen_before` or created before `created_before`; how many."""
        ...
