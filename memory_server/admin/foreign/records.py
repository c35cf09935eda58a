"""What every foreign format becomes: candidate memories (`remember`'s fields, with where each came from) and
problems (a record that cannot be read, with its file and line). Readers yield both in file order; the import
validates the candidates as `remember` does and writes them through the bulk path of `import`.

Whatever the input, an import holds at most one record in memory, and a record is read only up to a bound
(`MAX_LINE_BYTES`, `MAX_NOTE_BYTES`, `MAX_DOCUMENT_BYTES`, `MAX_CONTAINERS`): a larger one is reported and
skipped unread. A file reached through a link out of the folder imported is reported and skipped unread."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import IO, Any, Protocol

from memory_server.errors import InvalidParameters
from memory_server.memories.validation import MAX_TAGS, MAX_WORD
from memory_server.timestamps import parse_rfc3339

MiB = 1024 * 1024
MAX_LINE_BYTES = 4 * MiB  # a JSON Lines record (an mcp-memory entity, a mem0 memory)
MAX_NOTE_BYTES = 4 * MiB  # a Markdown note
MAX_DOCUMENT_BYTES = 8 * MiB  # a mem0 JSON document, read whole (JSON Lines has no file limit)
# Objects and arrays in one JSON text: an empty one costs ~60 bytes parsed for 3 read, so their number,
# not the text's size, bounds what parsing it takes.
MAX_CONTAINERS = 200_000


@dataclass(frozen=True)
class Candidate:
    """One memory to remember: `fields` are remember's (content, type, location, bucket, tags, metadata,
    provenance, occurred_at, expires_at); `reference` keeps a stable one (a re-import finds it present)."""

    where: str  # "memory.jsonl:12", "notes/coffee.md:7"
    fields: dict[str, Any]
    reference: str | None = None


@dataclass(frozen=True)
class Problem:
    where: str
    message: str


Item = Candidate | Problem


class Reader(Protocol):
    def __call__(self, path: Path, *, max_content_bytes: int, progress: Callable[[int], None]) -> Iterator[Item]:
        """Every record under `path`, in order; `progress(n)` after each n bytes read."""
        ...


@dataclass
class Tags:
    """Tags as memories take them (at most MAX_TAGS words of [A-Za-z0-9_.:-]): foreign names made into words,
    duplicates dropped, order kept."""

    values: list[str] = field(default_factory=list)

    def add(self, value: object, prefix: str = "") -> None:
        made = word(f"{prefix}{value}") if isinstance(value, str) and value.strip() else None
        if made is not None and made not in self.values and len(self.values) < MAX_TAGS:
            self.values.append(made)

    def extend(self, values: Iterable[object], prefix: str = "") -> None:
        for value in values:
            self.add(value, prefix)


_NOT_WORD = re.compile(r"[^A-Za-z0-9_.:-]+")


def relation(
    where: str, source: str, relationship: str, target: str, *, origin: str, metadata: dict[str, Any] | None = None
) -> Candidate:
    """A graph edge as a relation memory, "SOURCE relationship TARGET", tagged with both ends (`entity:`) and the
    relationship (`relation:`): the MCP memory server's relations and mem0's alike. `origin` is the source tool."""
    tags = Tags()
    tags.add(source, "entity:")
    tags.add(target, "entity:")
    tags.add(relationship, "relation:")
    fields = {
        "content": f"{source} {relationship.replace('_', ' ')} {target}",
        "type": "relation",
        "tags": list(tags.values),
        "metadata": {"from": source, "to": target, "relation_type": relationship, **(metadata or {})},
        "provenance": {"source": origin},
    }
    return Candidate(where, fields)


def word(text: str) -> str | None:
    """A foreign label as a short word (a tag, a type, a bucket): runs of other characters become "-", and it
    starts with a letter or digit. None when nothing is left."""
    made = _NOT_WORD.sub("-", text.strip()).lstrip("_.:-")[:MAX_WORD].rstrip("-")
    return made or None


def tag_list(value: object) -> list[str]:
    """Tags given as a list, or as one comma-separated string (both are common in front matter and metadata)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, str)]
    return []


def timestamp(name: str, value: object) -> str | None:
    """An RFC3339 timestamp from an ISO date or datetime (text, or as YAML reads it). A datetime without a
    timezone is taken as UTC; a date is its midnight UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime.combine(value, time(), tzinfo=UTC)
    elif isinstance(value, str):
        found = parse_rfc3339(value.strip())
        if found is None:
            raise InvalidParameters(f"{name} {value!r} is not an ISO 8601 date or time")
        parsed = found
    else:
        raise InvalidParameters(f"{name} must be an ISO 8601 date or time")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC).isoformat().replace("+00:00", "Z")
    except OverflowError:
        raise InvalidParameters(f"{name} {value!r} lies outside years 1-9999") from None


def total_bytes(path: Path, suffixes: tuple[str, ...]) -> int:
    """The size of what a reader will read: the file, or every file under the folder with these suffixes."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in files_under(path, suffixes) if not outside(path, f))


def outside(folder: Path, file: Path) -> Problem | None:
    """A file found under `folder` whose real path is not inside it (a link to /etc/passwd, to a secret
    beside the folder): reported, never read. None for a file of the folder."""
    real = file.resolve()
    if real.is_relative_to(folder.resolve()):
        return None
    return Problem(file.relative_to(folder).as_posix(), "a link to a file outside the folder imported; skipped unread")


def too_large(size: int, limit: int, what: str) -> str:
    return f"{what} is {size:,} bytes, more than the {limit // MiB} MiB it may be; skipped unread"


def read_bounded(file: Path, limit: int) -> bytes | None:
    """The file's bytes, or None when it holds more than `limit` (only limit + 1 bytes are read)."""
    with open(file, "rb") as stream:
        raw = stream.read(limit + 1)
    return raw if len(raw) <= limit else None


def bounded_lines(stream: IO[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None, int]]:
    """(line number, the line or None when longer than `limit`, bytes read) for every line: a long line is
    read past in pieces, never held whole."""
    number = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        number += 1
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield number, raw, len(raw)
            continue
        size = len(raw)
        while not raw.endswith(b"\n"):
            raw = stream.readline(MiB)
            if not raw:
                break
            size += len(raw)
        yield number, None, size


def json_problem(raw: bytes, what: str) -> str | None:
    """Why a JSON text is not parsed (too many objects and arrays to hold), or None."""
    containers = raw.count(b"{") + raw.count(b"[")  # an upper bound: brackets in strings count too
    if containers > MAX_CONTAINERS:
        return f"{what} holds more than {MAX_CONTAINERS:,} objects and arrays; skipped"
    return None


def files_under(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Files with these suffixes under the folder, in path order; hidden files and folders (.git, .obsidian)
    are left out."""
    found = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.is_file() and path.suffix.lower() in suffixes:
            found.append(path)
    return sorted(found)
