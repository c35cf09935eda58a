"""Tokens and console sessions as rows, the part every storage backend shares: the columns a token read
selects, rows read back as records, and a token's bounds as its row holds them (JSON text, or NULL: any)."""

from __future__ import annotations

import json

from memory_server.storage.records import Row, SessionRecord, TokenRecord

TOKEN_COLUMNS = (
    "t.id, t.site_id, s.name AS site, t.scopes, t.teams, t.projects, t.buckets, t.created_at,"
    " t.revoked_at, t.label, t.last_used_at"
)
SESSION_COLUMNS = "id_hash, site_id, site, kind, credential, created_at, seen_at"


def bound_json(values: tuple[str, ...] | None) -> str | None:
    return json.dumps(sorted(set(values))) if values else None


def token_of(row: Row) -> TokenRecord:
    """A row read with TOKEN_COLUMNS."""
    return TokenRecord(
        id=row["id"],
        site_id=int(row["site_id"]),
        site=row["site"],
        scopes=tuple(json.loads(row["scopes"])),
        teams=_bound(row["teams"]),
        projects=_bound(row["projects"]),
        buckets=_bound(row["buckets"]),
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
        label=row["label"],
        last_used_at=row["last_used_at"],
    )


def session_of(row: Row) -> SessionRecord:
    """A row read with SESSION_COLUMNS."""
    return SessionRecord(
        id_hash=row["id_hash"],
        site_id=int(row["site_id"]),
        site=row["site"],
        kind=row["kind"],
        credential=row["credential"],
        created_at=float(row["created_at"]),
        seen_at=float(row["seen_at"]),
    )


def _bound(raw: str | None) -> tuple[str, ...] | None:
    return tuple(json.loads(raw)) if raw else None
