"""Losing the PostgreSQL primary under load: two server replicas, a streaming standby promoted in its place.

The replicas reach PostgreSQL through one multi-host URL (`host=PRIMARY,STANDBY&port=P1,P2&
target_session_attrs=read-write`); each has its own embedded index following the authority's change feed,
as in tests/test_replicas.py. The primary is crashed (`pg_ctl stop -m immediate`) while clients append and
remember through both replicas; the standby is promoted, and the replicas must find it by themselves.
"""

from __future__ import annotations

from pathlib import Path

from failover_load import Replica, run_failover, verify

from procs import ServerProcesses, parse_fields, run_cli, server_env, server_processes  # noqa: F401
from tests.postgres import ReplicatedPostgres, ReplicatedPostgresFactory

SITE = "acme"


def start_replicas(tmp_path: Path, pair: ReplicatedPostgres, processes: ServerProcesses) -> list[Replica]:
    env = server_env(MEMORY_DATABASE_URL=pair.create_database())
    created = run_cli("site", "create", SITE, data_dir=tmp_path / "admin", env=env)
    assert created.returncode == 0, created.stderr
    auth = (SITE, parse_fields(created.stdout)["secret"])
    replicas = []
    for name in ("a", "b"):
        server = processes.start(tmp_path / name, env=env).wait_ready()
        replicas.append(Replica(name, server.base, auth))
    return replicas


async def test_with_a_synchronous_standby_every_acknowledged_write_survives_the_loss_of_the_primary(
        tmp_path: Path, replicated_postgres: ReplicatedPostgresFactory, server_processes: ServerProcesses) -> None:
    pair = replicated_postgres(synchronous=True)
    replicas = start_replicas(tmp_path, pair, server_processes)
    ledger, failover = await run_failover(replicas, pair.crash_primary, pair.promote, promote_after_s=6.0)
    assert not ledger.faults, ledger.faults
    # Promoted after the server's 5 s of retries: meanwhile each replica answered 503 (and only that).
    assert all(ledger.unavailable[replica.name] > 0 for replica in replicas), ledger.unavailable
    print(f"promoted {failover.promoted_s:.2f} s after the crash; first acknowledged write after it: "
          + ", ".join(f"{name} {s:.2f} s" for name, s in sorted(failover.first_ack_s.items())))
    for replica in replicas:
        survival = await verify(replica, ledger, failover.crashed_at)
        assert survival.lost == 0, (survival.appends_lost, survival.memories_lost)
    print(f"{len(ledger.appends)} appends and {len(ledger.memories)} memories acknowledged, none lost; "
          f"503 answers while the primary was gone: {dict(ledger.unavailable)}")


async def test_with_an_asynchronous_standby_only_writes_acknowledged_before_the_crash_can_be_lost(
        tmp_path: Path, replicated_postgres: ReplicatedPostgresFactory, server_processes: ServerProcesses) -> None:
    pair = replicated_postgres(synchronous=False)
    replicas = start_replicas(tmp_path, pair, server_processes)
    ledger, failover = await run_failover(replicas, pair.crash_primary, pair.promote)
    assert not ledger.faults, ledger.faults
    survival = await verify(replicas[0], ledger, failover.crashed_at)
    assert all(before >= 0 for before in survival.lost_acked_before_crash_s)
    print("first acknowledged write after the crash: "
          + ", ".join(f"{name} {s:.2f} s" for name, s in sorted(failover.first_ack_s.items()))
          + f"; lost {len(survival.appends_lost)} of {len(ledger.appends)} appends and "
          f"{len(survival.memories_lost)} of {len(ledger.memories)} memories")
