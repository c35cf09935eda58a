"""Saved-memory rows on SQLite (the authority), their FTS5 lexical index, and the outbox to the vector index.

A memory is committed to SQLite first, with its embedding and `indexed = 0`; the vector index is written
after the commit and the row is then marked `indexed = 1`. A crash in between leaves `indexed = 0`, which
start-up repairs. Deleting a row (forget, site deletion) queues its id in `index_deletions` by trigger, so
the index drops the point even if the process dies before it could.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import numpy as np

from server.storage import cursors
from server.auth.core import Principal, now_rfc3339
from server.errors import Forbidden, InvalidParameters, PayloadTooLarge
from server.index.base import Condition, IndexFilter
from server.ranking.lexical import analyzed_text
from server.logs.store import MAX_DEPTH, _depth_ok
from server.text import check_json_unicode, check_unicode

SHORT_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
LOCATION = re.compile(r"^[^\x00-\x1f]{1,512}$")
MAX_TAGS = 32
MAX_JSON_BYTES = 64 * 1024
DEFAULT_BUCKET = "default"
DEFAULT_TYPE = "note"

ROW_COLUMNS = (
    "id, reference, site_id, content, type, location, project, team, bucket, tags, metadata, provenance,"
    " occurred_at, created_at, updated_at, conversation_id, conversation_seq"
)


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A validated `remember` request."""

    content: str
    type: str
    location: str | None
    project: str | None
    team: str | None
    bucket: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    provenance: dict[str, Any]
    occurred_at: str

    @property
    def dedup_key(self) -> str:
        # Identity of a memory for idempotent `remember`: its content and where it is filed.
        raw = json.dumps(
            [self.content, self.type, self.location, self.project, self.team, self.bucket], ensure_ascii=False
        )
        return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Scope:
    """Which memories a request may see: the site, the caller's bounds, and the request's own filters.

    Each field other than `site_id` is a set of allowed values (None: any). `tags` means "has every tag".
    """

    site_id: int
    teams: frozenset[str] | None = None
    projects: frozenset[str] | None = None
    buckets: frozenset[str] | None = None
    types: frozenset[str] | None = None
    tags: frozenset[str] = frozenset()

    def narrowed(
        self,
        *,
        team: str | None = None,
        project: str | None = None,
        bucket: str | None = None,
        type: str | None = None,
        tags: Iterable[str] = (),
    ) -> "Scope":
        return Scope(
            site_id=self.site_id,
            teams=_narrow(self.teams, team),
            projects=_narrow(self.projects, project),
            buckets=_narrow(self.buckets, bucket),
            types=_narrow(self.types, type),
            tags=self.tags | frozenset(tags),
        )

    @property
    def empty(self) -> bool:
        return any(s is not None and not s for s in (self.teams, self.projects, self.buckets, self.types))

    def sql(self, alias: str = "m") -> tuple[str, list[Any]]:
        clauses, args = [f"{alias}.site_id = ?"], [self.site_id]
        for column, allowed in (("team", self.teams), ("project", self.projects), ("bucket", self.buckets),
                                ("type", self.types)):
            if allowed is not None:
                values = sorted(allowed)
                clauses.append(f"{alias}.{column} IN ({','.join('?' * len(values))})")
                args += values
        for tag in sorted(self.tags):
            clauses.append(f"EXISTS (SELECT 1 FROM json_each({alias}.tags) WHERE value = ?)")
            args.append(tag)
        return " AND ".join(clauses), args

    def index_filter(self) -> IndexFilter:
        conditions = [Condition("site", (str(self.site_id),))]
        for field, allowed in (("team", self.teams), ("project", self.projects), ("bucket", self.buckets),
                               ("type", self.types)):
            if allowed is not None:
                conditions.append(Condition(field, tuple(sorted(allowed))))
        conditions += [Condition("tags", (tag,)) for tag in sorted(self.tags)]
        return IndexFilter(tuple(conditions))


def _narrow(allowed: frozenset[str] | None, wanted: str | None) -> frozenset[str] | None:
    if wanted is None:
        return allowed
    return frozenset({wanted}) if allowed is None else allowed & {wanted}


def scope_for(principal: Principal) -> Scope:
    return Scope(
        site_id=principal.site_id, teams=principal.teams, projects=principal.projects, buckets=principal.buckets
    )


def check_write_bounds(principal: Principal, memory: NewMemory) -> None:
    """A bounded token only writes inside its bounds (an unset field is outside a bound on that field)."""
    for name, bound, value in (("team", principal.teams, memory.team), ("project", principal.projects,
                               memory.project), ("bucket", principal.buckets, memory.bucket)):
        if bound is not None and value not in bound:
            raise Forbidden(f"this token may only write memories with {name} in {sorted(bound)}")


# --- validation ---------------------------------------------------------------------------------------


def check_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidParameters("query must be a non-empty string")
    if len(query) > 4096:
        raise InvalidParameters("query must be at most 4096 characters")
    return check_unicode("query", query)


def check_word(name: str, value: object, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not SHORT_WORD.fullmatch(value):
        raise InvalidParameters(f"{name} must be 1-64 characters of [A-Za-z0-9_.:-], starting alphanumeric")
    return value


def check_tags(tags: object) -> tuple[str, ...]:
    if tags is None:
        return ()
    if not isinstance(tags, list) or len(tags) > MAX_TAGS:
        raise InvalidParameters(f"tags must be a list of at most {MAX_TAGS} short strings")
    checked = [check_word("each tag", tag, optional=False) for tag in tags]
    return tuple(dict.fromkeys(t for t in checked if t))  # de-duplicated, order kept


def check_object(name: str, value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidParameters(f"{name} must be a JSON object")
    if not _depth_ok(value):
        # Deeper values were stored once and then broke every response carrying them (serializers cap depth).
        raise InvalidParameters(f"{name} is nested deeper than {MAX_DEPTH} levels")
    check_json_unicode(name, value)
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode())
    except (ValueError, TypeError, RecursionError):
        raise InvalidParameters(f"{name} must be valid JSON") from None
    if size > MAX_JSON_BYTES:
        raise PayloadTooLarge(f"{name} is {size} bytes serialized; the limit is {MAX_JSON_BYTES}")
    return value


def parse_timestamp(name: str, value: object) -> datetime:
    """An RFC3339 timestamp with a timezone, or invalid_parameters."""
    if not isinstance(value, str) or not 1 <= len(value) <= 64:
        raise InvalidParameters(f"{name} must be an RFC3339 timestamp")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidParameters(f"{name} must be an RFC3339 timestamp, e.g. 2024-05-08T13:56:00Z") from None
    if parsed.tzinfo is None:
        raise InvalidParameters(f"{name} must carry a timezone (e.g. Z or +02:00)")
    try:
        # 0001-01-01T00:00:00+01:00 is a valid RFC3339 text whose UTC instant lies before year 1.
        parsed.astimezone(timezone.utc)
    except OverflowError:
        raise InvalidParameters(f"{name} must lie between years 1 and 9999 in UTC") from None
    return parsed


def check_timestamp(name: str, value: object) -> str:
    """Normalised to UTC with microseconds; now when absent."""
    if value is None:
        return now_rfc3339()
    parsed = parse_timestamp(name, value)
    return parsed.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def validate_new(
    *,
    content: object,
    type: object = None,
    location: object = None,
    project: object = None,
    team: object = None,
    bucket: object = None,
    tags: object = None,
    metadata: object = None,
    provenance: object = None,
    occurred_at: object = None,
    max_content_bytes: int,
) -> NewMemory:
    if not isinstance(content, str) or not content.strip():
        raise InvalidParameters("content must be a non-empty string")
    check_unicode("content", content)
    size = len(content.encode("utf-8"))
    if size > max_content_bytes:
        raise PayloadTooLarge(f"content is {size} bytes; the limit is {max_content_bytes}")
    if location is not None and (not isinstance(location, str) or not LOCATION.fullmatch(location)):
        raise InvalidParameters("location must be a path-like string of 1-512 characters")
    if location is not None:
        check_unicode("location", location)
    return NewMemory(
        content=content,
        type=check_word("type", type) or DEFAULT_TYPE,
        location=location,  # type: ignore[arg-type]
        project=check_word("project", project),
        team=check_word("team", team),
        bucket=check_word("bucket", bucket) or DEFAULT_BUCKET,
        tags=check_tags(tags),
        metadata=check_object("metadata", metadata),
        provenance=check_object("provenance", provenance),
        occurred_at=check_timestamp("occurred_at", occurred_at),
    )


# --- rows -----------------------------------------------------------------------------------------------


def find_duplicate(conn: sqlite3.Connection, site_id: int, memory: NewMemory) -> str | None:
    row = conn.execute(
        "SELECT reference FROM memories WHERE site_id = ? AND dedup_key = ?", (site_id, memory.dedup_key)
    ).fetchone()
    return row[0] if row else None


@dataclass(frozen=True, slots=True)
class Kept:
    """What an import keeps from its file instead of minting it: the reference and the timestamps."""

    reference: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


CREATED, DUPLICATE, PRESENT, CONFLICT = "created", "duplicate", "present", "conflict"


@dataclass(frozen=True, slots=True)
class Inserted:
    """The outcome of inserting one memory.

    created: a new row (`row_id`); duplicate: the same content and filing exists as `reference`;
    present: the kept reference already holds this memory; conflict: the kept reference holds another
    memory (`detail` says which way), nothing is written.
    """

    row_id: int | None
    reference: str
    outcome: str
    detail: str = ""

    @property
    def created(self) -> bool:
        return self.outcome == CREATED


def decided_by_stored(conn: sqlite3.Connection, site_id: int, memory: NewMemory,
                      kept: Kept | None = None) -> Inserted | None:
    """The outcome of inserting `memory` when rows already stored decide it (no new row), else None."""
    if kept is not None and kept.reference is not None:
        row = conn.execute("SELECT site_id, dedup_key FROM memories WHERE reference = ?",
                           (kept.reference,)).fetchone()
        if row is not None:
            if int(row[0]) != site_id:
                return Inserted(None, kept.reference, CONFLICT,
                                f"conflict: reference {kept.reference} belongs to a memory of another site")
            if row[1] != memory.dedup_key:
                return Inserted(None, kept.reference, CONFLICT,
                                f"conflict: reference {kept.reference} already holds a memory with other content "
                                "or filing (type, location, project, team, bucket)")
            return Inserted(None, kept.reference, PRESENT)
    existing = find_duplicate(conn, site_id, memory)
    return Inserted(None, existing, DUPLICATE) if existing is not None else None


def insert_memory(
    conn: sqlite3.Connection,
    site_id: int,
    memory: NewMemory,
    *,
    document: str,
    vector: np.ndarray,
    model: str,
    kept: Kept | None = None,
) -> Inserted:
    """Insert inside the caller's write transaction, unless stored rows decide otherwise (see Inserted)."""
    decided = decided_by_stored(conn, site_id, memory, kept)
    if decided is not None:
        return decided
    kept = kept or Kept()
    reference = kept.reference or f"mem_{uuid.uuid4().hex}"
    created_at = kept.created_at or now_rfc3339()
    conversation_id, conversation_seq = _conversation_position(memory.provenance)
    cur = conn.execute(
        "INSERT INTO memories (reference, site_id, content, type, location, project, team, bucket, tags,"
        " metadata, provenance, occurred_at, created_at, updated_at, dedup_key, conversation_id,"
        " conversation_seq, vector, vector_model, indexed) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0)",
        (
            reference, site_id, memory.content, memory.type, memory.location, memory.project, memory.team,
            memory.bucket, json.dumps(list(memory.tags), ensure_ascii=False),
            json.dumps(memory.metadata, ensure_ascii=False), json.dumps(memory.provenance, ensure_ascii=False),
            memory.occurred_at, created_at, kept.updated_at or created_at, memory.dedup_key, conversation_id,
            conversation_seq, vector.astype(np.float32).tobytes(), model,
        ),
    )
    row_id = int(cur.lastrowid)  # type: ignore[arg-type]
    conn.execute("INSERT INTO memories_fts (rowid, terms) VALUES (?, ?)", (row_id, analyzed_text(document)))
    conn.execute("DELETE FROM index_deletions WHERE id = ?", (row_id,))
    return Inserted(row_id, reference, CREATED)


def _conversation_position(provenance: dict[str, Any]) -> tuple[str | None, int | None]:
    cid, seq = provenance.get("conversation_id"), provenance.get("seq")
    if isinstance(cid, str) and isinstance(seq, int) and not isinstance(seq, bool):
        return cid, seq
    return None, None


def delete_memory(conn: sqlite3.Connection, scope: Scope, reference: str) -> int | None:
    """Delete a visible memory; return its row id, or None if no such memory is visible."""
    where, args = scope.sql("m")
    row = conn.execute(f"SELECT m.id FROM memories m WHERE m.reference = ? AND {where}", (reference, *args))
    found = row.fetchone()
    if found is None:
        return None
    conn.execute("DELETE FROM memories WHERE id = ?", (found[0],))
    return int(found[0])


def clear_deletions(conn: sqlite3.Connection, ids: Sequence[int]) -> None:
    conn.executemany("DELETE FROM index_deletions WHERE id = ?", [(i,) for i in ids])


def hit_fields(row: sqlite3.Row) -> dict[str, Any]:
    """The public attributes of a memory row, as a hit carries them (without score)."""
    return {
        "reference": row["reference"],
        "type": row["type"],
        "location": row["location"],
        "content": row["content"],
        "project": row["project"],
        "team": row["team"],
        "bucket": row["bucket"],
        "tags": json.loads(row["tags"]),
        "metadata": json.loads(row["metadata"]),
        "provenance": json.loads(row["provenance"]),
        "occurred_at": row["occurred_at"],
        "created_at": row["created_at"],
    }


def index_payload(row: sqlite3.Row | dict[str, Any]) -> dict[str, object]:
    tags = row["tags"]
    return {
        "site": str(row["site_id"]),
        "team": row["team"] or "",
        "project": row["project"] or "",
        "bucket": row["bucket"],
        "type": row["type"],
        "tags": json.loads(tags) if isinstance(tags, str) else list(tags),
    }


def vector_of(row: sqlite3.Row) -> np.ndarray:
    return np.frombuffer(row["vector"], dtype=np.float32)


# --- REST: listing, reading and updating one memory ------------------------------------------------------

FULL_COLUMNS = ", ".join(f"m.{c.strip()}" for c in ROW_COLUMNS.split(",")) + ", m.vector, m.vector_model"
PROVENANCE_FILTERS = ("source", "agent", "conversation_id")  # provenance keys a listing can filter on


def memory_fields(row: sqlite3.Row) -> dict[str, Any]:
    """Every public attribute of a memory (a hit's fields plus updated_at)."""
    return {**hit_fields(row), "updated_at": row["updated_at"]}


def as_new_memory(row: sqlite3.Row) -> NewMemory:
    """The attributes of a stored row, in the shape `remember` validates (for merging a PATCH)."""
    return NewMemory(
        content=row["content"], type=row["type"], location=row["location"], project=row["project"],
        team=row["team"], bucket=row["bucket"], tags=tuple(json.loads(row["tags"])),
        metadata=json.loads(row["metadata"]), provenance=json.loads(row["provenance"]),
        occurred_at=row["occurred_at"],
    )


def visible_row(conn: sqlite3.Connection, scope: Scope, reference: str) -> sqlite3.Row | None:
    where, args = scope.sql("m")
    return conn.execute(
        f"SELECT {FULL_COLUMNS} FROM memories m WHERE m.reference = ? AND {where}", (reference, *args)
    ).fetchone()


def list_rows(
    conn: sqlite3.Connection,
    scope: Scope,
    *,
    location: str | None,
    provenance: dict[str, str],
    limit: int,
    after: tuple[str, int] | None,
) -> tuple[list[sqlite3.Row], tuple[str, int] | None]:
    """One page of visible memories, newest first (created_at, then row id); and the key after it.

    Keyset pagination on (created_at, id): rows written while a client pages never shift a page, and every
    row present throughout is returned exactly once.
    """
    where, args = scope.sql("m")
    if location is not None:
        where += " AND m.location = ?"
        args.append(location)
    for key in sorted(provenance):
        if key not in PROVENANCE_FILTERS:
            raise InvalidParameters(f"cannot filter on provenance.{key}")
        where += f" AND json_extract(m.provenance, '$.{key}') = ?"
        args.append(provenance[key])
    if after is not None:
        where += " AND (m.created_at < ? OR (m.created_at = ? AND m.id < ?))"
        args += [after[0], after[0], after[1]]
    found = conn.execute(
        f"SELECT m.id, {FULL_COLUMNS} FROM memories m WHERE {where} ORDER BY m.created_at DESC, m.id DESC LIMIT ?",
        (*args, limit + 1),
    ).fetchall()
    page = found[:limit]
    following = (page[-1]["created_at"], int(page[-1]["id"])) if len(found) > limit else None
    return page, following


def encode_list_cursor(key: tuple[str, int]) -> str:
    return cursors.encode(["m", key[0], key[1]])


def decode_list_cursor(cursor: object) -> tuple[str, int]:
    tag, created_at, row_id = cursors.decode(cursor, max_length=300, count=3)
    if (
        tag != "m"
        or not isinstance(created_at, str)
        or not isinstance(row_id, int)
        or isinstance(row_id, bool)
        or not 0 <= row_id < 2**63
    ):
        raise cursors.invalid()
    return created_at, row_id


# The columns a PATCH may change; the merge and the embedding are valid only while these are unchanged.
EDITABLE = ("content", "type", "location", "project", "team", "bucket", "tags", "metadata", "provenance",
            "occurred_at")


class StaleRow(Exception):
    """The row changed between reading it and the update's transaction; the caller retries."""


def update_memory(
    conn: sqlite3.Connection,
    scope: Scope,
    reference: str,
    memory: NewMemory,
    *,
    based_on: dict[str, Any],
    document: str,
    vector: np.ndarray | None,
    model: str,
) -> int | None:
    """Replace a visible memory's attributes inside the caller's write transaction; return its row id
    (None if it is no longer visible). `based_on` holds the stored values of the columns the update did not
    set but was computed from (the merge, the embedding); if the row no longer has them, StaleRow. Columns
    the update sets are last-writer-wins. `vector` None keeps the stored embedding.

    The row is left `indexed = 0` (the outbox) until the caller has written it to the vector index.
    """
    where, args = scope.sql("m")
    row = conn.execute(
        f"SELECT m.id, {', '.join('m.' + c for c in EDITABLE)} FROM memories m WHERE m.reference = ? AND {where}",
        (reference, *args),
    ).fetchone()
    if row is None:
        return None
    if any(row[column] != value for column, value in based_on.items()):
        raise StaleRow(reference)
    row_id = int(row["id"])
    clash = conn.execute(
        "SELECT reference FROM memories WHERE site_id = ? AND dedup_key = ? AND id != ?",
        (scope.site_id, memory.dedup_key, row_id),
    ).fetchone()
    if clash is not None:
        raise InvalidParameters(
            f"memory {clash[0]} already has this content with the same type, location, project, team and "
            "bucket; forget one of them instead of making them identical"
        )
    conversation_id, conversation_seq = _conversation_position(memory.provenance)
    now = now_rfc3339()
    assignments = (
        "content = ?, type = ?, location = ?, project = ?, team = ?, bucket = ?, tags = ?, metadata = ?,"
        " provenance = ?, occurred_at = ?, updated_at = ?, dedup_key = ?, conversation_id = ?,"
        " conversation_seq = ?, indexed = 0"
    )
    values: list[Any] = [
        memory.content, memory.type, memory.location, memory.project, memory.team, memory.bucket,
        json.dumps(list(memory.tags), ensure_ascii=False), json.dumps(memory.metadata, ensure_ascii=False),
        json.dumps(memory.provenance, ensure_ascii=False), memory.occurred_at, now, memory.dedup_key,
        conversation_id, conversation_seq,
    ]
    if vector is not None:
        assignments += ", vector = ?, vector_model = ?"
        values += [vector.astype(np.float32).tobytes(), model]
    conn.execute(f"UPDATE memories SET {assignments} WHERE id = ?", (*values, row_id))
    conn.execute("UPDATE memories_fts SET terms = ? WHERE rowid = ?", (analyzed_text(document), row_id))
    return row_id


def kept_values(row: sqlite3.Row, changed: Iterable[str]) -> dict[str, Any]:
    """The stored values of the EDITABLE columns an update leaves as they are."""
    return {column: row[column] for column in EDITABLE if column not in set(changed)}


def mark_indexed_versions(conn: sqlite3.Connection, versions: Sequence[tuple[int, str]]) -> None:
    """Mark rows indexed if they are still at the version (updated_at) that was written to the index."""
    conn.executemany("UPDATE memories SET indexed = 1 WHERE id = ? AND updated_at = ?", list(versions))
