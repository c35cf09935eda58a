"""LoCoMo asked of conversation logs: the same questions through `recall`, once with every turn saved by
`remember` (bench/locomo.py's protocol) and once with every session appended as a conversation log of a site
that indexes its logs, each through a `memory-server serve` process of its own (SQLite, or PostgreSQL with
--storage postgres).

The logs protocol: each session of a sample is one conversation (`<sample_id>-session-<n>`), appended as one
batch of items {"speaker", "text", "occurred_at"} (the text with " [shares <caption>]" when the turn shares
an image, the session's date as occurred_at: a transcript logged after the fact), with bucket=<sample_id>;
the site is set to `--index-logs` first. Once /readyz shows no log item waiting, each question of categories
1-4 is asked with recall(limit=10, bucket=<sample_id>, kinds=["turn"]) and a hit's dia_id is read from its
provenance (conversation_id, seq). R@5 / R@10 as bench/locomo.py computes them.

    python bench/locomo_logs.py [--data PATH] [--storage sqlite|postgres] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.locomo import CATEGORIES, DEFAULT_DATA, Question, load, score, session_time  # noqa: E402
from bench.serverproc import SITE, Server  # noqa: E402

INDEX_WAIT_S = 3600.0


def sessions(path: Path) -> tuple[list[tuple[str, str, list[dict[str, Any]]]], dict[tuple[str, int], str]]:
    """(sample_id, conversation_id, items) per session, and the dia_id of each (conversation_id, seq)."""
    logs: list[tuple[str, str, list[dict[str, Any]]]] = []
    dia: dict[tuple[str, int], str] = {}
    for sample in json.loads(path.read_text()):
        sid, conv = sample["sample_id"], sample["conversation"]
        numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        for n in numbers:
            when = session_time(conv[f"session_{n}_date_time"])
            conversation_id = f"{sid}-session-{n}"
            items = []
            for seq, turn in enumerate(conv[f"session_{n}"] or []):
                text = turn["text"] + (f" [shares {turn['blip_caption']}]" if turn.get("blip_caption") else "")
                items.append({"speaker": turn["speaker"], "text": text, "occurred_at": when})
                dia[(conversation_id, seq)] = turn["dia_id"]
            if items:
                logs.append((sid, conversation_id, items))
    return logs, dia


@contextlib.contextmanager
def authority(storage: str) -> Iterator[dict[str, str]]:
    """The environment of a server process: its own PostgreSQL database with --storage postgres."""
    if storage == "sqlite":
        yield {}
        return
    from bench.postgres import private_server

    with private_server() as url:
        yield {"MEMORY_DATABASE_URL": url}


def ask(
    server: Server, questions: list[Question], hit_id: Callable[[dict[str, Any]], str], **filters: Any
) -> tuple[list[list[str]], list[float]]:
    """Each question through recall: the ids `hit_id` reads off its hits, and its latency."""
    found: list[list[str]] = []
    latencies: list[float] = []
    for q in questions:
        start = time.perf_counter()
        hits = server.recall(q["question"], limit=10, bucket=q["bucket"], **filters)
        latencies.append(time.perf_counter() - start)
        found.append([hit_id(hit) for hit in hits])
    return found, latencies


def remembered(path: Path, storage: str, work: Path) -> dict[str, Any]:
    memories, questions = load(path)
    with authority(storage) as env, Server(work / "remember", env=env) as server:
        start = time.perf_counter()
        for memory in memories:
            server.remember(memory)
        stored = time.perf_counter() - start
        found, latencies = ask(server, questions, lambda hit: hit["metadata"]["dia_id"])
    return {
        "entries": len(memories),
        "store_seconds": round(stored, 1),
        "recall": score(questions, found),
        "median_recall_ms": round(statistics.median(latencies) * 1000, 2),
    }


def logged(path: Path, storage: str, work: Path) -> dict[str, Any]:
    logs, dia = sessions(path)
    _, questions = load(path)
    with authority(storage) as env, Server(work / "logs", env=env) as server:
        import subprocess

        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "memory_server",
                "site",
                "set",
                SITE,
                "--index-logs",
                "--data-dir",
                str(server.data_dir),
            ],
            cwd=ROOT,
            env=server.env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        start = time.perf_counter()
        appends = []
        for sid, conversation_id, items in logs:
            begun = time.perf_counter()
            server.request("POST", f"/v1/conversations/{conversation_id}/items", {"items": items, "bucket": sid})
            appends.append(time.perf_counter() - begun)
        appended = time.perf_counter() - start
        deadline = time.monotonic() + INDEX_WAIT_S
        while True:
            ready = server.request("GET", "/readyz")
            if "log_indexing" not in ready:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"log items still waiting: {ready}")
            time.sleep(0.5)
        indexed = time.perf_counter() - start
        found, latencies = ask(
            server,
            questions,
            lambda hit: dia[(hit["provenance"]["conversation_id"], hit["provenance"]["seq"])],
            kinds=["turn"],
        )
    return {
        "entries": sum(len(items) for _, _, items in logs),
        "conversations": len(logs),
        "append_seconds": round(appended, 2),
        "median_append_ms": round(statistics.median(appends) * 1000, 2),
        "indexed_seconds": round(indexed, 1),
        "recall": score(questions, found),
        "median_recall_ms": round(statistics.median(latencies) * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--json", type=Path, help="also write the JSON report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = {
            "data": str(args.data),
            "storage": args.storage,
            "remember": remembered(args.data, args.storage, Path(tmp)),
            "logs": logged(args.data, args.storage, Path(tmp)),
        }
    overall = "overall (1-4)"
    report["difference"] = {
        k: round(report["logs"]["recall"][overall][k] - report["remember"]["recall"][overall][k], 3)
        for k in ("R@5", "R@10")
    }
    print(json.dumps(report, indent=2))
    print(f"\nLoCoMo through recall on {args.storage}: R@5 / R@10 over categories 1-4")
    for name in (*CATEGORIES.values(), overall):
        a, b = report["remember"]["recall"].get(name), report["logs"]["recall"].get(name)
        if a and b:
            print(f"{name:<16} remember {a['R@5']:.3f} / {a['R@10']:.3f}   logs {b['R@5']:.3f} / {b['R@10']:.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
