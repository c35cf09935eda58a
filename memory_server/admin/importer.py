"""`memory-server import`: JSON Lines written by `export`, back into a store.

Import is idempotent. A memory keeps its reference: a reference already present is skipped (a present
reference holding other content is a conflict), and another reference with the same content and filing is
skipped as a duplicate. Memories go through the same bulk write path as `remember` (same batches, the
words for query expansion stored with them), so they rank exactly as remembered ones. Log items keep their
seq and recorded_at: a conversation's items are appended only where they continue it without a gap, an item
already present with the identical payload is skipped, and a different payload at a present seq is a
conflict. A bad line is reported with its number and skipped, whatever is wrong with it; every other line
is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TypeVar

from memory_server.admin.export import FORMAT_VERSION
from memory_server.admin.export_lines import (
    ConversationSettings,
    Header,
    LogRecord,
    MemoryRecord,
    Record,
    SiteSettings,
    numbered_lines,
    parse_line,
)
from memory_server.auth.admin import ensure_site
from memory_server.errors import AppError
from memory_server.logs.validation import MAX_ITEMS, LogLimits
from memory_server.memories.writes import EMBED_BATCH, MemoryWrites
from memory_server.storage.protocols import LogStore, SiteStore
from memory_server.storage.records import APPENDED, CREATED, DUPLICATE, PRESENT, Inserted, Kept

T = TypeVar("T")

# --- the whole stream ---------------------------------------------------------------------------------


def skipped_duplicates(count: int, what: str, first: str, message: str) -> str:
    """The one line an import says of the records that held a memory already there (a re-import: all of them),
    instead of one line each."""
    return f"skipped {count} {what} holding a memory already here (the first, {first}: {message})"


class ImportAborted(Exception):
    """The import cannot go on (storage failure, unsupported format); what was committed stays."""


KEPT = 1000  # rejected and duplicate lines kept to be shown; past that they are only counted (memory stays bounded)


@dataclass
class ImportReport:
    memories_created: int = 0
    memories_present: int = 0
    memories_duplicate: int = 0
    items_appended: int = 0
    items_present: int = 0
    sites_created: list[tuple[str, str]] = field(default_factory=list)  # (name, secret shown once)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, message): the first KEPT
    rejected: int = 0  # every error, kept or not
    duplicates: list[tuple[int, str]] = field(default_factory=list)  # (line number, message): skipped, not errors
    sites_indexing: list[int] = field(default_factory=list)  # ids of the sites set to index their logs
    items_to_index: int = 0  # their log items waiting to be indexed (by a server, in the background)

    def error(self, line: int, message: str) -> None:
        self.rejected += 1
        if len(self.errors) < KEPT:
            self.errors.append((line, message))


class Importer:
    """Feeds parsed records into the stores in batches: log items one transaction per run of a
    conversation's lines, memories through the bulk write path (`writes`, needed only if the file holds
    memories: the model and the vector index)."""

    def __init__(
        self,
        *,
        sites: SiteStore,
        logs: LogStore,
        limits: LogLimits,
        max_content_bytes: int,
        writes: MemoryWrites | None = None,
        target_site: str | None = None,
    ) -> None:
        self._sites_store = sites
        self._log_store = logs
        self.limits = limits
        self.max_content_bytes = max_content_bytes
        self._memory = writes
        self.target_site = target_site
        self.report = ImportReport()
        self._sites: dict[str, int] = {}
        self._logs: list[LogRecord] = []
        self._logs_key: tuple[int, str] | None = None
        self._logs_bytes = 0
        self._memories: list[tuple[int, MemoryRecord]] = []
        self._choices: dict[tuple[int, str], tuple[bool | None, str | None]] = {}  # conversation records

    # -- sites --

    def site_id(self, name: str | None) -> int:
        name = self.target_site or name
        if name is None:  # parse_line guarantees a site unless one is mapped
            raise ImportAborted("a record has no site and no --site was given")
        if name not in self._sites:
            site_id, secret = self._run(lambda: ensure_site(self._sites_store, name))
            if secret is not None:
                self.report.sites_created.append((name, secret))
            self._sites[name] = site_id
        return self._sites[name]

    # -- records --

    def add(self, record: Record) -> None:
        if isinstance(record, Header):
            if record.version != FORMAT_VERSION:
                raise ImportAborted(
                    f"line {record.line}: export format version {record.version} is not supported "
                    f"(this memory-server reads version {FORMAT_VERSION})"
                )
        elif isinstance(record, LogRecord):
            self._add_log(record)
        elif isinstance(record, SiteSettings):
            self._flush_logs()
            site_id = self.site_id(record.site)
            name = self.target_site or record.site
            if name is not None:
                self._run(lambda: self._sites_store.set_log_indexing(name, record.index_logs))
            if record.index_logs:
                self.report.sites_indexing.append(site_id)
        elif isinstance(record, ConversationSettings):
            self._flush_logs()
            self._choices[(self.site_id(record.site), record.conversation_id)] = (record.index, record.bucket)
        else:
            self._add_memory(record)

    def finish(self) -> ImportReport:
        self._flush_logs()
        self._flush_memories()
        for site_id in dict.fromkeys(self.report.sites_indexing):
            self.report.items_to_index += self._run(lambda: self._log_store.index_progress(site_id)).waiting  # noqa: B023
        return self.report

    def _error(self, line: int, message: str) -> None:
        self.report.error(line, message)

    # -- log items: one transaction per run of one conversation's consecutive lines --

    def _add_log(self, record: LogRecord) -> None:
        key = (self.site_id(record.site), record.conversation_id)
        size = len(record.text.encode("utf-8"))
        if self._logs and (
            key != self._logs_key
            or len(self._logs) >= MAX_ITEMS
            or self._logs_bytes + size > self.limits.max_batch_bytes
        ):
            self._flush_logs()
        self._logs.append(record)
        self._logs_key = key
        self._logs_bytes += size

    def _flush_logs(self) -> None:
        if not self._logs:
            return
        batch, key = self._logs, self._logs_key
        self._logs, self._logs_key, self._logs_bytes = [], None, 0
        if key is None:  # set whenever a line is queued; here for the type checker
            return
        site_id, conversation_id = key
        items = [(r.seq, r.recorded_at, r.text) for r in batch]
        index, bucket = self._choices.get(key, (None, None))
        outcomes = self._run(
            lambda: self._log_store.import_items(site_id, conversation_id, items, index=index, bucket=bucket)
        )
        for record, outcome in zip(batch, outcomes, strict=True):
            if outcome == APPENDED:
                self.report.items_appended += 1
            elif outcome == PRESENT:
                self.report.items_present += 1
            else:
                self._error(record.line, outcome)

    # -- memories: through the bulk write path of the API (same batches, same word vectors) --

    def _add_memory(self, record: MemoryRecord) -> None:
        if self._memory is None:
            raise ImportAborted(f"line {record.line}: memory records need the model and the vector index")
        self._memories.append((self.site_id(record.site), record))
        if len(self._memories) >= EMBED_BATCH:
            self._flush_memories()

    def _flush_memories(self) -> None:
        batch, self._memories = self._memories, []
        by_site: dict[int, list[MemoryRecord]] = {}
        for site_id, record in batch:
            by_site.setdefault(site_id, []).append(record)
        for site_id, records in by_site.items():
            assert self._memory is not None  # _add_memory refuses memory records without it
            kept = [Kept(r.reference, r.created_at, r.updated_at, r.superseded_by, r.valid_to) for r in records]
            try:
                outcomes = self._memory.remember_many(site_id, [r.memory for r in records], kept)
            except AppError as exc:
                raise ImportAborted(f"storage error: {exc}") from exc
            except Exception as exc:  # the model or the index failed: nothing more can be imported
                raise ImportAborted(f"saving memories failed: {exc}") from exc
            for record, outcome in zip(records, outcomes, strict=True):
                self._memory_outcome(record, outcome)

    def _memory_outcome(self, record: MemoryRecord, outcome: Inserted) -> None:
        if outcome.outcome == CREATED:
            self.report.memories_created += 1
        elif outcome.outcome == PRESENT:
            self.report.memories_present += 1
        elif outcome.outcome == DUPLICATE:
            self.report.memories_duplicate += 1
            if len(self.report.duplicates) < KEPT:
                self.report.duplicates.append(
                    (
                        record.line,
                        f"duplicate of {outcome.reference} (same content, type, location, project, team and bucket)",
                    )
                )
        else:
            self._error(record.line, outcome.detail)

    def _run(self, work: Callable[[], T]) -> T:
        try:
            return work()
        except AppError as exc:
            raise ImportAborted(f"storage error: {exc}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith(("sqlite3", "psycopg")):  # the store failed, not the line
                raise ImportAborted(f"storage error: {exc}") from exc
            raise


def import_stream(
    stream: IO[bytes], importer: Importer, *, progress: Callable[[int], None] | None = None
) -> ImportReport:
    """Parse and import every line; bad lines go to the report. Raises ImportAborted on a fatal error."""
    mapped = importer.target_site is not None
    for number, raw, size in numbered_lines(stream):
        try:
            record = parse_line(
                raw, number, limits=importer.limits, max_content_bytes=importer.max_content_bytes, mapped=mapped
            )
        except AppError as exc:
            importer.report.error(number, str(exc))
        except Exception as exc:  # a line must never stop the import: whatever is wrong with it, report it
            importer.report.error(number, f"invalid_parameters: the line cannot be read ({exc!r})")
        else:
            importer.add(record)
        if progress is not None:
            progress(size)
    return importer.finish()
