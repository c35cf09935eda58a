"""The `memory-server` command line: serve, and site/token administration.

Settings come from the environment (`MEMORY_*`) with flags taking precedence; this module and
`server.__main__` are the only places that read them.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from server import auth
from server.errors import AppError
from server.settings import Settings

app = typer.Typer(help="memory-server: durable conversation logs and saved memories for AI agents.",
                  no_args_is_help=True, add_completion=False)
site_app = typer.Typer(help="Manage sites (tenants) and their Basic credentials.", no_args_is_help=True)
token_app = typer.Typer(help="Manage Bearer tokens.", no_args_is_help=True)
app.add_typer(site_app, name="site")
app.add_typer(token_app, name="token")

DataDir = Annotated[Optional[Path], typer.Option("--data-dir", help="Data directory (MEMORY_DATA_DIR).")]
DEFAULT_SITE = "default"


def load_settings(**overrides: object) -> Settings:
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def _fail(error: Exception) -> None:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(1)


def _admin(data_dir: Path | None, work):  # type: ignore[no-untyped-def]
    """Run one administrative change in a write transaction on the data directory's SQLite file."""
    from server.db import connect, transaction
    from server.services import open_database

    settings = load_settings(data_dir=data_dir)
    try:
        open_database(settings)
        conn = connect(settings.db_path)
    except (OSError, sqlite3.Error) as exc:  # e.g. the data directory is a file, or not writable
        _fail(RuntimeError(f"cannot open the data directory {settings.data_dir}: {exc}"))
    try:
        return transaction(conn, work)
    except AppError as exc:
        _fail(exc)
    except sqlite3.Error as exc:
        _fail(RuntimeError(f"storage error: {exc}"))
    finally:
        conn.close()


@app.command()
def serve(
    transport: Annotated[Optional[str], typer.Option(help="http or stdio (MEMORY_TRANSPORT).")] = None,
    host: Annotated[Optional[str], typer.Option(help="Bind address (MEMORY_HOST).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port (MEMORY_PORT).")] = None,
    data_dir: DataDir = None,
) -> None:
    """Serve the MCP tools over streamable HTTP (default) or stdio."""
    settings = load_settings(transport=transport, host=host, port=port, data_dir=data_dir)
    from server.logging_setup import configure_logging

    configure_logging(settings, stream=sys.stderr)
    if settings.transport == "stdio":
        _serve_stdio(settings)
    else:
        _serve_http(settings)


def _serve_http(settings: Settings) -> None:
    import uvicorn

    from server.app import create_app
    from server.services import open_configured_index, open_services

    # Open the index here, before the port: a second server on the same data directory, or an index built
    # with another model, fails now with a clear message instead of after start-up.
    try:
        index = open_configured_index(settings)
        _check_index_model(settings, index)
    except Exception as exc:
        _fail(exc)
    services = open_services(settings)
    services.closers.append(index.close)
    site_id, secret = services.writer.run_sync(lambda conn: _first_site(conn))
    url = f"http://{settings.host}:{settings.port}/mcp"
    typer.echo(f"memory-server: MCP over streamable HTTP at {url}", err=True)
    typer.echo(f"data directory: {settings.data_dir.resolve()}", err=True)
    if secret is not None:
        typer.echo(
            f"first start: created site '{DEFAULT_SITE}' with a Basic credential (shown once):\n"
            f"  username: {DEFAULT_SITE}\n  secret: {secret}\n"
            f"connect with the header  Authorization: Basic base64('{DEFAULT_SITE}:<secret>')",
            err=True,
        )
    app = create_app(settings, services=services, index=index)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", lifespan="on")


def _check_index_model(settings: Settings, index) -> None:  # type: ignore[no-untyped-def]
    """Compare the index's recorded model with the configured one without loading the model."""
    from embeddings.factory import resolve_model_dir
    from embeddings.sentence import model_name
    from server.memory_service import IndexMismatch
    from server.services import PROJECT_ROOT

    info = index.info()
    if info is None:
        return
    configured = model_name(resolve_model_dir(settings.embedding_model, project_root=PROJECT_ROOT))
    if info.model != configured:
        raise IndexMismatch(
            f"the vector index was built with {info.model} but the configured model is {configured}; "
            "run `memory-server reindex` to rebuild the index from SQLite with the configured model"
        )


def _first_site(conn):  # type: ignore[no-untyped-def]
    if conn.execute("SELECT 1 FROM sites LIMIT 1").fetchone():
        return None, None
    return auth.ensure_site(conn, DEFAULT_SITE)


def _serve_stdio(settings: Settings) -> None:
    from server.app import build_mcp
    from server.services import open_services

    services = open_services(settings)
    try:
        services.load_memory()
    except Exception as exc:
        services.close()
        _fail(exc)
    services.start_maintenance()
    principal = services.local_principal(settings.stdio_site)
    mcp = build_mcp(services, local=lambda: principal)
    try:
        mcp.run(transport="stdio", show_banner=False)
    finally:
        services.close()


@site_app.command("create")
def site_create(name: str, data_dir: DataDir = None) -> None:
    """Create a site; prints its username and secret (the secret is shown once)."""
    secret = _admin(data_dir, lambda conn: auth.create_site(conn, name))
    typer.echo(f"username: {name}\nsecret: {secret}")


@site_app.command("list")
def site_list(data_dir: DataDir = None) -> None:
    """List sites."""
    for site in _admin(data_dir, auth.list_sites):
        typer.echo(f"{site['name']}\tcreated {site['created_at']}")


@site_app.command("delete")
def site_delete(name: str, data_dir: DataDir = None) -> None:
    """Delete a site with its tokens and all its data."""
    _admin(data_dir, lambda conn: auth.delete_site(conn, name))
    typer.echo(f"deleted site {name}")


@site_app.command("rotate")
def site_rotate(name: str, data_dir: DataDir = None) -> None:
    """Replace a site's Basic secret; prints the new one (shown once)."""
    secret = _admin(data_dir, lambda conn: auth.rotate_site(conn, name))
    typer.echo(f"username: {name}\nsecret: {secret}")


@token_app.command("create")
def token_create(
    site: Annotated[str, typer.Option("--site", help="The site the token belongs to.")],
    scope: Annotated[list[str], typer.Option("--scope", help="memory:read and/or memory:write.")],
    team: Annotated[Optional[list[str]], typer.Option("--team", help="Bound to these teams.")] = None,
    project: Annotated[Optional[list[str]], typer.Option("--project", help="Bound to these projects.")] = None,
    bucket: Annotated[Optional[list[str]], typer.Option("--bucket", help="Bound to these buckets.")] = None,
    data_dir: DataDir = None,
) -> None:
    """Mint a Bearer token; prints it once."""
    token_id, token = _admin(
        data_dir,
        lambda conn: auth.create_token(conn, site, scopes=scope, teams=team, projects=project, buckets=bucket),
    )
    typer.echo(f"id: {token_id}\ntoken: {token}")


@token_app.command("list")
def token_list(
    site: Annotated[str, typer.Option("--site", help="The site whose tokens to list.")], data_dir: DataDir = None
) -> None:
    """List a site's tokens (never the secrets)."""
    for t in _admin(data_dir, lambda conn: auth.list_tokens(conn, site)):
        state = f"revoked {t['revoked_at']}" if t["revoked_at"] else "active"
        bounds = " ".join(
            f"{k}={','.join(t[k])}" for k in ("teams", "projects", "buckets") if t[k]
        )
        typer.echo(f"{t['id']}\t{','.join(t['scopes'])}\t{bounds or 'unbounded'}\t{state}")


@token_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(metavar="ID")], data_dir: DataDir = None) -> None:
    """Revoke a token by id; takes effect on the next request."""
    _admin(data_dir, lambda conn: auth.revoke_token(conn, token_id))
    typer.echo(f"revoked token {token_id}")


@app.command()
def reindex(data_dir: DataDir = None) -> None:
    """Rebuild the vector index from SQLite alone (stop the server first when using the embedded index)."""
    from rich.progress import Progress

    from server.services import open_services

    settings = load_settings(data_dir=data_dir)
    services = open_services(settings)
    try:
        from server.services import open_configured_index

        try:
            index = open_configured_index(settings)
        except Exception as exc:
            _fail(exc)
        services.closers.append(index.close)
        services.load_memory(index=index, repair=False)
        service = services.memory_service
        total = services.readers.get().execute("SELECT count(*) FROM memories").fetchone()[0]
        with Progress() as progress:
            task = progress.add_task("reindexing", total=total)
            done = service.reindex(progress=lambda n: progress.advance(task, n))
        typer.echo(f"reindexed {done} memories with {service.embedder.name}")
    finally:
        services.close()


def main() -> None:
    app()
