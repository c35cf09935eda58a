"""The doors that need no credential, against a real server process on SQLite and on PostgreSQL: client
registration limited per address (429 before the body is read) and bounded in size, a `state` of bounded
length, capped pending authorizations and registrations that never signed in, which expire and are removed;
revocation by a public client; revoked tokens that are no failed sign-ins; a registered scope as the upper
bound of a grant; X-Forwarded-For believed from a trusted proxy only. Plus what the OAuth store keeps for
each of these (and for the grants' list: client name, scopes, created, last used), in process.

The module's server trusts 127.0.0.1 as a proxy, so each test speaks for client addresses of its own
(`X-Forwarded-For`) and the per-address limits of one test never touch another's.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest

from memory_server.auth.principal import READ, WRITE
from memory_server.settings import Settings
from memory_server.storage.backends import SQLITE, backend_of
from memory_server.storage.factory import open_storage
from memory_server.storage.oauth_records import (
    ACCESS,
    REFRESH,
    Admission,
    Bounds,
    IssuedToken,
    NewGrant,
    OAuthClient,
    OAuthCode,
    Quota,
)
from memory_server.storage.oauth_records import PendingAuthorization as Pending
from memory_server.timestamps import rfc3339_at

from conftest import make_settings, query
from oauth_support import Owner, RawClient, parse_form, pkce
from procs import ServerProcess, parse_fields, run_cli, server_env

pytestmark = pytest.mark.backends

PER_MINUTE = 3  # the module server's MEMORY_OAUTH_REQUESTS_PER_MINUTE and MEMORY_SIGN_IN_FAILURES_PER_MINUTE
_addresses = itertools.count(1)


def new_address() -> str:
    n = next(_addresses)
    return f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"


class Front:
    def __init__(self, root: Path, **env: str) -> None:
        self.data = root / "data"
        self.secret = parse_fields(run_cli("site", "create", "acme", data_dir=self.data).stdout)["secret"]
        # Ready, not only healthy: several tests read memories, which wait for the model.
        self.process = ServerProcess(self.data, env=server_env(**env)).start().wait_ready()
        self.base = self.process.base
        self.settings = make_settings(self.data)

    def owner(self, **choices: Any) -> Owner:
        return Owner("acme", self.secret, **choices)

    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return query(self.settings, sql, *args)

    def count(self, table: str) -> int:
        [(n,)] = self.rows(f"SELECT count(*) FROM {table}")
        return int(n)


@pytest.fixture(scope="module")
def front(storage_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    server = Front(
        tmp_path_factory.mktemp("front-doors"),
        MEMORY_TRUSTED_PROXIES="127.0.0.1",
        MEMORY_OAUTH_REQUESTS_PER_MINUTE=str(PER_MINUTE),
        MEMORY_SIGN_IN_FAILURES_PER_MINUTE=str(PER_MINUTE),
    )
    try:
        yield server
    finally:
        server.process.kill()


@contextlib.asynccontextmanager
async def client_at(address: str) -> Any:
    """An HTTP client speaking for `address` through the trusted proxy (its X-Forwarded-For)."""
    async with httpx2.AsyncClient(timeout=60, headers={"X-Forwarded-For": address}) as http:
        yield http


def registration(**metadata: Any) -> dict[str, Any]:
    return {"client_name": "Front door", "redirect_uris": ["http://127.0.0.1:38125/cb"], **metadata}


# --- registration ----------------------------------------------------------------------------------------


async def test_registrations_are_limited_per_address_before_the_body_is_read(front: Front) -> None:
    address, before = new_address(), front.count("oauth_clients")
    async with client_at(address) as http:
        for _ in range(PER_MINUTE):
            assert (await http.post(f"{front.base}/register", json=registration())).status_code == 201
        refused = await http.post(f"{front.base}/register", json=registration())
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert front.count("oauth_clients") == before + PER_MINUTE  # the refused one stored nothing

    # The 429 comes before any body: a head announcing 50 KB that never sends them is answered at once.
    with socket.create_connection(("127.0.0.1", front.process.port), timeout=10) as sock:
        sock.sendall(
            f"POST /register HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {address}\r\n"
            "Content-Type: application/json\r\nContent-Length: 50000\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 429")

    # Another address has a budget of its own; IPv6 addresses are limited by their /64.
    async with client_at(new_address()) as http:
        assert (await http.post(f"{front.base}/register", json=registration())).status_code == 201
    for host in ("2001:db8:7:1::1", "2001:db8:7:1::2", "2001:db8:7:1:ffff::3"):
        async with client_at(host) as http:
            assert (await http.post(f"{front.base}/register", json=registration())).status_code == 201
    async with client_at("2001:db8:7:1::4") as http:
        assert (await http.post(f"{front.base}/register", json=registration())).status_code == 429
    async with client_at("2001:db8:7:2::1") as http:
        assert (await http.post(f"{front.base}/register", json=registration())).status_code == 201


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        ({"redirect_uris": [f"http://127.0.0.1:{5000 + i}/cb" for i in range(11)]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://claude.ai@evil.example/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["http://user:pw@127.0.0.1:5000/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://app.example/" + "p" * 2000]}, "invalid_redirect_uri"),
        ({"client_name": "n" * 201}, "invalid_client_metadata"),
        (
            {
                "client_uri": "https://app.example/" + "u" * 1900,
                "tos_uri": "https://app.example/" + "t" * 1900,
                "policy_uri": "https://app.example/" + "p" * 1900,
            },
            "invalid_client_metadata",
        ),
        ({"contacts": [f"someone{i}@example.com" for i in range(200)]}, "invalid_client_metadata"),
    ],
)
async def test_a_registration_is_bounded_and_user_information_is_refused(
    front: Front, metadata: dict[str, Any], error: str
) -> None:
    before = front.count("oauth_clients")
    async with client_at(new_address()) as http:
        response = await http.post(f"{front.base}/register", json=registration(**metadata))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error
    assert front.count("oauth_clients") == before


async def test_what_a_client_needs_registers(front: Front) -> None:
    """Six redirect URIs (as VS Code registers them), contacts and URIs of ordinary length are fine."""
    uris = [
        "https://insiders.vscode.dev/redirect",
        "https://vscode.dev/redirect",
        "http://localhost/",
        "http://127.0.0.1/",
        "http://localhost:33418/",
        "http://127.0.0.1:33418/",
    ]
    async with client_at(new_address()) as http:
        response = await http.post(
            f"{front.base}/register",
            json=registration(
                redirect_uris=uris,
                client_uri="https://code.visualstudio.com/",
                contacts=["dev@example.com"],
                logo_uri="https://code.visualstudio.com/logo.png",
                scope="memory:read memory:write offline_access",
            ),
        )
    assert response.status_code == 201, response.text


# --- authorization requests ------------------------------------------------------------------------------


async def test_state_is_bounded(front: Front) -> None:
    async with client_at(new_address()) as http:
        raw = await RawClient.register(http, front.base)
        _, challenge = pkce()
        before = front.count("oauth_requests")
        long = await http.get(raw.authorize_url(challenge, state="s" * 1025))
        assert long.status_code == 302
        query_ = parse_qs(urlsplit(long.headers["location"]).query)
        assert long.headers["location"].startswith(raw.redirect_uri) and query_["error"] == ["invalid_request"]
        assert front.count("oauth_requests") == before
        fits = await http.get(raw.authorize_url(challenge, state="s" * 1024))
        assert fits.status_code == 302 and "/oauth/consent?" in fits.headers["location"]
        assert front.count("oauth_requests") == before + 1


# --- revocation, and tokens that no longer hold ----------------------------------------------------------


async def test_a_public_client_revokes_with_its_client_id_alone(front: Front) -> None:
    async with client_at(new_address()) as http:
        # The metadata says so (RFC 8414): `none` at the revocation endpoint as at the token endpoint.
        metadata = (await http.get(f"{front.base}/.well-known/oauth-authorization-server")).json()
        for methods in ("token_endpoint_auth_methods_supported", "revocation_endpoint_auth_methods_supported"):
            assert "none" in metadata[methods], metadata
        raw = await RawClient.register(http, front.base, token_endpoint_auth_method="none")
        assert raw.client_secret is None
        tokens = await raw.tokens(http, front.owner())
        access = {"Authorization": f"Bearer {tokens['access_token']}"}
        assert (await http.get(f"{front.base}/v1/memories", headers=access)).status_code == 200
        revoked = await http.post(
            f"{front.base}/revoke", data={"client_id": raw.client_id, "token": tokens["access_token"]}
        )
        assert revoked.status_code == 200, revoked.text
        assert (await http.get(f"{front.base}/v1/memories", headers=access)).status_code == 401
        assert (await raw.refresh(http, tokens["refresh_token"])).status_code == 400  # the whole grant ended

        # A token it does not own is left alone (200 all the same); its refresh token revokes too.
        second = await raw.tokens(http, front.owner())
        other = await RawClient.register(http, front.base, token_endpoint_auth_method="none")
        foreign = await http.post(
            f"{front.base}/revoke", data={"client_id": other.client_id, "token": second["refresh_token"]}
        )
        assert foreign.status_code == 200
        refreshed = await raw.refresh(http, second["refresh_token"])
        assert refreshed.status_code == 200, refreshed.text
        current = refreshed.json()
        own = await http.post(
            f"{front.base}/revoke",
            data={"client_id": raw.client_id, "token_type_hint": "refresh_token", "token": current["refresh_token"]},
        )
        assert own.status_code == 200
        assert (
            await http.get(f"{front.base}/v1/memories", headers={"Authorization": f"Bearer {current['access_token']}"})
        ).status_code == 401


async def test_a_confidential_client_still_needs_its_secret_to_revoke(front: Front) -> None:
    async with client_at(new_address()) as http:
        raw = await RawClient.register(http, front.base)
        tokens = await raw.tokens(http, front.owner())
        anonymous = await http.post(
            f"{front.base}/revoke", data={"client_id": raw.client_id, "token": tokens["access_token"]}
        )
        assert anonymous.status_code == 401 and anonymous.json()["error"] == "invalid_client"
        access = {"Authorization": f"Bearer {tokens['access_token']}"}
        assert (await http.get(f"{front.base}/v1/memories", headers=access)).status_code == 200
        assert (await raw.revoke(http, tokens["access_token"])).status_code == 200
        assert (await http.get(f"{front.base}/v1/memories", headers=access)).status_code == 401


async def test_a_revoked_token_is_no_failed_sign_in(front: Front) -> None:
    async with client_at(new_address()) as http:
        raw = await RawClient.register(http, front.base)
        tokens = await raw.tokens(http, front.owner())
        assert (await raw.revoke(http, tokens["access_token"])).status_code == 200
        stale = {"Authorization": f"Bearer {tokens['access_token']}"}
        answers = [(await http.get(f"{front.base}/v1/memories", headers=stale)).status_code for _ in range(10)]
        assert answers == [401] * 10  # a client still holding its revoked token is refused, never rate-limited
        # Guesses at the secret still count, from the first.
        wrong = httpx2.BasicAuth("acme", "not-the-secret")
        guesses = [(await http.get(f"{front.base}/v1/memories", auth=wrong)).status_code for _ in range(PER_MINUTE + 1)]
        assert guesses == [401] * PER_MINUTE + [429]


async def test_the_consent_page_takes_a_secret_it_verified_before_from_a_limited_address(front: Front) -> None:
    async with client_at(new_address()) as http:
        right = httpx2.BasicAuth("acme", front.secret)
        assert (await http.get(f"{front.base}/v1/memories", auth=right)).status_code == 200
        wrong = httpx2.BasicAuth("acme", "not-the-secret")
        for _ in range(PER_MINUTE):
            assert (await http.get(f"{front.base}/v1/memories", auth=wrong)).status_code == 401
        assert (await http.get(f"{front.base}/v1/memories", auth=wrong)).status_code == 429
        raw = await RawClient.register(http, front.base)
        _, challenge = pkce()

        async def consent_page() -> httpx2.Response:
            return await http.get((await http.get(raw.authorize_url(challenge))).headers["location"])

        granted = await front.owner().submit(http, await consent_page())
        assert granted.status_code == 303, granted.text  # the owner, not a guesser: let in
        denied = await Owner("acme", "not-the-secret").submit(http, await consent_page())
        assert denied.status_code == 429 and "Too many failed sign-ins" in denied.text


# --- scopes ----------------------------------------------------------------------------------------------


async def test_the_registered_scope_bounds_what_a_client_is_granted(front: Front) -> None:
    async with client_at(new_address()) as http:
        reader = await RawClient.register(http, front.base, scope=READ)
        _, challenge = pkce()
        start = await http.get(reader.authorize_url(challenge, scope=f"{READ} {WRITE}"))
        page = await http.get(start.headers["location"])
        assert [value for _, value, _ in parse_form(page.text).checkboxes] == [READ]
        verifier, challenge = pkce()
        code = parse_qs(
            urlsplit((await http.get(reader.authorize_url(challenge, scope=WRITE))).headers["location"]).query
        )
        assert code["error"] == ["invalid_scope"]
        tokens = await reader.tokens(http, front.owner())
        assert tokens["scope"] == READ

    async with client_at(new_address()) as http:  # another address: this one's three authorizations are spent
        anything = await RawClient.register(http, front.base)  # no scope registered: any of this server's
        _, challenge = pkce()
        page = await http.get(
            (await http.get(anything.authorize_url(challenge, scope=f"{READ} {WRITE}"))).headers["location"]
        )
        assert [value for _, value, _ in parse_form(page.text).checkboxes] == [READ, WRITE]


# --- X-Forwarded-For -------------------------------------------------------------------------------------


async def test_x_forwarded_for_is_believed_only_from_a_trusted_proxy(tmp_path: Path) -> None:
    """By default no proxy is trusted: a client on this very machine cannot reset its limits by naming
    another address each time (uvicorn alone would believe any loopback peer)."""
    server = Front(tmp_path, MEMORY_OAUTH_REQUESTS_PER_MINUTE="2", MEMORY_SIGN_IN_FAILURES_PER_MINUTE="2")
    try:
        async with httpx2.AsyncClient(timeout=60) as http:
            wrong = httpx2.BasicAuth("acme", "not-the-secret")
            signs = [
                (
                    await http.get(f"{server.base}/v1/memories", auth=wrong, headers={"X-Forwarded-For": new_address()})
                ).status_code
                for _ in range(3)
            ]
            assert signs == [401, 401, 429]
            registered = [
                (
                    await http.post(
                        f"{server.base}/register", json=registration(), headers={"X-Forwarded-For": new_address()}
                    )
                ).status_code
                for _ in range(3)
            ]
            assert registered == [201, 201, 429]
    finally:
        server.process.kill()
    with pytest.raises(ValueError, match="not an IP address"):
        Settings(trusted_proxies="127.0.0.1, proxy.example")


# --- capacity: pending requests, registrations that never signed in --------------------------------------

UNUSED_S = 10


@pytest.fixture(scope="module")
def capped(storage_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    server = Front(
        tmp_path_factory.mktemp("front-doors-capped"),
        MEMORY_OAUTH_MAX_PENDING="3",
        MEMORY_OAUTH_MAX_UNUSED_CLIENTS="3",
        MEMORY_OAUTH_UNUSED_CLIENT_S=str(UNUSED_S),
        MEMORY_OAUTH_REQUESTS_PER_MINUTE="1000",
    )
    try:
        yield server
    finally:
        server.process.kill()


async def test_registrations_that_never_sign_in_are_capped_expire_and_are_removed(capped: Front) -> None:
    async with httpx2.AsyncClient(timeout=60) as http:
        signed_in = await RawClient.register(http, capped.base)
        tokens = await signed_in.tokens(http, capped.owner())
        unused = [(await http.post(f"{capped.base}/register", json=registration())) for _ in range(4)]
        assert [answer.status_code for answer in unused] == [201, 201, 201, 201], [a.text for a in unused]
        # The fourth took the place of the oldest that never signed in (tests/test_oauth_shares.py: whose).
        taken, *ids = [answer.json()["client_id"] for answer in unused]
        kept = {row[0] for row in capped.rows("SELECT client_id FROM oauth_clients")}
        assert taken not in kept and set(ids) <= kept and signed_in.client_id in kept

        # Once UNUSED_S have passed, they are unknown (a sign-in needs a new registration) ... Asked with a
        # malformed challenge, /authorize stores nothing for a client it knows (an error redirect), and
        # answers 400 for one it does not.
        expired = RawClient(capped.base, ids[-1], None, "http://127.0.0.1:38125/cb")  # the newest of them
        deadline = time.monotonic() + UNUSED_S + 30
        while (await http.get(expired.authorize_url("not-s256"))).status_code != 400:
            assert time.monotonic() < deadline, "a registration that never signed in did not expire"
            await anyio.sleep(0.5)
        # ... and the next registration removes them, making room under the cap.
        assert (await http.post(f"{capped.base}/register", json=registration())).status_code == 201
        kept = {row[0] for row in capped.rows("SELECT client_id FROM oauth_clients")}
        assert not set(ids) & kept and signed_in.client_id in kept
        # A client that signed in is kept whatever its age: it refreshes.
        assert (await signed_in.refresh(http, tokens["refresh_token"])).status_code == 200


async def test_pending_authorizations_are_capped(capped: Front) -> None:
    async with httpx2.AsyncClient(timeout=60) as http:
        raw = await RawClient.register(http, capped.base)
        _, challenge = pkce()
        waiting = [await http.get(raw.authorize_url(challenge)) for _ in range(3)]
        assert all("/oauth/consent?" in answer.headers["location"] for answer in waiting)
        # A fourth takes the place of the oldest (tests/test_oauth_shares.py: whose), whose page is gone.
        fourth = await http.get(raw.authorize_url(challenge, state="st-4"))
        assert "/oauth/consent?" in fourth.headers["location"]
        assert capped.count("oauth_requests") == 3
        assert (await http.get(waiting[0].headers["location"])).status_code == 400
        # One answered frees its slot.
        page = await http.get(waiting[1].headers["location"])
        assert (await capped.owner(action="deny").submit(http, page)).status_code == 303
        assert capped.count("oauth_requests") == 2


# --- the store -------------------------------------------------------------------------------------------

NOW = 1_900_000_000.0


def test_the_oauth_store_caps_what_it_keeps_and_dates_use(tmp_path: Path) -> None:
    storage = open_storage(make_settings(tmp_path / "data"))
    try:
        oauth = storage.oauth
        cap = Quota(total=2, per_network=2, per_address=2)
        assert oauth.add_client(OAuthClient("c-1", None, "Claude", "{}", NOW), quota=cap).added
        assert oauth.add_client(OAuthClient("c-2", None, None, "{}", NOW + 10), quota=cap).added
        assert oauth.client("c-1") == OAuthClient("c-1", None, "Claude", "{}", NOW)

        # A sign-in (a code exchanged) marks its client, and dates its grant's use.
        storage.sites.create_site("acme", "h")
        sid = storage.sites.site_id("acme")
        assert sid is not None
        code = OAuthCode(
            client_id="c-1",
            site_id=sid,
            bounds=Bounds((READ,)),
            resource="r",
            code_challenge="x",
            redirect_uri="http://127.0.0.1:5000/cb",
            redirect_uri_explicit=True,
            expires_at=NOW + 60,
        )
        assert oauth.add_code("code", code, now=NOW)
        grant = NewGrant(
            id="oa_1",
            site_id=sid,
            client_id="c-1",
            bounds=Bounds((READ,)),
            resource="r",
            created_at="2030-03-17T17:46:40.000000Z",
            expires_at=NOW + 3600,
        )
        tokens = [IssuedToken("acc", ACCESS, (READ,), NOW + 100), IssuedToken("ref", REFRESH, (READ,), NOW + 3600)]
        assert oauth.redeem_code("code", grant, tokens, now=NOW + 5)
        client = oauth.client("c-1")
        assert client is not None and client.granted_at == NOW + 5
        [listed] = oauth.grants(sid)
        assert (listed.client_name, listed.bounds.scopes, listed.created_at, listed.last_used_at) == (
            "Claude",
            (READ,),
            "2030-03-17T17:46:40.000000Z",
            rfc3339_at(NOW + 5),
        )
        assert oauth.rotate_refresh(
            "ref", [IssuedToken("ref-2", REFRESH, (READ,), NOW + 9000)], now=NOW + 50, grant_expires_at=NOW + 9000
        )
        assert oauth.grants(sid)[0].last_used_at == rfc3339_at(NOW + 50)

        # Forgetting: only clients that never signed in, registered before the given time.
        assert oauth.add_client(OAuthClient("c-3", None, None, "{}", NOW + 20), quota=cap) == Admission(
            True
        )  # c-1 is used
        assert oauth.forget_unused_clients(registered_before=NOW + 15) == 1  # c-2 (c-1 signed in, c-3 too new)
        assert oauth.client("c-2") is None and oauth.client("c-1") is not None and oauth.client("c-3") is not None

        # Pending requests: the expired ones make room as they go, then the oldest does.
        pending = Pending("c-1", "{}", NOW + 600)
        assert oauth.add_request("r-1", Pending("c-1", "{}", NOW + 30), now=NOW, quota=cap).added
        assert oauth.add_request("r-2", pending, now=NOW, quota=cap).added
        assert oauth.add_request("r-3", pending, now=NOW + 30, quota=cap) == Admission(True)  # r-1 expired
        assert oauth.add_request("r-4", replace(pending, expires_at=NOW + 700), now=NOW + 30, quota=cap) == Admission(
            True, evicted=1
        )
        assert oauth.request("r-2", now=NOW + 30) is None and oauth.request("r-3", now=NOW + 30) is not None
        assert oauth.add_request("r-5", pending, now=NOW + 30) == Admission(True)  # no cap given: none applied
    finally:
        storage.close()


def test_the_schema_step_counts_clients_with_grants_as_signed_in(tmp_path: Path, storage_backend: str) -> None:
    """Upgrading: a client registered before with a grant is not taken for one that never signed in."""
    settings = make_settings(tmp_path / "data")
    rows = [
        "INSERT INTO oauth_clients (client_id, client_name, metadata, created_at) VALUES ('old-used', NULL,"
        " '{}', 1), ('old-unused', NULL, '{}', 1)",
        "INSERT INTO oauth_grants (id, site_id, client_id, scopes, resource, created_at, expires_at)"
        " VALUES ('oa_old', 1, 'old-used', '[]', 'r', '2024-01-01T00:00:00.000000Z', 2)",
    ]
    if backend_of(settings) is SQLITE:
        from memory_server.storage.sqlite import schema

        settings.data_dir.mkdir(parents=True)
        with contextlib.closing(sqlite3.connect(settings.db_path, isolation_level=None)) as conn:
            before = schema.SCHEMA.index(next(s for s in schema.SCHEMA if "granted_at" in s))
            schema.SCHEMA, full = schema.SCHEMA[:before], schema.SCHEMA
            try:
                schema.migrate(conn)
            finally:
                schema.SCHEMA = full
            for sql in rows:
                conn.execute(sql)
            schema.migrate(conn)
    else:
        import psycopg

        from memory_server.storage.postgres import schema as pg_schema

        before = pg_schema.SCHEMA.index(next(s for s in pg_schema.SCHEMA if "granted_at" in s))
        with psycopg.connect(settings.database_url.get_secret_value(), autocommit=True) as pg:
            pg_schema.migrate(pg, pg_schema.SCHEMA[:before])
            for sql in rows:
                pg.execute(sql)
            pg_schema.migrate(pg)
    assert sorted(query(settings, "SELECT client_id, granted_at FROM oauth_clients")) == [
        ("old-unused", None),
        ("old-used", 1.0),
    ]
    assert query(settings, "SELECT last_used_at FROM oauth_grants") == [(None,)]
