"""Performance benchmarks with same-run baselines (`make bench-perf`). Prints JSON and a table.

Every server measurement goes through MCP over real HTTP (JSON-RPC `tools/call` POSTs to a
`memory-server serve` subprocess on 127.0.0.1); each is printed beside a baseline measured in the same run
on the same disk: raw sqlite3 for the log store, qdrant-client local mode for vector search.

    python bench/perf.py [--sizes 10000,100000] [--only logs,indexing,remember,search] [--json OUT]

The memory corpus is synthetic text embedded once with the bundled model; its vectors are cached under
bench/.cache/ and reused (the output says when they were).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import numpy as np  # noqa: E402

from memory_server.auth import admin as auth  # noqa: E402
from memory_server.embeddings.base import Embedder  # noqa: E402
from memory_server.memories.writes import document_terms  # noqa: E402
from memory_server.ranking.fusion import document_text  # noqa: E402
from memory_server.services import open_services  # noqa: E402
from memory_server.settings import Settings  # noqa: E402
from memory_server.storage.backends import SQLITE, backend_of, database_url  # noqa: E402
from memory_server.storage.factory import open_storage  # noqa: E402
from memory_server.storage.records import Document, Words  # noqa: E402

CACHE = ROOT / "bench" / ".cache"
QUERIES = 200
BUCKETS = 100
# The corpus's occurred_at dates spread over DAYS days from FIRST_DAY; a time-window query asks for WINDOW_DAYS
# of them (about 4% of the corpus).
FIRST_DAY, DAYS, WINDOW_DAYS = date(2024, 1, 1), 730, 30


# --- statistics ---------------------------------------------------------------------------------------


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 2)

    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
    }


# --- a real server process ------------------------------------------------------------------------------


class Server:
    def __init__(self, data: Path, database_url: str | None = None, *, secret: str | None = None) -> None:
        """`secret`: the site's, when another replica of one deployment created it."""
        self.data, self.database_url = data, database_url
        if secret is None:
            storage = open_storage(self.settings())
            try:
                exists = storage.sites.site_id("bench") is not None
                secret = (auth.rotate_site if exists else auth.create_site)(storage.sites, "bench")
            finally:
                storage.close()
        self.secret = secret
        with socket_port() as port:
            self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.auth = "Basic " + base64.b64encode(f"bench:{self.secret}".encode()).decode()

    def settings(self) -> Settings:
        return Settings(data_dir=self.data, database_url=self.database_url)

    def start(self) -> float:
        """Start the process; return seconds from spawn to /readyz 200."""
        env = {
            **os.environ,
            "FASTMCP_SHOW_SERVER_BANNER": "false",
            "MEMORY_LOG_LEVEL": "WARNING",
            **({"MEMORY_DATABASE_URL": self.database_url} if self.database_url else {}),
        }
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memory_server", "serve", "--data-dir", str(self.data), "--port", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        while True:
            try:
                if httpx2.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return time.perf_counter() - started
            except httpx2.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stderr.read().decode() if self.proc.stderr else "")
            time.sleep(0.02)

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class socket_port:
    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        port: int = self.sock.getsockname()[1]
        return port

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


class Caller:
    """JSON-RPC tools/call over HTTP (the server is stateless: no session handshake needed)."""

    def __init__(self, server: Server, client: httpx2.AsyncClient) -> None:
        self.server = server
        self.client = client
        self.headers = {
            "authorization": server.auth,
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }

    async def __call__(self, tool: str, **arguments: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        response = await self.client.post(f"{self.server.url}/mcp", json=body, headers=self.headers)
        result = response.json()["result"]
        if result.get("isError"):
            raise RuntimeError(result["content"][0]["text"])
        content: dict[str, Any] = result["structuredContent"]
        return content


async def timed(calls: int, make: Callable[[int], Awaitable[Any]]) -> list[float]:
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        await make(i)
        samples.append(time.perf_counter() - start)
    return samples


def appending(call: Caller, conversation_id: str, items: list[dict[str, Any]]) -> Callable[[int], Awaitable[Any]]:
    """A step for `timed`: the same items appended to one conversation, each call."""
    return lambda _: call("append_memory", conversation_id=conversation_id, items=items)


def client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=64))


# --- conversation logs ----------------------------------------------------------------------------------


def batch(n: int, tag: int) -> list[dict[str, Any]]:
    return [{"role": "user", "text": f"message {tag}-{i} " + "x" * 80, "n": i} for i in range(n)]


def process_cpu_seconds(pid: int) -> float:  # user + system CPU time of a process so far (Linux)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def bench_logs(tmp: Path, *, duration: float, read_items: int) -> dict[str, Any]:
    server = Server(tmp / "logs")
    server.start()
    out: dict[str, Any] = {}
    try:
        async with client() as http:
            call = Caller(server, http)
            out["append_ack"] = {}
            for size in (1, 10, 100):
                samples = await timed(200, appending(call, f"ack-{size:04d}-xx", batch(size, size)))
                out["append_ack"][f"batch_{size}"] = summary(samples)
            out["append_throughput"] = {}
            # CPU seconds per request, server and this client: steadier than items/s on a shared machine,
            # and they say how many requests/s the two cores could carry at best.
            out["append_cpu_ms_per_request"] = {}
            acknowledged = 0
            for clients in (1, 8, 32):
                for shape in ("many", "hot"):
                    server_cpu = process_cpu_seconds(server.proc.pid)
                    client_cpu = resource.getrusage(resource.RUSAGE_SELF)
                    items = await append_load([server], clients, shape, duration)
                    requests = max(1, items // 10)
                    acknowledged += items
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    out["append_throughput"][f"{clients}_clients_{shape}"] = round(items / duration)
                    out["append_cpu_ms_per_request"][f"{clients}_clients_{shape}"] = {
                        "server": round((process_cpu_seconds(server.proc.pid) - server_cpu) * 1000 / requests, 3),
                        "client": round(
                            (after.ru_utime + after.ru_stime - client_cpu.ru_utime - client_cpu.ru_stime)
                            * 1000
                            / requests,
                            3,
                        ),
                    }
            # Every acknowledged item is in the database, each conversation gapless from seq 0.
            conn = sqlite3.connect(Settings(data_dir=server.data).db_path)
            try:
                stored, gapless = conn.execute(
                    "SELECT sum(n), min(n = top + 1) FROM (SELECT count(*) AS n, max(seq) AS top"
                    " FROM log_items WHERE conversation_id LIKE '%conversation%' GROUP BY conversation_id)"
                ).fetchone()
            finally:
                conn.close()
            if stored != acknowledged or not gapless:
                raise RuntimeError(f"{acknowledged} items acknowledged, {stored} stored (gapless: {gapless})")
            out["append_items_verified"] = stored
            out["append_throughput"]["baseline_raw_sqlite"] = raw_sqlite_appends(tmp / "raw.db", duration)
            out["reads"] = await bench_reads(server, call, read_items)
    finally:
        server.stop()
    return out


async def bench_log_indexing(tmp: Path, *, appends: int, database_url: str | None = None) -> dict[str, Any]:
    """Append acknowledgements with log indexing on beside off, one server, one run: site `bench` does not
    index its logs, site `indexed` does (memory_server/logs/indexing.py embeds its items in the background). First
    `appends` batches of 10 to `bench` alone (nothing to embed), then the same number to each site in turn,
    while the indexer embeds what `indexed` was sent; then how long the indexer took to catch up."""
    server = Server(tmp / "indexing", database_url)
    storage = open_storage(server.settings())
    try:
        indexed_secret = auth.create_site(storage.sites, "indexed")
        storage.sites.set_log_indexing("indexed", True)
    finally:
        storage.close()
    server.start()
    out: dict[str, Any] = {"batch": 10, "appends": appends}
    try:
        async with client() as http:
            plain = Caller(server, http)
            indexed = Caller(server, http)
            indexed.headers = {
                **plain.headers,
                "authorization": "Basic " + base64.b64encode(f"indexed:{indexed_secret}".encode()).decode(),
            }
            out["off_alone"] = summary(
                await timed(
                    appends, lambda i: plain("append_memory", conversation_id="plain-alone-0001", items=batch(10, i))
                )
            )
            off: list[float] = []
            on: list[float] = []
            started = time.perf_counter()
            for i in range(appends):
                for call, samples, conversation in ((indexed, on, "indexed-000001"), (plain, off, "plain-000001")):
                    begun = time.perf_counter()
                    await call("append_memory", conversation_id=conversation, items=batch(10, i))
                    samples.append(time.perf_counter() - begun)
            out["off_beside_on"], out["on"] = summary(off), summary(on)
            while True:  # the indexer's lag: until /readyz shows nothing waiting
                ready = (await http.get(f"{server.url}/readyz")).json()
                if "log_indexing" not in ready:
                    break
                await asyncio.sleep(0.2)
            out["indexed_items"] = appends * 10
            out["indexed_after_s"] = round(time.perf_counter() - started, 1)
    finally:
        server.stop()
    return out


async def append_load(servers: list[Server], clients: int, shape: str, duration: float) -> int:
    """Appends of 10 items from `clients` concurrent keep-alive connections (spread over the replicas)
    until `duration` is over.

    The load comes from RawConnection, not httpx: on 2 cores shared by client and server, httpx's ~0.7 ms of
    CPU per request would be more than the server's own cost and would cap what is measured."""
    deadline = time.perf_counter() + duration
    payload = batch(10, 0)
    done = 0

    async def worker(n: int) -> None:
        nonlocal done
        conversation = "hot-conversation" if shape == "hot" else f"conversation-{n:04d}"
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "append_memory", "arguments": {"conversation_id": conversation, "items": payload}},
            }
        ).encode()
        connection = await RawConnection.open(servers[n % len(servers)])
        try:
            while time.perf_counter() < deadline:
                reply = json.loads(await connection.post("/mcp", body))
                if "result" not in reply or reply["result"].get("isError"):
                    raise RuntimeError(f"append failed: {reply}")
                done += 10
        finally:
            connection.close()

    await asyncio.gather(*(worker(n) for n in range(clients)))
    return done


class RawConnection:
    """A minimal HTTP/1.1 keep-alive client (a load generator, like wrk): one request at a time, the response
    read by its Content-Length. Only for the throughput test; every other figure goes through httpx."""

    def __init__(self, server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.head = (
            f"host: 127.0.0.1:{server.port}\r\nauthorization: {server.auth}\r\n"
            "content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
        )

    @classmethod
    async def open(cls, server: Server) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        return cls(server, reader, writer)

    async def post(self, path: str, body: bytes) -> bytes:
        self.writer.write(f"POST {path} HTTP/1.1\r\n{self.head}content-length: {len(body)}\r\n\r\n".encode() + body)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        if not head[0].startswith("HTTP/1.1 200"):
            raise RuntimeError(f"unexpected response: {head[0]}")
        length = next(int(line.split(":", 1)[1]) for line in head if line.lower().startswith("content-length:"))
        return await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def raw_sqlite_appends(path: Path, duration: float) -> int:
    """Baseline: insert batches of 10 and commit with synchronous=FULL, as fast as one thread can."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE items (conversation TEXT, seq INTEGER, payload TEXT, PRIMARY KEY (conversation, seq))"
        " WITHOUT ROWID"
    )
    texts = [json.dumps(item) for item in batch(10, 0)]
    seq, deadline = 0, time.perf_counter() + duration
    while time.perf_counter() < deadline:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO items VALUES ('c', ?, ?)", [(seq + i, t) for i, t in enumerate(texts)])
        conn.execute("COMMIT")
        seq += 10
    conn.close()
    return round(seq / duration)


async def bench_reads(server: Server, call: Caller, items: int) -> dict[str, Any]:
    storage = open_storage(server.settings())  # beside the server, as a second writer
    try:
        site_id = storage.sites.site_id("bench")
        assert site_id is not None
        texts = [json.dumps(item, separators=(",", ":")) for item in batch(1000, 7)]
        for _ in range(items // 1000):
            await storage.logs.append(site_id, "long-conversation", texts, None)
    finally:
        storage.close()
    tail = await timed(200, lambda i: call("recall_memory", conversation_id="long-conversation", count=50))
    pages = items // 1000
    replay = await timed(
        pages, lambda i: call("replay_memory", conversation_id="long-conversation", limit=1000, offset=i * 1000)
    )
    raw = []
    if backend_of(server.settings()) is SQLITE:
        conn = sqlite3.connect(server.settings().db_path)  # the baseline: raw sqlite3 reads
        sql, label = (
            (
                "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = ? AND"
                " conversation_id = 'long-conversation' AND seq >= ? ORDER BY seq LIMIT 1000"
            ),
            "raw_sqlite",
        )
    else:
        import psycopg

        conn = psycopg.connect(database_url(server.settings()), autocommit=True)  # type: ignore[assignment]
        sql, label = (
            (
                "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = %s AND"
                " conversation_id = 'long-conversation' AND seq >= %s ORDER BY seq LIMIT 1000"
            ),
            "raw_psycopg",
        )
    for i in range(pages):
        start = time.perf_counter()
        fetched = conn.execute(sql, (site_id, i * 1000)).fetchall()
        [json.loads(p) for _, _, p in fetched]
        raw.append(time.perf_counter() - start)
    conn.close()
    return {
        "conversation_items": items,
        "recall_memory_50": summary(tail),
        "replay_memory_1000": {**summary(replay), "items_per_s": round(1000 / statistics.median(replay))},
        f"baseline_{label}_1000": {**summary(raw), "items_per_s": round(1000 / statistics.median(raw))},
    }


# --- saved memories --------------------------------------------------------------------------------------

SUBJECTS = [
    "the billing service",
    "our mobile app",
    "the data team",
    "Alice",
    "the search cluster",
    "the onboarding flow",
    "the staging database",
    "Bob",
    "the design review",
    "the release train",
    "the support queue",
    "the analytics pipeline",
    "the security audit",
    "the API gateway",
    "Carol",
]
VERBS = [
    "decided to move",
    "prefers",
    "found a bug in",
    "scheduled",
    "deprecated",
    "migrated",
    "documented",
    "benchmarked",
    "rolled back",
    "approved",
    "postponed",
    "rewrote",
    "monitors",
    "paused",
    "reviewed",
]
OBJECTS = [
    "the payment retries",
    "dark mode",
    "the nightly backups",
    "the Postgres upgrade",
    "feature flags",
    "the Kubernetes nodes",
    "the quarterly roadmap",
    "the login page",
    "rate limiting",
    "the cache layer",
    "the invoice emails",
    "vector search",
    "the CI runners",
    "the pricing page",
    "on-call rotations",
]
DETAILS = [
    "before the Friday release",
    "after the outage in March",
    "because latency doubled",
    "to cut cloud costs",
    "for the enterprise customers",
    "in the Berlin office",
    "until next sprint",
    "with help from the platform team",
    "as agreed in the retro",
    "to meet the audit deadline",
]


# Above this many memories the corpus is synthetic (see `synthetic_vectors`): embedding a million texts
# would take hours on two cores.
EMBEDDED_UP_TO = 100_000
SYNTHETIC_NOISE = 0.05  # the norm of the perturbation of a synthetic vector, relative to its unit source


def corpus_text(i: int) -> str:
    if i >= EMBEDDED_UP_TO:  # the text of the memory whose vector it perturbs, with its own note number
        source = i % EMBEDDED_UP_TO
        return corpus_text(source).replace(f"(note {source}).", f"(note {i}).")
    rng = random.Random(i)
    return (
        f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
        f"{rng.choice(DETAILS)} (note {i})."
    )


def synthetic_vectors(embedded: np.ndarray, n: int) -> np.ndarray:
    """n vectors: the embedded ones, then each of them again (memory i copies i mod len(embedded)) plus
    Gaussian noise of norm ~SYNTHETIC_NOISE, renormalised, beside a text recombined from its source's."""
    rng = np.random.default_rng(n)
    base = len(embedded)
    out = np.empty((n, embedded.shape[1]), dtype=np.float32)
    out[:base] = embedded
    for start in range(base, n, base):
        stop = min(n, start + base)
        chunk = embedded[: stop - start] + rng.standard_normal(
            (stop - start, embedded.shape[1]), dtype=np.float32
        ) * np.float32(SYNTHETIC_NOISE / np.sqrt(embedded.shape[1]))
        out[start:stop] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
    return out


def corpus_vectors(embedder: Embedder, n: int) -> tuple[np.ndarray, bool | str]:
    """Vectors of corpus_text(0..n-1) through document_text; cached between runs. Above EMBEDDED_UP_TO the
    rest are synthetic (`synthetic_vectors`), and the second value says so."""
    if n > EMBEDDED_UP_TO:
        embedded, _ = corpus_vectors(embedder, EMBEDDED_UP_TO)
        return synthetic_vectors(embedded, n), (
            f"synthetic: {EMBEDDED_UP_TO} embedded, the rest those perturbed "
            f"(noise {SYNTHETIC_NOISE}) and renormalised, texts recombined"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"corpus-{embedder.name}-{n}.npy"
    if path.exists():
        return np.load(path), True
    for smaller in sorted(CACHE.glob(f"corpus-{embedder.name}-*.npy"), reverse=True):
        cached = np.load(smaller)
        if len(cached) >= n:
            return cached[:n], True
    texts = [document_text(corpus_text(i), "2024-01-01T00:00:00Z") for i in range(n)]
    vectors = np.concatenate([embedder.embed_documents(texts[i : i + 256]) for i in range(0, n, 256)])
    np.save(path, vectors)
    return vectors, False


def day(n: int) -> str:
    return f"{(FIRST_DAY + timedelta(days=n)).isoformat()}T00:00:00Z"


def load_corpus(data: Path, embedder: Embedder, n: int, database_url: str | None = None) -> dict[str, Any]:
    """Fill a data directory (and database) with n memories in BUCKETS buckets, reusing cached vectors."""
    vectors, cached = corpus_vectors(embedder, n)
    services = open_services(Settings(data_dir=data, database_url=database_url))
    try:
        memories = services.load_memories(embedder=embedder)
        site_id, _ = auth.ensure_site(services.storage.sites, "bench")
        start = time.perf_counter()
        for offset in range(0, n, 1000):
            chunk = range(offset, min(n, offset + 1000))
            batch = []
            for i in chunk:
                # The cached vectors were embedded with FIRST_DAY's date in the text; the stored date (and the
                # analysed terms) spread over DAYS days: only the timing of time windows depends on it.
                memory = memories.writes.validate(
                    content=corpus_text(i), bucket=f"b{i % BUCKETS:03d}", occurred_at=day(i % DAYS)
                )
                terms = document_terms(memory.content, memory.occurred_at)
                batch.append((memory, Document(vector=vectors[i], model=embedder.name, terms=terms), None))
            # The cached vectors go in as remember would store them; words are backfilled below.
            inserted = services.storage.memories.insert(site_id, batch, Words())
            memories.writes.index.written([i.row_id for i in inserted if i.row_id is not None])
        seconds = time.perf_counter() - start
        memories.backfill_words()  # what the server's first start would do in the background
        optimize_start = time.perf_counter()
        memories.index.optimize()
        optimize_seconds = time.perf_counter() - optimize_start
        # The server reopens this shard: its points must all be under HNSW, or search is a full scan.
        index_stats = memories.index.stats() if hasattr(memories.index, "stats") else None
    finally:
        services.close()
    return {
        "memories": n,
        "vectors_cached": cached,
        "load_seconds": round(seconds, 1),
        "optimize_seconds": round(optimize_seconds, 1),
        "index": index_stats,
        "vectors": vectors,
    }


async def bench_remember(tmp: Path, embedder: Embedder, *, single: int, bulk: int) -> dict[str, Any]:
    server = Server(tmp / "remember")
    server.start()
    try:
        async with client() as http:
            call = Caller(server, http)
            samples = await timed(single, lambda i: call("remember", content=corpus_text(10_000_000 + i)))
    finally:
        server.stop()
    services = open_services(Settings(data_dir=tmp / "bulk"))
    try:
        writes = services.load_memories(embedder=embedder).writes
        site_id, _ = auth.ensure_site(services.storage.sites, "bench")
        memories = [writes.validate(content=corpus_text(20_000_000 + i)) for i in range(bulk)]
        start = time.perf_counter()
        writes.remember_many(site_id, memories)
        bulk_seconds = time.perf_counter() - start
    finally:
        services.close()
    return {
        "one_at_a_time": {**summary(samples), "per_s": round(single / sum(samples), 1)},
        "bulk_import": {"memories": bulk, "seconds": round(bulk_seconds, 1), "per_s": round(bulk / bulk_seconds, 1)},
    }


def disk_mb(data: Path) -> dict[str, float]:
    """Bytes on disk (allocated blocks) of the data directory: the SQLite files and the embedded index."""

    def size(paths: list[Path]) -> float:
        return round(sum(p.stat().st_blocks * 512 for p in paths if p.is_file()) / 2**20, 1)

    settings = Settings(data_dir=data)
    files = list(data.rglob("*"))
    return {
        "total": size(files),
        "index": size(list(settings.index_path.rglob("*"))),
        "sqlite": size([p for p in files if p.name.startswith(settings.db_path.name)]),
    }


# Recall at this many memories and above skips the qdrant-client baseline: its local mode scans every
# vector in Python (1.5 s a query at 100k, minutes to load a million).
BASELINE_UP_TO = 100_000


async def cold_phase(server: Server, queries: list[str], buckets: list[str] | None) -> dict[str, Any]:
    """The first len(queries) recalls after a start-up (nothing before them), whole site or one bucket."""
    startup = server.start()
    try:
        async with client() as http:
            call = Caller(server, http)
            samples = await timed(
                len(queries),
                lambda i: call("recall", query=queries[i], limit=10, **({"bucket": buckets[i]} if buckets else {})),
            )
        return {**summary(samples), "startup_to_ready_s": round(startup, 2), "server_peak_rss_mb": server.peak_rss_mb()}
    finally:
        server.stop()


async def bench_search(tmp: Path, embedder: Embedder, size: int, database_url: str | None = None) -> dict[str, Any]:
    data = tmp / f"search-{size}"
    loaded = load_corpus(data, embedder, size, database_url)
    vectors = loaded.pop("vectors")
    server = Server(data, database_url)
    rng = random.Random(size)
    cold = {
        name: [
            f"{rng.choice(SUBJECTS)} {rng.choice(OBJECTS)} {rng.choice(DETAILS)} ({name} {i})" for i in range(QUERIES)
        ]
        for name in ("recall_cold", "recall_bucket_cold")
    }
    cold_buckets = [f"b{rng.randrange(BUCKETS):03d}" for _ in range(QUERIES)]
    out_cold = {
        "recall_cold": await cold_phase(server, cold["recall_cold"], None),
        "recall_bucket_cold": await cold_phase(server, cold["recall_bucket_cold"], cold_buckets),
    }
    startup = server.start()
    # Six phases, six disjoint query sets: no phase is helped by another's cached query embeddings.
    phases = (
        "recall",
        "recall_bucket",
        "recall_window",
        "search_memory",
        "search_memory_bucket",
        "search_memory_window",
    )
    queries = {
        phase: [
            f"{rng.choice(SUBJECTS)} {rng.choice(OBJECTS)} {rng.choice(DETAILS)} ({phase} {i})" for i in range(QUERIES)
        ]
        for phase in phases
    }
    buckets = [f"b{rng.randrange(BUCKETS):03d}" for _ in range(QUERIES)]
    starts = [rng.randrange(DAYS - WINDOW_DAYS) for _ in range(QUERIES)]
    windows = [{"occurred_after": day(s), "occurred_before": day(s + WINDOW_DAYS)} for s in starts]
    out: dict[str, Any] = {**loaded, "startup_to_ready_s": round(startup, 2), **out_cold}
    try:
        async with client() as http:
            call = Caller(server, http)
            await call("recall", query="warm up", limit=5)

            async def one(phase: str, i: int) -> Any:
                tool = "recall" if phase.startswith("recall") else "search_memory"
                extra: dict[str, Any] = {"min_score": 0.0} if tool == "search_memory" else {}
                bucket = {"bucket": buckets[i]} if phase.endswith("bucket") else {}
                window = windows[i] if phase.endswith("window") else {}
                return await call(tool, query=queries[phase][i], limit=10, **bucket, **window, **extra)

            # The phases take turns, a query each: a machine that slows down or speeds up during the run (a
            # shared one does, by 30% from one minute to the next) weighs on every phase alike, so recall and
            # its search_memory floor are compared under the same conditions.
            samples: dict[str, list[float]] = {phase: [] for phase in phases}
            for i in range(QUERIES):
                for phase in phases:
                    begun = time.perf_counter()
                    await one(phase, i)
                    samples[phase].append(time.perf_counter() - begun)
            out.update({phase: summary(samples[phase]) for phase in phases})
        out["server_peak_rss_mb"] = server.peak_rss_mb()
    finally:
        server.stop()
    out["disk_mb"] = disk_mb(data)
    # The index baseline does not depend on the authority: measured once, beside the default one.
    if backend_of(server.settings()) is SQLITE and size <= BASELINE_UP_TO:
        query_vectors = embedder.embed_documents(queries["search_memory"])
        out["baseline_qdrant_local"] = qdrant_local_baseline(
            tmp / f"qdrant-local-{size}", vectors, query_vectors, buckets
        )
    return out


def qdrant_local_baseline(path: Path, vectors: np.ndarray, queries: np.ndarray, buckets: list[str]) -> dict[str, Any]:
    """qdrant-client's local mode on the same vectors and bucket payloads (query vectors precomputed, so
    this excludes the embedding time our figures include)."""
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(path))
    client.create_collection(
        "bench", vectors_config=models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
    )
    for offset in range(0, len(vectors), 2000):
        client.upsert(
            "bench",
            points=models.Batch(
                ids=list(range(offset, min(len(vectors), offset + 2000))),
                vectors=vectors[offset : offset + 2000].tolist(),
                payloads=[{"bucket": f"b{i % BUCKETS:03d}"} for i in range(offset, min(len(vectors), offset + 2000))],
            ),
        )
    client.close()
    start = time.perf_counter()
    client = QdrantClient(path=str(path))
    reopen = time.perf_counter() - start

    def search(i: int, bucket: str | None) -> None:
        flt = (
            models.Filter(must=[models.FieldCondition(key="bucket", match=models.MatchValue(value=bucket))])
            if bucket
            else None
        )
        client.query_points("bench", query=queries[i].tolist(), query_filter=flt, limit=10)

    plain, filtered = [], []
    for i in range(len(queries)):
        start = time.perf_counter()
        search(i, None)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        search(i, buckets[i])
        filtered.append(time.perf_counter() - start)
    client.close()
    return {"reopen_s": round(reopen, 2), "search": summary(plain), "search_bucket": summary(filtered)}


# --- report ----------------------------------------------------------------------------------------------


def table(report: dict[str, Any]) -> str:
    lines = ["", f"memory-server performance ({report['machine']})", ""]
    lines += _tables(report)
    if "postgres" in report:
        lines += ["", "with PostgreSQL as the authority (append throughput: two replicas where marked)", ""]
        lines += _tables(report["postgres"])
    return "\n".join(lines)


def _tables(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    indexing = report.get("log_indexing")
    if indexing:
        for name, label in (
            ("off_alone", "indexing off, alone"),
            ("off_beside_on", "indexing off, beside on"),
            ("on", "indexing on"),
        ):
            s = indexing[name]
            lines.append(f"append ack (batch of 10), {label:<24} p50 {s['p50_ms']:>7} ms  p99 {s['p99_ms']:>7} ms")
        lines.append(
            f"log indexing caught up with {indexing['indexed_items']} items "
            f"{indexing['indexed_after_s']} s after the first append"
        )
    logs = report.get("logs")
    if logs:
        for name, s in logs["append_ack"].items():
            lines.append(
                f"append ack, {name:<12} p50 {s['p50_ms']:>7} ms  p95 {s['p95_ms']:>7} ms  p99 {s['p99_ms']:>7} ms"
            )
        for name, v in logs["append_throughput"].items():
            lines.append(f"append throughput, {name:<24} {v:>9} items/s")
        r = logs["reads"]
        lines.append(f"recall_memory(50) p50 {r['recall_memory_50']['p50_ms']} ms")
        base = next(key for key in r if key.startswith("baseline_"))
        lines.append(
            f"replay_memory(1000) {r['replay_memory_1000']['items_per_s']} items/s"
            f"  ({base.removeprefix('baseline_').removesuffix('_1000').replace('_', ' ')} "
            f"{r[base]['items_per_s']} items/s)"
        )
    rem = report.get("remember")
    if rem:
        one = rem["one_at_a_time"]
        lines.append(
            f"remember one at a time: p50 {one['p50_ms']} ms, {one['per_s']}/s;"
            f" bulk import {rem['bulk_import']['per_s']}/s ({rem['bulk_import']['memories']})"
        )
    for size, s in report.get("search", {}).items():
        index = s.get("index") or {}
        lines.append(
            f"{size} memories (vectors cached: {s['vectors_cached']}; HNSW over "
            f"{index.get('indexed_vectors', '?')}/{index.get('points', '?')} points), start-up to /readyz "
            f"{s['startup_to_ready_s']} s, server peak RSS {s['server_peak_rss_mb']} MB"
            + (
                f", disk {s['disk_mb']['total']} MB (index {s['disk_mb']['index']} MB,"
                f" SQLite {s['disk_mb']['sqlite']} MB)"
                if "disk_mb" in s
                else ""
            )
        )
        for name in (
            "recall_cold",
            "recall_bucket_cold",
            "recall",
            "recall_bucket",
            "recall_window",
            "search_memory",
            "search_memory_bucket",
            "search_memory_window",
        ):
            if name not in s:
                continue
            lines.append(
                f"  {name:<22} p50 {s[name]['p50_ms']:>7} ms  p95 {s[name]['p95_ms']:>7} ms"
                f"  p99 {s[name]['p99_ms']:>7} ms"
            )
        base = s.get("baseline_qdrant_local")
        if base is None:
            continue
        lines.append(f"  qdrant local reopen {base['reopen_s']} s")
        for name, key in (("search", "search"), ("search bucket", "search_bucket")):
            lines.append(
                f"  qdrant local {name:<13} p50 {base[key]['p50_ms']:>7} ms  p95 {base[key]['p95_ms']:>7} ms"
                f"  p99 {base[key]['p99_ms']:>7} ms"
            )
        ratio = base["search_bucket"]["p50_ms"] / max(s["search_memory_bucket"]["p50_ms"], 1e-9)
        lines.append(
            f"  search_memory with a bucket filter: {ratio:.1f}x faster than qdrant local at p50"
            " (ours includes query embedding and MCP over HTTP)"
        )
    return lines


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": f"{os.cpu_count()} cores, {sys.platform}, Python {sys.version.split()[0]}"}
    only, storages = set(args.only.split(",")), set(args.storage.split(","))
    embedder = None
    if only & {"remember", "search"}:
        from memory_server.embeddings.factory import load_embedder, resolve_model
        from memory_server.services import PROJECT_ROOT

        embedder = load_embedder(
            resolve_model(os.environ.get("MEMORY_EMBEDDING_MODEL"), project_root=PROJECT_ROOT),
            threads=1,
            engine=Settings().embedding_engine,
        )
    if "sqlite" in storages:
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp_name:
            tmp = Path(tmp_name)
            if "logs" in only:
                report["logs"] = await bench_logs(tmp, duration=args.duration, read_items=args.read_items)
            if "indexing" in only:
                report["log_indexing"] = await bench_log_indexing(tmp, appends=args.index_appends)
            if "remember" in only and embedder is not None:
                report["remember"] = await bench_remember(tmp, embedder, single=args.single, bulk=args.bulk)
            if "search" in only and embedder is not None:
                report["search"] = {}
                for size in (int(s) for s in args.sizes.split(",")):
                    report["search"][str(size)] = await bench_search(tmp, embedder, size)
    if "postgres" in storages:
        from bench import postgres

        report["postgres"] = await postgres.bench(args, embedder, only)
    report["client_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="logs,remember,search")
    parser.add_argument(
        "--storage",
        default="sqlite",
        help="sqlite, postgres or both (sqlite,postgres): the "
        "authority the figures are measured on; postgres runs a private server",
    )
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per throughput run")
    parser.add_argument("--read-items", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=200)
    parser.add_argument("--bulk", type=int, default=10_000)
    parser.add_argument(
        "--index-appends",
        type=int,
        default=300,
        help="appends of 10 items per phase of the log indexing comparison (--only indexing)",
    )
    parser.add_argument("--tmp", default=None, help="where to put the data directories")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    print(json.dumps(report, indent=2))
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
