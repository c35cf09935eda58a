"""Importing a foreign format: its reader's candidates validated as `remember` validates them, then written by
`Importer` through the bulk path of `import` (same batches, same words for query expansion), with a progress bar.
A record that cannot be read or fails validation is reported with its file and line, and skipped."""

from __future__ import annotations

from pathlib import Path

import typer

from memory_server.admin.common import fail, stderr_progress
from memory_server.admin.data import pinned_model
from memory_server.admin.export_lines import MemoryRecord
from memory_server.admin.foreign import FORMATS
from memory_server.admin.foreign.records import Candidate, total_bytes
from memory_server.admin.importer import ImportAborted, Importer, ImportReport, skipped_duplicates
from memory_server.errors import AppError
from memory_server.memories.writes import EMBED_BATCH
from memory_server.settings import Settings
from memory_server.timestamps import now_rfc3339

SHOWN = 50  # problems printed; the rest are counted


def import_foreign(settings: Settings, fmt: str, file: str, site: str | None) -> None:
    from memory_server.index.base import IndexLocked
    from memory_server.logs.validation import LogLimits
    from memory_server.memories.validation import validate_new
    from memory_server.services import open_configured_index, open_services

    if fmt not in FORMATS:
        fail(RuntimeError(f"unknown format {fmt!r} for --from; one of: {', '.join(FORMATS)}"))
    read, suffixes = FORMATS[fmt]
    path = Path(file)
    if not path.exists():
        fail(RuntimeError(f"{file} does not exist"))
    try:
        index = open_configured_index(settings)
    except IndexLocked as exc:
        fail(
            RuntimeError(
                f"importing memories needs the vector index, which a running server holds: stop the "
                f"server first, or add the memories through the REST/MCP API. Details: {exc}"
            )
        )
    except Exception as exc:
        fail(exc)
    settings = pinned_model(settings, index)
    try:
        services = open_services(settings)
    except (OSError, AppError) as exc:
        index.close()
        fail(RuntimeError(f"cannot open the data directory {settings.data_dir}: {exc}"))
    services.closers.append(index.close)
    problems = Problems()
    started = now_rfc3339()
    places: dict[int, str] = {}  # the number given to each record still in the importer -> where it came from
    number = 0  # records given to the importer
    try:
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
            target_site=site or "default",
        )
        with stderr_progress() as progress:
            task = progress.add_task(f"importing {fmt}", total=total_bytes(path, suffixes))
            try:
                for item in read(
                    path, max_content_bytes=settings.max_content_bytes, progress=lambda n: progress.advance(task, n)
                ):
                    if not isinstance(item, Candidate):
                        problems.add(item.where, item.message)
                        continue
                    try:
                        memory = validate_new(**item.fields, max_content_bytes=settings.max_content_bytes)
                    except AppError as exc:
                        problems.add(item.where, str(exc))
                        continue
                    if memory.expires_at is not None and memory.expires_at <= started:
                        problems.expired += 1  # it would be gone at once: not a memory to make
                        continue
                    number += 1
                    places[number] = item.where
                    importer.add(
                        MemoryRecord(
                            line=number,
                            site=None,
                            reference=item.reference,
                            memory=memory,
                            created_at=None,
                            updated_at=None,
                        )
                    )
                    if number % EMBED_BATCH == 0:  # the importer wrote its batch: those places are done with
                        problems.settle(importer.report, places)
                importer.finish()
                problems.settle(importer.report, places)
            except ImportAborted as exc:
                fail(RuntimeError(f"import stopped: {exc}; what was imported before stays (run it again to resume)"))
            except OSError as exc:
                fail(RuntimeError(f"cannot read {file}: {exc}"))
    finally:
        services.close()
    _report(importer, problems)


class Problems:
    """The rejected records and duplicates to print, where each came from: the first SHOWN kept, the rest
    counted, so a file of a million bad lines costs no more memory than one of fifty."""

    def __init__(self) -> None:
        self.shown: list[tuple[str, str]] = []
        self.duplicates: list[tuple[str, str]] = []
        self.count = 0
        self.expired = 0  # records whose expires_at had passed: skipped
        self._errors_seen = self._duplicates_seen = self._rejected_seen = 0

    def add(self, where: str, message: str) -> None:
        self.count += 1
        if len(self.shown) < SHOWN:
            self.shown.append((where, message))

    def settle(self, report: ImportReport, places: dict[int, str]) -> None:
        """Take in what the importer reported since the last call, once it has written every record given
        to it; their places are then forgotten."""
        kept = report.errors[self._errors_seen :]
        for n, message in kept:
            self.add(places.get(n, str(n)), message)
        self.count += report.rejected - self._rejected_seen - len(kept)  # past the importer's KEPT
        self._errors_seen, self._rejected_seen = len(report.errors), report.rejected
        for n, message in report.duplicates[self._duplicates_seen : SHOWN]:
            self.duplicates.append((places.get(n, str(n)), message))
        self._duplicates_seen = len(report.duplicates)
        places.clear()


def _report(importer: Importer, problems: Problems) -> None:
    report = importer.report
    for name, secret in report.sites_created:
        typer.echo(f"created site: {name}\nusername: {name}\nsecret: {secret}")
    typer.echo(
        f"memories created: {report.memories_created}\nmemories already present: {report.memories_present}\n"
        f"memories duplicate: {report.memories_duplicate}\nmemories expired: {problems.expired}\n"
        f"rejected records: {problems.count}"
    )
    if problems.duplicates:
        where, message = problems.duplicates[0]
        typer.echo(skipped_duplicates(report.memories_duplicate, "records", where, message), err=True)
    if problems.expired:
        typer.echo(f"skipped {problems.expired} records whose expires_at has passed", err=True)
    for where, message in problems.shown:
        typer.echo(f"{where}: {message}", err=True)
    if problems.count > len(problems.shown):
        typer.echo(f"... and {problems.count - len(problems.shown)} more rejected records", err=True)
    if problems.count:
        raise typer.Exit(1)
