"""memory_client benchmarks (`make bench-client`): record() latency and recorder throughput. JSON + a table.

    python bench/client.py [--records 20000] [--items 50000] [--batch 100,500] [--runs 3] [--json OUT]

- `record()` latency, per call, while the server is down (nothing listens on the port: every append the
  worker tries is refused and retried) and while it is up (the worker delivering as the loop records),
  with the in-memory buffer and with a SQLite spool. Target: p99 under 1 ms while the server is down.
- Throughput through one recorder to a `memory-server serve` process: `--items` recorded as fast as
  possible, until `flush()` says all are acknowledged; beside the baseline measured in the same run
  against the same server: a plain loop of appends of the same batch size over one keep-alive httpx
  connection (the fastest one client can append by itself, waiting on each acknowledgement). Runs
  alternate between the two and the median is reported. Target: within 20% of the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "client")]

import httpx  # noqa: E402

from memory_client import Client, Recorder  # noqa: E402

from bench.perf import Server, socket_port  # noqa: E402


def item(i: int) -> dict[str, Any]:
    """A conversation turn of ~200 bytes serialized."""
    return {
        "role": "user" if i % 2 else "assistant",
        "turn": i,
        "content": f"message {i}: " + "the quick brown fox jumps over the lazy dog " * 4,
    }


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)

    def at(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] / 1000, 1)

    return {
        "n": len(ordered),
        "p50_us": at(0.5),
        "p99_us": at(0.99),
        "p999_us": at(0.999),
        "max_us": round(ordered[-1] / 1000, 1),
    }


def record_latency(recorder: Recorder, n: int, offset: int = 0) -> dict[str, float]:
    samples = []
    clock = time.perf_counter_ns
    for i in range(offset, offset + n):
        payload = item(i)
        start = clock()
        recorder.record(payload)
        samples.append(clock() - start)
    return percentiles(samples)


def latency_down(tmp: Path, records: int) -> dict[str, Any]:
    with socket_port() as port:
        pass  # a port nothing listens on
    out: dict[str, Any] = {}
    with Client(f"http://127.0.0.1:{port}", auth=("bench", "x")) as client:
        for name, spool in (("memory", None), ("spool", tmp / "down.db")):
            recorder = client.recorder(f"bench-down-{name}", spool=spool, max_buffer_items=10 * records)
            record_latency(recorder, 1000)  # warm-up
            out[name] = record_latency(recorder, records, 1000)
            out[name]["worker_retries"] = recorder.stats().retries
            recorder.close(timeout=0)
    return out


def latency_up(server: Server, tmp: Path, records: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with Client(server.url, auth=("bench", server.secret)) as client:
        for name, spool in (("memory", None), ("spool", tmp / "up.db")):
            recorder = client.recorder(f"bench-up-{name}", spool=spool)
            record_latency(recorder, 1000)
            out[name] = record_latency(recorder, records, 1000)
            assert recorder.flush(120)
            out[name]["batches"] = recorder.stats().batches
            recorder.close()
    return out


def recorder_run(
    server: Server, tmp: Path, cid: str, items: list[dict[str, Any]], batch: int, spool: Path | None
) -> float:
    with Client(server.url, auth=("bench", server.secret)) as client:
        recorder = client.recorder(cid, spool=spool, max_batch_items=batch, max_buffer_items=len(items) + 1)
        start = time.perf_counter()
        for payload in items:
            recorder.record(payload)
        assert recorder.flush(300), recorder.stats()
        elapsed = time.perf_counter() - start
        stats = recorder.stats()
        assert stats.acked == len(items) and stats.dead == 0, stats
        recorder.close()
        got = client.tail(cid, 1)
        assert got and got[0].seq == len(items) - 1 and got[0].payload == items[-1]
    return len(items) / elapsed


def baseline_run(server: Server, cid: str, items: list[dict[str, Any]], batch: int) -> float:
    """A plain loop of appends, each waiting on its acknowledgement, over one keep-alive connection."""
    with httpx.Client(base_url=server.url, headers={"authorization": server.auth}, timeout=60) as http:
        start = time.perf_counter()
        for at in range(0, len(items), batch):
            response = http.post(
                f"/v1/conversations/{cid}/items",
                json={"items": items[at : at + batch], "idempotency_key": f"{cid}-{at}"},
            )
            if response.status_code != 201:
                raise RuntimeError(response.text)
        elapsed = time.perf_counter() - start
    return len(items) / elapsed


def runners(server: Server, tmp: Path, items: list[dict[str, Any]], batch: int) -> dict[str, Callable[[str], float]]:
    """The three ways compared, each given a fresh conversation id: items appended per second."""
    return {
        "baseline_plain_appends": lambda cid: baseline_run(server, cid, items, batch),
        "recorder_memory": lambda cid: recorder_run(server, tmp, cid, items, batch, None),
        "recorder_spool": lambda cid: recorder_run(server, tmp, cid, items, batch, tmp / f"{cid}.db"),
    }


def throughput(server: Server, tmp: Path, n: int, batches: list[int], runs: int) -> dict[str, Any]:
    items = [item(i) for i in range(n)]
    out: dict[str, Any] = {}
    counter = iter(range(10**6))
    for batch in batches:
        results: dict[str, list[float]] = {"baseline_plain_appends": [], "recorder_memory": [], "recorder_spool": []}
        for _ in range(runs):  # interleaved, so drift on a shared machine hits all three alike
            for name, run in runners(server, tmp, items, batch).items():
                results[name].append(run(f"bench-tp-{batch}-{next(counter)}"))
        medians = {name: round(statistics.median(values)) for name, values in results.items()}
        base = medians["baseline_plain_appends"]
        out[str(batch)] = {
            "items_per_s": medians,
            "runs": {name: [round(v) for v in values] for name, values in results.items()},
            "recorder_memory_vs_baseline": round(medians["recorder_memory"] / base, 3),
            "recorder_spool_vs_baseline": round(medians["recorder_spool"] / base, 3),
        }
    return out


def table(report: dict[str, Any]) -> str:
    lines = ["", f"memory_client ({report['machine']})", ""]
    for state in ("down", "up"):
        for name, s in report[f"record_latency_server_{state}"].items():
            lines.append(
                f"record(), server {state:<4} {name:<7} p50 {s['p50_us']:>7} us  p99 {s['p99_us']:>7} us"
                f"  p99.9 {s['p999_us']:>7} us  max {s['max_us']:>8} us  (n={s['n']})"
            )
    lines.append("")
    for batch, t in report["throughput"].items():
        m = t["items_per_s"]
        lines.append(
            f"batches of {batch:>4}: plain appends {m['baseline_plain_appends']:>7} items/s | recorder "
            f"memory {m['recorder_memory']:>7} ({t['recorder_memory_vs_baseline']:.2f}x) | spool "
            f"{m['recorder_spool']:>7} ({t['recorder_spool_vs_baseline']:.2f}x)"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000, help="record() calls timed per case")
    parser.add_argument("--items", type=int, default=50_000, help="items per throughput run")
    parser.add_argument("--batch", default="100,500", help="batch sizes (max_batch_items) to compare")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": f"{os.cpu_count()} cores, {sys.platform}, Python {sys.version.split()[0]}"}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        report["record_latency_server_down"] = latency_down(tmp, args.records)
        server = Server(tmp / "data")
        server.start()
        try:
            report["record_latency_server_up"] = latency_up(server, tmp, args.records)
            report["throughput"] = throughput(
                server, tmp, args.items, [int(b) for b in args.batch.split(",")], args.runs
            )
        finally:
            server.stop()
    print(json.dumps(report, indent=2))
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
