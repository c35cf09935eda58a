"""`memory-server export | import | backup | reindex | doctor`: the data directory as a whole."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from memory_server.admin.common import DataDir, app, fail, load_settings, stderr_progress
from memory_server.errors import AppError
from memory_server.settings import Settings

if TYPE_CHECKING:  # imported when used: the CLI starts fast
    from memory_server.admin.importer import Importer
    from memory_server.index.base import VectorIndex


def _model_name(settings: Settings) -> str:
    from memory_server.embeddings.factory import resolve_model
    from memory_server.services import PROJECT_ROOT

    return resolve_model(settings.embedding_model, project_root=PROJECT_ROOT).name


@app.command("export")
def export_command(
    file: Annotated[str, typer.Argument(metavar="FILE", help="Where to write the JSON Lines; - for stdout.")],
    site: Annotated[str | None, typer.Option("--site", help="Export only this site.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE if it exists.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Export memories and conversation logs as JSON Lines (a consistent snapshot; works while serving).

    Lines: a header {"kind": "header", "version": 1, ...}, then {"kind": "memory", ...} records, then
    {"kind": "log_item", ...} records. Credentials and vectors are never exported.
    """
    from memory_server.admin.export import total, write_export
    from memory_server.storage.factory import live_paths, open_snapshot
    from memory_server.storage.files import refuse_live_target

    settings = load_settings(data_dir=data_dir)
    target = None if file == "-" else Path(file)
    if target is not None:
        refuse_live_target(target, live_paths(settings))
        if target.exists() and not force:
            fail(RuntimeError(f"{target} exists; pass --force to overwrite it"))
    snapshot = open_snapshot(settings, site=site)
    model, tmp_name = _model_name(settings), None
    try:
        with stderr_progress() as progress:
            task = progress.add_task("exporting", total=total(snapshot))

            def write(out: IO[str]) -> int:
                return write_export(snapshot, out, site=site, model=model, progress=lambda n: progress.advance(task, n))

            if target is None:
                written = write(sys.stdout)
                sys.stdout.flush()
            else:
                # Written beside FILE and renamed once complete: FILE is never a truncated export. mkstemp
                # creates it 0600: an export holds every memory and log, for its owner only.
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                    written = write(out)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp_name, target)
                tmp_name = None
    except OSError as exc:
        fail(RuntimeError(f"export failed: {exc}"))
    finally:
        snapshot.close()
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
    counts = snapshot.counts
    typer.echo(
        f"exported {counts['memories']} memories and {counts['log_items']} log items "
        f"({counts['conversations']} conversations) to {file}",
        err=target is None,
    )
    if written != total(snapshot):  # cannot happen inside one snapshot; say so loudly if it ever does
        fail(RuntimeError(f"wrote {written} records but the snapshot counted {total(snapshot)}"))


def pinned_model(settings: Settings, index: VectorIndex, *, reindex: bool = False) -> Settings:
    """The settings with the model the index records when MEMORY_EMBEDDING_MODEL is unset; a command that
    would embed the index again with another model fails saying how to change it (embeddings/factory.py)."""
    from memory_server.embeddings.factory import ModelMismatch, admin_model
    from memory_server.services import PROJECT_ROOT

    info = index.info()
    try:
        model = admin_model(
            settings.embedding_model, info.model if info else None, project_root=PROJECT_ROOT, reindex=reindex
        )
    except ModelMismatch as exc:
        index.close()
        fail(exc)
    return settings if model == settings.embedding_model else settings.model_copy(update={"embedding_model": model})


def _input(file: str) -> IO[bytes]:
    """The file, or stdin spooled so that it can be scanned before anything is written."""
    try:
        if file != "-":
            return open(file, "rb")
        stream = tempfile.TemporaryFile()
        shutil.copyfileobj(sys.stdin.buffer, stream)
        stream.seek(0)
        return stream
    except OSError as exc:
        fail(RuntimeError(f"cannot read {file}: {exc}"))


def _index_for_import(settings: Settings, file: str) -> VectorIndex:
    from memory_server.index.base import IndexLocked
    from memory_server.services import open_configured_index

    try:
        return open_configured_index(settings)
    except IndexLocked as exc:
        fail(
            RuntimeError(
                f"{file} holds memories, and importing them needs the vector index, which a running server holds: "
                "stop the server first, or use the REST/MCP API to add memories while it runs. (A file of log items "
                f"alone imports while the server runs.) Details: {exc}"
            )
        )
    except Exception as exc:
        fail(exc)


@app.command("import")
def import_command(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE", help="JSON Lines from `export`; - for stdin. With --from: another tool's file or folder."
        ),
    ],
    site: Annotated[str | None, typer.Option("--site", help="Import everything into this site.")] = None,
    from_: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="mcp-memory|mem0|markdown",
            help="Another memory tool's format: mcp-memory, mem0 or markdown (into --site, default `default`).",
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Import JSON Lines written by `export`, or another memory tool's data with --from mcp-memory|mem0|markdown
    (idempotent: running it again adds nothing).

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

    With --from FORMAT, FILE is another memory tool's data: mcp-memory (the MCP memory server's JSON Lines
    graph), mem0 (a saved get_all() answer, JSON or JSON Lines) or markdown (a folder of notes with front
    matter, as basic-memory keeps them). Bad records are reported with their file and line and skipped.
    """
    from memory_server.admin.export_lines import has_memory_records
    from memory_server.admin.importer import ImportAborted, Importer, import_stream
    from memory_server.auth.secrets import SITE_NAME
    from memory_server.logs.validation import LogLimits
    from memory_server.services import open_services

    settings = load_settings(data_dir=data_dir)
    if site is not None and not SITE_NAME.fullmatch(site):
        fail(RuntimeError("--site must be a site name (1-64 characters of [A-Za-z0-9_-])"))
    if from_ is not None:  # other memory tools' formats: memory_server.admin.foreign
        from memory_server.admin.foreign.command import import_foreign

        return import_foreign(settings, from_, file, site)
    with _input(file) as stream:
        size = stream.seek(0, 2)
        stream.seek(0)
        index = _index_for_import(settings, file) if has_memory_records(stream) else None
        if index is not None:
            settings = pinned_model(settings, index)
        try:
            services = open_services(settings)
        except (OSError, AppError) as exc:
            if index is not None:
                index.close()
            fail(RuntimeError(f"cannot open the data directory {settings.data_dir}: {exc}"))
        aborted = None
        try:
            writes = None
            if index is not None:
                services.closers.append(index.close)
                try:
                    writes = services.load_memories(index=index).writes
                except Exception as exc:
                    fail(exc)
            importer = Importer(
                sites=services.storage.sites,
                logs=services.storage.logs,
                limits=LogLimits(settings.max_payload_bytes, settings.max_batch_bytes),
                max_content_bytes=settings.max_content_bytes,
                writes=writes,
                target_site=site,
            )
            with stderr_progress() as progress:
                task = progress.add_task("importing", total=size)
                try:
                    import_stream(stream, importer, progress=lambda n: progress.advance(task, n))
                except ImportAborted as exc:
                    aborted = exc
        finally:
            services.close()
    _print_report(importer, aborted)


def _print_report(importer: Importer, aborted: Exception | None) -> None:
    from memory_server.admin.importer import skipped_duplicates

    report = importer.report
    for name, secret in report.sites_created:
        typer.echo(f"created site: {name}\nusername: {name}\nsecret: {secret}")
    typer.echo(
        f"memories created: {report.memories_created}\nmemories already present: {report.memories_present}\n"
        f"memories duplicate: {report.memories_duplicate}\nlog items appended: {report.items_appended}\n"
        f"log items already present: {report.items_present}\nrejected lines: {report.rejected}"
    )
    if report.sites_indexing:
        typer.echo(f"log items to index: {report.items_to_index} (a running server indexes them in the background)")
    shown = 50
    if report.duplicates:
        line, message = report.duplicates[0]
        typer.echo(skipped_duplicates(report.memories_duplicate, "lines", f"line {line}", message), err=True)
    for line, message in report.errors[:shown]:
        typer.echo(f"line {line}: {message}", err=True)
    if report.rejected > shown:
        typer.echo(f"... and {report.rejected - shown} more rejected lines", err=True)
    if aborted is not None:
        fail(RuntimeError(f"import stopped: {aborted}; what was imported before stays (run it again to resume)"))
    if report.rejected:
        raise typer.Exit(1)


@app.command()
def reindex(data_dir: DataDir = None) -> None:
    """Rebuild the vector index from the database alone (stop the server first when using the embedded index)."""
    from rich.progress import Progress

    from memory_server.index.base import IndexLocked
    from memory_server.logs.indexing import LogIndexer
    from memory_server.memories.system import rewrite_terms
    from memory_server.services import open_configured_index, open_services

    settings = load_settings(data_dir=data_dir)
    try:
        index = open_configured_index(settings)
    except IndexLocked as exc:
        fail(
            RuntimeError(
                f"a server is running on this data directory: stop the server (pid {exc.holder}), "
                "then run reindex again"
            )
        )
    except Exception as exc:
        fail(exc)
    settings = pinned_model(settings, index, reindex=True)
    services = open_services(settings)
    try:
        services.closers.append(index.close)
        memories = services.load_memories(index=index, repair_index=False)
        rewrite_terms(services.storage, force=True)  # the lexical terms are derived too
        if memories.follower is not None:  # this server's own index of a shared authority: only it is rebuilt
            done = memories.follower.rebuild()
        else:
            with Progress() as progress:
                task = progress.add_task("reindexing", total=services.storage.memories.count())
                done = memories.outbox.reindex(progress=lambda n: progress.advance(task, n))
        memories.words.load(services.storage.words)
        memories.backfill_words()
        typer.echo(f"reindexed {done} memories with {memories.embedder.name}")
        # The log items waiting to be indexed (their turns are memories, reindexed above with the others).
        turns = LogIndexer(services.storage.logs, services.storage.sites, memories.writes).drain()
        if turns:
            typer.echo(f"indexed {turns} log items")
    finally:
        services.close()


@app.command()
def doctor(data_dir: DataDir = None) -> None:
    """Check the model, the database and the vector index; print one line per check with how to fix it.

    Exit code 0 when every check is ok (or skipped because a running server holds the index), 1 otherwise.
    """
    from memory_server.admin.doctor import FAIL, run_checks
    from memory_server.services import PROJECT_ROOT

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
    On PostgreSQL it says how to back up instead (pg_dump, or `export`).

    The vector index is not copied: it is derived from the database. After restoring, run `memory-server
    reindex` (with the server backend, snapshot the Qdrant collection instead).
    """
    from memory_server.storage.backends import backend_of
    from memory_server.storage.factory import live_paths
    from memory_server.storage.sqlite.backup import backup_database

    settings = load_settings(data_dir=data_dir)
    if not backend_of(settings).in_data_dir:
        fail(
            RuntimeError(
                "the authority is PostgreSQL (MEMORY_DATABASE_URL): back it up with PostgreSQL's own tools, e.g. "
                '`pg_dump --format=custom --file memory.dump "$MEMORY_DATABASE_URL"` (restore with pg_restore), or '
                "write a consistent export of every site with `memory-server export FILE`"
            )
        )
    try:
        result = backup_database(settings.db_path, path, force=force, live=live_paths(settings))
    except (AppError, FileExistsError, RuntimeError, OSError) as exc:
        fail(exc)
    typer.echo(
        f"backup: {result.path}\nsize: {result.size} bytes\nquick_check: ok\nschema version: {result.schema_version}"
    )
    for name, count in result.counts.items():
        typer.echo(f"{name}: {count}")
    typer.echo(
        "note: the vector index is not in the backup; after restoring this file as memory.db, rebuild it "
        "with `memory-server reindex` (server backend: snapshot the Qdrant collection instead)"
    )
