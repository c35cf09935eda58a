"""The OAuth store's contract on SQLite and PostgreSQL: registered clients, pending authorization requests,
codes, grants and their access and refresh tokens.

Part of the storage seam's contract suite (tests/README.md lists the others); the fixtures and records
are in tests/storage_support.py.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from storage_support import (
    WHEN,
    site,
    storage,  # noqa: F401
)

from memory_server.auth.principal import READ, WRITE
from memory_server.storage.oauth_records import (
    ACCESS,
    REFRESH,
    Bounds,
    IssuedToken,
    NewGrant,
    OAuthClient,
    OAuthCode,
    OAuthGrant,
    PendingAuthorization,
)
from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    WouldBlock,
)
from memory_server.timestamps import rfc3339_at

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


NOW = 1_900_000_000.0


def oauth_code(site_id: int, **fields: Any) -> OAuthCode:
    values: dict[str, Any] = {
        "client_id": "client-1",
        "site_id": site_id,
        "bounds": Bounds((READ,), buckets=("b",)),
        "resource": "http://127.0.0.1:8765/mcp",
        "code_challenge": "challenge",
        "redirect_uri": "http://127.0.0.1:5000/cb",
        "redirect_uri_explicit": True,
        "expires_at": NOW + 60,
    }
    values.update(fields)
    return OAuthCode(**values)


def oauth_grant(grant_id: str, site_id: int, created_at: str = WHEN) -> NewGrant:
    return NewGrant(
        id=grant_id,
        site_id=site_id,
        client_id="client-1",
        bounds=Bounds((READ, WRITE), teams=("t",)),
        resource="http://127.0.0.1:8765/mcp",
        created_at=created_at,
        expires_at=NOW + 3600,
    )


def test_oauth_clients_and_requests(storage: Storage) -> None:
    oauth = storage.oauth
    public = OAuthClient("client-1", None, "Claude", '{"redirect_uris": ["http://127.0.0.1:5000/cb"]}', NOW)
    oauth.add_client(public)
    oauth.add_client(OAuthClient("client-2", "secret-digest", None, "{}", NOW + 0.25))
    assert oauth.client("client-1") == public and oauth.client("client-2") == OAuthClient(
        "client-2", "secret-digest", None, "{}", NOW + 0.25
    )
    assert oauth.client("nobody") is None
    pending = PendingAuthorization("client-1", '{"state": "s"}', NOW + 600)
    oauth.add_request("req-1", pending, now=NOW)
    oauth.add_request("req-old", replace(pending, expires_at=NOW + 1), now=NOW)
    assert oauth.request("req-1", now=NOW) == pending and oauth.request("nope", now=NOW) is None
    assert oauth.request("req-1", now=NOW + 600) is None  # expired
    assert oauth.set_request_csrf("req-1", "csrf-digest", now=NOW)
    assert not oauth.set_request_csrf("req-1", "x", now=NOW + 600) and not oauth.set_request_csrf("nope", "x", now=NOW)
    assert oauth.request("req-1", now=NOW) == replace(pending, csrf_hash="csrf-digest")
    oauth.add_request("req-2", pending, now=NOW + 2)  # forgets the expired ones
    assert oauth.take_request("req-old", now=NOW) is None
    assert oauth.take_request("req-1", now=NOW) == replace(pending, csrf_hash="csrf-digest")
    assert oauth.take_request("req-1", now=NOW) is None  # taken once
    assert oauth.take_request("req-2", now=NOW + 600) is None and oauth.request("req-2", now=NOW) is None


def test_oauth_codes_grants_and_tokens(storage: Storage) -> None:
    oauth = storage.oauth
    sid = site(storage)
    oauth.add_client(OAuthClient("client-1", None, "Claude", "{}", NOW))
    assert not oauth.add_code("code-x", oauth_code(sid + 100), now=NOW)  # no such site
    assert oauth.code("code-x") is None
    assert oauth.add_code("code-1", oauth_code(sid), now=NOW)
    assert oauth.add_code("code-2", oauth_code(sid, bounds=Bounds((READ, WRITE)), redirect_uri_explicit=False), now=NOW)
    assert oauth.code("code-1") == oauth_code(sid) and oauth.code("code-2") == oauth_code(
        sid, bounds=Bounds((READ, WRITE)), redirect_uri_explicit=False
    )
    access = IssuedToken("access-1", ACCESS, (READ,), NOW + 3600)
    refresh = IssuedToken("refresh-1", REFRESH, (READ, WRITE), NOW + 7200)
    grant = oauth_grant("oa_1", sid)
    assert not oauth.redeem_code("code-1", grant, [access, refresh], now=NOW + 60)  # expired
    assert not oauth.redeem_code("code-none", grant, [access, refresh], now=NOW)
    assert oauth.redeem_code("code-1", grant, [access, refresh], now=NOW)
    assert not oauth.redeem_code("code-1", oauth_grant("oa_2", sid), [], now=NOW)  # used
    assert oauth.code("code-1") == replace(oauth_code(sid), used=True, grant_id="oa_1")
    record = oauth.token("access-1")
    assert record is not None and (record.kind, record.scopes, record.expires_at, record.rotated) == (
        ACCESS,
        (READ,),
        NOW + 3600,
        False,
    )
    listed = OAuthGrant(
        id="oa_1",
        site_id=sid,
        site="acme",
        client_id="client-1",
        client_name="Claude",
        bounds=Bounds((READ, WRITE), teams=("t",)),
        resource="http://127.0.0.1:8765/mcp",
        created_at=WHEN,
        expires_at=NOW + 3600,
        revoked_at=None,
        last_used_at=rfc3339_at(NOW),
    )
    assert record.grant == listed and oauth.token("unknown") is None
    try:
        assert oauth.token("access-1", nowait=True) == record
    except WouldBlock:
        pass  # PostgreSQL: the caller asks again from a thread

    # Rotation: once, before expiry, of a refresh token only; the grant's expired tokens go.
    new = [IssuedToken("access-2", ACCESS, (READ,), NOW + 100), IssuedToken("refresh-2", REFRESH, (READ,), NOW + 9000)]
    assert not oauth.rotate_refresh("access-1", new, now=NOW, grant_expires_at=NOW + 9000)
    assert not oauth.rotate_refresh("refresh-1", new, now=NOW + 7200, grant_expires_at=NOW + 9000)
    assert oauth.rotate_refresh("refresh-1", new, now=NOW + 3600, grant_expires_at=NOW + 9000)
    assert not oauth.rotate_refresh("refresh-1", [], now=NOW + 3600, grant_expires_at=NOW + 9999)
    rotated = oauth.token("refresh-1")
    assert rotated is not None and rotated.rotated and rotated.grant.expires_at == NOW + 9000
    assert oauth.token("access-1") is None  # expired at the rotation: forgotten
    fresh = oauth.token("refresh-2")
    assert fresh is not None and (fresh.kind, fresh.scopes, fresh.rotated) == (REFRESH, (READ,), False)

    # Grants: oldest first, revoked ones included; a revoked grant refreshes no more.
    assert oauth.redeem_code(
        "code-2",
        oauth_grant("oa_0", sid, created_at="2024-04-01T00:00:00.000000Z"),
        [IssuedToken("refresh-0", REFRESH, (READ,), NOW + 3600)],
        now=NOW,
    )
    assert [g.id for g in oauth.grants(sid)] == ["oa_0", "oa_1"] and oauth.grants(sid + 100) == []
    assert oauth.revoke_grant("oa_1") and not oauth.revoke_grant("oa_1") and not oauth.revoke_grant("oa_none")
    revoked = oauth.grants(sid)[1]
    assert revoked.revoked_at is not None and RFC3339.fullmatch(revoked.revoked_at)
    assert not oauth.rotate_refresh("refresh-2", [], now=NOW + 3600, grant_expires_at=NOW + 9999)
    record = oauth.token("access-2")
    assert record is not None and record.grant.revoked_at == revoked.revoked_at

    # When a grant was last used (its code exchanged, a refresh, one of its tokens): only ever later.
    assert [g.last_used_at for g in oauth.grants(sid)] == [rfc3339_at(NOW), rfc3339_at(NOW + 3600)]
    oauth.mark_grant_used("oa_0", "2030-03-17T18:00:00.000000Z")
    oauth.mark_grant_used("oa_0", "2030-03-17T17:59:00.000000Z")
    oauth.mark_grant_used("oa_none", "2030-03-17T18:00:00.000000Z")
    assert [g.last_used_at for g in oauth.grants(sid)] == ["2030-03-17T18:00:00.000000Z", rfc3339_at(NOW + 3600)]

    # A site's deletion takes its codes, grants and tokens (not the clients: they belong to no site).
    other = site(storage, "other")
    assert oauth.add_code("code-o", oauth_code(other), now=NOW)
    assert oauth.redeem_code(
        "code-o", oauth_grant("oa_o", other), [IssuedToken("access-o", ACCESS, (READ,), NOW + 60)], now=NOW
    )
    assert oauth.add_code("code-3", oauth_code(sid), now=NOW)
    assert storage.sites.delete_site("acme")
    assert oauth.grants(sid) == [] and oauth.code("code-1") is None and oauth.code("code-3") is None
    assert all(oauth.token(t) is None for t in ("refresh-0", "refresh-1", "refresh-2", "access-2"))
    assert [g.id for g in oauth.grants(other)] == ["oa_o"] and oauth.token("access-o") is not None
    assert oauth.client("client-1") is not None
    assert not oauth.redeem_code("code-3", oauth_grant("oa_3", sid), [], now=NOW)
