"""OAuth rows, the part every storage backend shares: the joins that read grants and tokens, the values a
client, request, code or grant is inserted with, and rows read back as the records of oauth_records.py (both
backends keep bounds as JSON text and times as floats)."""

from __future__ import annotations

import json

from memory_server.storage.oauth_records import (
    Bounds,
    NewGrant,
    OAuthClient,
    OAuthCode,
    OAuthGrant,
    OAuthTokenRecord,
    PendingAuthorization,
    Source,
)
from memory_server.storage.records import Row

GRANTS = (
    "SELECT g.*, s.name AS site, c.client_name FROM oauth_grants g JOIN sites s ON s.id = g.site_id"
    " LEFT JOIN oauth_clients c ON c.client_id = g.client_id"
)
CLIENT_COLUMNS = "client_id, secret_hash, client_name, metadata, created_at, granted_at, source_address, source_network"
REQUEST_COLUMNS = "request_hash, client_id, params, csrf_hash, expires_at, source_address, source_network"
CODE_COLUMNS = (
    "code_hash, client_id, site_id, scopes, teams, projects, buckets, resource, code_challenge, redirect_uri,"
    " redirect_uri_explicit, expires_at"
)
GRANT_COLUMNS = (
    "id, site_id, client_id, scopes, teams, projects, buckets, resource, created_at, expires_at, last_used_at"
)
TOKENS = (
    "SELECT t.kind, t.scopes AS token_scopes, t.expires_at AS token_expires_at, t.rotated, g.*,"
    " s.name AS site, c.client_name FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id"
    " JOIN sites s ON s.id = g.site_id LEFT JOIN oauth_clients c ON c.client_id = g.client_id"
)


def json_list(values: tuple[str, ...] | None) -> str | None:
    return json.dumps(list(values)) if values is not None else None


def bounds_values(bounds: Bounds) -> list[str | None]:
    """scopes, teams, projects, buckets, as a code's or a grant's row holds them."""
    return [json_list(bounds.scopes), json_list(bounds.teams), json_list(bounds.projects), json_list(bounds.buckets)]


def client_values(client: OAuthClient) -> list[object]:
    """An oauth_clients row, in CLIENT_COLUMNS' order."""
    return [
        client.client_id,
        client.secret_hash,
        client.client_name,
        client.metadata,
        client.created_at,
        client.granted_at,
        client.source.address,
        client.source.network,
    ]


def request_values(request_hash: str, request: PendingAuthorization) -> list[object]:
    """An oauth_requests row, in REQUEST_COLUMNS' order."""
    return [
        request_hash,
        request.client_id,
        request.params,
        request.csrf_hash,
        request.expires_at,
        request.source.address,
        request.source.network,
    ]


def code_values(code_hash: str, code: OAuthCode) -> list[object]:
    """An oauth_codes row, in CODE_COLUMNS' order."""
    return [
        code_hash,
        code.client_id,
        code.site_id,
        *bounds_values(code.bounds),
        code.resource,
        code.code_challenge,
        code.redirect_uri,
        int(code.redirect_uri_explicit),
        code.expires_at,
    ]


def grant_values(grant: NewGrant, *, last_used_at: str) -> list[object]:
    """An oauth_grants row, in GRANT_COLUMNS' order."""
    return [
        grant.id,
        grant.site_id,
        grant.client_id,
        *bounds_values(grant.bounds),
        grant.resource,
        grant.created_at,
        grant.expires_at,
        last_used_at,
    ]


def client_of(row: Row) -> OAuthClient:
    return OAuthClient(
        client_id=row["client_id"],
        secret_hash=row["secret_hash"],
        client_name=row["client_name"],
        metadata=row["metadata"],
        created_at=float(row["created_at"]),
        granted_at=_float(row["granted_at"]),
        source=Source(row["source_address"], row["source_network"]),
    )


def pending_of(row: Row) -> PendingAuthorization:
    return PendingAuthorization(
        client_id=row["client_id"],
        params=row["params"],
        expires_at=float(row["expires_at"]),
        csrf_hash=row["csrf_hash"],
        source=Source(row["source_address"], row["source_network"]),
    )


def code_of(row: Row) -> OAuthCode:
    return OAuthCode(
        client_id=row["client_id"],
        site_id=int(row["site_id"]),
        bounds=_bounds(row),
        resource=row["resource"],
        code_challenge=row["code_challenge"],
        redirect_uri=row["redirect_uri"],
        redirect_uri_explicit=bool(row["redirect_uri_explicit"]),
        expires_at=float(row["expires_at"]),
        used=row["grant_id"] is not None,
        grant_id=row["grant_id"],
    )


def grant_of(row: Row) -> OAuthGrant:
    return OAuthGrant(
        id=row["id"],
        site_id=int(row["site_id"]),
        site=row["site"],
        client_id=row["client_id"],
        client_name=row["client_name"],
        bounds=_bounds(row),
        resource=row["resource"],
        created_at=row["created_at"],
        expires_at=float(row["expires_at"]),
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
    )


def token_of(row: Row) -> OAuthTokenRecord:
    """A row read with TOKENS."""
    return OAuthTokenRecord(
        grant=grant_of(row),
        kind=row["kind"],
        scopes=tuple(json.loads(row["token_scopes"])),
        expires_at=float(row["token_expires_at"]),
        rotated=bool(row["rotated"]),
    )


def _bounds(row: Row) -> Bounds:
    return Bounds(
        scopes=tuple(json.loads(row["scopes"])),
        teams=_tuple(row["teams"]),
        projects=_tuple(row["projects"]),
        buckets=_tuple(row["buckets"]),
    )


def _float(raw: float | None) -> float | None:
    return float(raw) if raw is not None else None


def _tuple(raw: str | None) -> tuple[str, ...] | None:
    return tuple(json.loads(raw)) if raw is not None else None
