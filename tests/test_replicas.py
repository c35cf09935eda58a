"""Several `memory-server serve` processes on one PostgreSQL: one deployment, replicas in front.

Each replica is a real server process with a data directory of its own (its own embedded index, which
follows the authority's change feed); PostgreSQL is the private test server of tests/postgres.py, restarted
for real where a test says so.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
from fastmcp import Client

from memory_server.api.console.sessions import IDLE_S, SESSION_COOKIE, csrf_token

from procs import (  # noqa: F401
    ServerProcess,
    ServerProcesses,
    batch_payloads,
    check_log,
    parse_fields,
    read_all,
    run_cli,
    server_env,
    server_processes,
)
from tests.postgres import PostgresServer

SITE = "acme"
CONVERSATIONS = [f"conv-replicated-{n}" for n in range(4)]
FOLLOW_WITHIN_S = 2.0


class Deployment:
    """Replicas on one database: `start(name)` runs a server process on data directory `name`."""

    def __init__(self, root: Path, url: str, processes: ServerProcesses) -> None:
        self.root, self.url, self.processes = root, url, processes
        self.env = server_env(MEMORY_DATABASE_URL=url)
        created = run_cli("site", "create", SITE, data_dir=root / "admin", env=self.env)
        assert created.returncode == 0, created.stderr
        self.secret = parse_fields(created.stdout)["secret"]
        self.auth = (SITE, self.secret)

    def start(self, name: str) -> ServerProcess:
        return self.processes.start(self.root / name, env=self.env).wait_ready()

    def client(self, replica: ServerProcess) -> Client:
        return replica.client(SITE, self.secret, timeout=30)

    def cli(self, *args: str) -> Any:
        return run_cli(*args, data_dir=self.root / "admin", env=self.env)


@pytest.fixture
def deployment(tmp_path: Path, postgres_url: str, server_processes: ServerProcesses) -> Deployment:
    return Deployment(tmp_path, postgres_url, server_processes)


async def eventually(check: Callable[[], Awaitable[bool]], within_s: float) -> float:
    """Seconds until `check()` holds; fails after `within_s`."""
    start = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - start
        if time.monotonic() - start > within_s:
            raise AssertionError(f"not within {within_s} s")
        await asyncio.sleep(0.05)


def rest(replica: ServerProcess, auth: tuple[str, str]) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=replica.base, auth=auth, timeout=30)


async def test_a_memory_remembered_on_one_replica_is_recalled_on_another_within_two_seconds(
    deployment: Deployment,
) -> None:
    a, b = deployment.start("a"), deployment.start("b")
    async with rest(a, deployment.auth) as on_a, rest(b, deployment.auth) as on_b:
        created = await on_a.post("/v1/memories", json={"content": "The spare routers are on shelf 14 in Lisbon."})
        assert created.status_code == 201, created.text
        reference = created.json()["reference"]

        async def found_on(http: httpx2.AsyncClient) -> bool:
            search = await http.post("/v1/search", json={"query": "where are the spare routers?", "min_score": 0.3})
            recall = await http.post("/v1/recall", json={"query": "where are the spare routers?"})
            assert search.status_code == recall.status_code == 200
            return reference in [h["reference"] for h in search.json()["results"]] and reference in [
                h["reference"] for h in recall.json()["results"]
            ]

        seen_after = await eventually(lambda: found_on(on_b), FOLLOW_WITHIN_S)
        gone = await on_b.delete(f"/v1/memories/{reference}")
        assert gone.status_code == 200, gone.text

        async def gone_from_a() -> bool:
            search = await on_a.post("/v1/search", json={"query": "where are the spare routers?", "min_score": 0.0})
            return reference not in [h["reference"] for h in search.json()["results"]]

        gone_after = await eventually(gone_from_a, FOLLOW_WITHIN_S)
    print(f"remembered on a, found on b after {seen_after:.2f} s; forgotten on b, gone from a after {gone_after:.2f} s")


async def test_a_token_revoked_through_one_replica_is_refused_by_every_replica(deployment: Deployment) -> None:
    a, b = deployment.start("a"), deployment.start("b")
    made = parse_fields(deployment.cli("token", "create", "--site", SITE, "--scope", "memory:read").stdout)
    headers = {"authorization": f"Bearer {made['token']}"}
    async with httpx2.AsyncClient(timeout=30) as http:
        for replica in (a, b):
            assert (await http.get(f"{replica.base}/v1/memories", headers=headers)).status_code == 200
        revoked = deployment.cli("token", "revoke", made["id"])
        assert revoked.returncode == 0, revoked.stderr
        for replica in (a, b):  # the very next request, on either replica
            assert (await http.get(f"{replica.base}/v1/memories", headers=headers)).status_code == 401


def console_sign_in(replica: ServerProcess, deployment: Deployment) -> str:
    """Sign in to a replica's console with the site credential, as its sign-in form does; the session cookie."""
    with httpx2.Client(base_url=replica.base, timeout=30) as http:
        form = http.get("/ui/sign-in")
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
        assert form.status_code == 200 and found is not None
        signed_in = http.post(
            "/ui/sign-in",
            data={
                "csrf": found.group(1),
                "method": "basic",
                "site": SITE,
                "secret": deployment.secret,
                "next": "/ui/conversations",
            },
        )
        assert signed_in.status_code == 303 and signed_in.headers["location"] == "/ui/conversations", signed_in.text
        return str(signed_in.cookies[SESSION_COOKIE])


def console_page(replica: ServerProcess, cookie: str) -> httpx2.Response:
    return httpx2.get(f"{replica.base}/ui/conversations", cookies={SESSION_COOKIE: cookie}, timeout=30)


def test_a_console_session_holds_on_every_replica_until_it_expires_or_signs_out(deployment: Deployment) -> None:
    a, b = deployment.start("a"), deployment.start("b")
    cookie = console_sign_in(a, deployment)
    for replica in (a, b):
        assert console_page(replica, cookie).status_code == 200
    with psycopg.connect(deployment.url, autocommit=True) as conn:  # idle for longer than a session may be
        conn.execute("UPDATE console_sessions SET seen_at = seen_at - %s", [IDLE_S + 60])
    for replica in (b, a):
        ended = console_page(replica, cookie)
        assert ended.status_code == 303 and "ended=1" in ended.headers["location"]
    with psycopg.connect(deployment.url, autocommit=True) as conn:  # the first replica to see it ended it
        assert conn.execute("SELECT count(*) FROM console_sessions").fetchone() == (0,)
    cookie = console_sign_in(b, deployment)
    assert console_page(a, cookie).status_code == 200
    signed_out = httpx2.post(
        f"{a.base}/ui/sign-out", data={"csrf": csrf_token(cookie)}, cookies={SESSION_COOKIE: cookie}, timeout=30
    )
    assert signed_out.status_code == 303 and "signed_out=1" in signed_out.headers["location"]
    assert console_page(b, cookie).status_code == 303


class Ledger:
    def __init__(self) -> None:
        self.sent: dict[tuple[int, int], str] = {}
        self.acks: dict[tuple[int, int], dict[str, Any]] = {}
        self.stop = asyncio.Event()


async def writer(deployment: Deployment, replica: ServerProcess, w: int, ledger: Ledger) -> None:
    """Append batches to the 4 shared conversations until stopped or until the replica dies."""
    rng = random.Random(w)
    try:
        async with deployment.client(replica) as client:
            batch = 0
            while not ledger.stop.is_set():
                conversation = CONVERSATIONS[rng.randrange(len(CONVERSATIONS))]
                ledger.sent[(w, batch)] = conversation
                result = await client.call_tool(
                    "append_memory",
                    {
                        "conversation_id": conversation,
                        "idempotency_key": f"w{w}-b{batch}",
                        "items": batch_payloads(w, batch, rng.choice([1, 3, 10, 40])),
                    },
                    raise_on_error=False,
                )
                assert not result.is_error, result.content[0].text
                ledger.acks[(w, batch)] = result.structured_content
                batch += 1
    except AssertionError:
        raise
    except Exception:  # the replica was killed under us: this batch stays unacknowledged
        return


async def check(deployment: Deployment, replica: ServerProcess, ledger: Ledger) -> set[tuple[int, int]]:
    found: set[tuple[int, int]] = set()
    async with deployment.client(replica) as client:
        for conversation in CONVERSATIONS:
            acks = {k: a for k, a in ledger.acks.items() if ledger.sent[k] == conversation}
            found |= set(check_log(await read_all(client, conversation), acks))  # whole, gapless, no repeats
    assert set(ledger.acks) <= found
    return found


async def test_two_replicas_appending_while_one_is_killed_and_restarted(deployment: Deployment) -> None:
    a, b = deployment.start("a"), deployment.start("b")
    ledger = Ledger()
    tasks = [asyncio.create_task(writer(deployment, (a, b)[w % 2], w, ledger)) for w in range(16)]
    await eventually(lambda: _at_least(ledger, 200), 60)
    a.kill()  # SIGKILL mid-stream: its 8 writers lose their connection
    target = len(ledger.acks) + 100
    await eventually(lambda: _at_least(ledger, target), 60)  # b goes on alone
    a = deployment.start("a")
    more = [asyncio.create_task(writer(deployment, a, 100 + w, ledger)) for w in range(8)]
    target = len(ledger.acks) + 100
    await eventually(lambda: _at_least(ledger, target), 60)
    ledger.stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks, *more), 60)
    found = await check(deployment, b, ledger)
    unacknowledged = set(ledger.sent) - set(ledger.acks)
    assert found - set(ledger.acks) <= unacknowledged  # committed but not acknowledged: only what a kill cut
    assert await check(deployment, a, ledger) == found  # both replicas read one log


async def _at_least(ledger: Ledger, count: int) -> bool:
    return len(ledger.acks) >= count


async def test_postgresql_restarted_while_clients_append(
    deployment: Deployment, postgres_server: PostgresServer
) -> None:
    a = deployment.start("a")
    ledger = Ledger()
    codes: list[int] = []

    async def rest_writer(w: int) -> None:
        async with rest(a, deployment.auth) as http:
            batch = 0
            while not ledger.stop.is_set():
                conversation = CONVERSATIONS[batch % len(CONVERSATIONS)]
                key = f"rw{w}-b{batch}"
                response = await http.post(
                    f"/v1/conversations/{conversation}/items",
                    json={"items": batch_payloads(w, batch, 5), "idempotency_key": key},
                )
                codes.append(response.status_code)
                if response.status_code in (200, 201):
                    ledger.sent[(w, batch)] = conversation
                    ledger.acks[(w, batch)] = response.json()
                    batch += 1
                else:  # unavailable during the outage: the same batch is retried with its key
                    assert response.status_code == 503, response.text
                    assert response.json()["error"]["code"] == "unavailable"
                    await asyncio.sleep(0.05)

    tasks = [asyncio.create_task(rest_writer(w)) for w in range(4)]
    await eventually(lambda: _at_least(ledger, 50), 60)
    await asyncio.to_thread(postgres_server.restart, "fast")
    before = len(ledger.acks)
    await eventually(lambda: _at_least(ledger, before + 50), 60)  # recovered by itself
    ledger.stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert 500 not in codes
    await check(deployment, a, ledger)
    ready = httpx2.get(f"{a.base}/readyz")
    assert ready.status_code == 200, ready.text
