"""Memories as rows, the part every storage backend shares: the columns a read selects, a row read back as
a `StoredMemory`, and a memory's values as a write binds them.

Both backends keep tags, metadata and provenance as JSON text and vectors as float32 bytes, so a row of
either (a sqlite3.Row or a psycopg dict row) reads the same way.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from memory_server.storage.records import NewMemory, Row, StoredMemory

COLUMNS = (
    "m.id, m.reference, m.site_id, m.content, m.type, m.location, m.project, m.team, m.bucket, m.tags,"
    " m.metadata, m.provenance, m.occurred_at, m.created_at, m.updated_at, m.supersedes, m.superseded_by,"
    " m.valid_to, m.expires_at, m.kind, m.vector_model, m.vector IS NOT NULL AS has_vector"
)
# A memory's public fields, in the order an export line holds them (after its site's name); an import reads
# back these and no others.
EXPORTED_FIELDS = (
    "reference",
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
    "created_at",
    "updated_at",
    "supersedes",
    "superseded_by",
    "valid_to",
    "expires_at",
)
# What a snapshot selects from `memories m JOIN sites s` for them: the site's name, then the fields in order.
EXPORTED_COLUMNS = "s.name AS site, " + ", ".join(f"m.{name}" for name in EXPORTED_FIELDS)
OPTIONAL_FIELDS = ("supersedes", "superseded_by", "valid_to", "expires_at")  # exported only when set


def stored(row: Row) -> StoredMemory:
    return StoredMemory(
        id=int(row["id"]),
        reference=row["reference"],
        site_id=int(row["site_id"]),
        content=row["content"],
        type=row["type"],
        location=row["location"],
        project=row["project"],
        team=row["team"],
        bucket=row["bucket"],
        tags=tuple(json.loads(row["tags"])),
        metadata=json.loads(row["metadata"]),
        provenance=json.loads(row["provenance"]),
        occurred_at=row["occurred_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        supersedes=row["supersedes"],
        superseded_by=row["superseded_by"],
        valid_to=row["valid_to"],
        expires_at=row["expires_at"],
        kind=row["kind"],
        vector_model=row["vector_model"],
        has_vector=bool(row["has_vector"]),  # SQLite answers 0 or 1
    )


def attribute_values(memory: NewMemory) -> list[Any]:
    """content, type, location, project, team, bucket, tags, metadata, provenance, occurred_at."""
    return [
        memory.content,
        memory.type,
        memory.location,
        memory.project,
        memory.team,
        memory.bucket,
        json.dumps(list(memory.tags), ensure_ascii=False),
        json.dumps(memory.metadata, ensure_ascii=False),
        json.dumps(memory.provenance, ensure_ascii=False),
        memory.occurred_at,
    ]


def vector_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def exported(record: dict[str, Any]) -> dict[str, Any]:
    """A memory's export line from its public columns (JSON as text): the JSON parsed, and the optional
    fields written only when set, so an export that uses none of them reads as before."""
    for name in ("tags", "metadata", "provenance"):
        record[name] = json.loads(record[name])
    for name in OPTIONAL_FIELDS:
        if record[name] is None:
            del record[name]
    return record
