"""What a saved memory accepts, and what a caller may see and write of them.

Every check raises `invalid_parameters` (or `payload_too_large`) with a message naming the field, before
anything is written. No text of a memory may hold what one of the backends cannot store (a NUL, a lone
surrogate: memory_server/values.py), so SQLite and PostgreSQL accept the same memories.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memory_server.auth.principal import READ, Principal
from memory_server.errors import Forbidden, InvalidParameters, PayloadTooLarge
from memory_server.storage import cursors
from memory_server.storage.records import BY_CREATED, BY_OCCURRED, NewMemory
from memory_server.storage.scope import Scope
from memory_server.timestamps import now_rfc3339, parse_rfc3339
from memory_server.values import MAX_DEPTH, check_json, check_text, within_depth

MAX_WORD = 64
SHORT_WORD = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.:-]{{0,{MAX_WORD - 1}}}$")
WORD_RULE = f"1-{MAX_WORD} characters of [A-Za-z0-9_.:-], starting with a letter or digit"
MAX_LOCATION = 512
LOCATION = re.compile(rf"^[^\x00-\x1f]{{1,{MAX_LOCATION}}}$")
LOCATION_RULE = f"a path-like string of 1-{MAX_LOCATION} characters"
MAX_TIMESTAMP = 64  # characters: any RFC3339 timestamp fits
MAX_TAGS = 32
MAX_JSON_BYTES = 64 * 1024
MAX_QUERY = 4096
MAX_REFERENCE = 128
DEFAULT_BUCKET = "default"
DEFAULT_TYPE = "note"


@dataclass(frozen=True, slots=True)
class Filters:
    """A request's own exact-match filters (within what the caller may see)."""

    project: str | None = None
    team: str | None = None
    bucket: str | None = None
    type: str | None = None
    tags: tuple[str, ...] = ()

    def described(self) -> dict[str, Any]:
        """The filters set, for a retrieval plan."""
        out: dict[str, Any] = {
            name: getattr(self, name)
            for name in ("project", "team", "bucket", "type")
            if getattr(self, name) is not None
        }
        if self.tags:
            out["tags"] = list(self.tags)
        return out


def filters(
    *, project: object = None, team: object = None, bucket: object = None, type: object = None, tags: object = None
) -> Filters:
    return Filters(
        project=check_word("project", project),
        team=check_word("team", team),
        bucket=check_word("bucket", bucket),
        type=check_word("type", type),
        tags=check_tags(tags),
    )


def scope_for(principal: Principal) -> Scope:
    return Scope(
        site_id=principal.site_id, teams=principal.teams, projects=principal.projects, buckets=principal.buckets
    )


def read_scope(principal: Principal, found: Filters) -> Scope:
    """What a read may see: the caller's bounds narrowed by the request's filters (needs memory:read)."""
    principal.require(READ)
    return scope_for(principal).narrowed(
        team=found.team, project=found.project, bucket=found.bucket, type=found.type, tags=found.tags
    )


def check_write_bounds(principal: Principal, memory: NewMemory) -> None:
    """A bounded token only writes inside its bounds (an unset field is outside a bound on that field)."""
    for name, bound, value in (
        ("team", principal.teams, memory.team),
        ("project", principal.projects, memory.project),
        ("bucket", principal.buckets, memory.bucket),
    ):
        if bound is not None and value not in bound:
            raise Forbidden(f"this token may only write memories with {name} in {sorted(bound)}")


def check_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidParameters("query must be a non-empty string")
    if len(query) > MAX_QUERY:
        raise InvalidParameters(f"query must be at most {MAX_QUERY} characters")
    return check_text("query", query)


def plausible_reference(reference: object, name: str = "reference") -> bool:
    """Whether `reference` may name a memory (if not, none has it). Text no backend can look up (a NUL, a lone
    surrogate) is invalid_parameters, as PostgreSQL would make it, rather than SQLite's not_found."""
    if not isinstance(reference, str) or not 1 <= len(reference) <= MAX_REFERENCE:
        return False
    check_text(name, reference)
    return True


def check_word(name: str, value: object, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not SHORT_WORD.fullmatch(value):
        raise InvalidParameters(f"{name} must be {WORD_RULE}")
    return value


def check_tags(tags: object) -> tuple[str, ...]:
    if tags is None:
        return ()
    if not isinstance(tags, (list, tuple)) or len(tags) > MAX_TAGS:
        raise InvalidParameters(f"tags must be a list of at most {MAX_TAGS} short strings")
    checked = [check_word("each of the tags", tag, optional=False) for tag in tags]
    return tuple(dict.fromkeys(t for t in checked if t))  # de-duplicated, order kept


def check_object(name: str, value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidParameters(f"{name} must be a JSON object")
    if not within_depth(value):
        # Deeper values were stored once and then broke every response carrying them (serializers cap depth).
        raise InvalidParameters(f"{name} is nested deeper than {MAX_DEPTH} levels")
    check_json(name, value)
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode())
    except (ValueError, TypeError, RecursionError):
        raise InvalidParameters(f"{name} must be valid JSON") from None
    if size > MAX_JSON_BYTES:
        raise PayloadTooLarge(f"{name} is {size} bytes serialized; the limit is {MAX_JSON_BYTES}")
    return value


def parse_timestamp(name: str, value: object) -> datetime:
    """An RFC3339 timestamp with a timezone, or invalid_parameters."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TIMESTAMP:
        raise InvalidParameters(f"{name} must be an RFC3339 timestamp")
    check_text(name, value)  # Python's parser skips a NUL ("…00:00:00\x00+00:00" parses)
    parsed = parse_rfc3339(value)
    if parsed is None:
        raise InvalidParameters(f"{name} must be an RFC3339 timestamp, e.g. 2024-05-08T13:56:00Z")
    if parsed.tzinfo is None:
        raise InvalidParameters(f"{name} must carry a timezone (e.g. Z or +02:00)")
    try:
        # 0001-01-01T00:00:00+01:00 is a valid RFC3339 text whose UTC instant lies before year 1.
        parsed.astimezone(UTC)
    except OverflowError:
        raise InvalidParameters(f"{name} must lie between years 1 and 9999 in UTC") from None
    return parsed


def check_timestamp(name: str, value: object) -> str:
    """Normalised to UTC with microseconds; now when absent."""
    if value is None:
        return now_rfc3339()
    parsed = parse_timestamp(name, value)
    return parsed.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def check_location(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not LOCATION.fullmatch(value):
        raise InvalidParameters(f"location must be {LOCATION_RULE}")
    return check_text("location", value)


def check_reference(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not plausible_reference(value, name):
        raise InvalidParameters(f"{name} must be a memory's reference (1-{MAX_REFERENCE} characters)")
    return str(value)


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
    supersedes: object = None,
    expires_at: object = None,
    max_content_bytes: int,
) -> NewMemory:
    if not isinstance(content, str) or not content.strip():
        raise InvalidParameters("content must be a non-empty string")
    check_text("content", content)
    size = len(content.encode("utf-8"))
    if size > max_content_bytes:
        raise PayloadTooLarge(f"content is {size} bytes; the limit is {max_content_bytes}")
    return NewMemory(
        content=content,
        type=check_word("type", type) or DEFAULT_TYPE,
        location=check_location(location),
        project=check_word("project", project),
        team=check_word("team", team),
        bucket=check_word("bucket", bucket) or DEFAULT_BUCKET,
        tags=check_tags(tags),
        metadata=check_object("metadata", metadata),
        provenance=check_object("provenance", provenance),
        occurred_at=check_timestamp("occurred_at", occurred_at),
        supersedes=check_reference("supersedes", supersedes),
        expires_at=None if expires_at is None else check_timestamp("expires_at", expires_at),
    )


# A listing's cursor names its order, so that a page of one order never continues another.
LIST_CURSOR_TAGS = {BY_CREATED: "m", BY_OCCURRED: "o"}


def encode_list_cursor(key: tuple[str, int], order: str = BY_CREATED) -> str:
    return cursors.encode([LIST_CURSOR_TAGS[order], key[0], key[1]])


def decode_list_cursor(cursor: object, order: str = BY_CREATED) -> tuple[str, int]:
    tag, at, row_id = cursors.decode(cursor, max_length=300, count=3)
    if (
        tag != LIST_CURSOR_TAGS[order]
        or not isinstance(at, str)
        or not isinstance(row_id, int)
        or isinstance(row_id, bool)
        or not 0 <= row_id < 2**63
    ):
        raise cursors.invalid()
    return at, row_id
