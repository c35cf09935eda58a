"""Losing the PostgreSQL primary under load: two server replicas, a streaming standby promoted in its place.

The replicas reach PostgreSQL through one multi-host URL (`host=PRIMARY,STANDBY&port=P,Q&
target_session_attrs=read-write`); each has its own embedded index following the authority's change feed,
as in tests/test_replicas.py. While clients append and remember through both replicas, the standby is
stopped for a moment (it falls behind, as a disconnected or slow standby does), the primary is crashed
(`pg_ctl stop -m immediate`), and the standby is started again and promoted: the replicas must find it by
themselves, answering 503 `unavailable` with Retry-After meanwhile and nothing else.
"""

from __future__ import annotations

import asyncio
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import httpx2

from memory_server.storage.postgres.database import RECONNECT_TIMEOUT_S, Database

from procs import ServerProcesses, parse_fields, run_cli, server_env, server_processes  # noqa: F401
from tests.failover_load import Ledger, Replica, Survival, note, run_failover, searched, verify
from tests.postgres import PostgresDatabases, PostgresServer, ReplicatedPostgres, ReplicatedPostgresFactory

SITE = "acme"
STANDBY_AWAY_S = 1.0
FOLLOW_WITHIN_S = 10.0


async def start_replicas(tmp_path: Path, pair: ReplicatedPostgres, processes: ServerProcesses) -> list[Replica]:
    """Two replicas on the pair's multi-host URL, started side by side."""
    env = server_env(MEMORY_DATABASE_URL=pair.create_database())
    created = run_cli("site", "create", SITE, data_dir=tmp_path / "admin", env=env)
    assert created.returncode == 0, created.stderr
    auth = (SITE, parse_fields(created.stdout)["secret"])

    def start(name: str) -> Replica:
        return Replica(name, processes.start(tmp_path / name, env=env).wait_ready().base, auth)

    return list(await asyncio.gather(*(asyncio.to_thread(start, name) for name in ("a", "b"))))


async def found_everywhere(replicas: list[Replica], memories: dict[str, str]) -> None:
    """Until every replica's index has every one of `memories` (reference -> content): each replica follows
    the new primary's change feed."""
    deadline = time.monotonic() + FOLLOW_WITHIN_S
    for replica in replicas:
        for reference, content in memories.items():
            while reference not in await searched(replica, content):
                assert time.monotonic() < deadline, f"{reference} not found through {replica.name}"
                await asyncio.sleep(0.1)


async def indexes_follow(replicas: list[Replica], ledger: Ledger, survival: Survival) -> None:
    """Every memory kept is found through every replica, and so is one remembered now; none of the lost
    ones is found through any."""
    content = note("after", 0, 0)
    response = await asyncio.to_thread(
        httpx2.post, f"{replicas[0].base}/v1/memories", json={"content": content}, auth=replicas[0].auth, timeout=60
    )
    assert response.status_code == 201, response.text
    kept = {ref: text for ref, (text, _) in ledger.memories.items() if ref not in survival.lost}
    await found_everywhere(replicas, {**kept, response.json()["reference"]: content})
    for reference, content in survival.lost_memories.items():
        for replica in replicas:
            assert reference not in await searched(replica, content), (replica.name, reference)


async def test_with_a_synchronous_standby_no_acknowledged_write_is_lost_with_the_primary(
    tmp_path: Path, replicated_postgres: ReplicatedPostgresFactory, server_processes: ServerProcesses
) -> None:
    pair = replicated_postgres(synchronous=True)
    replicas = await start_replicas(tmp_path, pair, server_processes)
    # Promoted after the server's 5 s of retries, so requests meet a database that is gone.
    ledger, failover = await run_failover(
        replicas, pair, warm_up=10, after_promotion=10, standby_away_s=STANDBY_AWAY_S, promote_after_s=6.0
    )
    assert not ledger.faults, ledger.faults
    assert all(ledger.unavailable[replica.name] > 0 for replica in replicas), ledger.unavailable
    # While the standby was away, commits waited for it: nothing was acknowledged that it did not have.
    assert failover.standby_stopped_at is not None
    assert not ledger.written_between(failover.standby_stopped_at, failover.crashed_at)

    for replica in replicas:
        survival = await verify(replica, ledger)
        assert not survival.lost, survival.lost
    await indexes_follow(replicas, ledger, survival)
    print(
        f"promoted {failover.promoted_s:.2f} s after the crash; first acknowledged write after it: "
        + ", ".join(f"{name} {s:.2f} s" for name, s in sorted(failover.first_ack_s.items()))
        + f"; {len(ledger.appends)} appends and {len(ledger.memories)} memories acknowledged, none lost; "
        f"503 answers: {dict(ledger.unavailable)}"
    )


async def test_with_an_asynchronous_standby_what_it_had_not_received_is_lost_and_nothing_else(
    tmp_path: Path, replicated_postgres: ReplicatedPostgresFactory, server_processes: ServerProcesses
) -> None:
    pair = replicated_postgres(synchronous=False)
    replicas = await start_replicas(tmp_path, pair, server_processes)
    ledger, failover = await run_failover(replicas, pair, warm_up=10, after_promotion=10, standby_away_s=STANDBY_AWAY_S)
    assert not ledger.faults, ledger.faults
    assert failover.standby_stopped_at is not None
    unseen = ledger.written_between(failover.standby_stopped_at, failover.crashed_at)
    assert unseen, "no write was acknowledged while the standby was away"

    survival = await verify(replicas[0], ledger)
    # Every write committed while the standby was away is gone; anything else lost was sent before the old
    # primary died (committed there, its WAL not yet on the standby), never one the new primary took.
    assert unseen <= survival.lost
    acks = ledger.acks()
    assert all(acks[name].sent < failover.primary_gone_at for name in survival.lost)
    assert await verify(replicas[1], ledger) == survival

    await indexes_follow(replicas, ledger, survival)
    print(
        "first acknowledged write after the crash: "
        + ", ".join(f"{name} {s:.2f} s" for name, s in sorted(failover.first_ack_s.items()))
        + f"; lost {len(survival.lost)} of {len(acks)} acknowledged writes "
        f"({len(unseen)} committed while the standby was away, {len(survival.lost_memories)} memories)"
    )


def test_a_host_that_never_answers_is_passed_over_after_the_urls_connect_timeout(
    postgres_server: PostgresServer,
) -> None:
    """A primary whose machine hangs: TCP connects (the kernel's backlog) but nothing answers. The URL's
    `connect_timeout=2` is how long each connection waits on it before trying the next host, well inside the
    5 s a request waits for a connection (the server's own 10 s default would not be)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = quote(str(postgres_server.socket_dir), safe="/")
        url = (
            f"postgresql://postgres@/postgres?host=127.0.0.1,{host}&port={silent.getsockname()[1]},"
            f"{postgres_server.port}&target_session_attrs=read-write&connect_timeout=2"
        )
        db = Database(url, retry_budget_s=5.0)
        try:
            assert db.read(lambda conn: conn.execute("SELECT 1").fetchone()) == (1,)
        finally:
            db.close()


def test_a_request_waiting_through_a_long_outage_is_served_once_the_server_is_back(
    postgres_server: PostgresServer, postgres_databases: PostgresDatabases
) -> None:
    """Longer than a pool tries to reopen its connections: it gives each slot up after a few seconds and opens
    one again only when a request comes to wait, so a request already waiting asks again every
    WAIT_SLICE_S. It is served once PostgreSQL is back (as a standby promoted late is reached), within its
    retry budget, rather than failing at the end of it."""
    outage_s = RECONNECT_TIMEOUT_S * 4
    db = Database(postgres_databases.create(), retry_budget_s=outage_s * 3)
    try:
        db.write(lambda conn: conn.execute("CREATE TABLE t (x int)"), single=True)
        postgres_server.stop("fast")
        try:
            with ThreadPoolExecutor(1) as worker:
                waiting = worker.submit(db.write, lambda conn: conn.execute("INSERT INTO t VALUES (1)"), single=True)
                time.sleep(outage_s)
                assert not waiting.done()
                postgres_server.start()
                waiting.result()
        finally:
            postgres_server.ensure_running()
        assert db.read(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()) == (1,)
    finally:
        db.close()
