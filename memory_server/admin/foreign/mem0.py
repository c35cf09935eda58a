"""Memories exported from mem0: what `Memory.get_all()` (the open-source library) or `MemoryClient.get_all()`
(the platform) returns, saved as JSON: `{"results": [...]}` (or `"memories"`), a bare list, or JSON Lines of
the same items. An item is `{"id", "memory", "hash", "metadata", "created_at", "updated_at", "user_id",
"agent_id", "run_id", "actor_id", "role"}`; the platform adds `categories`, `app_id`, `expiration_date`.

With graph memory on, a `get_all()` answer also holds `relations`: `{"source", "relationship", "target"}` (the
library writes `destination` for `target`), each imported as a relation memory "SOURCE relationship TARGET",
tagged `entity:` with both ends and `relation:` with the relationship, as the MCP memory server's relations are.

A memory's text is `memory`; `user_id` (else `agent_id`, else `run_id`) is its bucket; `created_at` its
`occurred_at`; `categories`, and `metadata`'s own `categories`/`category`/`tags`, are its tags (with
`agent:…` when both a user and an agent are named); `expiration_date` its `expires_at`; `metadata` is kept.
Its reference is `mem0_<id>`, so importing the same export again finds each one present.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

from memory_server.admin.foreign.records import (
    MAX_DOCUMENT_BYTES,
    MAX_LINE_BYTES,
    Candidate,
    Item,
    Problem,
    Tags,
    bounded_lines,
    files_under,
    json_problem,
    outside,
    read_bounded,
    relation,
    tag_list,
    timestamp,
    too_large,
    word,
)
from memory_server.errors import AppError

SUFFIXES = (".json", ".jsonl")
SOURCE = "mem0"
LISTS = ("results", "memories")  # where a saved get_all() answer keeps its items
RELATIONS = "relations"  # and, with graph memory on, the graph's edges
_SPACE = re.compile(r"[ \t\r\n]*")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.~:-]{0,122}$")  # mem0_<id> must be one of our references


def read(path: Path, *, max_content_bytes: int, progress: Callable[[int], None]) -> Iterator[Item]:
    del max_content_bytes  # a mem0 memory is one short fact; one too long is reported when it is validated
    for file in [path] if path.is_file() else files_under(path, SUFFIXES):
        escaped = None if file is path else outside(path, file)
        if escaped is not None:
            yield escaped
        elif file.suffix.lower() == ".jsonl":
            yield from _lines(file, progress)
        else:
            yield from _document(file, progress)


def _lines(file: Path, progress: Callable[[int], None]) -> Iterator[Item]:
    with open(file, "rb") as stream:
        for number, raw, size in bounded_lines(stream):
            progress(size)
            where = f"{file.name}:{number}"
            if raw is None:
                yield Problem(where, too_large(size, MAX_LINE_BYTES, "the line"))
                continue
            if not raw.strip():
                continue
            refused = json_problem(raw, "the line")
            if refused is not None:
                yield Problem(where, refused)
                continue
            try:
                item = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                yield Problem(where, f"not valid JSON ({exc})")
                continue
            yield _relation(item, where) if _is_relation(item) else _memory(item, where)


def _document(file: Path, progress: Callable[[int], None]) -> Iterator[Item]:
    """A JSON document, read whole up to MAX_DOCUMENT_BYTES (it was checked as JSON first); each item is
    reported with its line."""
    raw = read_bounded(file, MAX_DOCUMENT_BYTES)
    if raw is None:
        size = file.stat().st_size
        progress(size)
        yield Problem(
            file.name,
            too_large(size, MAX_DOCUMENT_BYTES, "the file") + ": save it as JSON Lines (.jsonl), one memory a line",
        )
        return
    refused = json_problem(raw, "the file")
    if refused is not None:
        progress(len(raw))
        yield Problem(file.name, refused)
        return
    try:
        text = raw.decode("utf-8")
        json.loads(text)
    except UnicodeDecodeError:
        progress(len(raw))
        yield Problem(file.name, "the file is not valid UTF-8")
        return
    except json.JSONDecodeError as exc:
        progress(len(raw))
        yield Problem(
            f"{file.name}:{exc.lineno}", f"not valid JSON ({exc.msg} at column {exc.colno}); the file is skipped"
        )
        return
    except (ValueError, RecursionError) as exc:
        progress(len(raw))
        yield Problem(file.name, f"not valid JSON ({exc}); the file is skipped")
        return
    ratio, reported = len(raw) / max(len(text), 1), 0  # progress in bytes, from positions in the text
    line, seen, found = 1, 0, False
    for start, end, item, edge in _items(text):
        line += text.count("\n", seen, start)
        seen, found = start, True
        yield _relation(item, f"{file.name}:{line}") if edge else _memory(item, f"{file.name}:{line}")
        done = int(end * ratio)
        progress(done - reported)
        reported = done
    progress(len(raw) - reported)
    if not found:
        yield Problem(file.name, f"no memories found: expected a list, or an object with {' or '.join(LISTS)}")


def _items(text: str) -> Iterator[tuple[int, int, Any, bool]]:
    """(start, end, value, whether it is a relation) of each item of the document's list: the document itself,
    or its "results" (or "memories") member, and its "relations". The text is valid JSON, so this small
    scanner need not recover from errors."""
    decoder = json.JSONDecoder()
    at = _space(text, 0)
    if text.startswith("[", at):
        yield from _elements(text, at, decoder, edges=None)
    elif text.startswith("{", at):
        at = _space(text, at + 1)
        while not text.startswith("}", at):
            key, at = decoder.raw_decode(text, at)
            at = _space(text, _space(text, at) + 1)  # past the ':'
            if (key in LISTS or key == RELATIONS) and text.startswith("[", at):
                at = _space(text, (yield from _elements(text, at, decoder, edges=key == RELATIONS)))
            else:
                at = _space(text, decoder.raw_decode(text, at)[1])
            if text.startswith(",", at):
                at = _space(text, at + 1)


def _elements(
    text: str, at: int, decoder: json.JSONDecoder, *, edges: bool | None
) -> Generator[tuple[int, int, Any, bool], None, int]:
    """The array's elements, relations if `edges` (None: each as it looks); returns the position after its ']'."""
    at = _space(text, at + 1)  # past the '['
    while not text.startswith("]", at):
        value, end = decoder.raw_decode(text, at)
        yield at, end, value, _is_relation(value) if edges is None else edges
        at = _space(text, end)
        if text.startswith(",", at):
            at = _space(text, at + 1)
    return at + 1


def _space(text: str, at: int) -> int:
    """The position of the first character at or after `at` that is not JSON whitespace."""
    match = _SPACE.match(text, at)
    return match.end() if match is not None else at


def _is_relation(item: object) -> bool:
    return isinstance(item, dict) and "relationship" in item and "memory" not in item


def _relation(item: object, where: str) -> Item:
    """A graph edge as a relation memory, as the MCP memory server's relations are imported."""
    if not isinstance(item, dict):
        return Problem(where, "a relation must be a JSON object")
    ends = {"source": item.get("source"), "relationship": item.get("relationship")}
    ends["target"] = item.get("target", item.get("destination"))
    missing = [key for key, value in ends.items() if not isinstance(value, str) or not value.strip()]
    if missing:
        return Problem(where, f"a relation needs {', '.join(missing)} (non-empty strings)")
    types = {key: item[key] for key in ("source_type", "target_type") if isinstance(item.get(key), str)}
    source, kind, target = str(ends["source"]), str(ends["relationship"]), str(ends["target"])
    return relation(where, source, kind, target, origin=SOURCE, metadata=types)


def _memory(item: object, where: str) -> Item:
    if not isinstance(item, dict):
        return Problem(where, "a memory must be a JSON object")
    content = item.get("memory")
    if not isinstance(content, str) or not content.strip():
        return Problem(where, 'a memory needs its text in "memory" (a non-empty string)')
    try:
        occurred_at = timestamp("created_at", item.get("created_at"))
        expires_at = timestamp("expiration_date", item.get("expiration_date"))
    except AppError as exc:
        return Problem(where, exc.message)
    given = item.get("metadata")
    metadata: dict[str, Any] = given if isinstance(given, dict) else {}
    ids = {key: item[key] for key in ("user_id", "agent_id", "run_id") if isinstance(item.get(key), str)}
    tags = Tags()
    tags.extend(tag_list(item.get("categories")))
    for key in ("categories", "category", "tags"):
        tags.extend(tag_list(metadata.get(key)))
    if "user_id" in ids and "agent_id" in ids:
        tags.add(ids["agent_id"], "agent:")
    bucket = next(
        (made for key in ("user_id", "agent_id", "run_id") if key in ids and (made := word(ids[key])) is not None), None
    )
    provenance: dict[str, Any] = {"source": SOURCE, **ids}
    if "agent_id" in ids:
        provenance["agent"] = ids["agent_id"]
    identifier = item.get("id")
    if isinstance(identifier, str | int) and not isinstance(identifier, bool):
        provenance["id"] = identifier
    reference = f"mem0_{identifier}" if isinstance(identifier, str) and _ID.fullmatch(identifier) else None
    fields = {
        "content": content,
        "bucket": bucket,
        "tags": list(tags.values),
        "metadata": metadata,
        "provenance": provenance,
        "occurred_at": occurred_at,
        "expires_at": expires_at,
    }
    return Candidate(where, fields, reference)
