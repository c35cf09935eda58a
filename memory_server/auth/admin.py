"""Site and token administration (the CLI, the bootstrap credential, the stdio site)."""

from __future__ import annotations

from collections.abc import Sequence

from memory_server.auth import oauth as grants
from memory_server.auth.principal import SCOPES
from memory_server.auth.secrets import check_site_name, hash_secret, new_secret, new_token, token_hash
from memory_server.errors import InvalidParameters, NotFound
from memory_server.storage.oauth_records import OAuthGrant
from memory_server.storage.protocols import OAuthStore, SiteStore
from memory_server.storage.records import SiteRecord, TokenRecord
from memory_server.timestamps import now_rfc3339


def create_site(sites: SiteStore, name: str, *, secret: str | None = None) -> str:
    """Create a site; return its Basic secret (shown once). `secret`: a pre-set one (the bootstrap)."""
    check_site_name(name)
    secret = secret or new_secret()
    sites.create_site(name, hash_secret(secret))
    return secret


def ensure_site(sites: SiteStore, name: str) -> tuple[int, str | None]:
    """(site id, new secret or None if the site already existed, or was created meanwhile elsewhere)."""
    existing = sites.site_id(name)
    if existing is not None:
        return existing, None
    try:
        secret = create_site(sites, name)
    except InvalidParameters:
        if sites.site_id(name) is None:
            raise
        return require_site(sites, name), None  # another process (a second replica) created it first
    return require_site(sites, name), secret


def rotate_site(sites: SiteStore, name: str) -> str:
    secret = new_secret()
    if not sites.set_secret(name, hash_secret(secret)):
        raise NotFound(f"no site named {name!r}")
    return secret


def delete_site(sites: SiteStore, name: str) -> None:
    if not sites.delete_site(name):
        raise NotFound(f"no site named {name!r}")


def list_sites(sites: SiteStore) -> list[SiteRecord]:
    return sites.sites()


def show_site(sites: SiteStore, name: str) -> SiteRecord:
    for site in sites.sites():
        if site.name == name:
            return site
    raise NotFound(f"no site named {name!r}")


MAX_RETENTION_DAYS = 36_500


def set_log_retention(sites: SiteStore, name: str, days: int | None) -> None:
    """Keep the site's conversation logs `days` days after their last activity; None: until deleted."""
    if days is not None and not 1 <= days <= MAX_RETENTION_DAYS:
        raise InvalidParameters(f"the log retention must be 1-{MAX_RETENTION_DAYS} days (got {days})")
    if not sites.set_log_retention(name, days):
        raise NotFound(f"no site named {name!r}")


def require_site(sites: SiteStore, name: str) -> int:
    site_id = sites.site_id(name)
    if site_id is None:
        raise NotFound(f"no site named {name!r}")
    return site_id


MAX_LABEL = 100  # characters of a token's label


def check_label(label: str | None) -> str | None:
    """A token's label: what it is for, printable text of 1-MAX_LABEL characters (blank: none)."""
    label = (label or "").strip()
    if not label:
        return None
    if len(label) > MAX_LABEL:
        raise InvalidParameters(f"label: at most {MAX_LABEL} characters (got {len(label)})")
    if not label.isprintable():
        raise InvalidParameters("label: printable text only (no control characters or line breaks)")
    return label


def create_token(
    sites: SiteStore,
    site: str,
    *,
    scopes: Sequence[str],
    teams: Sequence[str] | None = None,
    projects: Sequence[str] | None = None,
    buckets: Sequence[str] | None = None,
    label: str | None = None,
) -> tuple[str, str]:
    """Mint a Bearer token; return (id, token). The token is shown once and stored hashed; `label` says what
    it is for (shown beside it wherever tokens are listed)."""
    label = check_label(label)
    if not scopes:
        raise InvalidParameters("a token needs at least one scope")
    for scope in scopes:
        if scope not in SCOPES:
            raise InvalidParameters(f"unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    site_id = require_site(sites, site)
    token_id, token = new_token()
    sites.add_token(
        TokenRecord(
            id=token_id,
            site_id=site_id,
            site=site,
            scopes=tuple(sorted(set(scopes))),
            teams=_bound(teams),
            projects=_bound(projects),
            buckets=_bound(buckets),
            created_at=now_rfc3339(),
            revoked_at=None,
            label=label,
        ),
        token_hash(token),
    )
    return token_id, token


def _bound(values: Sequence[str] | None) -> tuple[str, ...] | None:
    return tuple(sorted(set(values))) if values else None


def list_tokens(sites: SiteStore, site: str) -> list[TokenRecord]:
    return sites.tokens(require_site(sites, site))


def revoke_token(sites: SiteStore, token_id: str) -> None:
    if not sites.revoke_token(token_id):
        raise NotFound(f"no active token with id {token_id!r}")


def revoke_site_token(sites: SiteStore, site: str, token_id: str) -> None:
    """Revoke one of `site`'s own tokens: a token id of another site is not found (the console, where the
    caller is a site and not the machine's administrator)."""
    if not any(token.id == token_id and not token.revoked_at for token in list_tokens(sites, site)):
        raise NotFound(f"no active token with id {token_id!r}")
    revoke_token(sites, token_id)


def list_site_grants(sites: SiteStore, oauth: OAuthStore, site: str) -> list[OAuthGrant]:
    """The OAuth grants of `site`'s connectors, oldest first, revoked ones included."""
    return grants.list_grants(oauth, require_site(sites, site))


def revoke_site_grant(sites: SiteStore, oauth: OAuthStore, site: str, grant_id: str) -> None:
    """Revoke one of `site`'s own OAuth grants: a grant of another site is not found (the console, as
    `revoke_site_token`)."""
    if not any(grant.id == grant_id and not grant.revoked_at for grant in list_site_grants(sites, oauth, site)):
        raise NotFound(f"no active OAuth grant with id {grant_id!r}")
    grants.revoke_grant(oauth, grant_id)
