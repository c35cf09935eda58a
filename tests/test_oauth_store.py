"""The authorization server over a real store, in process, with a clock of the test's own: what the OAuth
store promises (every backend), the provider's rules that rest on it, and what the authenticator makes of
the tokens: secrets stored only as digests, codes single-use and short-lived, one winner of racing
exchanges and refreshes, a revocation seen by every replica on its next request, a site's rows gone with it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp.server.auth.provider import AuthorizationParams, TokenError
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

from server.api.oauth.clients import RegisteredClient
from server.api.oauth.provider import IssuedCode, Lifetimes, SiteAuthorizationServer
from server.auth import admin
from server.auth.authenticator import Authenticator
from server.auth.oauth import digest
from server.auth.principal import READ, WRITE
from server.errors import Unauthorized
from server.settings import Settings
from server.storage.factory import open_storage
from server.storage.oauth_records import Bounds
from server.storage.protocols import Storage

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
    provider = SiteAuthorizationServer(storage.oauth, issuer=BASE, resource=RESOURCE, lifetimes=Lifetimes(),
                                       clock=clock)
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
    info = OAuthClientInformationFull(client_id=f"client-{secrets.token_hex(4)}",
                                      client_secret=f"mcs_{secrets.token_hex(16)}", client_name="In-process",
                                      redirect_uris=[AnyUrl("http://127.0.0.1:5000/cb")],
                                      token_endpoint_auth_method="client_secret_post")
    await a.provider.register_client(info)
    client = await a.provider.get_client(info.client_id)
    assert client is not None and client.secret_hash == digest(info.client_secret or "")
    _, challenge = pkce()
    params = AuthorizationParams(state="s1", scopes=[READ, WRITE], code_challenge=challenge,
                                 redirect_uri=AnyUrl("http://127.0.0.1:5000/cb"), redirect_uri_provided_explicitly=True,
                                 resource=RESOURCE)
    request_id = parse_qs(urlsplit(await a.provider.authorize(client, params)).query)["request"][0]
    begun = await a.provider.begin_consent(request_id)
    assert begun is not None
    redirect = await a.provider.approve(request_id, a.site_id, bounds)
    assert redirect is not None
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    issued = await a.provider.load_authorization_code(client, code)
    assert issued is not None
    return Flow(client, info.client_secret or "", request_id, begun[1], issued,
                [info.client_secret or "", request_id, begun[1], code])


async def test_every_secret_is_stored_only_as_its_digest(authority: Authority) -> None:
    flow = await signed_in(authority)
    tokens = await authority.provider.exchange_authorization_code(flow.client, flow.code)
    refresh = await authority.provider.load_refresh_token(flow.client, tokens.refresh_token or "")
    assert refresh is not None
    again = await authority.provider.exchange_refresh_token(flow.client, refresh, [READ])
    plaintexts = flow.plaintexts + secrets_of(tokens) + secrets_of(again)
    cells = [str(cell) for table in TABLES for row in query(authority.settings, f"SELECT * FROM {table}")
             for cell in row]
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
    info = OAuthClientInformationFull(client_id="client-slow", redirect_uris=[AnyUrl("http://127.0.0.1:5000/cb")],
                                      token_endpoint_auth_method="none")
    await authority.provider.register_client(info)
    client = await authority.provider.get_client("client-slow")
    assert client is not None and client.secret_hash is None
    params = AuthorizationParams(state=None, scopes=None, code_challenge=pkce()[1],
                                 redirect_uri=AnyUrl("http://127.0.0.1:5000/cb"), redirect_uri_provided_explicitly=True)
    request_id = parse_qs(urlsplit(await authority.provider.authorize(client, params)).query)["request"][0]
    authority.clock.now += 599
    assert await authority.provider.consent_view(request_id) is not None
    authority.clock.now += 1
    assert await authority.provider.consent_view(request_id) is None
    assert await authority.provider.approve(request_id, authority.site_id, Bounds((READ,))) is None


async def test_of_two_racing_exchanges_neither_keeps_tokens(authority: Authority) -> None:
    flow = await signed_in(authority)
    outcomes = await asyncio.gather(*(authority.provider.exchange_authorization_code(flow.client, flow.code)
                                      for _ in range(2)), return_exceptions=True)
    won = [o for o in outcomes if isinstance(o, OAuthToken)]
    assert len(won) == 1 and sum(isinstance(o, TokenError) for o in outcomes) == 1
    with pytest.raises(Unauthorized, match="revoked"):  # a code presented twice: its grant is revoked
        authority.authenticator().authenticate(f"Bearer {won[0].access_token}")


async def test_of_two_racing_refreshes_neither_keeps_tokens(authority: Authority) -> None:
    flow = await signed_in(authority)
    tokens = await authority.provider.exchange_authorization_code(flow.client, flow.code)
    refresh = await authority.provider.load_refresh_token(flow.client, tokens.refresh_token or "")
    assert refresh is not None
    outcomes = await asyncio.gather(*(authority.provider.exchange_refresh_token(flow.client, refresh, [READ, WRITE])
                                      for _ in range(2)), return_exceptions=True)
    won = [o for o in outcomes if isinstance(o, OAuthToken)]
    assert len(won) == 1
    with pytest.raises(Unauthorized, match="revoked"):
        authority.authenticator().authenticate(f"Bearer {won[0].access_token}")


async def test_every_replica_sees_a_revocation_on_its_next_request(authority: Authority) -> None:
    flow = await signed_in(authority, Bounds((READ,), buckets=("b1",)))
    tokens = await authority.provider.exchange_authorization_code(flow.client, flow.code)
    other = open_storage(authority.settings)  # a second server process on the same authority
    try:
        header = f"Bearer {tokens.access_token}"
        here, there = authority.authenticator(), authority.authenticator(other)
        for authenticator in (here, there):
            principal = authenticator.authenticate(header)
            assert (principal.kind, principal.scopes, principal.buckets) == ("oauth", {READ}, {"b1"})
            assert authenticator.authenticate_nowait(header) == principal
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
    elsewhere = Authenticator(authority.storage.sites, oauth=authority.storage.oauth,
                              resource="https://memory.example.com/mcp", clock=authority.clock)
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
