"""Changing the embedding model of a store: how long every memory takes to be embedded again, and recall meanwhile.

A store of N memories is filled with all-MiniLM-L6-v2 vectors (bench/perf.py's corpus, vectors cached), then a
`memory-server serve` process is started on it with the default model (multilingual-e5-small). While it embeds
every memory again in the background, a client asks `recall` through REST without pause and `/readyz` is read
every second: reported are the time to the end of the re-embedding, the memories embedded a second, and every
recall's status, latency and whether it found anything (during the re-embedding and after it), with the server's
peak memory.

    python bench/migration.py [--size 100000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2  # noqa: E402

from memory_server.embeddings.factory import load_embedder, resolve_model  # noqa: E402
from memory_server.services import PROJECT_ROOT  # noqa: E402

from bench.perf import BUCKETS, Server, corpus_text, load_corpus, summary  # noqa: E402

QUERIES = [corpus_text(i).split(" (note")[0] for i in range(0, 2000, 40)]


def ask_until(
    server: Server,
    done: threading.Event,
    samples: dict[str, list[float]],
    statuses: dict[int, int],
    notices: list[int],
    empty: dict[str, int],
) -> None:
    with httpx2.Client(timeout=30, headers={"Authorization": server.auth}) as http:
        n = 0
        while not done.is_set():
            query = QUERIES[n % len(QUERIES)]
            start = time.perf_counter()
            response = http.post(
                f"{server.url}/v1/recall", json={"query": query, "limit": 10, "bucket": f"b{n % BUCKETS:03d}"}
            )
            elapsed = time.perf_counter() - start
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code == 200:
                body = response.json()
                during = "notice" in body
                samples["during" if during else "after"].append(elapsed)
                notices.append(int(during))
                if not body["results"]:
                    empty["during" if during else "after"] += 1
            n += 1


def run(size: int) -> dict[str, Any]:
    minilm = load_embedder(resolve_model("all-MiniLM-L6-v2", project_root=PROJECT_ROOT), threads=1)
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as tmp:
        data = Path(tmp) / "data"
        loaded = load_corpus(data, minilm, size)
        loaded.pop("vectors")
        os.environ.pop("MEMORY_EMBEDDING_MODEL", None)
        server = Server(data)
        started = time.perf_counter()
        ready_seconds = server.start()
        samples: dict[str, list[float]] = {"during": [], "after": []}
        statuses: dict[int, int] = {}
        notices: list[int] = []
        empty = {"during": 0, "after": 0}
        done = threading.Event()
        asker = threading.Thread(target=ask_until, args=(server, done, samples, statuses, notices, empty), daemon=True)
        asker.start()
        progress: list[dict[str, Any]] = []
        try:
            while True:
                state = httpx2.get(f"{server.url}/readyz", timeout=30).json()
                if "reembedding" not in state:
                    break
                progress.append({"seconds": round(time.perf_counter() - started, 1), **state["reembedding"]})
                time.sleep(1.0)
            finished = time.perf_counter() - started
            time.sleep(5.0)  # recall after the end, for comparison
            done.set()
            asker.join()
            peak = server.peak_rss_mb()
        finally:
            server.stop()
    embedded = progress[-1]["total"] if progress else 0
    return {
        "memories": size,
        "store": loaded,
        "ready_seconds": round(ready_seconds, 1),
        "reembedding_seconds": round(finished, 1),
        "memories_per_second": round(embedded / finished, 1) if finished else None,
        "recall_statuses": statuses,
        "recall_empty": empty,
        "recall_during": summary(samples["during"]) if samples["during"] else None,
        "recall_after": summary(samples["after"]) if samples["after"] else None,
        "peak_rss_mb": peak,
        "progress": progress[:: max(1, len(progress) // 20)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = run(args.size)
    print(json.dumps(report, indent=2))
    print(
        f"\n{args.size:,} memories embedded again in {report['reembedding_seconds']} s "
        f"({report['memories_per_second']}/s); recall answered {report['recall_statuses']}, "
        f"with no result {report['recall_empty']}; "
        f"during p50/p99 {report['recall_during']}; after {report['recall_after']}; "
        f"peak RSS {report['peak_rss_mb']} MB"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
