"""Soak: mixed load from several clients against a real `memory-server serve` process for a bounded time.

    python bench/soak.py [--seconds 300] [--clients 6] [--processes] [--storage sqlite|postgres]
                         [--mix append=35,remember=20,recall=15,search=15,tail=15] [--server-env NAME=VALUE]...
                         [--sample-s 5] [--json OUT]

A server on a fresh data directory (bench/serverproc.py: the site made with the CLI, `serve` as a child
process, its log in a file). Each client, a thread (or with `--processes` a process of its own), talks REST
over its own keep-alive connection and loops until the time is up, picking at random: append a batch of 10
items (with an idempotency key) to one of its conversations, remember a new memory, recall, search, and read
the tail of a conversation. Nothing is retried: every answer counts.

A sampler reads the server's /proc/PID/status every `--sample-s` seconds (VmRSS, RssAnon: the heap and other
private memory; RssFile: mapped files, the model and SQLite's and the index's pages in the page cache).

Afterwards every acknowledged write is checked: each conversation is replayed whole (seq gapless from 0, each
acknowledged batch at its seq with its payloads) and each acknowledged memory is fetched by reference. Counted:
answers by status per operation, 5xx answers (with samples of their bodies), tracebacks in the server's log.
Prints JSON and a table; exits 1 if a write was lost, a 5xx was answered or a traceback was logged.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402

from bench.serverproc import SITE, Server  # noqa: E402

BATCH = 10
CONVERSATIONS_PER_CLIENT = 3
# Operation mix: roughly the appends-to-remembers ratio of an agent that logs every turn and saves a fact
# every few turns, with reads in between.
WEIGHTS = {"append": 35, "remember": 20, "recall": 15, "search": 15, "tail": 15}
NOUNS = ["router", "invoice", "deploy", "backup", "meeting", "budget", "ticket", "laptop", "contract", "release"]
PLACES = ["Lisbon", "Berlin", "Osaka", "Toronto", "Nairobi", "Lima", "Oslo", "Pune"]
VERBS = ["moved", "renewed", "cancelled", "approved", "delayed", "audited", "replaced", "signed"]
FIVE_XX_SAMPLES = 20


@dataclass
class ClientJob:
    client: int
    base: str
    secret: str
    deadline: float  # time.time() at which to stop
    seed: int
    weights: dict[str, int] = field(default_factory=lambda: dict(WEIGHTS))


@dataclass
class ClientResult:
    client: int
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)  # op -> status -> count
    latencies: dict[str, list[float]] = field(default_factory=dict)  # op -> seconds
    appends: list[tuple[str, int, int, int]] = field(default_factory=list)  # (conversation, first_seq, count, batch)
    memories: list[tuple[str, str, bool]] = field(default_factory=list)  # (reference, content, created)
    five_xx: list[str] = field(default_factory=list)
    transport_errors: int = 0


def conversation_of(client: int, n: int) -> str:
    return f"soak-client-{client:02d}-conv-{n}"


def payload(client: int, batch: int, pos: int) -> dict[str, Any]:
    """What client `client` appended at position `pos` of its batch `batch` (recomputed when checking)."""
    return {
        "role": "user" if pos % 2 == 0 else "assistant",
        "client": client,
        "batch": batch,
        "pos": pos,
        "text": f"turn {batch}.{pos} of client {client}: " + "words " * (pos % 7 + 3),
    }


def memory_text(rng: random.Random, client: int, n: int) -> str:
    return (
        f"Soak note {client}-{n}: the {rng.choice(NOUNS)} from {rng.choice(PLACES)} was {rng.choice(VERBS)} "
        f"on day {n % 28 + 1} by team {rng.randint(1, 9)}."
    )


def query_text(rng: random.Random) -> str:
    return f"which {rng.choice(NOUNS)} was {rng.choice(VERBS)} in {rng.choice(PLACES)}?"


def run_client(job: ClientJob) -> ClientResult:
    """One client's loop until the deadline (a top-level function: it also runs in a process of its own)."""
    rng = random.Random(job.seed)
    result = ClientResult(job.client)
    ops, weights = list(job.weights), list(job.weights.values())
    batches = remembered = 0
    with httpx2.Client(base_url=job.base, auth=(SITE, job.secret), timeout=120) as http:
        while time.time() < job.deadline:
            op = rng.choices(ops, weights)[0]
            conversation = conversation_of(job.client, rng.randrange(CONVERSATIONS_PER_CLIENT))
            if op == "append":
                body: dict[str, Any] = {
                    "items": [payload(job.client, batches, p) for p in range(BATCH)],
                    "idempotency_key": f"c{job.client}-b{batches}",
                }
                request: tuple[str, str, dict[str, Any] | None] = (
                    "POST",
                    f"/v1/conversations/{conversation}/items",
                    body,
                )
            elif op == "remember":
                content = memory_text(rng, job.client, remembered)
                request = ("POST", "/v1/memories", {"content": content, "type": "note", "tags": [f"c{job.client}"]})
            elif op == "recall":
                request = ("POST", "/v1/recall", {"query": query_text(rng), "limit": 5})
            elif op == "search":
                request = ("POST", "/v1/search", {"query": query_text(rng), "limit": 10, "min_score": 0.2})
            else:
                request = ("GET", f"/v1/conversations/{conversation}/items?count=50", None)
            started = time.perf_counter()
            try:
                response = http.request(request[0], request[1], json=request[2])
            except httpx2.HTTPError:
                result.transport_errors += 1
                continue
            result.latencies.setdefault(op, []).append(time.perf_counter() - started)
            statuses = result.statuses.setdefault(op, {})
            statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1
            if response.status_code >= 500 and len(result.five_xx) < FIVE_XX_SAMPLES:
                result.five_xx.append(f"{op} {response.status_code}: {response.text[:300]}")
            if op == "append":
                if response.status_code == 201:
                    ack = response.json()
                    result.appends.append((conversation, ack["first_seq"], ack["count"], batches))
                batches += 1
            elif op == "remember":
                if response.status_code in (200, 201):
                    ack = response.json()
                    result.memories.append((ack["reference"], content, bool(ack["created"])))
                remembered += 1
    return result


class RssSampler:
    """The server's memory, from /proc/PID/status, every `every_s` seconds on a thread of its own."""

    FIELDS = ("VmRSS", "RssAnon", "RssFile")

    def __init__(self, pid: int, every_s: float) -> None:
        self.pid = pid
        self.every_s = every_s
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def read(self) -> dict[str, float]:
        values = {"t_s": round(time.monotonic() - self._started, 1)}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in self.FIELDS:
                values[name] = round(int(rest.split()[0]) / 1024, 1)  # kB -> MB
        return values

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.read())
            except OSError:  # the server is gone: nothing more to sample
                return
            self._stop.wait(self.every_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.samples.append(self.read())
        except OSError:
            pass


def slope_mb_per_min(samples: list[dict[str, float]], name: str) -> float | None:
    """Least-squares growth of `name` over `samples`, in MB per minute."""
    if len(samples) < 3:
        return None
    xs, ys = [s["t_s"] / 60 for s in samples], [s[name] for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    return round(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread, 2) if spread else None


def rss_summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    """Start, peak and end of each field, and the growth rate in the first and the second half of the run:
    memory that levels off grows much slower in the second half."""
    if not samples:
        return {}
    half = len(samples) // 2
    out: dict[str, Any] = {}
    for name in RssSampler.FIELDS:
        out[name] = {
            "start_mb": samples[0][name],
            "peak_mb": max(s[name] for s in samples),
            "end_mb": samples[-1][name],
            "first_half_mb_per_min": slope_mb_per_min(samples[: half + 1], name),
            "second_half_mb_per_min": slope_mb_per_min(samples[half:], name),
        }
    return out


def verify(http: httpx2.Client, results: list[ClientResult]) -> dict[str, Any]:
    """Every acknowledged batch at its seq with its payloads, every conversation gapless; every acknowledged
    memory fetchable with its content."""
    lost_batches, bad_logs, lost_memories, items = 0, [], 0, 0
    for result in results:
        by_conversation: dict[str, list[tuple[int, int, int]]] = {}
        for conversation, first, count, batch in result.appends:
            by_conversation.setdefault(conversation, []).append((first, count, batch))
        for n in range(CONVERSATIONS_PER_CLIENT):
            conversation = conversation_of(result.client, n)
            stored = replay(http, conversation)
            items += len(stored)
            if [item["seq"] for item in stored] != list(range(len(stored))):
                bad_logs.append(f"{conversation}: seq not gapless from 0")
            for first, count, batch in by_conversation.get(conversation, []):
                got = [item["payload"] for item in stored[first : first + count]]
                if got != [payload(result.client, batch, p) for p in range(BATCH)]:
                    lost_batches += 1
        for reference, content, _ in result.memories:
            response = http.get(f"/v1/memories/{reference}")
            if response.status_code != 200 or response.json()["content"] != content:
                lost_memories += 1
    return {
        "batches_checked": sum(len(r.appends) for r in results),
        "batches_lost": lost_batches,
        "log_items_stored": items,
        "logs_not_gapless": bad_logs,
        "memories_checked": sum(len(r.memories) for r in results),
        "memories_lost": lost_memories,
    }


def replay(http: httpx2.Client, conversation: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        page = http.get(f"/v1/conversations/{conversation}/items", params={"offset": len(items), "limit": 1000}).json()[
            "items"
        ]
        items += page
        if len(page) < 1000:
            return items


def latency_summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    if not ordered:
        return {}
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def run(
    data_dir: Path,
    *,
    seconds: float,
    clients: int,
    processes: bool = False,
    sample_s: float = 5.0,
    database_url: str | None = None,
    weights: dict[str, int] | None = None,
    server_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Start a server on `data_dir`, soak it, check it; the report (see the module docstring). `server_env`:
    more environment for the server process (e.g. MALLOC_ARENA_MAX, to compare allocators' settings)."""
    env = {**(server_env or {}), **({"MEMORY_DATABASE_URL": database_url} if database_url else {})}
    mix = weights or dict(WEIGHTS)
    with Server(data_dir, env=env) as server:
        assert server.proc is not None
        pool: Callable[..., Executor] = ProcessPoolExecutor if processes else ThreadPoolExecutor
        deadline = time.time() + seconds
        jobs = [ClientJob(n, server.base, server.secret, deadline, seed=1000 + n, weights=mix) for n in range(clients)]
        with RssSampler(server.proc.pid, sample_s) as sampler, pool(max_workers=clients) as executor:
            results = list(executor.map(run_client, jobs))
        with httpx2.Client(base_url=server.base, auth=(SITE, server.secret), timeout=120) as http:
            checked = verify(http, results)
        log = server.log_path.read_text(errors="replace")
    operations: dict[str, Any] = {}
    for op in mix:
        statuses: dict[str, int] = {}
        for result in results:
            for status, count in result.statuses.get(op, {}).items():
                statuses[status] = statuses.get(status, 0) + count
        samples = [s for result in results for s in result.latencies.get(op, [])]
        operations[op] = {
            "requests": sum(statuses.values()),
            "statuses": dict(sorted(statuses.items())),
            **latency_summary(samples),
        }
    five_xx = sum(
        count for op in operations.values() for status, count in op["statuses"].items() if status.startswith("5")
    )
    return {
        "machine": f"{os.cpu_count()} cores",
        "storage": "postgres" if database_url else "sqlite",
        "seconds": seconds,
        "clients": clients,
        "clients_are": "processes" if processes else "threads",
        "mix": mix,
        "server_env": server_env or {},
        "operations": operations,
        "five_xx": five_xx,
        "five_xx_samples": [s for result in results for s in result.five_xx][:FIVE_XX_SAMPLES],
        "transport_errors": sum(r.transport_errors for r in results),
        "remembers_not_created": sum(1 for r in results for _, _, created in r.memories if not created),
        "tracebacks": log.count("Traceback (most recent call last)"),
        "verified": checked,
        "rss": rss_summary(sampler.samples),
        "rss_samples": sampler.samples,
    }


def failed(report: dict[str, Any]) -> bool:
    checked = report["verified"]
    return bool(
        report["five_xx"]
        or report["tracebacks"]
        or report["transport_errors"]
        or checked["batches_lost"]
        or checked["memories_lost"]
        or checked["logs_not_gapless"]
    )


def table(report: dict[str, Any], *, curve_points: int = 12) -> str:
    lines = [
        f"soak: {report['storage']}, {report['clients']} client {report['clients_are']}, {report['seconds']:g} s"
        f" ({report['machine']})",
        "",
        "| operation | requests | 2xx | 4xx | 5xx | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op, data in report["operations"].items():
        by_class = {k: sum(c for s, c in data["statuses"].items() if s.startswith(k)) for k in "245"}
        lines.append(
            f"| {op} | {data['requests']} | {by_class['2']} | {by_class['4']} | {by_class['5']} |"
            f" {data.get('p50_ms', '')} | {data.get('p95_ms', '')} | {data.get('max_ms', '')} |"
        )
    checked = report["verified"]
    lines += [
        "",
        f"checked: {checked['batches_checked']} acknowledged batches ({checked['batches_lost']} lost, "
        f"{checked['log_items_stored']} items stored), {checked['memories_checked']} acknowledged memories "
        f"({checked['memories_lost']} lost); 5xx: {report['five_xx']}; tracebacks in the server log: "
        f"{report['tracebacks']}",
        "",
        "| t s | VmRSS MB | RssAnon MB | RssFile MB |",
        "|---|---|---|---|",
    ]
    samples = report["rss_samples"]
    step = max(1, len(samples) // curve_points)
    for sample in samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else []):
        lines.append(
            f"| {sample['t_s']:g} | {sample.get('VmRSS', '')} | {sample.get('RssAnon', '')} |"
            f" {sample.get('RssFile', '')} |"
        )
    rss = report["rss"]
    if rss:
        lines += [
            "",
            "growth MB/min (first half -> second half): "
            + ", ".join(
                f"{name} {rss[name]['first_half_mb_per_min']} -> {rss[name]['second_half_mb_per_min']}"
                for name in RssSampler.FIELDS
            ),
        ]
    return "\n".join(lines)


def parse_mix(text: str) -> dict[str, int]:
    mix = {name.strip(): int(weight) for name, _, weight in (part.partition("=") for part in text.split(","))}
    unknown = set(mix) - set(WEIGHTS)
    if unknown or not any(mix.values()):
        raise argparse.ArgumentTypeError(f"operations are {', '.join(WEIGHTS)}, with a weight each")
    return mix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--processes", action="store_true", help="each client in a process of its own")
    parser.add_argument("--storage", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--mix",
        type=parse_mix,
        default=dict(WEIGHTS),
        help="operation weights, e.g. append=1,remember=1 (operations left out are not run)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server process",
    )
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server_env = dict(item.split("=", 1) for item in args.server_env)
        kwargs = dict(
            seconds=args.seconds,
            clients=args.clients,
            processes=args.processes,
            sample_s=args.sample_s,
            weights=args.mix,
            server_env=server_env,
        )
        if args.storage == "postgres":
            from bench.postgres import private_server

            with private_server() as url:
                report = run(Path(tmp) / "data", database_url=url, **kwargs)
        else:
            report = run(Path(tmp) / "data", **kwargs)
    print(json.dumps(report, indent=2))
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    sys.exit(1 if failed(report) else 0)


if __name__ == "__main__":
    main()
