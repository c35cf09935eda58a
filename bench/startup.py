"""Start-up of `memory-server serve` on a store of N memories: seconds from spawning the process to `/readyz` 200,
this checkout beside another one (`--baseline TREE`, e.g. `git worktree add ../base <commit>`), started in
turn on the same data directory, `--runs` times each; medians.

The store is filled once as bench/perf.py fills it (its cached vectors) and kept in `--data` for later runs.

    python bench/startup.py [--memories 100000] [--data DIR] [--runs 5] [--baseline ../base] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serverproc import ROOT, child_env, free_port  # noqa: E402


def fill(data: Path, memories: int) -> None:
    from memory_server.embeddings.factory import load_embedder, resolve_model

    from bench.perf import load_corpus

    embedder = load_embedder(resolve_model(None, project_root=ROOT), threads=2, engine="onnx")
    print(json.dumps({k: v for k, v in load_corpus(data, embedder, memories).items() if k != "vectors"}))


def start_to_ready(tree: Path, data: Path) -> float:
    port = free_port()
    began = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "memory_server", "serve", "--port", str(port), "--data-dir", str(data)],
        cwd=tree,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while process.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    return time.monotonic() - began
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"the server in {tree} exited with code {process.returncode}")
    finally:
        process.terminate()
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--data", type=Path, default=ROOT / "bench" / ".cache" / "startup-store")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    data = args.data / str(args.memories)
    if not (data / "memory.db").exists():
        fill(data, args.memories)
    trees = {"this": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    samples: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.runs):  # in turn, so both see the same machine
        for name, tree in trees.items():
            samples[name].append(start_to_ready(tree, data))
    report: dict[str, Any] = {
        "memories": args.memories,
        **{
            name: {"median_s": round(statistics.median(s), 2), "runs_s": [round(x, 2) for x in s]}
            for name, s in samples.items()
        },
    }
    print(json.dumps(report, indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
