"""The `memory-server` command line: serve, and site/token administration.

Settings come from the environment (`MEMORY_*`) with flags taking precedence; this module and
`server.__main__` are the only places that read them.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer

from server.auth import core as auth
from server.errors import AppError
from server.settings import Settings

app = typer.Typer(help="memory-server: durable conversation logs and saved memories for AI agents.",
                  pretty_exceptions_enable=False,
                  no_args_is_help=True, add_completion=False)
site_app = typer.Typer(help="Manage sites (tenants) and their Basic credentials.", no_args_is_help=True)
token_app = typer.Typer(help="Manage Bearer tokens.", no_args_is_help=True)
app.add_typer(site_app, name="site")
app.add_typer(token_app, name="token")

DataDir = Annotated[Optional[Path], typer.Option("--data-dir", help="Data directory (MEMORY_DATA_DIR).")]


def _print_version(value: bool) -> None:
    if value:
        from server.version import __version__

        typer.echo(f"memory-server {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    pass
DEFAULT_SITE = "default"


INTEGRITY_CHECK_BUDGET_S = 3.0  # start-up's share of `PRAGMA quick_check` (see server.storage.sqlite.db.quick_check)


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment and flags; a bad value is a one-line error naming it, never a traceback."""
    from pydantic import ValidationError

    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            name = ".".join(str(p) for p in err.get("loc", ()))
            flag = f"--{name.replace('_', '-')}" if name in overrides and overrides[name] is not None else \
                f"MEMORY_{name.upper()}"
            problems.append(f"{flag}: {err.get('msg', 'invalid')} (got {err.get('input')!r})")
        _fail(RuntimeError("; ".join(problems)))
        raise  # not reached: _fail exits


def _fail(error: Exception) -> NoReturn:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(1)


def _announce(settings: Settings, message: str, **fields: str) -> None:
    """A start-up line on stderr: plain text, or one JSON object when the log format is JSON (so every line
    a container writes parses). Not through logging: the first-start secret must not reach log handlers."""
    if settings.log_format == "json":
        from server.logging_setup import json_line

        typer.echo(json_line("memory_server.serve", message, **fields), err=True)
        return
    typer.echo("\n".join([message, *(f"  {name}: {value}" for name, value in fields.items())]), err=True)


def _admin(data_dir: Path | None, work):  # type: ignore[no-untyped-def]
    """Run one administrative change in a write transaction on the data directory's SQLite file."""
    from server.storage.sqlite.db import connect, transaction
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
    from server.api import serving
    from server.api.app import create_app
    from server.auth.bootstrap import bootstrap_or_exit

    # The port first, then the index, then the database: a port in use, a second server on the same data
    # directory, an index built with another model or a damaged database fail before anything is created,
    # each with its own message.
    try:
        sock = serving.bind(settings.host, settings.port)
    except serving.PortInUse as exc:
        _fail(exc)
    index = _open_index_for_serving(settings)
    services = _open_services_for_serving(settings, index)
    bootstrap_or_exit(services)  # MEMORY_BOOTSTRAP_*: a pre-set site credential, before the first-start one
    site_id, secret = services.writer.run_sync(lambda conn: _first_site(conn))
    _announce(settings, f"memory-server: MCP over streamable HTTP at http://{settings.host}:{settings.port}/mcp",
              data_directory=str(settings.data_dir.resolve()))
    if secret is not None:
        _announce(settings, f"first start: created site '{DEFAULT_SITE}' with a Basic credential (shown once); "
                            f"connect with the header  Authorization: Basic base64('{DEFAULT_SITE}:<secret>')",
                  username=DEFAULT_SITE, secret=secret)
    app = create_app(settings, services=services, index=index)
    serving.run(app, settings, sock)


def _open_index_for_serving(settings: Settings) -> Any:
    from server.services import open_configured_index

    try:
        index = open_configured_index(settings)
    except Exception as exc:  # locked by another server, unreadable, unreachable: each says what to do
        _fail(exc)
    try:
        _check_index_model(settings, index)
    except Exception as exc:
        index.close()
        _fail(exc)
    return index


def _open_services_for_serving(settings: Settings, index: Any) -> Any:
    """The services over a checked database (see open_database); warns about an exposed data directory."""

    from server.storage.sqlite.db import DatabaseDamaged
    from server.storage.files import exposed
    from server.services import open_services

    try:
        services = open_services(settings, integrity_budget_s=INTEGRITY_CHECK_BUDGET_S)
    except (DatabaseDamaged, OSError, sqlite3.Error) as exc:
        index.close()
        _fail(exc)
    services.closers.append(index.close)
    if exposed(settings.data_dir):
        logging.getLogger("memory_server").warning(
            "the data directory %s can be read by other users of this machine; run: chmod 700 %s",
            settings.data_dir, settings.data_dir)
    return services


def _check_index_model(settings: Settings, index) -> None:  # type: ignore[no-untyped-def]
    """Compare the index's recorded model with the configured one without loading the model."""
    from embeddings.factory import resolve_model_dir
    from embeddings.sentence import model_name
    from server.memories.service import IndexMismatch
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
    from server.api.app import build_mcp
    from server.storage.sqlite.db import DatabaseDamaged
    from server.services import open_services

    try:
        services = open_services(settings, integrity_budget_s=INTEGRITY_CHECK_BUDGET_S)
    except (DatabaseDamaged, OSError, sqlite3.Error) as exc:
        _fail(exc)
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

    from server.index.base import IndexLocked
    from server.services import open_configured_index

    settings = load_settings(data_dir=data_dir)
    try:
        index = open_configured_index(settings)
    except IndexLocked as exc:
        _fail(RuntimeError(f"a server is running on this data directory: stop the server (pid {exc.holder}), "
                           "then run reindex again"))
    except Exception as exc:
        _fail(exc)
    services = open_services(settings)
    try:
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


def _stderr_progress():  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.progress import Progress

    return Progress(console=Console(stderr=True), transient=False)


@app.command("export")
def export_command(
    file: Annotated[str, typer.Argument(metavar="FILE", help="Where to write the JSON Lines; - for stdout.")],
    site: Annotated[Optional[str], typer.Option("--site", help="Export only this site.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE if it exists.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Export memories and conversation logs as JSON Lines (a consistent snapshot; works while serving).

    Lines: a header {"kind": "header", "version": 1, ...}, then {"kind": "memory", ...} records, then
    {"kind": "log_item", ...} records. Credentials and vectors are never exported.
    """
    import tempfile

    from embeddings.factory import resolve_model_dir
    from embeddings.sentence import model_name
    from server.services import PROJECT_ROOT
    from server.admin.transfer import Export, write_export

    from server.storage.files import live_paths, refuse_live_target

    settings = load_settings(data_dir=data_dir)
    target = None if file == "-" else Path(file)
    if target is not None:
        refuse_live_target(target, live_paths(settings.db_path, settings.index_path))
        if target.exists() and not force:
            _fail(RuntimeError(f"{target} exists; pass --force to overwrite it"))
    try:
        export = Export(settings.db_path, site=site)
    except (AppError, sqlite3.Error, OSError) as exc:
        _fail(exc)
    model = model_name(resolve_model_dir(settings.embedding_model, project_root=PROJECT_ROOT))
    tmp_name = None
    try:
        with _stderr_progress() as progress:
            task = progress.add_task("exporting", total=export.total)
            advance = lambda n: progress.advance(task, n)  # noqa: E731
            if target is None:
                written = write_export(export, sys.stdout, model=model, progress=advance)
                sys.stdout.flush()
            else:
                # Written beside FILE and renamed once complete: FILE is never a truncated export.
                target.parent.mkdir(parents=True, exist_ok=True)
                # mkstemp creates it 0600: an export holds every memory and log, for its owner only.
                fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                    written = write_export(export, out, model=model, progress=advance)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp_name, target)
                tmp_name = None
    except (sqlite3.Error, OSError) as exc:
        _fail(RuntimeError(f"export failed: {exc}"))
    finally:
        export.close()
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
    counts = export.counts
    typer.echo(
        f"exported {counts['memories']} memories and {counts['log_items']} log items "
        f"({counts['conversations']} conversations) to {file}",
        err=target is None,
    )
    if written != export.total:  # cannot happen inside one snapshot; say so loudly if it ever does
        _fail(RuntimeError(f"wrote {written} records but the snapshot counted {export.total}"))


@app.command("import")
def import_command(
    file: Annotated[str, typer.Argument(metavar="FILE", help="JSON Lines from `export`; - for stdin.")],
    site: Annotated[Optional[str], typer.Option("--site", help="Import everything into this site.")] = None,
    data_dir: DataDir = None,
) -> None:
    """Import JSON Lines written by `export` (idempotent: running it again adds nothing).

    Memories keep their reference: one already present is skipped, and another reference with the same
    content and filing is skipped as a duplicate. Log items keep their seq and recorded_at: they are
    appended only where they continue their conversation without a gap; an item already present with the
    same payload is skipped; a different payload at a present seq is a conflict. Missing sites are created
    and their secret is printed once.

    Bad lines (invalid JSON, unknown kind, invalid fields, conflicts, gaps) are reported with their line
    number and skipped; every other line is imported, and the exit code is 1 if any line was rejected.
    Each batch is one transaction, so an interrupted import leaves whole batches: run it again.

    Memories need the model and the vector index: with the embedded index, stop the server first (or use
    the REST/MCP API). A file of log items alone imports while the server runs.
    """
    import shutil
    import tempfile

    from server.index.base import IndexLocked
    from server.logs.store import LogLimits
    from server.services import open_configured_index, open_services
    from server.admin.transfer import ImportAborted, Importer, has_memory_records, import_stream

    settings = load_settings(data_dir=data_dir)
    if site is not None and not auth.SITE_NAME.fullmatch(site):
        _fail(RuntimeError("--site must be a site name (1-64 characters of [A-Za-z0-9_-])"))
    try:
        if file == "-":  # spooled so that it can be scanned before anything is written
            stream = tempfile.TemporaryFile()
            shutil.copyfileobj(sys.stdin.buffer, stream)
            stream.seek(0)
        else:
            stream = open(file, "rb")
    except OSError as exc:
        _fail(RuntimeError(f"cannot read {file}: {exc}"))
    with stream:
        size = stream.seek(0, 2)
        stream.seek(0)
        index = None
        if has_memory_records(stream):
            try:
                index = open_configured_index(settings)
            except IndexLocked as exc:
                _fail(RuntimeError(
                    f"{file} holds memories, and importing them needs the vector index, which a running server "
                    f"holds: stop the server first, or use the REST/MCP API to add memories while it runs. "
                    f"(A file of log items alone imports while the server runs.) Details: {exc}"
                ))
            except Exception as exc:
                _fail(exc)
        try:
            services = open_services(settings)
        except (OSError, sqlite3.Error, AppError) as exc:
            if index is not None:
                index.close()
            _fail(RuntimeError(f"cannot open the data directory {settings.data_dir}: {exc}"))
        try:
            if index is not None:
                services.closers.append(index.close)
                try:
                    services.load_memory(index=index)
                except Exception as exc:
                    _fail(exc)
            importer = Importer(
                write=services.writer.run_sync, read=services.readers.get,
                limits=LogLimits(settings.max_payload_bytes, settings.max_batch_bytes),
                max_content_bytes=settings.max_content_bytes, memory_service=services.memory_service,
                target_site=site,
            )
            aborted = None
            with _stderr_progress() as progress:
                task = progress.add_task("importing", total=size)
                try:
                    import_stream(stream, importer, progress=lambda n: progress.advance(task, n))
                except ImportAborted as exc:
                    aborted = exc
        finally:
            services.close()
    report = importer.report
    for name, secret in report.sites_created:
        typer.echo(f"created site: {name}\nusername: {name}\nsecret: {secret}")
    typer.echo(
        f"memories created: {report.memories_created}\n"
        f"memories already present: {report.memories_present}\n"
        f"memories duplicate: {report.memories_duplicate}\n"
        f"log items appended: {report.items_appended}\n"
        f"log items already present: {report.items_present}\n"
        f"rejected lines: {len(report.errors)}"
    )
    shown = 50
    for line, message in report.duplicates[:shown]:
        typer.echo(f"line {line}: skipped: {message}", err=True)
    for line, message in report.errors[:shown]:
        typer.echo(f"line {line}: {message}", err=True)
    if len(report.errors) > shown:
        typer.echo(f"... and {len(report.errors) - shown} more rejected lines", err=True)
    if aborted is not None:
        _fail(RuntimeError(f"import stopped: {aborted}; what was imported before stays (run it again to resume)"))
    if report.errors:
        raise typer.Exit(1)


@app.command()
def doctor(data_dir: DataDir = None) -> None:
    """Check the model, SQLite and the vector index; print one line per check with how to fix it.

    Exit code 0 when every check is ok (or skipped because a running server holds the index), 1 otherwise.
    """
    from server.admin.doctor import FAIL, run_checks
    from server.services import PROJECT_ROOT

    settings = load_settings(data_dir=data_dir)
    typer.echo(f"data directory: {settings.data_dir.resolve()}")
    failed = 0
    for check in run_checks(settings, project_root=PROJECT_ROOT):
        typer.echo(check.render())
        failed += check.status == FAIL
    typer.echo("all checks passed" if not failed else f"{failed} check(s) failed")
    if failed:
        raise typer.Exit(1)


@app.command()
def backup(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="Backup file (or a directory to put it in).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite PATH if it exists.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Copy the SQLite database to PATH while the server runs (online backup API), then verify the copy.

    The vector index is not copied: it is derived from SQLite. After restoring, run `memory-server reindex`
    (with the server backend, snapshot the Qdrant collection instead).
    """
    from server.storage.files import live_paths
    from server.admin.transfer import backup_database

    settings = load_settings(data_dir=data_dir)
    try:
        result = backup_database(settings.db_path, path, force=force,
                                 live=live_paths(settings.db_path, settings.index_path))
    except (AppError, FileExistsError, RuntimeError, sqlite3.Error, OSError) as exc:
        _fail(exc)
    typer.echo(f"backup: {result.path}\nsize: {result.size} bytes\nquick_check: ok\n"
               f"schema version: {result.schema_version}")
    for name, count in result.counts.items():
        typer.echo(f"{name}: {count}")
    typer.echo(
        "note: the vector index is not in the backup; after restoring this file as memory.db, rebuild it with "
        "`memory-server reindex` (server backend: snapshot the Qdrant collection instead)"
    )


def main() -> None:
    from server.storage.sqlite.db import DatabaseDamaged
    from server.storage.files import PRIVATE_UMASK
    from server.index.base import IndexUnavailable

    os.umask(PRIVATE_UMASK)  # every file this process writes (database, index, exports) is the owner's only
    try:
        app()
    except (AppError, DatabaseDamaged, IndexUnavailable, sqlite3.Error, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # a bug: one line for the user; the traceback only when asked for
        if os.environ.get("MEMORY_LOG_LEVEL", "").upper() == "DEBUG":
            raise
        typer.echo(f"error: unexpected failure ({type(exc).__name__}: {exc}); run with MEMORY_LOG_LEVEL=DEBUG "
                   "to see where", err=True)
        sys.exit(1)
