"""What rows already stored decide of an insert, with the same SQL on every backend: the reference an import
keeps, held already (by this memory, another memory or another site), or the same filing saved before.

`conn` is an open connection (sqlite3 or psycopg: both `execute(sql, args)`), `mark` the backend's placeholder.
"""

from __future__ import annotations

from typing import Any

from memory_server.storage.records import CONFLICT, DUPLICATE, PRESENT, Inserted, Kept, NewMemory


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
