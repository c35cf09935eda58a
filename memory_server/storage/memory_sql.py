"""What rows already stored decide of a write, with the same SQL on every backend: of an insert, the reference
an import keeps, held already (by this memory, another memory or another site), or the same filing saved
before; of an update, whether the row changed meanwhile or its new filing is another memory's, and what it sets.

`conn` is an open connection (sqlite3 or psycopg: both `execute(sql, args)`), `mark` the backend's placeholder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory_server.errors import InvalidParameters
from memory_server.storage.memory_rows import attribute_values, vector_blob
from memory_server.storage.records import (
    CONFLICT,
    DUPLICATE,
    PRESENT,
    Document,
    Inserted,
    Kept,
    NewMemory,
    StaleRow,
    StoredMemory,
)
from memory_server.timestamps import now_rfc3339


def find_duplicate(conn: Any, site_id: int, dedup_key: str, *, mark: str = "?") -> str | None:
    """The reference of the site's memory with this filing (content, type, location, project, team, bucket)."""
    sql = "SELECT reference FROM memories WHERE site_id = ? AND dedup_key = ?"
    row = conn.execute(sql.replace("?", mark), [site_id, dedup_key]).fetchone()
    return str(row[0]) if row else None


def decided(conn: Any, site_id: int, memory: NewMemory, kept: Kept | None, *, mark: str = "?") -> Inserted | None:
    """The outcome of inserting `memory` when rows already stored decide it (no new row), else None."""
    if kept is not None and kept.reference is not None:
        sql = "SELECT site_id, dedup_key FROM memories WHERE reference = ?"
        row = conn.execute(sql.replace("?", mark), [kept.reference]).fetchone()
        if row is not None:
            if int(row[0]) != site_id:
                detail = f"conflict: reference {kept.reference} belongs to a memory of another site"
                return Inserted(None, kept.reference, CONFLICT, detail)
            if row[1] != memory.dedup_key:
                detail = (
                    f"conflict: reference {kept.reference} already holds a memory with other content "
                    "or filing (type, location, project, team, bucket)"
                )
                return Inserted(None, kept.reference, CONFLICT, detail)
            return Inserted(None, kept.reference, PRESENT)
    existing = find_duplicate(conn, site_id, memory.dedup_key, mark=mark)
    return Inserted(None, existing, DUPLICATE) if existing is not None else None


def check_update(
    conn: Any,
    site_id: int,
    reference: str,
    now: StoredMemory,
    memory: NewMemory,
    based_on: Mapping[str, Any],
    *,
    mark: str = "?",
) -> None:
    """Whether the stored row `now` may become `memory`: StaleRow when it changed since the caller read what
    `based_on` holds, invalid_parameters when another memory of the site has the new filing already."""
    if any(getattr(now, name) != value for name, value in based_on.items()):
        raise StaleRow(reference)
    sql = "SELECT reference FROM memories WHERE site_id = ? AND dedup_key = ? AND id != ?"
    clash = conn.execute(sql.replace("?", mark), [site_id, memory.dedup_key, now.id]).fetchone()
    if clash is not None:
        raise InvalidParameters(
            f"memory {clash[0]} already has this content with the same type, location, project, team and "
            "bucket; forget one of them instead of making them identical"
        )


def update_assignments(memory: NewMemory, document: Document | None, *, mark: str = "?") -> tuple[str, list[Any]]:
    """The SET clause of an update to `memory` (with its new vector, if `document`) and its values."""
    conversation_id, seq = memory.conversation_position
    assignments = (
        "content = ?, type = ?, location = ?, project = ?, team = ?, bucket = ?, tags = ?,"
        " metadata = ?, provenance = ?, occurred_at = ?, updated_at = ?, dedup_key = ?,"
        " conversation_id = ?, conversation_seq = ?, supersedes = ?, expires_at = ?, indexed = 0"
    )
    values: list[Any] = [
        *attribute_values(memory),
        now_rfc3339(),
        memory.dedup_key,
        conversation_id,
        seq,
        memory.supersedes,
        memory.expires_at,
    ]
    if document is not None:
        assignments += ", vector = ?, vector_model = ?"
        values += [vector_blob(document.vector), document.model]
    return assignments.replace("?", mark), values
