"""`memory-server site ...`, `memory-server token ...` and `memory-server conversation ...`: sites, their Basic
credentials and log retention, Bearer tokens and the OAuth grants of connectors (listed with the tokens,
revoked by the same command), deleting a conversation log."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Protocol, TypeVar

import typer

from memory_server.admin.common import DataDir, conversation_app, fail, load_settings, site_app, token_app
from memory_server.auth import admin, oauth
from memory_server.errors import AppError, NotFound
from memory_server.settings import Settings
from memory_server.storage.factory import open_storage
from memory_server.storage.oauth_records import OAuthGrant
from memory_server.storage.protocols import SiteStore, Storage
from memory_server.storage.records import IndexingProgress, SiteRecord, TokenRecord

if TYPE_CHECKING:
    from memory_server.services import Services

T = TypeVar("T")


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


def with_storage(data_dir: object, work: Callable[[Settings, Storage], T]) -> T:
    """Run one administrative change on the data directory's store (the schema is brought up to date)."""
    return _with_opened(data_dir, open_checked_storage, work)


def open_checked_storage(settings: Settings) -> Storage:
    """The settings' store, unless its database is missing beside a used index (refused as damaged)."""
    from memory_server.index.lost_database import refuse_lost_database

    refuse_lost_database(settings)
    return open_storage(settings)


def with_services(data_dir: object, work: Callable[[Services], T]) -> T:
    """Run one command through the operations a server builds (`Services`), over the data directory's store."""
    from memory_server.services import open_services

    return _with_opened(data_dir, open_services, lambda _, services: work(services))


def _with_opened(data_dir: object, open_: Callable[[Settings], C], work: Callable[[Settings, C], T]) -> T:
    settings = load_settings(data_dir=data_dir)
    try:
        opened = open_(settings)
    except OSError as exc:  # e.g. the data directory is a file, or not writable
        fail(RuntimeError(f"cannot open the data directory {settings.data_dir}: {exc}"))
    try:
        return work(settings, opened)
    except AppError as exc:
        fail(exc)
    finally:
        opened.close()


def with_sites(data_dir: object, work: Callable[[SiteStore], T]) -> T:
    return with_storage(data_dir, lambda _, storage: work(storage.sites))


@site_app.command("create")
def site_create(name: str, data_dir: DataDir = None) -> None:
    """Create a site; prints its username and secret (the secret is shown once)."""
    secret = with_sites(data_dir, lambda sites: admin.create_site(sites, name))
    typer.echo(f"username: {name}\nsecret: {secret}")


def retention_text(site: SiteRecord) -> str:
    days = site.log_retention_days
    if days is None:
        return "logs kept until deleted"
    return f"logs deleted {days} day{'s' if days != 1 else ''} after their last activity"


def indexing_text(site: SiteRecord) -> str:
    return "logs indexed" if site.index_logs else "logs not indexed"


def progress_text(progress: IndexingProgress) -> str:
    """How far a site's log indexing is, for `site show` and `site set`."""
    return f"{progress.waiting} items waiting, {progress.indexed} done ({progress.skipped} without text, skipped)"


@site_app.command("list")
def site_list(data_dir: DataDir = None) -> None:
    """List sites."""
    for site in with_sites(data_dir, admin.list_sites):
        typer.echo(f"{site.name}\tcreated {site.created_at}\t{indexing_text(site)}\t{retention_text(site)}")


@site_app.command("show")
def site_show(name: str, data_dir: DataDir = None) -> None:
    """Show a site: when it was created, its log retention, whether its log items are indexed and how far."""

    def show(_: Settings, storage: Storage) -> tuple[SiteRecord, IndexingProgress]:
        site = admin.show_site(storage.sites, name)
        return site, storage.logs.index_progress(site.id)

    site, progress = with_storage(data_dir, show)
    retention = "none" if site.log_retention_days is None else f"{site.log_retention_days} days"
    typer.echo(
        f"name: {site.name}\ncreated: {site.created_at}\nlog retention: {retention}\n"
        f"log indexing: {'on' if site.index_logs else 'off'}\nlog items indexed: {progress_text(progress)}"
    )


@site_app.command("set")
def site_set(
    name: str,
    log_retention_days: Annotated[
        int | None,
        typer.Option(
            "--log-retention-days",
            metavar="N",
            help="Delete conversation logs N days after their last activity "
            "(in the background, while the server runs).",
        ),
    ] = None,
    no_log_retention: Annotated[
        bool,
        typer.Option(
            "--no-log-retention", help="Keep conversation logs until they are deleted (clears the retention)."
        ),
    ] = False,
    index_logs: Annotated[
        bool | None,
        typer.Option(
            "--index-logs/--no-index-logs",
            help="Make the site's conversation log items recallable entries (kind "
            "turn) that recall finds beside saved memories: those logged already are indexed in the background; "
            "or stop indexing new ones.",
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Change a site's settings: its log retention, whether its log items are indexed."""
    if log_retention_days is not None and no_log_retention:
        fail(RuntimeError("give either --log-retention-days N or --no-log-retention"))
    if log_retention_days is None and not no_log_retention and index_logs is None:
        fail(RuntimeError("give --log-retention-days N, --no-log-retention, --index-logs or --no-index-logs"))

    def change(_: Settings, storage: Storage) -> tuple[SiteRecord, IndexingProgress]:
        if log_retention_days is not None or no_log_retention:
            admin.set_log_retention(storage.sites, name, log_retention_days)
        if index_logs is not None and not storage.sites.set_log_indexing(name, index_logs):
            raise NotFound(f"no site named {name!r}")
        site = admin.show_site(storage.sites, name)
        return site, storage.logs.index_progress(site.id)

    site, progress = with_storage(data_dir, change)
    changed = [retention_text(site)] if log_retention_days is not None or no_log_retention else []
    changed += [indexing_text(site)] if index_logs is not None else []
    typer.echo(f"site {name}: {', '.join(changed)}")
    if index_logs:
        typer.echo(
            f"log items indexed: {progress_text(progress)}; a running server indexes those waiting in the "
            "background (see `site show`, /readyz)"
        )


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
    label: Annotated[
        str | None,
        typer.Option(
            "--label",
            help="What the token is for (e.g. 'laptop: Claude Code'), shown wherever tokens are listed.",
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Mint a Bearer token; prints it once."""
    token_id, token = with_sites(
        data_dir,
        lambda sites: admin.create_token(
            sites, site, scopes=scope, teams=team, projects=project, buckets=bucket, label=label
        ),
    )
    typer.echo(f"id: {token_id}\ntoken: {token}")


TOKEN_LIST_HEADER = "ID\tSCOPES\tBOUNDS\tSTATE\tLABEL OR OAUTH CLIENT\tLAST USED"


@token_app.command("list")
def token_list(
    site: Annotated[str, typer.Option("--site", help="The site whose tokens to list.")], data_dir: DataDir = None
) -> None:
    """List a site's tokens (with their labels and last use), then the OAuth grants of its connectors with their
    client's name and last use (never a secret)."""

    def listed(_: Settings, storage: Storage) -> tuple[list[str], list[OAuthGrant]]:
        tokens = admin.list_tokens(storage.sites, site)
        return _lines(tokens), oauth.list_grants(storage.oauth, admin.require_site(storage.sites, site))

    lines, grants = with_storage(data_dir, listed)
    if lines or grants:
        typer.echo(TOKEN_LIST_HEADER)
    for line in lines:
        typer.echo(line)
    now = time.time()
    for g in grants:
        state = f"revoked {g.revoked_at}" if g.revoked_at else "active" if g.expires_at > now else "expired"
        b = g.bounds
        typer.echo(
            f"{g.id}\t{','.join(b.scopes)}\t{_bounds(b.teams, b.projects, b.buckets)}\t{state}"
            f"\toauth client: {_printable(g.client_name or g.client_id)}"
            f"\tlast used: {g.last_used_at or 'never'}"
        )


def _lines(tokens: list[TokenRecord]) -> list[str]:
    return [
        f"{t.id}\t{','.join(t.scopes)}\t{_bounds(t.teams, t.projects, t.buckets)}\t"
        f"{f'revoked {t.revoked_at}' if t.revoked_at else 'active'}\tlabel: {t.label or '-'}"
        f"\tlast used: {t.last_used_at or 'never'}"
        for t in tokens
    ]


def _bounds(teams: tuple[str, ...] | None, projects: tuple[str, ...] | None, buckets: tuple[str, ...] | None) -> str:
    named = " ".join(
        f"{name}={','.join(values)}"
        for name, values in (("teams", teams), ("projects", projects), ("buckets", buckets))
        if values
    )
    return named or "unbounded"


def _printable(name: str) -> str:
    """A client names itself: keep its name from writing control characters to the operator's terminal."""
    return "".join(c if c.isprintable() else "?" for c in name)[:200]


@token_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(metavar="ID")], data_dir: DataDir = None) -> None:
    """Revoke a token, or an OAuth grant (oa_...), by id; takes effect on the next request."""
    if oauth.is_grant_id(token_id):
        with_storage(data_dir, lambda _, storage: oauth.revoke_grant(storage.oauth, token_id))
        typer.echo(f"revoked OAuth grant {token_id}")
        return
    with_sites(data_dir, lambda sites: admin.revoke_token(sites, token_id))
    typer.echo(f"revoked token {token_id}")


@conversation_app.command("delete")
def conversation_delete(
    conversation_id: Annotated[str, typer.Argument(metavar="ID")],
    site: Annotated[str, typer.Option("--site", help="The site the conversation belongs to.")],
    data_dir: DataDir = None,
) -> None:
    """Delete a conversation log for good: its items, its idempotency keys, and the link of every memory whose
    provenance names it (the memories stay). Safe while the server runs."""
    import anyio

    from memory_server.auth.principal import site_principal
    from memory_server.logs.params import DeleteConversationParams

    def delete(services: Services) -> dict[str, object]:
        params = DeleteConversationParams(conversation_id=conversation_id)
        principal = site_principal(admin.require_site(services.storage.sites, site), site)
        return dict(anyio.run(services.logs.delete_conversation, principal, params))

    deleted = with_services(data_dir, delete)
    turns = f", {deleted['turns_deleted']} indexed turns" if deleted["turns_deleted"] else ""
    typer.echo(
        f"deleted conversation {conversation_id}: {deleted['item_count']} items{turns}, "
        f"{deleted['memories_unlinked']} memories unlinked"
    )
