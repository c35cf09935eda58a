"""The knowledge graph of the MCP reference `memory` server (modelcontextprotocol/servers, src/memory): JSON
Lines, `{"type": "entity", "name", "entityType", "observations": [...]}` and `{"type": "relation", "from",
"to", "relationType"}` (its `memory.jsonl`, or older `memory.json`).

Each observation becomes a memory "NAME (ENTITY TYPE): observation", of type `observation`; an entity without
observations becomes "NAME (ENTITY TYPE)" (type `entity`); a relation "FROM relation type TO" (type
`relation`). Tags name the entities (`entity:NAME`), the entity type (`type:…`) and the relation
(`relation:…`), so `search_memory(tags=[...])` finds everything said about one entity.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memory_server.admin.foreign.records import (
    MAX_LINE_BYTES,
    Candidate,
    Item,
    Problem,
    Tags,
    bounded_lines,
    files_under,
    json_problem,
    outside,
    relation,
    too_large,
)

SUFFIXES = (".jsonl", ".json")
SOURCE = "mcp-memory"


def read(path: Path, *, max_content_bytes: int, progress: Callable[[int], None]) -> Iterator[Item]:
    del max_content_bytes  # observations are single facts; one too long is reported when it is validated
    for file in [path] if path.is_file() else files_under(path, SUFFIXES):
        escaped = None if file is path else outside(path, file)
        if escaped is not None:
            yield escaped
            continue
        with open(file, "rb") as stream:
            for number, raw, size in bounded_lines(stream):
                progress(size)
                where = f"{file.name}:{number}"
                if raw is None:
                    yield Problem(where, too_large(size, MAX_LINE_BYTES, "the line"))
                elif raw.strip():
                    yield from _record(raw, where)


def _record(raw: bytes, where: str) -> Iterator[Item]:
    refused = json_problem(raw, "the line")
    if refused is not None:
        yield Problem(where, refused)
        return
    try:
        record = json.loads(raw)
    except UnicodeDecodeError:
        yield Problem(where, "the line is not valid UTF-8")
        return
    except (ValueError, RecursionError) as exc:
        yield Problem(where, f"not valid JSON ({exc})")
        return
    if not isinstance(record, dict):
        yield Problem(where, "each line must be a JSON object")
    elif record.get("type") == "entity":
        yield from _entity(record, where)
    elif record.get("type") == "relation":
        yield from _relation(record, where)
    else:
        yield Problem(where, f"unknown type {record.get('type')!r}: expected entity or relation")


def _entity(record: dict[str, Any], where: str) -> Iterator[Item]:
    name, kind, observations = record.get("name"), record.get("entityType"), record.get("observations", [])
    if not isinstance(name, str) or not name.strip():
        yield Problem(where, "an entity needs a name (a non-empty string)")
        return
    if not isinstance(kind, str) or not kind.strip():
        yield Problem(where, f"entity {name!r} needs an entityType (a non-empty string)")
        return
    if not isinstance(observations, list):
        yield Problem(where, f"entity {name!r}: observations must be a list of strings")
        return
    tags = Tags()
    tags.add(name, "entity:")
    tags.add(kind, "type:")
    metadata = {"entity": name, "entity_type": kind}
    if not observations:
        yield Candidate(where, _fields(f"{name} ({kind})", "entity", tags, metadata))
    for n, observation in enumerate(observations):
        if not isinstance(observation, str) or not observation.strip():
            yield Problem(where, f"entity {name!r}: observations[{n}] is not a non-empty string; skipped")
            continue
        yield Candidate(where, _fields(f"{name} ({kind}): {observation}", "observation", tags, metadata))


def _relation(record: dict[str, Any], where: str) -> Iterator[Item]:
    ends = {key: record.get(key) for key in ("from", "to", "relationType")}
    missing = [key for key, value in ends.items() if not isinstance(value, str) or not value.strip()]
    if missing:
        yield Problem(where, f"a relation needs {', '.join(missing)} (non-empty strings)")
        return
    yield relation(where, str(ends["from"]), str(ends["relationType"]), str(ends["to"]), origin=SOURCE)


def _fields(content: str, kind: str, tags: Tags, metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": content,
        "type": kind,
        "tags": list(tags.values),
        "metadata": metadata,
        "provenance": {"source": SOURCE},
    }
