"""Soak: mixed load from several clients against a real `memory-server serve` process for a bounded time.

    python bench/soak.py [--seconds 300] [--clients 6] [--processes] [--storage sqlite|postgres]
                         [--mix append=35,remember=20,recall=15,search=15,tail=15] [--server-env NAME=VALUE]...
                         [--sample-s 5] [--max-memories N] [--max-log-items N]
                         [--probe DIR [--probe-every-s 60] [--tracemalloc-frames N]] [--json OUT]

A server on a fresh data directory (bench/serverproc.py: the site made with the CLI, `serve` as a child
process, its log in a file). Each client, a thread (or with `--processes` a process of its own), talks REST
over its own keep-alive connection and loops until the time is up, picking at random: append a batch of 10
items (with an idempotency key) to one of its conversations, remember a new memory, recall, search, and read
the tail of a conversation. Nothing is retried: every answer counts.

A sampler reads the server's /proc/PID/status every `--sample-s` seconds (VmRSS, RssAnon: the heap and other
private memory; RssFile: mapped files, the model and SQLite's and the index's pages in the page cache).
`--max-memories` and `--max-log-items` hold the data at a steady size once reached (a client past its share
forgets its oldest memory after each remember, and deletes a full conversation to start a new one), so that
memory growing with the data can be told from memory growing without it. `--probe DIR` serves through
bench/memprobe.py, which writes what the server's memory holds to DIR every `--probe-every-s`.

Afterwards every acknowledged write is checked: each conversation is replayed whole (seq gapless from 0, each
acknowledged batch at its seq with its payloads) and each acknowledged memory is fetched by reference. Counted:
answers by status per operation, 5xx answers (with samples of their bodies), tracebacks in the server's log.
Prints JSON and a table; exits 1 if a write was lost, a 5xx was answered or a traceback was logged.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
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
    memory_cap: int | None = None  # this client's memories kept: past it, each remember forgets its oldest
    items_cap: int | None = None  # items per conversation: past it, the conversation is deleted and started anew


@dataclass
class ClientResult:
    client: int
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)  # op -> status -> count
    latencies: dict[str, list[float]] = field(default_factory=dict)  # op -> seconds
    appends: list[tuple[str, int, int, int]] = field(default_factory=list)  # (conversation, first_seq, count, batch)
    memories: list[tuple[str, str, bool]] = field(default_factory=list)  # (reference, content, created)
    conversations: list[str] = field(default_factory=list)  # those not deleted: what is checked afterwards
    forgotten: int = 0
    capped_at: float | None = None  # time.time() when this client's data first reached its caps
    five_xx: list[str] = field(default_factory=list)
    transport_errors: int = 0


def conversation_of(client: int, n: int, generation: int = 0) -> str:
    """A client's n-th conversation; a later generation after the earlier one was deleted (`items_cap`)."""
    return f"soak-client-{client:02d}-conv-{n}" + (f"-g{generation}" if generation else "")


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
    generations = [0] * CONVERSATIONS_PER_CLIENT
    items = [0] * CONVERSATIONS_PER_CLIENT
    with httpx2.Client(base_url=job.base, auth=(SITE, job.secret), timeout=120) as http:

        def call(op: str, method: str, path: str, body: dict[str, Any] | None) -> httpx2.Response | None:
            started = time.perf_counter()
            try:
                response = http.request(method, path, json=body)
            except httpx2.HTTPError:
                result.transport_errors += 1
                return None
            result.latencies.setdefault(op, []).append(time.perf_counter() - started)
            statuses = result.statuses.setdefault(op, {})
            statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1
            if response.status_code >= 500 and len(result.five_xx) < FIVE_XX_SAMPLES:
                result.five_xx.append(f"{op} {response.status_code}: {response.text[:300]}")
            return response

        while time.time() < job.deadline:
            op = rng.choices(ops, weights)[0]
            n = rng.randrange(CONVERSATIONS_PER_CLIENT)
            conversation = conversation_of(job.client, n, generations[n])
            if (
                op == "append"
                and job.items_cap is not None
                and items[n] + BATCH > share(job.items_cap, n, generations[n])
            ):
                # At the cap: the conversation goes and a new one of the same size takes its place.
                deleted = call("delete_log", "DELETE", f"/v1/conversations/{conversation}", None)
                if deleted is None or deleted.status_code != 200:
                    continue
                result.appends = [a for a in result.appends if a[0] != conversation]
                generations[n] += 1
                items[n] = 0
                conversation = conversation_of(job.client, n, generations[n])
            if op == "append":
                body = {
                    "items": [payload(job.client, batches, p) for p in range(BATCH)],
                    "idempotency_key": f"c{job.client}-b{batches}",
                }
                response = call(op, "POST", f"/v1/conversations/{conversation}/items", body)
                if response is not None and response.status_code == 201:
                    ack = response.json()
                    result.appends.append((conversation, ack["first_seq"], ack["count"], batches))
                    items[n] += ack["count"]
                batches += 1
            elif op == "remember":
                content = memory_text(rng, job.client, remembered)
                memory = {"content": content, "type": "note", "tags": [f"c{job.client}"]}
                response = call(op, "POST", "/v1/memories", memory)
                if response is not None and response.status_code in (200, 201):
                    ack = response.json()
                    result.memories.append((ack["reference"], content, bool(ack["created"])))
                remembered += 1
                if job.memory_cap is not None and len(result.memories) > job.memory_cap:
                    oldest = result.memories[0][0]
                    forgotten = call("forget", "DELETE", f"/v1/memories/{oldest}", None)
                    if forgotten is not None and forgotten.status_code == 200:
                        result.memories.pop(0)
                        result.forgotten += 1
            elif op == "recall":
                call(op, "POST", "/v1/recall", {"query": query_text(rng), "limit": 5})
            elif op == "search":
                call(op, "POST", "/v1/search", {"query": query_text(rng), "limit": 10, "min_score": 0.2})
            else:
                call(op, "GET", f"/v1/conversations/{conversation}/items?count=50", None)
            if result.capped_at is None and capped(job, len(result.memories), generations):
                result.capped_at = time.time()
    result.conversations = [conversation_of(job.client, n, g) for n, g in enumerate(generations)]
    return result


def share(items_cap: int, n: int, generation: int) -> int:
    """The items conversation `n` holds before it is deleted: its first generation a part of the cap, so that
    a client's conversations are deleted in turn rather than all at once."""
    return items_cap if generation else max(BATCH, items_cap * (n + 1) // CONVERSATIONS_PER_CLIENT)


def capped(job: ClientJob, memories: int, generations: list[int]) -> bool:
    """Whether the client's data has reached the size it is held at: its memories at their cap and each of its
    conversations deleted once (never without both caps)."""
    if job.memory_cap is None or job.items_cap is None:
        return False
    return memories >= job.memory_cap and min(generations) > 0


class RssSampler:
    """The server's memory, from /proc/PID/status, every `every_s` seconds on a thread of its own; with
    `probe_every_s`, a SIGUSR1 to the server that often (bench/memprobe.py writes a probe then)."""

    FIELDS = ("VmRSS", "RssAnon", "RssFile")

    def __init__(self, pid: int, every_s: float, *, probe_every_s: float | None = None) -> None:
        self.pid = pid
        self.every_s = every_s
        self.probe_every_s = probe_every_s
        self._probed = -math.inf
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
                if self.probe_every_s is not None and time.monotonic() - self._probed >= self.probe_every_s:
                    self._probed = time.monotonic()
                    os.kill(self.pid, signal.SIGUSR1)
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
    """Start, peak and end of each field, its value half-way through the run and its change from there to the
    end, and the growth rate in the first and the second half of the run: memory that levels off grows much
    slower in the second half."""
    if not samples:
        return {}
    half = len(samples) // 2
    middle = min(samples, key=lambda s: abs(s["t_s"] - samples[-1]["t_s"] / 2))
    out: dict[str, Any] = {}
    for name in RssSampler.FIELDS:
        out[name] = {
            "start_mb": samples[0][name],
            "peak_mb": max(s[name] for s in samples),
            "middle_mb": middle[name],
            "middle_t_s": middle["t_s"],
            "end_mb": samples[-1][name],
            "second_half_change_pct": round(100 * (samples[-1][name] - middle[name]) / middle[name], 1),
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
        for conversation in result.conversations:
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
    max_memories: int | None = None,
    max_log_items: int | None = None,
    probe: Path | None = None,
    probe_every_s: float = 60.0,
    tracemalloc_frames: int = 0,
) -> dict[str, Any]:
    """Start a server on `data_dir`, soak it, check it; the report (see the module docstring). `server_env`:
    more environment for the server process (e.g. MALLOC_ARENA_MAX, to compare allocators' settings).
    `max_memories`, `max_log_items`: the data is held at that size once reached (split evenly between the
    clients and their conversations). `probe`: a directory the server writes memory probes to (bench/memprobe.py)
    every `probe_every_s`, with tracemalloc's allocation sites when `tracemalloc_frames` > 0."""
    env = {**(server_env or {}), **({"MEMORY_DATABASE_URL": database_url} if database_url else {})}
    if probe is not None:
        env.update(MEMPROBE_DIR=str(probe), MEMPROBE_FRAMES=str(tracemalloc_frames))
    mix = weights or dict(WEIGHTS)
    memory_cap = max(1, max_memories // clients) if max_memories else None
    items_cap = max(BATCH, max_log_items // (clients * CONVERSATIONS_PER_CLIENT)) if max_log_items else None
    with Server(data_dir, env=env, module="bench.memprobe" if probe is not None else "memory_server") as server:
        assert server.proc is not None
        pool: Callable[..., Executor] = ProcessPoolExecutor if processes else ThreadPoolExecutor
        started = time.time()
        deadline = started + seconds
        jobs = [
            ClientJob(
                n,
                server.base,
                server.secret,
                deadline,
                seed=1000 + n,
                weights=mix,
                memory_cap=memory_cap,
                items_cap=items_cap,
            )
            for n in range(clients)
        ]
        probing = probe_every_s if probe is not None else None
        with (
            RssSampler(server.proc.pid, sample_s, probe_every_s=probing) as sampler,
            pool(max_workers=clients) as executor,
        ):
            results = list(executor.map(run_client, jobs))
        if probe is not None:  # a last probe after malloc_trim: what it gives back was free heap
            os.kill(server.proc.pid, signal.SIGUSR2)
            time.sleep(5)
        with httpx2.Client(base_url=server.base, auth=(SITE, server.secret), timeout=120) as http:
            checked = verify(http, results)
        log = server.log_path.read_text(errors="replace")
    operations: dict[str, Any] = {}
    for op in [*mix, *(["forget"] if memory_cap else []), *(["delete_log"] if items_cap else [])]:
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
        "max_memories": max_memories,
        "max_log_items": max_log_items,
        "data_steady_at_s": steady_at(results, started),
        "memories_forgotten": sum(r.forgotten for r in results),
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


def steady_at(results: list[ClientResult], started: float) -> float | None:
    """Seconds into the run when the last client's data reached its caps; None if one never did."""
    if not results or any(r.capped_at is None for r in results):
        return None
    return round(max(r.capped_at or 0.0 for r in results) - started, 1)


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
        f"data held at {report['max_memories']} memories and {report['max_log_items']} log items from "
        f"{report['data_steady_at_s']} s ({report['memories_forgotten']} memories forgotten)",
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
    parser.add_argument(
        "--max-memories", type=int, help="hold the memories at this many: past it each remember forgets the oldest"
    )
    parser.add_argument(
        "--max-log-items",
        type=int,
        help="hold the log items at about this many: a conversation past its share is deleted and started anew",
    )
    parser.add_argument("--probe", type=Path, help="a directory for the server's memory probes (bench/memprobe.py)")
    parser.add_argument("--probe-every-s", type=float, default=60.0)
    parser.add_argument(
        "--tracemalloc-frames", type=int, default=0, help="with --probe: trace allocations, this many frames deep"
    )
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
            max_memories=args.max_memories,
            max_log_items=args.max_log_items,
            probe=args.probe,
            probe_every_s=args.probe_every_s,
            tracemalloc_frames=args.tracemalloc_frames,
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
