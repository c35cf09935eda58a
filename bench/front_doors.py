"""The doors that need no credential, under load, against a real `memory-server serve` process.

    python bench/front_doors.py [--storage sqlite|postgres] [--only storage,slow] [--json OUT]
                                [--registrations 3000] [--authorizations 3000] [--slow 1050] [--slow-for 30]

`storage`: anonymous `POST /register` calls with the largest metadata a body allows (10 redirect URIs of
2,000 characters), then `/authorize` calls carrying a 60 KB `state`, all from one address; reports how many
were accepted and what they cost: the server's resident memory and the authority's OAuth rows on disk
(SQLite: the database file and its WAL; PostgreSQL: the OAuth tables' total relation size).

`slow`: `--slow` connections to `/register` and `/ui/sign-in` that each send a complete head with
`Content-Length: 60000`, then one byte every 2 s, for `--slow-for` seconds; meanwhile a legitimate client
opens a new connection every 0.5 s and asks `GET /v1/conversations` with the site's Basic credential.
Reports its answers, failures and latencies, and how many slow connections the server closed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import resource
import secrets
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402

from bench.serverproc import Server  # noqa: E402

STATE_BYTES = 60_000
SLOW_LENGTH = 60_000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def oauth_bytes(server: Server, database_url: str | None) -> int:
    if database_url is None:
        return sum(p.stat().st_size for p in server.data_dir.glob("memory.db*"))
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
            " WHERE c.relname LIKE 'oauth_%' AND c.relkind = 'r'"
        ).fetchone()
    return int(row[0] or 0) if row else 0


def noise(length: int) -> str:
    """Random URL-safe text: what the flood stores cannot be compressed away (PostgreSQL's TOAST would)."""
    return secrets.token_urlsafe(length)[:length]


def registration(index: int) -> dict[str, Any]:
    uris = [f"https://client{index}.example/cb/{i}/" + noise(1950) for i in range(10)]
    return {"client_name": f"flood {index}", "redirect_uris": uris, "token_endpoint_auth_method": "none"}


async def storage_flood(
    server: Server, database_url: str | None, registrations: int, authorizations: int
) -> dict[str, Any]:
    assert server.proc is not None
    pid = server.proc.pid
    report: dict[str, Any] = {"before": {"rss_mb": rss_mb(pid), "oauth_bytes": oauth_bytes(server, database_url)}}
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        first = await http.post(
            "/register",
            json={
                "client_name": "legit",
                "redirect_uris": ["http://127.0.0.1:9/cb"],
                "token_endpoint_auth_method": "none",
            },
        )
        client_id = first.json()["client_id"]
        gate = asyncio.Semaphore(32)
        statuses: Counter[int] = Counter()

        async def register(index: int) -> None:
            async with gate:
                statuses[(await http.post("/register", json=registration(index))).status_code] += 1

        started = time.perf_counter()
        await asyncio.gather(*(register(i) for i in range(registrations)))
        report["registrations"] = {
            "seconds": round(time.perf_counter() - started, 1),
            "statuses": dict(sorted(statuses.items())),
        }
        report["after_registrations"] = {"rss_mb": rss_mb(pid), "oauth_bytes": oauth_bytes(server, database_url)}

        outcomes: Counter[str] = Counter()

        async def authorize(index: int) -> None:
            query = {
                "response_type": "code",
                "client_id": client_id,
                "redirect_uri": "http://127.0.0.1:9/cb",
                "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
                "code_challenge_method": "S256",
                "state": noise(STATE_BYTES),
            }
            async with gate:
                response = await http.get(f"/authorize?{urlencode(query)}")
            location = response.headers.get("location", "")
            kind = (
                "stored"
                if "/oauth/consent?" in location
                else "error redirect"
                if location
                else str(response.status_code)
            )
            outcomes[kind] += 1

        started = time.perf_counter()
        await asyncio.gather(*(authorize(i) for i in range(authorizations)))
        report["authorizations"] = {"seconds": round(time.perf_counter() - started, 1), "outcomes": dict(outcomes)}
        report["after_authorizations"] = {"rss_mb": rss_mb(pid), "oauth_bytes": oauth_bytes(server, database_url)}
    before, after = report["before"], report["after_authorizations"]
    report["growth"] = {
        "rss_mb": round(after["rss_mb"] - before["rss_mb"], 1),
        "oauth_mb": round((after["oauth_bytes"] - before["oauth_bytes"]) / 2**20, 1),
    }
    return report


async def slow_connection(port: int, path: str, until: float, closed: list[float], started: float) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        closed.append(0.0)
        return
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {SLOW_LENGTH}\r\n\r\n".encode()
    )
    try:
        while time.monotonic() < until:
            writer.write(b"a")
            await writer.drain()
            try:
                if await asyncio.wait_for(reader.read(4096), timeout=2.0) == b"":
                    closed.append(time.monotonic() - started)
                    return
            except TimeoutError:
                continue
    except OSError:
        closed.append(time.monotonic() - started)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def slow_flood(server: Server, connections: int, seconds: float) -> dict[str, Any]:
    port = int(server.base.rsplit(":", 1)[1])
    header = "Basic " + base64.b64encode(f"bench:{server.secret}".encode()).decode()
    latencies: list[float] = []
    failures: Counter[str] = Counter()
    closed: list[float] = []
    started = time.monotonic()
    until = started + seconds

    async def legitimate() -> None:
        await asyncio.sleep(2.0)  # once the flood is in place
        while time.monotonic() < until:
            began = time.perf_counter()
            try:
                async with httpx2.AsyncClient(timeout=5) as http:  # a new connection, as a new client
                    response = await http.get(f"{server.base}/v1/conversations", headers={"Authorization": header})
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - began)
                else:
                    failures[str(response.status_code)] += 1
            except httpx2.HTTPError as exc:
                failures[type(exc).__name__] += 1
            await asyncio.sleep(0.5)

    paths = ("/register", "/ui/sign-in")
    flood = [slow_connection(port, paths[i % 2], until, closed, started) for i in range(connections)]
    await asyncio.gather(legitimate(), *flood)
    answered = len(latencies)
    report: dict[str, Any] = {
        "connections": connections,
        "seconds": seconds,
        "legitimate_answered": answered,
        "legitimate_failed": dict(failures),
        "slow_closed_by_server": len(closed),
    }
    if latencies:
        ordered = sorted(latencies)
        report["latency_ms"] = {
            "median": round(statistics.median(ordered) * 1000, 1),
            "p95": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
            "max": round(ordered[-1] * 1000, 1),
        }
    if closed:
        report["slow_closed_after_s_median"] = round(statistics.median(closed), 1)
    return report


@contextlib.contextmanager
def authority(storage: str) -> Iterator[str | None]:
    if storage == "sqlite":
        yield None
        return
    from bench.postgres import private_server

    with private_server() as url:
        yield url


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--only", default="storage,slow")
    parser.add_argument("--registrations", type=int, default=3000)
    parser.add_argument("--authorizations", type=int, default=3000)
    parser.add_argument("--slow", type=int, default=1050)
    parser.add_argument("--slow-for", type=float, default=30.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the flood needs a descriptor per connection
    only = set(args.only.split(","))
    results: dict[str, Any] = {"storage": args.storage}
    with tempfile.TemporaryDirectory(prefix="front-doors-") as tmp:
        if "storage" in only:
            with authority(args.storage) as url:
                env = {"MEMORY_DATABASE_URL": url} if url else {}
                with Server(Path(tmp) / "storage", env=env) as server:
                    results["storage_flood"] = await storage_flood(server, url, args.registrations, args.authorizations)
        if "slow" in only:
            with authority(args.storage) as url:
                env = {"MEMORY_DATABASE_URL": url} if url else {}
                with Server(Path(tmp) / "slow", env=env) as server:
                    results["slow_bodies"] = await slow_flood(server, args.slow, args.slow_for)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
