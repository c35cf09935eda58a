"""The OAuth caps shared out per client address and network, on SQLite and on PostgreSQL: a flood of
registrations and authorization requests from many loopback addresses (real source addresses, 127.0.x.y,
against a real server process) while a client from another network registers, is shown its consent page and
signs in; a registration refused only when every candidate is in the middle of a sign-in, with Retry-After;
and, in process, the store's rule of who makes room (memory_server/storage/oauth_admission.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from memory_server.storage.factory import open_storage
from memory_server.storage.oauth_records import (
    Bounds,
    IssuedToken,
    NewGrant,
    OAuthClient,
    OAuthCode,
    PendingAuthorization,
    Quota,
    Source,
)

from conftest import make_settings, query
from oauth_support import Owner, RawClient, callback_of, parse_form, pkce
from procs import ServerProcess, parse_fields, run_cli, server_env

pytestmark = pytest.mark.backends

# Both caps lowered to keep the flood short; registrations above pending authorizations, as the defaults are
# (a registration waiting on its consent page is never taken, so more of them than requests leave room).
PENDING = Quota(total=24, per_network=8, per_address=3)
CLIENTS = Quota(total=48, per_network=16, per_address=6)
FLOOD_NETWORKS, FLOOD_ADDRESSES, FLOOD_ROUNDS = 4, 6, 5  # 24 addresses in 4 /24s, 5 of each request apiece
FLOOD_CONCURRENCY = 12
LEGITIMATE = "127.0.9.1"  # a network of its own


class Server:
    def __init__(self, root: Path, **env: str) -> None:
        self.data = root / "data"
        self.secret = parse_fields(run_cli("site", "create", "acme", data_dir=self.data).stdout)["secret"]
        self.process = ServerProcess(self.data, env=server_env(**env)).start()
        self.base = self.process.base
        self.settings = make_settings(self.data)

    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return query(self.settings, sql, *args)

    def owner(self) -> Owner:
        return Owner("acme", self.secret)


def caps_env(pending: Quota, clients: Quota, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_OAUTH_MAX_PENDING": str(pending.total),
        "MEMORY_OAUTH_MAX_PENDING_PER_NETWORK": str(pending.per_network),
        "MEMORY_OAUTH_MAX_PENDING_PER_ADDRESS": str(pending.per_address),
        "MEMORY_OAUTH_MAX_UNUSED_CLIENTS": str(clients.total),
        "MEMORY_OAUTH_MAX_UNUSED_CLIENTS_PER_NETWORK": str(clients.per_network),
        "MEMORY_OAUTH_MAX_UNUSED_CLIENTS_PER_ADDRESS": str(clients.per_address),
        **extra,
    }


@pytest.fixture
def server(storage_backend: str, tmp_path: Path) -> Iterator[Server]:
    # No proxy is trusted: each client's address is its socket's own source address.
    running = Server(tmp_path, **caps_env(PENDING, CLIENTS, MEMORY_OAUTH_REQUESTS_PER_MINUTE="1000"))
    try:
        yield running
    finally:
        running.process.kill()


@contextlib.asynccontextmanager
async def client_from(address: str) -> AsyncIterator[httpx2.AsyncClient]:
    """An HTTP client whose connections leave from `address` (a loopback address: 127.0.0.0/8 is all local)."""
    transport = httpx2.AsyncHTTPTransport(local_address=address)
    async with httpx2.AsyncClient(transport=transport, timeout=60) as http:
        yield http


async def flood_from(address: str, base: str, answers: Counter[str]) -> None:
    """FLOOD_ROUNDS registrations, each followed by an authorization request, never answering a consent page."""
    async with client_from(address) as http:
        for _ in range(FLOOD_ROUNDS):
            registered = await http.post(f"{base}/register", json={"redirect_uris": ["http://127.0.0.1:5/cb"]})
            answers[f"register {registered.status_code}"] += 1
            if registered.status_code >= 500 and "retry-after" not in registered.headers:
                answers["refused without Retry-After"] += 1
            if registered.status_code != 201:
                continue
            raw = RawClient(base, registered.json()["client_id"], None, "http://127.0.0.1:5/cb")
            started = await http.get(raw.authorize_url(pkce()[1]))
            answers[f"authorize {outcome(started)}"] += 1


def outcome(started: httpx2.Response) -> str:
    location = started.headers.get("location", "")
    if started.status_code == 302 and "/oauth/consent?" in location:
        return "consent"
    return f"{started.status_code} {parse_qs(urlsplit(location).query).get('error', [''])[0]}"


async def consent_page(http: httpx2.AsyncClient, raw: RawClient, challenge: str) -> httpx2.Response:
    started = await http.get(raw.authorize_url(challenge))
    assert outcome(started) == "consent", (started.status_code, started.headers.get("location"), started.text)
    return started


async def test_a_flood_from_many_addresses_leaves_room_for_a_client_from_another_network(server: Server) -> None:
    async with client_from(LEGITIMATE) as http:
        # Before the flood: registered, and its sign-in waiting on the consent page.
        early = await RawClient.register(http, server.base)
        early_verifier, early_challenge = pkce()
        waiting = await consent_page(http, early, early_challenge)

        answers: Counter[str] = Counter()
        addresses = [f"127.0.{n}.{a}" for n in range(1, FLOOD_NETWORKS + 1) for a in range(1, FLOOD_ADDRESSES + 1)]
        gate = asyncio.Semaphore(FLOOD_CONCURRENCY)

        async def one(address: str) -> None:
            async with gate:
                await flood_from(address, server.base, answers)

        flood = asyncio.gather(*(one(address) for address in addresses))
        # During the flood: another registration, and its consent page.
        during = await RawClient.register(http, server.base)
        during_verifier, during_challenge = pkce()
        shown = await consent_page(http, during, during_challenge)
        await asyncio.wait_for(flood, timeout=300)

        # The flood itself was served, its requests taking the places of its own older ones (a registration
        # of its taken before it asked to authorize is unknown by then: 400).
        total = FLOOD_NETWORKS * FLOOD_ADDRESSES * FLOOD_ROUNDS
        print(f"flood from {len(addresses)} addresses: {dict(answers)}")
        assert set(answers) <= {"register 201", "authorize consent", "authorize 400 "}, answers
        assert answers["register 201"] == total and answers["authorize consent"] > total / 2, answers
        # After it: the legitimate client registers again, and both earlier sign-ins go through.
        assert (await RawClient.register(http, server.base)).client_id
        for raw, started, verifier in ((early, waiting, early_verifier), (during, shown, during_verifier)):
            page = await http.get(started.headers["location"])
            assert page.status_code == 200 and parse_form(page.text).action, page.text
            code = callback_of(await server.owner().submit(http, page))["code"]
            exchanged = await raw.exchange(http, code, verifier)
            assert exchanged.status_code == 200, exchanged.text

    # What the store holds stays within every share.
    for table, held, quota in (("oauth_requests", "1 = 1", PENDING), ("oauth_clients", "granted_at IS NULL", CLIENTS)):
        by_address = server.rows(f"SELECT source_address, count(*) FROM {table} WHERE {held} GROUP BY source_address")
        by_network = server.rows(f"SELECT source_network, count(*) FROM {table} WHERE {held} GROUP BY source_network")
        assert sum(n for _, n in by_address) <= quota.total, (table, by_address)
        assert max(n for _, n in by_address) <= quota.per_address, (table, by_address)
        assert max(n for _, n in by_network) <= quota.per_network, (table, by_network)
        assert {network for network, _ in by_network} >= {f"127.0.{n}.0/24" for n in range(1, FLOOD_NETWORKS + 1)}


async def test_a_registration_is_refused_with_retry_after_only_when_every_candidate_is_signing_in(
    storage_backend: str, tmp_path: Path
) -> None:
    running = Server(tmp_path, **caps_env(PENDING, Quota(total=50, per_network=50, per_address=2)))
    try:
        async with client_from("127.0.5.5") as http:
            first = await RawClient.register(http, running.base)
            second = await RawClient.register(http, running.base)
            third = await RawClient.register(http, running.base)  # takes the place of the first: none signing in
            known = {row[0] for row in running.rows("SELECT client_id FROM oauth_clients")}
            assert known == {second.client_id, third.client_id} and first.client_id not in known
            for raw in (second, third):
                await consent_page(http, raw, pkce()[1])
            refused = await http.post(f"{running.base}/register", json={"redirect_uris": ["http://127.0.0.1:5/cb"]})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "temporarily_unavailable"
            assert 1 <= int(refused.headers["retry-after"]) <= 600  # when the first of those requests expires
            assert {row[0] for row in running.rows("SELECT client_id FROM oauth_clients")} == known
        async with client_from("127.0.6.6") as http:  # another address is not refused for it
            assert (await RawClient.register(http, running.base)).client_id
    finally:
        running.process.kill()


# --- the store's rule ----------------------------------------------------------------------------------------

NOW = 1_900_000_000.0
QUOTA = Quota(total=6, per_network=4, per_address=2)


def at(address: str) -> Source:
    return Source(address, address.rsplit(".", 1)[0] + ".0/24")


def test_who_makes_room_for_a_pending_authorization(tmp_path: Path, storage_backend: str) -> None:
    storage = open_storage(make_settings(tmp_path / "data"))
    try:
        oauth = storage.oauth

        def add(key: str, address: str, age: float) -> int:
            pending = PendingAuthorization("c", "{}", NOW + 600 + age, source=at(address))
            admission = oauth.add_request(key, pending, now=NOW + age, quota=QUOTA)
            assert admission.added
            return admission.evicted

        def kept() -> set[str]:
            return {k for k in keys if oauth.request(k, now=NOW) is not None}

        keys = ["a1", "a2", "a3", "b1", "b2", "c1", "d1", "d2"]
        # An address at its share: its own oldest makes room.
        assert [add("a1", "10.0.1.1", 1), add("a2", "10.0.1.1", 2), add("a3", "10.0.1.1", 3)] == [0, 0, 1]
        assert kept() == {"a2", "a3"}
        # A network at its share: the oldest of its address holding the most, not the others'.
        assert [add("b1", "10.0.1.2", 4), add("b2", "10.0.1.3", 5)] == [0, 0]
        assert add("c1", "10.0.1.4", 6) == 1
        assert kept() == {"a3", "b1", "b2", "c1"}
        # The cap in all: the network holding the most pays (10.0.1.0/24, 4), its oldest request whose page
        # was never opened (a3's is being looked at).
        assert oauth.set_request_csrf("a3", "csrf", now=NOW)
        assert [add("d1", "10.0.2.1", 7), add("d2", "10.0.3.1", 8)] == [0, 0]
        assert add("e1", "10.0.4.1", 9) == 1
        keys.append("e1")
        assert kept() == {"a3", "b2", "c1", "d1", "d2", "e1"}
    finally:
        storage.close()


def test_who_makes_room_for_a_registration(tmp_path: Path, storage_backend: str) -> None:
    storage = open_storage(make_settings(tmp_path / "data"))
    try:
        oauth = storage.oauth
        sites = storage.sites
        sites.create_site("acme", "h")
        site_id = sites.site_id("acme")
        assert site_id is not None

        def add(client_id: str, address: str, age: float) -> tuple[bool, int, float | None]:
            admission = oauth.add_client(
                OAuthClient(client_id, None, None, "{}", NOW + age, source=at(address)), quota=QUOTA
            )
            return admission.added, admission.evicted, admission.retry_at

        def signing_in(client_id: str, until: float) -> None:
            assert oauth.add_request(f"r-{client_id}", PendingAuthorization(client_id, "{}", until), now=NOW).added

        assert add("x1", "10.0.1.1", 1) == (True, 0, None)
        assert add("x2", "10.0.1.1", 2) == (True, 0, None)
        signing_in("x1", NOW + 500)
        assert add("x3", "10.0.1.1", 3) == (True, 1, None)  # x2 made room: x1 is waiting on its consent page
        assert oauth.client("x2") is None and oauth.client("x1") is not None
        # A code not yet exchanged protects its client as a request does.
        code = OAuthCode("x3", site_id, Bounds(("memory:read",)), "r", "x", "http://127.0.0.1:5/cb", True, NOW + 60)
        assert oauth.add_code("code-x3", code, now=NOW)
        # Every candidate of the address signing in: refused, taking nothing; room is sure once x3's code ends.
        assert add("x4", "10.0.1.1", 4) == (False, 0, NOW + 60)
        assert oauth.client("x4") is None and oauth.client("x1") and oauth.client("x3")
        # Clients that signed in no longer count.
        grant = NewGrant("oa_x3", site_id, "x3", Bounds(("memory:read",)), "r", "2030-03-17T17:46:40.000000Z", NOW + 9)
        assert oauth.redeem_code("code-x3", grant, [IssuedToken("t", "access", ("memory:read",), NOW + 9)], now=NOW + 5)
        assert add("x4", "10.0.1.1", 6) == (True, 0, None)
    finally:
        storage.close()
