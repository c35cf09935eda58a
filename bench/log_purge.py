"""Deleting a large conversation log while other conversations append: how long appends wait.

A `memory-server serve` process (SQLite, and PostgreSQL when its binaries are installed: bench/postgres.py)
holds one conversation of `--items` items (default 20,000, in batches of 1,000 with idempotency keys).
Appenders (`--appenders`, default 4 concurrent keep-alive connections) each append one item at a time to
conversations of their own, and every acknowledgement is timed:

- baseline: appends alone, for `--seconds`;
- delete: the same while `DELETE /v1/conversations/{id}` removes the large log (the request's own time is
  the purge's time);
- retention: the large log is written again, its site given a log retention of 1 day, and its last
  activity moved 2 days back in the database; the server's retention task (every 0.2 s here) finds and
  purges it while the appends go on.

Every acknowledged append is then checked: each appender's conversations gapless from seq 0. Prints JSON and
a table; `--json PATH` also writes the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402

from memory_server.storage.backends import SQLITE, backend_of, database_url  # noqa: E402
from memory_server.storage.factory import open_storage  # noqa: E402

from bench.perf import Server, summary  # noqa: E402

BIG = "conversation-to-delete"
DAY_US = 86_400 * 1_000_000


class Appenders:
    def __init__(self, server: Server, count: int) -> None:
        self.server = server
        self.count = count
        self.samples: list[tuple[float, float]] = []  # (start, seconds)
        self.acks: dict[str, list[int]] = {}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Appenders:
        self._stop.clear()
        self._tasks = [asyncio.create_task(self._run(n)) for n in range(self.count)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _run(self, n: int) -> None:
        conversation = f"appender-{n:03d}-{len(self.acks):03d}"
        self.acks[conversation] = []
        headers = {"authorization": self.server.auth}
        async with httpx2.AsyncClient(base_url=self.server.url, headers=headers, timeout=60) as http:
            while not self._stop.is_set():
                started = time.perf_counter()
                response = await http.post(
                    f"/v1/conversations/{conversation}/items", json={"items": [{"role": "user", "text": "x" * 80}]}
                )
                if response.status_code != 201:
                    raise RuntimeError(f"append failed: {response.status_code} {response.text}")
                self.samples.append((started, time.perf_counter() - started))
                self.acks[conversation].append(response.json()["first_seq"])

    def between(self, start: float, end: float) -> list[float]:
        return [s for begun, s in self.samples if begun >= start and begun + s <= end]


def latency(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    return {**summary(samples), "max_ms": round(max(samples) * 1000, 2)}


async def fill(server: Server, items: int) -> None:
    headers = {"authorization": server.auth}
    async with httpx2.AsyncClient(base_url=server.url, headers=headers, timeout=120) as http:
        for start in range(0, items, 1000):
            batch = [{"role": "assistant", "n": start + i, "text": "y" * 100} for i in range(min(1000, items - start))]
            response = await http.post(
                f"/v1/conversations/{BIG}/items", json={"items": batch, "idempotency_key": f"fill-{start}"}
            )
            if response.status_code != 201:
                raise RuntimeError(response.text)


def sql(server: Server, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    if backend_of(server.settings()) is SQLITE:
        with contextlib.closing(sqlite3.connect(server.settings().db_path)) as db, db:
            return db.execute(statement, args).fetchall()
    import psycopg

    with psycopg.connect(database_url(server.settings()), autocommit=True) as conn:
        cur = conn.execute(statement.replace("?", "%s"), args)
        return [tuple(row) for row in cur.fetchall()] if cur.description else []


async def run(server: Server, *, items: int, appenders: int, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {"items": items, "appenders": appenders}
    load = Appenders(server, appenders)
    await fill(server, items)
    async with load:
        begun = time.perf_counter()
        await asyncio.sleep(seconds)
        out["baseline"] = latency(load.between(begun, time.perf_counter()))

    async with load:
        await asyncio.sleep(0.5)
        headers = {"authorization": server.auth}
        async with httpx2.AsyncClient(base_url=server.url, headers=headers, timeout=300) as http:
            begun = time.perf_counter()
            response = await http.delete(f"/v1/conversations/{BIG}")
            ended = time.perf_counter()
        if response.status_code != 200 or response.json()["item_count"] != items:
            raise RuntimeError(f"delete failed: {response.text}")
        await asyncio.sleep(0.5)
    out["delete"] = {"seconds": round(ended - begun, 3), "appends_during": latency(load.between(begun, ended))}

    await fill(server, items)
    storage = open_storage(server.settings())
    try:
        storage.sites.set_log_retention("bench", 1)
    finally:
        storage.close()
    async with load:
        await asyncio.sleep(0.5)
        sql(
            server,
            "UPDATE conversations SET last_activity_us = last_activity_us - ? WHERE conversation_id = ?",
            2 * DAY_US,
            BIG,
        )
        marked = gone = None
        deadline = time.perf_counter() + 300
        while gone is None and time.perf_counter() < deadline:
            rows = sql(server, "SELECT deleting FROM conversations WHERE conversation_id = ?", BIG)
            now = time.perf_counter()
            if marked is None and (not rows or rows[0][0]):
                marked = now
            if not rows:
                gone = now
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.5)
    if marked is None or gone is None:
        raise RuntimeError("the retention task did not purge the conversation")
    out["retention"] = {"seconds": round(gone - marked, 3), "appends_during": latency(load.between(marked, gone))}

    for conversation, seqs in load.acks.items():
        if seqs != list(range(len(seqs))):
            raise RuntimeError(f"{conversation}: acknowledged seqs are not gapless from 0")
        stored = sql(server, "SELECT count(*), max(seq) FROM log_items WHERE conversation_id = ?", conversation)
        if stored[0][0] != len(seqs) or (seqs and stored[0][1] != seqs[-1]):
            raise RuntimeError(f"{conversation}: {len(seqs)} acknowledged, {stored[0][0]} stored")
    out["appends_verified"] = sum(len(seqs) for seqs in load.acks.values())
    return out


@contextlib.contextmanager
def serving(tmp: Path, database_url: str | None) -> Iterator[Server]:
    os.environ["MEMORY_LOG_RETENTION_INTERVAL_S"] = "0.2"
    server = Server(tmp, database_url)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def table(report: dict[str, Any]) -> str:
    lines = ["| storage | phase | purge s | appends | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|---|---|"]
    for storage, result in report["storages"].items():
        for phase in ("baseline", "delete", "retention"):
            data = result[phase]
            samples = data if phase == "baseline" else data["appends_during"]
            seconds = "" if phase == "baseline" else data["seconds"]
            lines.append(
                f"| {storage} | {phase} | {seconds} | {samples.get('n', 0)} | {samples.get('p50_ms', '')} |"
                f" {samples.get('p99_ms', '')} | {samples.get('max_ms', '')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--appenders", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the baseline phase")
    parser.add_argument("--storage", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": f"{os.cpu_count()} cores", "storages": {}}
    with tempfile.TemporaryDirectory() as tmp:
        if args.storage in ("sqlite", "both"):
            with serving(Path(tmp) / "sqlite", None) as server:
                report["storages"]["sqlite"] = asyncio.run(
                    run(server, items=args.items, appenders=args.appenders, seconds=args.seconds)
                )
        if args.storage in ("postgres", "both"):
            from bench.postgres import private_server
            from tests.postgres import find_bindir

            if find_bindir() is None and args.storage == "both":
                print("PostgreSQL binaries not found: SQLite only", file=sys.stderr)
            else:
                with private_server() as url, serving(Path(tmp) / "postgres", url) as server:
                    report["storages"]["postgres"] = asyncio.run(
                        run(server, items=args.items, appenders=args.appenders, seconds=args.seconds)
                    )
    print(json.dumps(report, indent=2))
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
