"""One line of an `export` file read back: its record kinds (header, site and conversation settings, log
items, memories), each checked as the server checks what it stores, and the numbering of the lines."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from memory_server.auth.secrets import SITE_NAME
from memory_server.errors import AppError, InvalidParameters
from memory_server.logs.validation import MAX_CURSOR_INT, LogLimits, check_conversation_id, serialize_items
from memory_server.memories.validation import check_timestamp, check_word, parse_timestamp, validate_new
from memory_server.storage.memory_rows import EXPORTED_FIELDS
from memory_server.storage.records import NewMemory

MEMORY_FIELDS = frozenset(EXPORTED_FIELDS)
LOG_FIELDS = frozenset({"conversation_id", "seq", "recorded_at", "payload"})
SITE_FIELDS = frozenset({"index_logs"})
CONVERSATION_FIELDS = frozenset({"conversation_id", "index", "bucket"})
# A reference must be addressable as one REST path segment (/v1/memories/{reference}) without escaping.
REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.~:-]{0,127}$")


def _whole(name: str, value: object, low: int, high: int | None) -> int:
    # bool is an int subclass in Python; JSON true is not a number.
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        raise InvalidParameters(f"{name} must be an integer >= {low}" + (f" and <= {high}" if high else ""))
    return value


# --- parsing and validating one line --------------------------------------------------------------------


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
    superseded_by: str | None = None
    valid_to: str | None = None


@dataclass(frozen=True, slots=True)
class SiteSettings:
    """A site's settings: whether it indexes its logs (its log items, imported, are then indexed again)."""

    line: int
    site: str | None
    index_logs: bool


@dataclass(frozen=True, slots=True)
class ConversationSettings:
    """A conversation's own choice to index its items, and its turns' bucket (applied as its items go in)."""

    line: int
    site: str | None
    conversation_id: str
    index: bool | None
    bucket: str | None


Record = Header | LogRecord | MemoryRecord | SiteSettings | ConversationSettings


def check_stored_timestamp(name: str, value: object) -> str:
    """An RFC3339 timestamp with a timezone, kept exactly as given (an import reproduces what it read)."""
    parse_timestamp(name, value)
    return str(value)


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
    if not isinstance(site, str) or not SITE_NAME.fullmatch(site):
        raise InvalidParameters("site must be a site name (1-64 characters of [A-Za-z0-9_-])")
    return site


def _reference(record: dict[str, Any], name: str) -> str | None:
    value = record.get(name)
    if value is not None and (not isinstance(value, str) or not REFERENCE.fullmatch(value)):
        raise InvalidParameters(
            f"{name} must be 1-128 characters of [A-Za-z0-9_.~:-], starting alphanumeric (it has to fit in a URL path)"
        )
    return value


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
            seq=_whole("seq", record["seq"], 0, MAX_CURSOR_INT),
            recorded_at=check_stored_timestamp("recorded_at", record["recorded_at"]),
            text=text,
        )
    if kind == "memory":
        _check_fields(record, kind, MEMORY_FIELDS, ("content",))
        reference, superseded_by = (_reference(record, name) for name in ("reference", "superseded_by"))
        created_at, updated_at = record.get("created_at"), record.get("updated_at")
        memory = validate_new(
            **{
                name: record.get(name)
                for name in (
                    "content",
                    "type",
                    "location",
                    "project",
                    "team",
                    "bucket",
                    "tags",
                    "metadata",
                    "provenance",
                    "occurred_at",
                    "expires_at",
                )
            },
            supersedes=_reference(record, "supersedes"),
            max_content_bytes=max_content_bytes,
        )
        valid_to = record.get("valid_to")
        return MemoryRecord(
            line=line,
            site=_check_site(record, mapped),
            reference=reference,
            memory=memory,
            created_at=None if created_at is None else check_stored_timestamp("created_at", created_at),
            updated_at=None if updated_at is None else check_stored_timestamp("updated_at", updated_at),
            superseded_by=superseded_by,
            # Normalised as occurred_at is: time windows compare it with theirs as text.
            valid_to=None if valid_to is None else check_timestamp("valid_to", valid_to),
        )
    if kind == "site":
        _check_fields(record, kind, SITE_FIELDS, ("index_logs",))
        if not isinstance(record["index_logs"], bool):
            raise InvalidParameters("index_logs must be true or false")
        return SiteSettings(line=line, site=_check_site(record, mapped), index_logs=record["index_logs"])
    if kind == "conversation":
        _check_fields(record, kind, CONVERSATION_FIELDS, ("conversation_id",))
        index = record.get("index")
        if index is not None and not isinstance(index, bool):
            raise InvalidParameters("index must be true, false or null")
        return ConversationSettings(
            line=line,
            site=_check_site(record, mapped),
            conversation_id=check_conversation_id(record["conversation_id"]),
            index=index,
            bucket=check_word("bucket", record.get("bucket")),
        )
    if kind == "header":  # other header fields are informative: a reader ignores them
        if "version" not in record:
            raise InvalidParameters("missing field(s) version in a header record")
        return Header(line=line, version=_whole("version", record["version"], 1, None))
    raise InvalidParameters(f"unknown kind {kind!r}: expected memory, log_item, site, conversation or header")


def numbered_lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes, int]]:
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


def has_memory_records(stream: IO[bytes]) -> bool:
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
