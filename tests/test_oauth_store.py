"""The authorization server over a real store, in process, with a clock of the test's own: what the OAuth
store promises (every backend), the provider's rules that rest on it, and what the authenticator makes of
the tokens: secrets stored only as digests, codes single-use and short-lived, one winner of racing
exchanges and refreshes, a revocation seen by every replica on its next request, a site's rows gone with it.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp.server.auth.provider import AuthorizationParams, TokenError
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

from memory_server.api.oauth.clients import RegisteredClient
from memory_server.api.oauth.provider import IssuedCode, Lifetimes, SiteAuthorizationServer
from memory_server.auth import admin
from memory_server.auth.authenticator import Authenticator
from memory_server.auth.oauth import digest, new_grant_id
from memory_server.auth.principal import READ, WRITE
from memory_server.errors import Unauthorized
from memory_server.settings import Settings
from memory_server.storage.factory import open_storage
from memory_server.storage.oauth_records import ACCESS, REFRESH, Bounds, IssuedToken, NewGrant, OAuthCode
from memory_server.storage.protocols import Storage
from memory_server.timestamps import now_rfc3339

from conftest import make_settings, query
from oauth_support import pkce

pytestmark = pytest.mark.backends

BASE = "http://127.0.0.1:8765"
RESOURCE = f"{BASE}/mcp"
TABLES = ("oauth_clients", "oauth_requests", "oauth_codes", "oauth_grants", "oauth_tokens")


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Authority:
    settings: Settings
    storage: Storage
    clock: Clock
    provider: SiteAuthorizationServer
    site_id: int

    def authenticator(self, storage: Storage | None = None) -> Authenticator:
        store = storage or self.storage
        return Authenticator(store.sites, oauth=store.oauth, resource=RESOURCE, clock=self.clock, nowait=True)


@pytest.fixture
def authority(storage_backend: str, tmp_path: Path) -> Iterator[Authority]:
    settings = make_settings(tmp_path / "data")
    storage = open_storage(settings)
    clock = Clock()
    provider = SiteAuthorizationServer(
        storage.oauth, issuer=BASE, resource=RESOURCE, lifetimes=Lifetimes(), clock=clock
    )
    admin.create_site(storage.sites, "acme")
    try:
        yield Authority(settings, storage, clock, provider, admin.require_site(storage.sites, "acme"))
    finally:
        storage.close()


@dataclass
class Flow:
    client: RegisteredClient
    client_secret: str
    request_id: str
    csrf: str
    code: IssuedCode
    plaintexts: list[str]


async def signed_in(a: Authority, bounds: Bounds = Bounds((READ, WRITE))) -> Flow:
    """Register, authorize, consent and load the code, as the routes would."""
    info = OAuthClientInformationFull(
        client_id=f"client-{secrets.token_hex(4)}",
        client_secret=f"mcs_{secrets.token_hex(16)}",
        client_name="In-process",
        redirect_uris=[AnyUrl("http://127.0.0.1:5000/cb")],
        token_endpoint_auth_method="client_secret_post",
    )
    await a.provider.register_client(info)
    client = await a.provider.get_client(info.client_id)
    assert client is not None and client.secret_hash == digest(info.client_secret or "")
    _, challenge = pkce()
    params = AuthorizationParams(
        state="s1",
        scopes=[READ, WRITE],
        code_challenge=challenge,
        redirect_uri=AnyUrl("http://127.0.0.1:5000/cb"),
        redirect_uri_provided_explicitly=True,
        resource=RESOURCE,
    )
    request_id = parse_qs(urlsplit(await a.provider.authorize(client, params)).query)["request"][0]
    begun = await a.provider.begin_consent(request_id)
    assert begun is not None
    redirect = await a.provider.approve(request_id, a.site_id, bounds)
    assert redirect is not None
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    issued = await a.provider.load_authorization_code(client, code)
    assert issued is not None
    return Flow(
        client,
        info.client_secret or "",
        request_id,
        begun[1],
        issued,
        [info.client_secret or "", request_id, begun[1], code],
    )


async def test_every_secret_is_stored_only_as_its_digest(authority: Authority) -> None:
    flow = await signed_in(authority)
    tokens = await authority.provider.exchange_authorization_code(flow.client, flow.code)
    refresh = await authority.provider.load_refresh_token(flow.client, tokens.refresh_token or "")
    assert refresh is not None
    again = await authority.provider.exchange_refresh_token(flow.client, refresh, [READ])
    plaintexts = flow.plaintexts + secrets_of(tokens) + secrets_of(again)
    cells = [
        str(cell) for table in TABLES for row in query(authority.settings, f"SELECT * FROM {table}") for cell in row
    ]
    assert cells
    for plaintext in plaintexts:
        assert not any(plaintext in cell for cell in cells), plaintext[:4]
    for stored in (flow.client_secret, flow.code.code, tokens.access_token, again.refresh_token or ""):
        assert digest(stored) in cells


async def test_a_code_is_good_once_and_for_a_minute(authority: Authority) -> None:
    stale = await signed_in(authority)
    authority.clock.now += 60
    with pytest.raises(TokenError, match="already used or has expired"):
        await authority.provider.exchange_authorization_code(stale.client, stale.code)
    fresh = await signed_in(authority)
    authority.clock.now += 59
    await authority.provider.exchange_authorization_code(fresh.client, fresh.code)
    with pytest.raises(TokenError):
        await authority.provider.exchange_authorization_code(fresh.client, fresh.code)
    assert await authority.provider.load_authorization_code(fresh.client, fresh.code.code) is None


async def test_a_consent_page_waits_ten_minutes(authority: Authority) -> None:
    info = OAuthClientInformationFull(
        client_id="client-slow", redirect_uris=[AnyUrl("http://127.0.0.1:5000/cb")], token_endpoint_auth_method="none"
    )
    await authority.provider.register_client(info)
    client = await authority.provider.get_client("client-slow")
    assert client is not None and client.secret_hash is None
    params = AuthorizationParams(
        state=None,
        scopes=None,
        code_challenge=pkce()[1],
        redirect_uri=AnyUrl("http://127.0.0.1:5000/cb"),
        redirect_uri_provided_explicitly=True,
    )
    request_id = parse_qs(urlsplit(await authority.provider.authorize(client, params)).query)["request"][0]
    authority.clock.now += 599
    assert await authority.provider.consent_view(request_id) is not None
    authority.clock.now += 1
    assert await authority.provider.consent_view(request_id) is None
    assert await authority.provider.approve(request_id, authority.site_id, Bounds((READ,))) is None


async def test_of_two_racing_exchanges_neither_keeps_tokens(authority: Authority) -> None:
    flow = await signed_in(authority)
    outcomes = await asyncio.gather(
        *(authority.provider.exchange_authorization_code(flow.client, flow.code) for _ in range(2)),
        return_exceptions=True,
    )
    won = [o for o in outcomes if isinstance(o, OAuthToken)]
    assert len(won) == 1 and sum(isinstance(o, TokenError) for o in outcomes) == 1
    with pytest.raises(Unauthorized, match="revoked"):  # a code presented twice: its grant is revoked
        authority.authenticator().authenticate(f"Bearer {won[0].access_token}")


async def test_of_two_racing_refreshes_neither_keeps_tokens(authority: Authority) -> None:
    flow = await signed_in(authority)
    tokens = await authority.provider.exchange_authorization_code(flow.client, flow.code)
    refresh = await authority.provider.load_refresh_token(flow.client, tokens.refresh_token or "")
    assert refresh is not None
    outcomes = await asyncio.gather(
        *(authority.provider.exchange_refresh_token(flow.client, refresh, [READ, WRITE]) for _ in range(2)),
        return_exceptions=True,
    )
    won = [o for o in outcomes if isinstance(o, OAuthToken)]
    assert len(won) == 1
    with pytest.raises(Unauthorized, match="revoked"):
        authority.authenticator().authenticate(f"Bearer {won[0].access_token}")


@contextmanager
def replica(a: Authority) -> Iterator[tuple[Storage, SiteAuthorizationServer]]:
    """A second server on the same authority (its own connections, pools or writer thread)."""
    other = open_storage(a.settings)
    try:
        yield (
            other,
            SiteAuthorizationServer(other.oauth, issuer=BASE, resource=RESOURCE, lifetimes=Lifetimes(), clock=a.clock),
        )
    finally:
        other.close()


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in threads released together; their results (or exceptions), in order."""
    start = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(n: int) -> None:
        start.wait()
        try:
            results[n] = calls[n]()
        except Exception as exc:  # noqa: BLE001 (handed to the test)
            results[n] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def issued(kind: str, now: float, life: float = 3600.0) -> tuple[str, IssuedToken]:
    secret = secrets.token_urlsafe(16)
    return secret, IssuedToken(digest(secret), kind, (READ, WRITE), now + life)


def new_grant(a: Authority) -> NewGrant:
    return NewGrant(
        id=new_grant_id(),
        site_id=a.site_id,
        client_id="client-x",
        bounds=Bounds((READ, WRITE)),
        resource=RESOURCE,
        created_at=now_rfc3339(),
        expires_at=a.clock.now + 3600,
    )


async def test_two_replicas_racing_for_one_code_or_refresh_token_one_wins(authority: Authority) -> None:
    now = authority.clock.now
    with replica(authority) as (other, _):
        stores = (authority.storage.oauth, other.oauth)
        for _ in range(10):  # each code: both servers redeem it at the same moment
            code = OAuthCode(
                client_id="client-x",
                site_id=authority.site_id,
                bounds=Bounds((READ,)),
                resource=RESOURCE,
                code_challenge="c",
                redirect_uri="http://127.0.0.1:5000/cb",
                redirect_uri_explicit=True,
                expires_at=now + 60,
            )
            key = digest(secrets.token_urlsafe(16))
            assert stores[0].add_code(key, code, now=now)
            grants = [new_grant(authority) for _ in stores]
            outcomes = at_once(
                *(
                    partial(s.redeem_code, key, g, [issued(ACCESS, now)[1]], now=now)
                    for s, g in zip(stores, grants, strict=True)
                )
            )
            assert sorted(outcomes) == [False, True], outcomes
            winner = grants[outcomes.index(True)]
            assert stores[1].code(key) == replace(code, used=True, grant_id=winner.id)
        assert count(authority, "oauth_grants") == 10 and count(authority, "oauth_tokens") == 10

        grant = new_grant(authority)
        refresh, token = issued(REFRESH, now)
        assert stores[0].redeem_code(digest("none"), grant, [token], now=now) is False  # no such code
        assert stores[0].add_code(digest("c2"), replace(code, expires_at=now + 60), now=now)
        assert stores[0].redeem_code(digest("c2"), grant, [token], now=now)
        for round_ in range(20):  # each refresh token: both servers rotate it at the same moment
            fresh = [issued(REFRESH, now + round_) for _ in stores]
            outcomes = at_once(
                *(
                    partial(
                        s.rotate_refresh,
                        digest(refresh),
                        [t[1]],
                        now=now + round_,
                        grant_expires_at=now + 7200 + round_,
                    )
                    for s, t in zip(stores, fresh, strict=True)
                )
            )
            assert sorted(outcomes) == [False, True], outcomes
            refresh = fresh[outcomes.index(True)][0]
            live = query(
                authority.settings, "SELECT count(*) FROM oauth_tokens WHERE grant_id = ? AND rotated = 0", grant.id
            )
            assert live == [(1,)]  # the winner's: the loser stored nothing
        record = stores[1].token(digest(refresh))
        assert record is not None and not record.rotated and record.grant.expires_at == now + 7200 + 19


async def test_a_refresh_racing_a_revocation_or_the_sites_deletion_leaves_nothing_behind(authority: Authority) -> None:
    now = authority.clock.now
    with replica(authority) as (other, _):
        for round_ in range(6):
            name = f"site-{round_}"
            admin.create_site(authority.storage.sites, name)
            grant = replace(new_grant(authority), site_id=admin.require_site(authority.storage.sites, name))
            refresh, token = issued(REFRESH, now)
            code = OAuthCode(
                client_id="client-x",
                site_id=grant.site_id,
                bounds=Bounds((READ,)),
                resource=RESOURCE,
                code_challenge="c",
                redirect_uri="http://127.0.0.1:5000/cb",
                redirect_uri_explicit=True,
                expires_at=now + 60,
            )
            assert authority.storage.oauth.add_code(digest(name), code, now=now)
            assert authority.storage.oauth.redeem_code(digest(name), grant, [token], now=now)
            rotate = partial(
                authority.storage.oauth.rotate_refresh,
                digest(refresh),
                [issued(ACCESS, now)[1], issued(REFRESH, now)[1]],
                now=now,
                grant_expires_at=now + 1,
            )
            if round_ % 2:
                rotated, revoked = at_once(rotate, partial(other.oauth.revoke_grant, grant.id))
                assert revoked is True and isinstance(rotated, bool)
                assert query(
                    authority.settings, "SELECT revoked_at IS NOT NULL FROM oauth_grants WHERE id = ?", grant.id
                ) == [(True,)]
            else:
                later = replace(code, expires_at=now + 60)
                rotated, added, deleted = at_once(
                    rotate,
                    partial(other.oauth.add_code, digest(f"{name}-2"), later, now=now),
                    partial(other.sites.delete_site, name),
                )
                assert deleted is True and isinstance(rotated, bool) and isinstance(added, bool)
                for table in ("oauth_codes", "oauth_grants"):
                    assert query(
                        authority.settings, f"SELECT count(*) FROM {table} WHERE site_id = ?", grant.site_id
                    ) == [(0,)]
                assert query(authority.settings, "SELECT count(*) FROM oauth_tokens WHERE grant_id = ?", grant.id) == [
                    (0,)
                ]


async def test_every_replica_sees_a_revocation_on_its_next_request(authority: Authority, storage_backend: str) -> None:
    sqlite = storage_backend == "sqlite"
    flow = await signed_in(authority, Bounds((READ,), buckets=("b1",)))
    tokens = await authority.provider.exchange_authorization_code(flow.client, flow.code)
    other = open_storage(authority.settings)  # a second server process on the same authority
    try:
        header = f"Bearer {tokens.access_token}"
        here, there = authority.authenticator(), authority.authenticator(other)
        for authenticator in (here, there):
            principal = authenticator.authenticate(header)
            assert (principal.kind, principal.scopes, principal.buckets) == ("oauth", {READ}, {"b1"})
            # PostgreSQL is never read on the event loop: the request goes on to `authenticate` in a thread.
            assert authenticator.authenticate_nowait(header) == (principal if sqlite else None)
        (grant,) = authority.storage.oauth.grants(authority.site_id)
        assert grant.client_name == "In-process" and grant.bounds == Bounds((READ,), buckets=("b1",))
        assert other.oauth.revoke_grant(grant.id) and not other.oauth.revoke_grant(grant.id)
        for authenticator in (here, there):
            assert authenticator.authenticate_nowait(header) is None
            with pytest.raises(Unauthorized, match="revoked"):
                authenticator.authenticate(header)
    finally:
        other.close()


async def test_an_access_token_expires_and_names_its_audience(authority: Authority) -> None:
    flow = await signed_in(authority)
    tokens = await authority.provider.exchange_authorization_code(flow.client, flow.code)
    header = f"Bearer {tokens.access_token}"
    elsewhere = Authenticator(
        authority.storage.sites,
        oauth=authority.storage.oauth,
        resource="https://memory.example.com/mcp",
        clock=authority.clock,
    )
    with pytest.raises(Unauthorized, match="another resource"):
        elsewhere.authenticate(header)
    authority.authenticator().authenticate(header)
    authority.clock.now += 3600
    with pytest.raises(Unauthorized, match="expired"):
        authority.authenticator().authenticate(header)
    with pytest.raises(Unauthorized):  # a refresh token is never an access token
        authority.authenticator().authenticate(f"Bearer {tokens.refresh_token}")


async def test_deleting_a_site_deletes_its_oauth_rows(authority: Authority) -> None:
    flow = await signed_in(authority)
    await authority.provider.exchange_authorization_code(flow.client, flow.code)
    await signed_in(authority)  # an unused code too
    counts = {t: count(authority, t) for t in ("oauth_codes", "oauth_grants", "oauth_tokens")}
    assert counts == {"oauth_codes": 2, "oauth_grants": 1, "oauth_tokens": 2}
    admin.delete_site(authority.storage.sites, "acme")
    assert all(count(authority, t) == 0 for t in counts)
    assert count(authority, "oauth_clients") == 2  # clients belong to no site


def count(a: Authority, table: str) -> int:
    return int(query(a.settings, f"SELECT count(*) FROM {table}")[0][0])


def secrets_of(tokens: OAuthToken) -> list[Any]:
    return [tokens.access_token, tokens.refresh_token or ""]
