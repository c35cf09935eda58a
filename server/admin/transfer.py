"""Bulk export and import of a data directory as JSON Lines, and the online SQLite backup.

The file: one JSON object per line, UTF-8.

    {"kind": "header", "version": 1, "exported_at", "model", "site", "counts": {...}}   (first line)
    {"kind": "memory", "site", "reference", "content", "type", "location", "project", "team", "bucket",
     "tags", "metadata", "provenance", "occurred_at", "created_at", "updated_at"}
    {"kind": "log_item", "site", "conversation_id", "seq", "recorded_at", "payload"}

Export reads SQLite only, inside one read transaction, so the file is a consistent snapshot even while a
server appends. It never carries credentials (site secrets, tokens) nor vectors: import embeds again.
Memories come first, in creation order; then each conversation's items in seq order, conversations in
order of last activity, so that `list_conversations` orders them the same way after an import.

Import is idempotent. A memory keeps its reference: a reference already present is skipped, and another
reference with the same content and filing is skipped as a duplicate. Log items keep their seq and
recorded_at: a conversation's items are appended only where they continue it without a gap, an item
already present with the identical payload is skipped, and a different payload at a present seq is a
conflict. A bad line is reported with its number and skipped; every other line is imported.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Mapping, Sequence, TextIO, TypeVar

from server.auth import core as auth
from server.storage.sqlite.db import connect
from server.errors import AppError, InvalidParameters, NotFound
from server.storage.files import private_file, refuse_live_target
from server.logs.store import MAX_ITEMS, MAX_SQLITE_INT, LogLimits, append_batch, check_bound, check_conversation_id, \
    serialize_items
from server.memories import rows as memories
from server.memories.rows import Inserted, Kept, NewMemory, parse_timestamp, validate_new
from server.memories.service import EMBED_BATCH

T = TypeVar("T")

FORMAT_VERSION = 1
MEMORY_FIELDS = frozenset({"reference", "content", "type", "location", "project", "team", "bucket", "tags",
                           "metadata", "provenance", "occurred_at", "created_at", "updated_at"})
LOG_FIELDS = frozenset({"conversation_id", "seq", "recorded_at", "payload"})
# A reference must be addressable as one REST path segment (/v1/memories/{reference}) without escaping.
REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.~:-]{0,127}$")


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# Characters JSON leaves raw inside strings but that str.splitlines() and many JSON Lines readers take as
# line breaks. Outside strings they cannot occur, so escaping them keeps every value and one record a line.
_LINE_SAFE = str.maketrans({"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


# --- export -------------------------------------------------------------------------------------------


class Export:
    """A consistent snapshot of the database, streamed as JSON Lines.

    The snapshot is fixed by the first read inside BEGIN (WAL: writers go on, we keep seeing the
    database as it was). Call `close()` to end the read transaction.
    """

    def __init__(self, db_path: Path, *, site: str | None = None) -> None:
        if not db_path.is_file():
            raise NotFound(f"no database at {db_path}: is --data-dir right?")
        self._conn = connect(db_path, readonly=True)
        try:
            self._conn.execute("BEGIN")
            self._site_id: int | None = None
            if site is not None:
                row = self._conn.execute("SELECT id FROM sites WHERE name = ?", (site,)).fetchone()
                if row is None:
                    raise NotFound(f"no site named {site!r}")
                self._site_id = int(row[0])
            self.site = site
            self.counts = self._counts()
        except BaseException:
            self.close()
            raise

    @property
    def total(self) -> int:
        return self.counts["memories"] + self.counts["log_items"]

    def _where(self, alias: str) -> tuple[str, tuple[Any, ...]]:
        if self._site_id is None:
            return "", ()
        return f" WHERE {alias}.site_id = ?", (self._site_id,)

    def _counts(self) -> dict[str, int]:
        counts = {}
        for name in ("memories", "conversations", "log_items"):
            where, args = self._where("t")
            counts[name] = int(self._conn.execute(f"SELECT count(*) FROM {name} t{where}", args).fetchone()[0])
        return counts

    def header(self, *, model: str | None) -> dict[str, Any]:
        return {"kind": "header", "version": FORMAT_VERSION, "exported_at": auth.now_rfc3339(), "model": model,
                "site": self.site, "counts": self.counts}

    def lines(self) -> Iterator[str]:
        """Every record as one line of JSON (without the newline): memories, then log items."""
        for line in self._memory_lines():
            yield line.translate(_LINE_SAFE)
        for line in self._log_lines():
            yield line.translate(_LINE_SAFE)

    def _memory_lines(self) -> Iterator[str]:
        where, args = self._where("m")
        rows = self._conn.execute(
            "SELECT s.name AS site, m.reference, m.content, m.type, m.location, m.project, m.team, m.bucket,"
            " m.tags, m.metadata, m.provenance, m.occurred_at, m.created_at, m.updated_at"
            f" FROM memories m JOIN sites s ON s.id = m.site_id{where} ORDER BY m.id",
            args,
        )
        for row in rows:
            record = {"kind": "memory", **dict(row)}
            for name in ("tags", "metadata", "provenance"):
                record[name] = json.loads(row[name])
            yield _dumps(record)

    def _log_lines(self) -> Iterator[str]:
        where, args = self._where("c")
        conversations = self._conn.execute(
            "SELECT c.site_id, s.name, c.conversation_id FROM conversations c JOIN sites s ON s.id = c.site_id"
            f"{where} ORDER BY c.site_id, c.last_activity_us, c.conversation_id",
            args,
        )
        for site_id, site, conversation_id in conversations:
            items = self._conn.execute(
                "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = ? AND conversation_id = ?"
                " ORDER BY seq",
                (site_id, conversation_id),
            )
            for seq, recorded_at, payload in items:
                head = _dumps({"kind": "log_item", "site": site, "conversation_id": conversation_id, "seq": seq,
                               "recorded_at": recorded_at})
                # The stored text is already compact JSON (keys in their appended order): spliced in as is.
                yield f'{head[:-1]},"payload":{payload}}}'

    def close(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        finally:
            self._conn.close()


def write_export(export: Export, out: TextIO, *, model: str | None,
                 progress: Callable[[int], None] | None = None) -> int:
    """Write the header and every record to `out`; return the number of records."""
    out.write(_dumps(export.header(model=model)) + "\n")
    written = 0
    for line in export.lines():
        out.write(line + "\n")
        written += 1
        if progress is not None and written % 500 == 0:
            progress(500)
    if progress is not None:
        progress(written % 500)
    return written


# --- import: parsing and validating one line ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Header:
    line: int
    version: int


@dataclass(frozen=True, slots=True)
class LogRecord:
    line: int
    site: str | None
    conversation_id: str
    seq: int
    recorded_at: str
    text: str  # the payload serialized exactly as append_memory stores it


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    line: int
    site: str | None
    reference: str | None
    memory: NewMemory
    created_at: str | None
    updated_at: str | None


Record = Header | LogRecord | MemoryRecord


def check_stored_timestamp(name: str, value: object) -> str:
    """An RFC3339 timestamp with a timezone, kept exactly as given (an import reproduces what it read)."""
    parse_timestamp(name, value)
    return value  # type: ignore[return-value]


def _check_fields(record: dict[str, Any], kind: str, allowed: frozenset[str], required: Sequence[str]) -> None:
    unknown = set(record) - allowed - {"kind", "site"}
    if unknown:
        raise InvalidParameters(f"unknown field(s) {', '.join(sorted(unknown))} in a {kind} record")
    missing = [name for name in required if name not in record]
    if missing:
        raise InvalidParameters(f"missing field(s) {', '.join(missing)} in a {kind} record")


def _check_site(record: dict[str, Any], mapped: bool) -> str | None:
    if mapped:  # --site NAME: everything goes there, whatever the file says
        return None
    site = record.get("site")
    if not isinstance(site, str) or not auth.SITE_NAME.fullmatch(site):
        raise InvalidParameters("site must be a site name (1-64 characters of [A-Za-z0-9_-])")
    return site


def parse_line(raw: bytes, line: int, *, limits: LogLimits, max_content_bytes: int, mapped: bool) -> Record:
    """One line of an export file -> a validated record; raises AppError saying what is wrong."""
    try:
        record = json.loads(raw)
    except UnicodeDecodeError:
        raise InvalidParameters("the line is not valid UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise InvalidParameters(f"not valid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise InvalidParameters("each line must be a JSON object")
    kind = record.get("kind")
    if kind == "log_item":
        _check_fields(record, kind, LOG_FIELDS, ("conversation_id", "seq", "recorded_at", "payload"))
        try:
            text = serialize_items([record["payload"]], limits)[0]
        except AppError as exc:
            exc.message = exc.message.replace("items[0]", "payload")
            raise
        return LogRecord(
            line=line,
            site=_check_site(record, mapped),
            conversation_id=check_conversation_id(record["conversation_id"]),
            seq=check_bound("seq", record["seq"], 0, MAX_SQLITE_INT),
            recorded_at=check_stored_timestamp("recorded_at", record["recorded_at"]),
            text=text,
        )
    if kind == "memory":
        _check_fields(record, kind, MEMORY_FIELDS, ("content",))
        reference = record.get("reference")
        if reference is not None and (not isinstance(reference, str) or not REFERENCE.fullmatch(reference)):
            raise InvalidParameters("reference must be 1-128 characters of [A-Za-z0-9_.~:-], starting alphanumeric "
                                    "(it has to fit in a URL path)")
        created_at, updated_at = record.get("created_at"), record.get("updated_at")
        memory = validate_new(
            **{name: record.get(name) for name in ("content", "type", "location", "project", "team", "bucket",
                                                   "tags", "metadata", "provenance", "occurred_at")},
            max_content_bytes=max_content_bytes,
        )
        return MemoryRecord(
            line=line,
            site=_check_site(record, mapped),
            reference=reference,
            memory=memory,
            created_at=None if created_at is None else check_stored_timestamp("created_at", created_at),
            updated_at=None if updated_at is None else check_stored_timestamp("updated_at", updated_at),
        )
    if kind == "header":  # other header fields are informative: a reader ignores them
        if "version" not in record:
            raise InvalidParameters("missing field(s) version in a header record")
        return Header(line=line, version=check_bound("version", record["version"], 1, None))
    raise InvalidParameters(f"unknown kind {kind!r}: expected memory, log_item or header")


def numbered_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line without surrounding whitespace, bytes read) per non-blank line.

    Binary, split on b"\n" only: a JSON text never holds a raw newline, but U+2028 and friends may
    appear in strings and must not split a record.
    """
    pending = 0
    for number, raw in enumerate(stream, start=1):
        pending += len(raw)
        stripped = raw.strip()
        if stripped:
            yield number, stripped, pending
            pending = 0


def has_memory_records(stream: BinaryIO) -> bool:
    """Whether any line is a memory record (decides, before anything is written, if the index is needed).

    Leaves the stream where it was. Only lines mentioning "memory" are parsed, so a log-only file scans fast.
    """
    start = stream.tell()
    try:
        for _, raw, _ in numbered_lines(stream):
            if b"memory" not in raw:
                continue
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and record.get("kind") == "memory":
                return True
        return False
    finally:
        stream.seek(start)


# --- import: log items ----------------------------------------------------------------------------------

APPENDED = "appended"
PRESENT = "present"


def import_log_items(
    conn: sqlite3.Connection, site_id: int, conversation_id: str, items: Sequence[tuple[int, str, str]]
) -> list[str]:
    """Import one conversation's items `(seq, recorded_at, payload text)` inside the caller's write transaction.

    Returns one outcome per item: "appended", "present" (that seq holds the identical payload), or an
    error message (a different payload at that seq, or a seq that would leave a gap). New items must
    continue the conversation: seq == its item count. Consecutive new items sharing a recorded_at go in
    as one batch, so each keeps its recorded_at and the batches keep their boundaries.
    """
    row = conn.execute(
        "SELECT item_count FROM conversations WHERE site_id = ? AND conversation_id = ?", (site_id, conversation_id)
    ).fetchone()
    count = int(row[0]) if row else 0
    outcomes: list[str] = []
    new: list[tuple[int, str, str]] = []
    for seq, recorded_at, text in items:
        if seq < count:
            stored = conn.execute(
                "SELECT payload FROM log_items WHERE site_id = ? AND conversation_id = ? AND seq = ?",
                (site_id, conversation_id, seq),
            ).fetchone()
            if stored is not None and _same_payload(stored[0], text):
                outcomes.append(PRESENT)
            else:
                outcomes.append(f"conflict: conversation {conversation_id} already has a different item at seq {seq}")
        elif seq == count + len(new):
            new.append((seq, recorded_at, text))
            outcomes.append(APPENDED)
        elif seq < count + len(new):  # the same seq twice in this run of lines
            if new[seq - count][2] == text:
                outcomes.append(PRESENT)
            else:
                outcomes.append(f"conflict: seq {seq} of conversation {conversation_id} appears twice in the file "
                                "with different payloads")
        else:
            outcomes.append(
                f"gap: conversation {conversation_id} has {count + len(new)} items, so the next seq must be "
                f"{count + len(new)}, not {seq}"
            )
    start = 0
    while start < len(new):
        end = start + 1
        while end < len(new) and new[end][1] == new[start][1]:
            end += 1
        append_batch(conn, site_id, conversation_id, [text for _, _, text in new[start:end]], None,
                     recorded_at=new[start][1])
        start = end
    return outcomes


def _same_payload(stored: str, text: str) -> bool:
    """Whether a stored payload is the imported one: the same JSON, keys in the same order."""
    if stored == text:
        return True
    try:  # stored by some other writer in another spacing: compare the canonical forms
        return _dumps(json.loads(stored)) == text
    except ValueError:
        return False


# --- import: the whole stream ---------------------------------------------------------------------------


class ImportAborted(Exception):
    """The import cannot go on (storage failure, unsupported format); what was committed stays."""


@dataclass
class ImportReport:
    memories_created: int = 0
    memories_present: int = 0
    memories_duplicate: int = 0
    items_appended: int = 0
    items_present: int = 0
    sites_created: list[tuple[str, str]] = field(default_factory=list)  # (name, secret shown once)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, message)
    duplicates: list[tuple[int, str]] = field(default_factory=list)  # (line number, message): skipped, not errors


class Importer:
    """Feeds parsed records into SQLite (and the index, for memories) in batches.

    `write` runs a function in one write transaction (the process's Writer); `read` gives a read
    connection. `memory_service` is needed only if the file holds memories.
    """

    def __init__(self, *, write: Callable[[Callable[[sqlite3.Connection], Any]], Any],
                 read: Callable[[], sqlite3.Connection], limits: LogLimits, max_content_bytes: int,
                 memory_service: Any = None, target_site: str | None = None) -> None:
        self._write = write
        self._read = read
        self.limits = limits
        self.max_content_bytes = max_content_bytes
        self._memory = memory_service
        self.target_site = target_site
        self.report = ImportReport()
        self._sites: dict[str, int] = {}
        self._logs: list[LogRecord] = []
        self._logs_key: tuple[int, str] | None = None
        self._logs_bytes = 0
        self._memories: list[tuple[int, MemoryRecord]] = []

    # -- sites --

    def site_id(self, name: str | None) -> int:
        name = self.target_site or name
        if name is None:  # parse_line guarantees a site unless one is mapped
            raise ImportAborted("a record has no site and no --site was given")
        if name not in self._sites:
            site_id, secret = self._write(lambda conn: auth.ensure_site(conn, name))
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
        else:
            self._add_memory(record)

    def finish(self) -> ImportReport:
        self._flush_logs()
        self._flush_memories()
        return self.report

    def _error(self, line: int, message: str) -> None:
        self.report.errors.append((line, message))

    # -- log items: one transaction per run of one conversation's consecutive lines --

    def _add_log(self, record: LogRecord) -> None:
        key = (self.site_id(record.site), record.conversation_id)
        size = len(record.text.encode("utf-8"))
        if self._logs and (key != self._logs_key or len(self._logs) >= MAX_ITEMS
                           or self._logs_bytes + size > self.limits.max_batch_bytes):
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
        outcomes = self._run(lambda conn: import_log_items(conn, site_id, conversation_id, items))
        for record, outcome in zip(batch, outcomes):
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
            kept = [Kept(r.reference, r.created_at, r.updated_at) for r in records]
            try:
                outcomes = self._memory.remember_many(site_id, [r.memory for r in records], kept)
            except (sqlite3.Error, AppError) as exc:
                raise ImportAborted(f"storage error: {exc}") from exc
            except Exception as exc:  # the model or the index failed: nothing more can be imported
                raise ImportAborted(f"saving memories failed: {exc}") from exc
            for record, outcome in zip(records, outcomes):
                self._memory_outcome(record, outcome)

    def _memory_outcome(self, record: MemoryRecord, outcome: Inserted) -> None:
        if outcome.outcome == memories.CREATED:
            self.report.memories_created += 1
        elif outcome.outcome == memories.PRESENT:
            self.report.memories_present += 1
        elif outcome.outcome == memories.DUPLICATE:
            self.report.memories_duplicate += 1
            self.report.duplicates.append(
                (record.line, f"duplicate of {outcome.reference} (same content, type, location, project, team and "
                              "bucket)")
            )
        else:
            self._error(record.line, outcome.detail)

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return self._write(work)
        except (sqlite3.Error, AppError) as exc:
            raise ImportAborted(f"storage error: {exc}") from exc


def import_stream(stream: BinaryIO, importer: Importer, *,
                  progress: Callable[[int], None] | None = None) -> ImportReport:
    """Parse and import every line; bad lines go to the report. Raises ImportAborted on a fatal error."""
    mapped = importer.target_site is not None
    for number, raw, size in numbered_lines(stream):
        try:
            record = parse_line(raw, number, limits=importer.limits, max_content_bytes=importer.max_content_bytes,
                                mapped=mapped)
        except AppError as exc:
            importer.report.errors.append((number, str(exc)))
        except Exception as exc:  # a line must never stop the import: whatever is wrong with it, report it
            importer.report.errors.append((number, f"invalid_parameters: the line cannot be read ({exc!r})"))
        else:
            importer.add(record)
        if progress is not None:
            progress(size)
    return importer.finish()


# --- backup ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackupResult:
    path: Path
    size: int
    counts: dict[str, int]
    schema_version: int


BACKUP_COUNTED = ("sites", "tokens", "memories", "conversations", "log_items")


def backup_database(source: Path, dest: Path, *, force: bool = False,
                    live: Mapping[Path, str] | None = None) -> BackupResult:
    """Copy the live database to `dest` with SQLite's online backup API, then verify the copy.

    The copy is made in one backup step, under one read transaction: a consistent snapshot that holds
    every transaction committed before it began, while writers go on (WAL). It is written beside `dest`
    and renamed into place only once it passes `PRAGMA quick_check`, so `dest` is never a partial file.
    `live`: the paths a running server writes (see server.storage.files.live_paths), never a target; the copy is 0600.
    """
    if not source.is_file():
        raise NotFound(f"no database at {source}: is --data-dir right?")
    if dest.is_dir():
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        dest = dest / f"memory-{stamp}.db"
    refuse_live_target(dest, {source: "the live database", **(live or {})})
    if dest.exists() and not force:
        raise FileExistsError(f"{dest} exists; pass --force to overwrite it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = private_file(dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp"))
    src = connect(source, readonly=True)
    try:
        target = sqlite3.connect(tmp, isolation_level=None)
        try:
            src.backup(target)  # pages=-1: the whole database in one step, so one consistent snapshot
            # A single self-contained file: no -wal/-shm beside the backup.
            target.execute("PRAGMA journal_mode = DELETE")
            target.execute("PRAGMA synchronous = FULL")
        finally:
            target.close()
        _verify(tmp)
        _fsync(tmp)
        os.replace(tmp, dest)
        _fsync(dest.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    counts, version = _verify(dest)
    return BackupResult(path=dest, size=dest.stat().st_size, counts=counts, schema_version=version)


def _verify(path: Path) -> tuple[dict[str, int], int]:
    """Open a backup, check it, count its rows; raises RuntimeError if it is not sound."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        result = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
        if result != ["ok"]:
            raise RuntimeError(f"the backup {path} failed quick_check: {'; '.join(result[:5])}")
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        counts = {name: int(conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0])
                  for name in BACKUP_COUNTED if name in tables}
        return counts, version
    finally:
        conn.close()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
