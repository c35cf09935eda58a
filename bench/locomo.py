"""Retrieval quality on LoCoMo through the server's own tools (`make bench-quality`).

Every turn is stored with the `remember` tool exactly as the LoCoMo data set's own notes describe (one bucket
per conversation, occurred_at from the session date, location locomo/<sample_id>/<dia_id>, provenance with
the turn's position), then every question of categories 1-4 is asked through the `recall` tool
(limit=10, the conversation's bucket) over an in-process MCP client. R@5 and R@10 are printed per category
and over categories 1-4, as a table and as JSON, with the time spent storing and querying.

    python bench/locomo.py [--data PATH] [--mode production|dense|lexical|all] [--json OUT]

The data (`--data`, default bench/data/locomo/locomo_dev.json) is LoCoMo's development split, five of its ten
conversations (bench/data/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypedDict, runtime_checkable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastmcp import Client  # noqa: E402
from fastmcp.client.transports import FastMCPTransport  # noqa: E402

from memory_server.api.mcp.server import build_mcp  # noqa: E402
from memory_server.services import open_services  # noqa: E402
from memory_server.settings import Settings  # noqa: E402

# The development split, in the repository with its source and licence (bench/data/locomo/README.md).
DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "locomo" / "locomo_dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
MODES = ("dense", "lexical", "production")


class Question(TypedDict):
    bucket: str  # the conversation's
    question: str
    category: int
    evidence: list[str]  # dia_ids of the turns that answer it


class ModeReport(TypedDict):
    recall: dict[str, dict[str, float]]  # category -> questions, R@5, R@10
    query_seconds: float
    median_recall_ms: float


class Report(TypedDict):
    data: str
    memories: int
    questions: int
    store_seconds: float
    modes: dict[str, ModeReport]


@runtime_checkable
class QueryCache(Protocol):
    """What the server's embedders have beside the Embedder protocol: their cache of query vectors."""

    def clear_cache(self) -> None: ...


def session_time(text: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00Z'."""
    parsed = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")


def load(path: Path) -> tuple[list[dict[str, Any]], list[Question]]:
    """Return (remember calls, questions) following the benchmark protocol."""
    memories: list[dict[str, Any]] = []
    questions: list[Question] = []
    for sample in json.loads(path.read_text()):
        sid, conv = sample["sample_id"], sample["conversation"]
        numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        seq = 0
        dia_ids = set()
        for n in numbers:
            when = session_time(conv[f"session_{n}_date_time"])
            for turn in conv[f"session_{n}"] or []:
                content = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    content += f" [shares {turn['blip_caption']}]"
                memories.append(
                    {
                        "content": content,
                        "type": "turn",
                        "bucket": sid,
                        "location": f"locomo/{sid}/{turn['dia_id']}",
                        "occurred_at": when,
                        "metadata": {"dia_id": turn["dia_id"]},
                        "provenance": {"conversation_id": sid, "seq": seq},
                    }
                )
                dia_ids.add(turn["dia_id"])
                seq += 1
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = [e for raw in qa.get("evidence", []) for e in re.split(r"[;\s]+", raw) if e in dia_ids]
            evidence = list(dict.fromkeys(evidence))
            if evidence:
                questions.append(
                    {"bucket": sid, "question": qa["question"], "category": qa["category"], "evidence": evidence}
                )
    return memories, questions


async def store(client: Client[FastMCPTransport], memories: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    for memory in memories:
        await client.call_tool("remember", memory)
    return time.perf_counter() - start


async def ask(
    client: Client[FastMCPTransport], questions: list[Question], limit: int
) -> tuple[list[list[str]], list[float]]:
    found: list[list[str]] = []
    latencies: list[float] = []
    for q in questions:
        start = time.perf_counter()
        result = await client.call_tool("recall", {"query": q["question"], "limit": limit, "bucket": q["bucket"]})
        latencies.append(time.perf_counter() - start)
        if result.structured_content is None:
            raise RuntimeError(f"recall gave no structured result: {result.content}")
        found.append([hit["metadata"]["dia_id"] for hit in result.structured_content["results"]])
    return found, latencies


def recall_at(found: list[str], evidence: list[str], k: int) -> float:
    top = set(found[:k])
    return sum(e in top for e in evidence) / len(evidence)


def score(questions: list[Question], found: list[list[str]]) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    groups = {name: [i for i, q in enumerate(questions) if q["category"] == c] for c, name in CATEGORIES.items()}
    groups["overall (1-4)"] = list(range(len(questions)))
    for name, members in groups.items():
        if members:
            table[name] = {
                "questions": len(members),
                "R@5": round(statistics.fmean(recall_at(found[i], questions[i]["evidence"], 5) for i in members), 3),
                "R@10": round(statistics.fmean(recall_at(found[i], questions[i]["evidence"], 10) for i in members), 3),
            }
    return table


def print_table(report: Report) -> None:
    modes = list(report["modes"])
    print(f"\nLoCoMo retrieval through recall ({report['questions']} questions, {report['memories']} memories)")
    print(f"{'category':<16}" + "".join(f"{m + ' R@5':>18}{m + ' R@10':>18}" for m in modes))
    for name in report["modes"][modes[0]]["recall"]:
        row = f"{name:<16}"
        for m in modes:
            r = report["modes"][m]["recall"][name]
            row += f"{r['R@5']:>18.3f}{r['R@10']:>18.3f}"
        print(row)
    print(f"{'median ms':<16}" + "".join(f"{report['modes'][m]['median_recall_ms']:>36.1f}" for m in modes))
    print(f"stored {report['memories']} memories in {report['store_seconds']:.1f} s")


async def run(args: argparse.Namespace) -> Report:
    memories, questions = load(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), embedding_threads=args.threads)
        services = open_services(settings)
        try:
            loaded = services.load_memories()
            principal = services.local_principal("bench")
            mcp = build_mcp(services, local=lambda: principal)
            async with Client(mcp) as client:
                store_seconds = await store(client, memories)
                report: Report = {
                    "data": str(args.data),
                    "memories": len(memories),
                    "questions": len(questions),
                    "store_seconds": round(store_seconds, 1),
                    "modes": {},
                }
                for mode in MODES if args.mode == "all" else (args.mode,):
                    loaded.retrieval.ranking = mode
                    if not isinstance(loaded.embedder, QueryCache):
                        raise SystemExit(f"{loaded.embedder.name} has no query cache to clear between modes")
                    loaded.embedder.clear_cache()  # each mode pays for its query embeddings
                    start = time.perf_counter()
                    found, latencies = await ask(client, questions, args.limit)
                    report["modes"][mode] = {
                        "recall": score(questions, found),
                        "query_seconds": round(time.perf_counter() - start, 1),
                        "median_recall_ms": round(statistics.median(latencies) * 1000, 2),
                    }
        finally:
            services.close()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--mode", choices=(*MODES, "all"), default="all")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the JSON report here")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print(json.dumps(report, indent=2))
    print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
