"""Many sites writing at once on PostgreSQL: memories saved per second by 1 site and by N sites, this tree
against another checkout (`--against DIR`, e.g. `git archive HEAD | tar -x -C DIR`), in the same run.

Each case gets a fresh database on a private PostgreSQL server (production durability: fsync,
synchronous_commit on) and two server replicas (`--replicas`; `memory-server serve`, each with its own
embedded index, following the change feed). Writer processes save memories through the storage layer with
their vectors given (random unit vectors recorded as the bundled model's, so the replicas index them and
nothing is embedded): the model is not the bound. Each writer saves one memory a transaction, to its sites in
turn. The writers first write for `--warm-up` seconds and the tables are analysed, as autovacuum does in a
store's first minute; the replicas then catch up, and the measured run starts. Reported: memories committed
per second while writing, the CPU each memory cost (writers, replicas, the rest: the database mostly), and how
long the replicas took afterwards to hold every change.

    python bench/sites.py [--against DIR] [--sites 1,50] [--writers 8] [--replicas 2] [--warm-up 5]
                          [--seconds 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.perf import process_cpu_seconds  # noqa: E402
from bench.postgres import private_server  # noqa: E402
from bench.serverproc import child_env, free_port  # noqa: E402

MODEL, DIM = "multilingual-e5-small", 384  # the bundled model's name and size, as the replicas' index records
CATCH_UP_TIMEOUT_S = 300.0

# Run in a checkout (its code, whatever version): create the sites, or save memories for a while.
CHILD = """
import json, sys, time
import numpy as np
from pathlib import Path
from memory_server.ranking.lexical import analyzed_text
from memory_server.settings import Settings
from memory_server.storage.factory import open_storage
from memory_server.storage.records import Document, NewMemory, Words

url, data_dir, model, dim, mode, arg, seconds, writer = sys.argv[1:]
storage = open_storage(Settings(data_dir=Path(data_dir), database_url=url))
if mode == "sites":
    print(json.dumps([storage.sites.create_site(f"site{n:03d}", "hash") for n in range(int(arg))]))
    storage.close()
    sys.exit(0)
sites, writer = json.loads(arg), int(writer)
rng = np.random.default_rng(writer)
words = "budget review coffee machine release train backup schedule design critique garden harbor".split()
done, deadline, n, cpu = 0, time.monotonic() + float(seconds), 0, time.process_time()
while time.monotonic() < deadline:
    site_id = sites[(writer + n) % len(sites)]
    text = f"Writer {writer} note {n}: " + " ".join(rng.choice(words, 8))
    vector = rng.standard_normal(int(dim)).astype(np.float32)
    memory = NewMemory(content=text, type="note", location=None, project=None, team=None, bucket="default",
                       tags=(), metadata={}, provenance={}, occurred_at="2024-05-01T10:00:00.000000Z")
    document = Document(vector=vector / np.linalg.norm(vector), model=model, terms=analyzed_text(text))
    storage.memories.insert(site_id, [(memory, document, None)], Words())
    done, n = done + 1, n + 1
storage.close()
print(done, time.process_time() - cpu)
"""


def child(tree: Path, url: str, data_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(data_dir), MODEL, str(DIM), *args],
        cwd=tree,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def replica(tree: Path, url: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with open(data_dir.parent / f"{data_dir.name}.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memory_server", "serve", "--port", str(port), "--data-dir", str(data_dir)],
            cwd=tree,
            env=child_env(MEMORY_DATABASE_URL=url),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    return proc, port


def wait_ready(port: int) -> None:
    import httpx

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"replica on port {port} not ready")


def machine_cpu_seconds() -> float:
    """CPU time every core has spent busy since boot (Linux: /proc/stat, idle and iowait left out)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def followed(data_dir: Path) -> int:
    """How many changes a replica's index holds (its follow state's total)."""
    try:
        return int(json.loads((data_dir / "index" / "follow.json").read_text())["mark"])
    except (OSError, ValueError, KeyError):
        return -1


def changes(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT seq FROM memory_change_counter").fetchone()
    return int(row[0]) if row else 0


def wait_caught_up(url: str, work: Path, replicas: int) -> None:
    """Wait (up to CATCH_UP_TIMEOUT_S) until every replica's index holds every change made so far."""
    total = changes(url)
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while any(followed(work / f"replica{n}") < total for n in range(replicas)) and time.monotonic() < deadline:
        time.sleep(0.1)


def write(
    tree: Path, url: str, work: Path, site_ids: list[int], writers: int, seconds: float, first: int
) -> tuple[list[int], float]:
    """Memories saved by `writers` processes for `seconds` (writer numbers from `first`, so no text repeats),
    and the CPU seconds the writers spent."""
    procs = [
        child(tree, url, work / f"writer{w}", "write", json.dumps(site_ids), str(seconds), str(w))
        for w in range(first, first + writers)
    ]
    counts: list[int] = []
    writing = 0.0
    for proc in procs:
        out, err = proc.communicate(timeout=seconds + 300)
        if proc.returncode != 0:
            raise RuntimeError(err)
        done, cpu = out.strip().splitlines()[-1].split()
        counts.append(int(done))
        writing += float(cpu)
    return counts, writing


def analyze(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def run_case(
    tree: Path, sites: int, writers: int, seconds: float, work: Path, replicas: int = 2, warm_up: float = 0.0
) -> dict[str, Any]:
    with private_server() as url:
        made = child(tree, url, work / "setup", "sites", str(sites), "0", "0")
        out, err = made.communicate(timeout=300)
        if made.returncode != 0:
            raise RuntimeError(err)
        site_ids = json.loads(out)
        if warm_up:
            # A store past its first minute: autovacuum has analysed the tables the warm-up filled, so the
            # plans each connection keeps are made with their statistics, not those of empty tables.
            write(tree, url, work, site_ids, writers, warm_up, first=writers)
            analyze(url)
        followers = [replica(tree, url, work / f"replica{n}") for n in range(replicas)]
        try:
            for _, port in followers:
                wait_ready(port)
            wait_caught_up(url, work, replicas)
            started, busy = time.monotonic(), machine_cpu_seconds()
            following = [process_cpu_seconds(server.pid) for server, _ in followers]
            counts, writing = write(tree, url, work, site_ids, writers, seconds, first=0)
            written = time.monotonic() - started
            busy = machine_cpu_seconds() - busy
            following = [
                process_cpu_seconds(server.pid) - f for (server, _), f in zip(followers, following, strict=True)
            ]
            wait_caught_up(url, work, replicas)
            caught_up = time.monotonic() - started - written
        finally:
            for server, _ in followers:
                server.terminate()
                server.wait(timeout=30)
    return {
        "sites": sites,
        "writers": writers,
        "memories": sum(counts),
        "per_second": round(sum(counts) / seconds, 1),
        "replicas_caught_up_s": round(caught_up, 2),
        # CPU a memory cost while writing: the writers' own, the replicas', and the rest (the database, mostly)
        "cpu_ms_per_memory": {
            "writers": round(writing * 1000 / sum(counts), 3),
            "replicas": round(sum(following) * 1000 / sum(counts), 3),
            "rest": round((busy - writing - sum(following)) * 1000 / sum(counts), 3),
        },
        "wall_s": round(written, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout, measured in the same run")
    parser.add_argument("--sites", default="1,50")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--warm-up",
        type=float,
        default=5.0,
        help="seconds of writing, then ANALYZE, before the measured run (0: measure a fresh, unanalysed store)",
    )
    parser.add_argument(
        "--replicas", type=int, default=2, help="server replicas following the feed (0: the database alone)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    results = []
    for label, tree in trees.items():
        for sites in (int(s) for s in args.sites.split(",")):
            with tempfile.TemporaryDirectory(prefix="bench-sites-") as work:
                case = run_case(tree, sites, args.writers, args.seconds, Path(work), args.replicas, args.warm_up)
            results.append({"tree": label, **case})
            print(
                f"{label:10} {sites:3} sites  {case['per_second']:8.1f} memories/s  "
                f"replicas caught up {case['replicas_caught_up_s']} s after; CPU ms a memory: "
                f"{case['cpu_ms_per_memory']}",
                flush=True,
            )
    report = {
        "writers": args.writers,
        "replicas": args.replicas,
        "warm_up_s": args.warm_up,
        "seconds": args.seconds,
        "results": results,
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
