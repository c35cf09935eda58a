"""`memory-server site ...` and `memory-server token ...`: sites, their Basic credentials, Bearer tokens and the
OAuth grants of connectors (listed with the tokens, revoked by the same command)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from server.admin.common import DataDir, fail, load_settings, site_app, token_app
from server.auth import admin, oauth
from server.errors import AppError
from server.storage.factory import open_storage
from server.storage.oauth_records import OAuthGrant
from server.storage.protocols import SiteStore, Storage
from server.storage.records import TokenRecord

T = TypeVar("T")


def with_sites(data_dir: object, work: Callable[[SiteStore], T]) -> T:
    """Run one administrative change on the data directory's store (the schema is brought up to date)."""
    return with_storage(data_dir, lambda storage: work(storage.sites))


def with_storage(data_dir: object, work: Callable[[Storage], T]) -> T:
    settings = load_settings(data_dir=data_dir)
    try:
        storage = open_storage(settings)
    except OSError as exc:  # e.g. the data directory is a file, or not writable
        fail(RuntimeError(f"cannot open the data directory {settings.data_dir}: {exc}"))
    try:
        return work(storage)
    except AppError as exc:
        fail(exc)
    finally:
        storage.close()


@site_app.command("create")
def site_create(name: str, data_dir: DataDir = None) -> None:
    """Create a site; prints its username and secret (the secret is shown once)."""
    secret = with_sites(data_dir, lambda sites: admin.create_site(sites, name))
    typer.echo(f"username: {name}\nsecret: {secret}")


@site_app.command("list")
def site_list(data_dir: DataDir = None) -> None:
    """List sites."""
    for site in with_sites(data_dir, admin.list_sites):
        typer.echo(f"{site.name}\tcreated {site.created_at}")


@site_app.command("delete")
def site_delete(name: str, data_dir: DataDir = None) -> None:
    """Delete a site with its tokens and all its data."""
    with_sites(data_dir, lambda sites: admin.delete_site(sites, name))
    typer.echo(f"deleted site {name}")


@site_app.command("rotate")
def site_rotate(name: str, data_dir: DataDir = None) -> None:
    """Replace a site's Basic secret; prints the new one (shown once)."""
    secret = with_sites(data_dir, lambda sites: admin.rotate_site(sites, name))
    typer.echo(f"username: {name}\nsecret: {secret}")


@token_app.command("create")
def token_create(
    site: Annotated[str, typer.Option("--site", help="The site the token belongs to.")],
    scope: Annotated[list[str], typer.Option("--scope", help="memory:read and/or memory:write.")],
    team: Annotated[list[str] | None, typer.Option("--team", help="Bound to these teams.")] = None,
    project: Annotated[list[str] | None, typer.Option("--project", help="Bound to these projects.")] = None,
    bucket: Annotated[list[str] | None, typer.Option("--bucket", help="Bound to these buckets.")] = None,
    data_dir: DataDir = None,
) -> None:
    """Mint a Bearer token; prints it once."""
    token_id, token = with_sites(data_dir, lambda sites: admin.create_token(
        sites, site, scopes=scope, teams=team, projects=project, buckets=bucket))
    typer.echo(f"id: {token_id}\ntoken: {token}")


@token_app.command("list")
def token_list(
    site: Annotated[str, typer.Option("--site", help="The site whose tokens to list.")], data_dir: DataDir = None
) -> None:
    """List a site's tokens, then the OAuth grants of its connectors with their client's name (never a secret)."""
    def listed(storage: Storage) -> tuple[list[str], list[OAuthGrant]]:
        tokens = admin.list_tokens(storage.sites, site)
        return _lines(tokens), oauth.list_grants(storage.oauth, admin.require_site(storage.sites, site))

    lines, grants = with_storage(data_dir, listed)
    for line in lines:
        typer.echo(line)
    now = time.time()
    for g in grants:
        state = f"revoked {g.revoked_at}" if g.revoked_at else "active" if g.expires_at > now else "expired"
        b = g.bounds
        typer.echo(f"{g.id}\t{','.join(b.scopes)}\t{_bounds(b.teams, b.projects, b.buckets)}\t{state}"
                   f"\toauth client: {_printable(g.client_name or g.client_id)}")


def _lines(tokens: list[TokenRecord]) -> list[str]:
    return [f"{t.id}\t{','.join(t.scopes)}\t{_bounds(t.teams, t.projects, t.buckets)}\t"
            f"{f'revoked {t.revoked_at}' if t.revoked_at else 'active'}" for t in tokens]


def _bounds(teams: tuple[str, ...] | None, projects: tuple[str, ...] | None, buckets: tuple[str, ...] | None) -> str:
    named = " ".join(f"{name}={','.join(values)}" for name, values in
                     (("teams", teams), ("projects", projects), ("buckets", buckets)) if values)
    return named or "unbounded"


def _printable(name: str) -> str:
    """A client names itself: keep its name from writing control characters to the operator's terminal."""
    return "".join(c if c.isprintable() else "?" for c in name)[:200]


@token_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(metavar="ID")], data_dir: DataDir = None) -> None:
    """Revoke a token, or an OAuth grant (oa_...), by id; takes effect on the next request."""
    if oauth.is_grant_id(token_id):
        with_storage(data_dir, lambda storage: oauth.revoke_grant(storage.oauth, token_id))
        typer.echo(f"revoked OAuth grant {token_id}")
        return
    with_sites(data_dir, lambda sites: admin.revoke_token(sites, token_id))
    typer.echo(f"revoked token {token_id}")
