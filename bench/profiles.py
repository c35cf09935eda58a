"""Profiles and events: recall over short standalone facts in many styles and date formats.

The dataset (bench/datasets/profiles.py, generated from a seed): about 310 memories about seven people and
three projects, one bucket per entity, written in the first person, the third person or as terse notes, with
dates in many formats or relative to `occurred_at`; about 700 questions in six categories (attribute,
single_fact, event_by_date, relative_date, category, preference), each with its gold memories.

Every memory is one `remember` (REST `POST /v1/memories`, with `occurred_at` and `type`), every question one
`POST /v1/recall` (limit 10, the entity's bucket). R@k = |gold in the top k| / min(k, |gold|), so a
question with several gold memories scores 1 at R@1 when the first hit is any of them. Reported per category
and overall for each ranking, each on its own fresh `memory-server serve` process started with
`MEMORY_RECALL_RANKING=dense|lexical|production`.

    python bench/profiles.py [--mode dense|lexical|production|all] [--json OUT] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.datasets import profiles as data  # noqa: E402
from bench.serverproc import Server  # noqa: E402

MODES = ("dense", "lexical", "production")
KS = (1, 5, 10)


def store(server: Server, dataset: data.Dataset) -> float:
    start = time.perf_counter()
    for memory in dataset.memories:
        server.remember(memory.remember_body())
    return time.perf_counter() - start


def ask(server: Server, dataset: data.Dataset, limit: int) -> tuple[list[list[str]], list[float]]:
    found, latencies = [], []
    for q in dataset.questions:
        start = time.perf_counter()
        hits = server.recall(q.text, limit=limit, bucket=q.bucket)
        latencies.append(time.perf_counter() - start)
        found.append([hit["metadata"].get("key", "?") for hit in hits])
    return found, latencies


def recall_at(found: list[str], gold: list[str], k: int) -> float:
    top = set(found[:k])
    return sum(g in top for g in gold) / min(k, len(gold))


def score(dataset: data.Dataset, found: list[list[str]]) -> dict[str, dict[str, Any]]:
    groups = {c: [i for i, q in enumerate(dataset.questions) if q.category == c] for c in data.CATEGORIES}
    groups["overall"] = list(range(len(dataset.questions)))
    table: dict[str, dict[str, Any]] = {}
    for name, members in groups.items():
        if members:
            row: dict[str, Any] = {"questions": len(members)}
            for k in KS:
                row[f"R@{k}"] = round(
                    statistics.fmean(recall_at(found[i], dataset.questions[i].gold, k) for i in members), 3
                )
            table[name] = row
    return table


def misses(dataset: data.Dataset, found: list[list[str]], per_category: int = 4) -> dict[str, list[dict[str, Any]]]:
    contents = {m.key: m.content for m in dataset.memories}
    out: dict[str, list[dict[str, Any]]] = {}
    for q, hits in zip(dataset.questions, found, strict=False):
        if recall_at(hits, q.gold, 5) < 1 and len(out.setdefault(q.category, [])) < per_category:
            out[q.category].append(
                {
                    "question": q.text,
                    "gold": [contents[g] for g in q.gold],
                    "first_hit": contents.get(hits[0]) if hits else None,
                }
            )
    return out


def run_mode(mode: str, dataset: data.Dataset, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    started = time.perf_counter()
    with Server(tmp / mode, ranking=mode) as server:
        store_seconds = store(server, dataset)
        query_start = time.perf_counter()
        found, latencies = ask(server, dataset, args.limit)
        result = {
            "recall": score(dataset, found),
            "startup_seconds": round(server.startup_seconds, 1),
            "store_seconds": round(store_seconds, 1),
            "query_seconds": round(time.perf_counter() - query_start, 1),
            "median_recall_ms": round(statistics.median(latencies) * 1000, 1),
            "misses": misses(dataset, found),
        }
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    dataset = data.generate(args.seed)
    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "profiles",
        "seed": args.seed,
        "limit": args.limit,
        "entities": dataset.entities,
        "memories": len(dataset.memories),
        "questions": len(dataset.questions),
        "questions_per_category": {c: sum(q.category == c for q in dataset.questions) for c in data.CATEGORIES},
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-profiles-") as tmp:
        for mode in MODES if args.mode == "all" else (args.mode,):
            report["modes"][mode] = run_mode(mode, dataset, args, Path(tmp))
            overall = report["modes"][mode]["recall"]["overall"]
            print(
                f"{mode}: R@1 {overall['R@1']:.3f} R@5 {overall['R@5']:.3f} R@10 {overall['R@10']:.3f} "
                f"({report['modes'][mode]['seconds']} s)",
                file=sys.stderr,
                flush=True,
            )
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    return report


def print_table(report: dict[str, Any]) -> None:
    modes = list(report["modes"])
    print(
        f"\nProfiles and events through recall(limit={report['limit']}), seed {report['seed']}: "
        f"{report['memories']} memories, {report['questions']} questions, {len(report['entities'])} buckets"
    )
    print(f"{'category':<15}{'n':>5}" + "".join(f"{m + ' R@' + str(k):>17}" for m in modes for k in KS))
    for name, first in report["modes"][modes[0]]["recall"].items():
        row = f"{name:<15}{first['questions']:>5}"
        for m in modes:
            r = report["modes"][m]["recall"][name]
            row += "".join(f"{r[f'R@{k}']:>17.3f}" for k in KS)
        print(row)
    print(f"{'median ms':<20}" + "".join(f"{report['modes'][m]['median_recall_ms']:>51.1f}" for m in modes))
    print(f"total {report['total_seconds']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=(*MODES, "all"), default="all")
    parser.add_argument("--seed", type=int, default=data.DEFAULT_SEED)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the JSON report here")
    args = parser.parse_args()
    report = run(args)
    print(json.dumps(report, indent=2))
    print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
