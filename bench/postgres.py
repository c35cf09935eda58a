"""`bench/perf.py --storage postgres`: the same figures with PostgreSQL as the authority.

A private PostgreSQL server (the machine's binaries, as the tests run it: tests/postgres.py) on a temporary
directory and Unix socket, with production durability settings (fsync, synchronous_commit on). Two replicas
(`memory-server serve` processes, each with a data directory and embedded index of its own) share one
database for the append throughput; the rest goes through one replica. The baselines are raw psycopg on the
same server: batches of 10 inserted and committed by one connection, and the same page reads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_server.embeddings.base import Embedder  # noqa: E402

from bench.perf import (  # noqa: E402
    Caller,
    Server,
    append_load,
    appending,
    batch,
    bench_log_indexing,
    bench_reads,
    bench_search,
    client,
    process_cpu_seconds,
    summary,
    timed,
)
from tests.postgres import PostgresServer, _make_directory, _server_user, find_bindir  # noqa: E402


@contextlib.contextmanager
def private_server() -> Iterator[str]:
    """A fresh PostgreSQL server and database for this run; yields the database URL."""
    import psycopg

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL server binaries not found: install Debian's postgresql package")
    user = _server_user()
    server = PostgresServer(bindir, _make_directory(user), user=user)
    server.arm_watchdog()
    try:
        server.init()
        server.start()
        name = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        yield server.url(name)
    finally:
        server.destroy()


def raw_psycopg_appends(url: str, duration: float) -> int:
    """Baseline: batches of 10 inserted and committed by one connection (synchronous_commit on)."""
    import psycopg

    texts = [json.dumps(item) for item in batch(10, 0)]
    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TABLE raw_items (conversation TEXT, seq BIGINT, payload TEXT, PRIMARY KEY (conversation, seq))"
        )
        conn.commit()
        seq, deadline = 0, time.perf_counter() + duration
        while time.perf_counter() < deadline:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO raw_items VALUES ('c', %s, %s)", [(seq + i, t) for i, t in enumerate(texts)]
                )
            conn.commit()
            seq += 10
    return round(seq / duration)


async def bench_logs(tmp: Path, url: str, *, duration: float, read_items: int) -> dict[str, Any]:
    first = Server(tmp / "replica-a", url)
    second = Server(tmp / "replica-b", url, secret=first.secret)
    replicas = [first, second]
    for replica in replicas:
        replica.start()
    out: dict[str, Any] = {"replicas": len(replicas)}
    try:
        async with client() as http:
            call = Caller(first, http)
            out["append_ack"] = {}
            for size in (1, 10, 100):
                samples = await timed(200, appending(call, f"ack-{size:04d}-xx", batch(size, size)))
                out["append_ack"][f"batch_{size}"] = summary(samples)
            out["append_throughput"], out["append_cpu_ms_per_request"] = {}, {}
            for clients, servers in ((1, [first]), (8, [first]), (32, [first]), (32, replicas)):
                for shape in ("many", "hot"):
                    name = f"{clients}_clients_{shape}" + ("_two_replicas" if len(servers) > 1 else "")
                    cpu = sum(process_cpu_seconds(s.proc.pid) for s in replicas)
                    client_cpu = resource.getrusage(resource.RUSAGE_SELF)
                    items = await append_load(servers, clients, shape, duration)
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    requests = max(1, items // 10)
                    out["append_throughput"][name] = round(items / duration)
                    out["append_cpu_ms_per_request"][name] = {
                        "servers": round(
                            (sum(process_cpu_seconds(s.proc.pid) for s in replicas) - cpu) * 1000 / requests, 3
                        ),
                        "client": round(
                            (after.ru_utime + after.ru_stime - client_cpu.ru_utime - client_cpu.ru_stime)
                            * 1000
                            / requests,
                            3,
                        ),
                    }
            out["append_items_verified"] = verify(url)
            out["append_throughput"]["baseline_raw_psycopg"] = raw_psycopg_appends(url, duration)
            out["reads"] = await bench_reads(first, call, read_items)
    finally:
        for replica in replicas:
            replica.stop()
    return out


def verify(url: str) -> int:
    """Every conversation of the load gapless from seq 0; returns how many items are stored."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT sum(n), bool_and(n = top + 1) FROM (SELECT count(*) AS n, max(seq) AS top FROM log_items"
            " WHERE conversation_id LIKE '%%conversation%%' GROUP BY conversation_id) AS c"
        ).fetchone()
    if row is None:  # an aggregate without GROUP BY always gives one row
        raise RuntimeError("no row from the verification query")
    stored, gapless = row
    if not gapless:
        raise RuntimeError("a conversation of the load has a gap or a repeated seq")
    return int(stored)


async def bench(args: argparse.Namespace, embedder: Embedder | None, only: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp_name, private_server() as url:
        tmp = Path(tmp_name)
        if "logs" in only:
            out["logs"] = await bench_logs(tmp, url, duration=args.duration, read_items=args.read_items)
        if "indexing" in only:
            out["log_indexing"] = await bench_log_indexing(tmp, appends=args.index_appends, database_url=url)
        if "search" in only and embedder is not None:
            out["search"] = {
                str(size): await bench_search(tmp, embedder, size, url)
                for size in (int(s) for s in args.sizes.split(","))
            }
    return out
