"""Many sites writing at once on PostgreSQL: memories saved per second by 1 site and by N sites, this tree
against another checkout (`--against DIR`, e.g. `git archive HEAD | tar -x -C DIR`), in the same run.

Each case gets a fresh database on a private PostgreSQL server (production durability: fsync,
synchronous_commit on) and two server replicas (`memory-server serve`, each with its own embedded index,
following the change feed). Writer processes save memories through the storage layer with their vectors
given (random unit vectors recorded as the bundled model's, so the replicas index them and nothing is
embedded): the model is not the bound. Each writer saves one memory a transaction, to its sites in turn.
Reported: memories committed per second while writing, and how long the replicas took afterwards to hold
every change.

    python bench/sites.py [--against DIR] [--sites 1,50] [--writers 8] [--seconds 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
done, deadline, n = 0, time.monotonic() + float(seconds), 0
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
print(done)
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


def run_case(tree: Path, sites: int, writers: int, seconds: float, work: Path) -> dict[str, Any]:
    with private_server() as url:
        made = child(tree, url, work / "setup", "sites", str(sites), "0", "0")
        out, err = made.communicate(timeout=300)
        if made.returncode != 0:
            raise RuntimeError(err)
        site_ids = json.loads(out)
        replicas = [replica(tree, url, work / f"replica{n}") for n in range(2)]
        try:
            for _, port in replicas:
                wait_ready(port)
            started = time.monotonic()
            procs = [
                child(tree, url, work / f"writer{w}", "write", json.dumps(site_ids), str(seconds), str(w))
                for w in range(writers)
            ]
            counts = []
            for proc in procs:
                out, err = proc.communicate(timeout=seconds + 300)
                if proc.returncode != 0:
                    raise RuntimeError(err)
                counts.append(int(out.strip().splitlines()[-1]))
            written = time.monotonic() - started
            total = changes(url)
            deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
            while any(followed(work / f"replica{n}") < total for n in range(2)) and time.monotonic() < deadline:
                time.sleep(0.1)
            caught_up = time.monotonic() - started - written
        finally:
            for server, _ in replicas:
                server.terminate()
                server.wait(timeout=30)
    return {
        "sites": sites,
        "writers": writers,
        "memories": sum(counts),
        "per_second": round(sum(counts) / seconds, 1),
        "replicas_caught_up_s": round(caught_up, 2),
        "wall_s": round(written, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout, measured in the same run")
    parser.add_argument("--sites", default="1,50")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    results = []
    for label, tree in trees.items():
        for sites in (int(s) for s in args.sites.split(",")):
            with tempfile.TemporaryDirectory(prefix="bench-sites-") as work:
                case = run_case(tree, sites, args.writers, args.seconds, Path(work))
            results.append({"tree": label, **case})
            print(
                f"{label:10} {sites:3} sites  {case['per_second']:8.1f} memories/s  "
                f"replicas caught up {case['replicas_caught_up_s']} s after",
                flush=True,
            )
    report = {"writers": args.writers, "seconds": args.seconds, "results": results}
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
