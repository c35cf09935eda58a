"""Memories that change over time: does `recall` put the right version of a fact first?

The dataset (bench/datasets/evolving.py, generated from a seed) is 230 changing facts about people,
projects, services and teams, 2-4 versions each between 2024 and 2025, plus distractors: each version is a
`remember` (REST `POST /v1/memories`) with `occurred_at` set to its date, saved in date order into one
bucket. Questions ask for the current value or a past one; each has one gold memory. Every question is one
`POST /v1/recall` (limit 10, the dataset's bucket); top-1 (gold is the first hit), R@3 and R@10 are reported
for current-value and past-value questions, and per kind of past question.

Modes, each a full run on a fresh `memory-server serve` process:
- baseline:     no `supersedes` links, no time filters;
- supersedes:   the updates generated with a link (half of them) carry `supersedes` = the previous version;
- time_filters: past-value questions pass `occurred_after`/`occurred_before` (the window the question's
                period implies); current-value questions are unchanged;
- all:          both.
Each mode runs with the server's recency ranking (a query asking for the current state ranks the newest
relevant memories first) and, with `--recency both` (the default), again without it
(`MEMORY_RECALL_RECENCY=false`, reported as "<mode> -recency").
A mode needing a feature the server lacks (probed at start: `supersedes` on remember, the time filters on
recall; a 422 means unsupported) is reported as "n/a" instead of failing.

Targets: current top-1 >= 0.90 with supersedes and >= 0.75 without; past top-1 >= 0.70 with time filters.

    python bench/evolving.py [--mode baseline|supersedes|time_filters|all|every] [--json OUT] [--seed N]
                             [--ranking production|dense|lexical] [--recency on|off|both]
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

from bench.datasets import evolving as data  # noqa: E402
from bench.serverproc import ApiError, Server  # noqa: E402

MODES = ("baseline", "supersedes", "time_filters", "all")
NEEDS = {
    "baseline": (),
    "supersedes": ("supersedes",),
    "time_filters": ("time_filters",),
    "all": ("supersedes", "time_filters"),
}
TARGETS = {
    "current top-1 with supersedes": 0.90,
    "current top-1 without supersedes": 0.75,
    "past top-1 with time filters": 0.70,
}
GROUPS = ("current", "past", "past:as_of", "past:changed_in", "past:before")
PROBE_BUCKET = "probe"


# --- feature detection ---------------------------------------------------------------------------------


def _unsupported(error: ApiError, field: str) -> bool:
    message = json.dumps(error.body)
    return error.status == 422 and field in message


def probe(server: Server) -> dict[str, dict[str, Any]]:
    """What the server supports, found with throw-away memories in their own bucket (deleted afterwards)."""
    support: dict[str, dict[str, Any]] = {}
    made: list[str] = []
    try:
        old = server.remember(
            {"content": "probe: the probe value is one", "bucket": PROBE_BUCKET, "occurred_at": "2001-01-01T00:00:00Z"}
        )
        made.append(old)
        try:
            new = server.remember(
                {
                    "content": "probe: the probe value is two",
                    "bucket": PROBE_BUCKET,
                    "occurred_at": "2001-02-01T00:00:00Z",
                    "supersedes": old,
                }
            )
            made.append(new)
            fetched = server.request("GET", f"/v1/memories/{old}")
            linked = fetched.get("superseded_by") == new
            support["supersedes"] = {
                "supported": True,
                "detail": "accepted" + ("" if linked else "; superseded_by not shown on the old memory"),
            }
        except ApiError as error:
            if not _unsupported(error, "supersedes"):
                raise
            support["supersedes"] = {"supported": False, "detail": "server lacks supersedes (422 on remember)"}
        # a third memory of its own, so that whatever supersedes does to ranking cannot blur this probe
        dated = server.remember(
            {"content": "probe: a dated probe note", "bucket": PROBE_BUCKET, "occurred_at": "2001-06-01T00:00:00Z"}
        )
        made.append(dated)
        try:
            after = server.recall("probe note", limit=5, bucket=PROBE_BUCKET, occurred_after="2002-01-01T00:00:00Z")
            around = server.recall(
                "probe note",
                limit=5,
                bucket=PROBE_BUCKET,
                occurred_after="2001-05-01T00:00:00Z",
                occurred_before="2001-07-01T00:00:00Z",
            )
            works = not after and [hit["reference"] for hit in around] == [dated]
            support["time_filters"] = {
                "supported": works,
                "detail": "accepted and applied"
                if works
                else "server accepts occurred_after/occurred_before but does not apply them",
            }
        except ApiError as error:
            if not (_unsupported(error, "occurred_after") or _unsupported(error, "occurred_before")):
                raise
            support["time_filters"] = {
                "supported": False,
                "detail": "server lacks occurred_after/occurred_before (422 on recall)",
            }
    finally:
        for reference in reversed(made):
            try:
                server.forget(reference)
            except ApiError:
                pass
    return support


# --- one run -------------------------------------------------------------------------------------------


def store(server: Server, dataset: data.Dataset, *, links: bool) -> float:
    refs: dict[str, str] = {}
    start = time.perf_counter()
    for memory in dataset.memories:
        link = refs[memory.supersedes] if links and memory.supersedes else None
        refs[memory.key] = server.remember(memory.remember_body(link=link))
    return time.perf_counter() - start


def ask(
    server: Server, dataset: data.Dataset, *, time_filters: bool, limit: int
) -> tuple[list[list[str]], list[float]]:
    found, latencies = [], []
    for q in dataset.questions:
        window = q.window if time_filters and q.kind == "past" else {}
        start = time.perf_counter()
        hits = server.recall(q.text, limit=limit, bucket=data.BUCKET, **window)
        latencies.append(time.perf_counter() - start)
        found.append([hit["metadata"].get("key", "?") for hit in hits])
    return found, latencies


def score(dataset: data.Dataset, found: list[list[str]]) -> dict[str, dict[str, Any]]:
    slot_keys = {s.id: set(s.keys) for s in dataset.slots}
    members: dict[str, list[int]] = {g: [] for g in GROUPS}
    for i, q in enumerate(dataset.questions):
        members["current" if q.kind == "current" else "past"].append(i)
        if q.kind == "past":
            members[f"past:{q.subkind}"].append(i)
    table: dict[str, dict[str, Any]] = {}
    for group, idx in members.items():
        if not idx:
            continue
        ranks = []
        other_version = 0
        for i in idx:
            q, hits = dataset.questions[i], found[i]
            ranks.append(hits.index(q.gold) + 1 if q.gold in hits else None)
            if hits and hits[0] != q.gold and hits[0] in slot_keys[q.slot]:
                other_version += 1  # the right fact, the wrong version of it
        n = len(idx)
        table[group] = {
            "questions": n,
            "top1": round(sum(r == 1 for r in ranks) / n, 3),
            "R@3": round(sum(r is not None and r <= 3 for r in ranks) / n, 3),
            "R@10": round(sum(r is not None for r in ranks) / n, 3),
            "MRR": round(sum(1 / r for r in ranks if r) / n, 3),
            "other_version_top1": round(other_version / n, 3),
        }
    return table


def misses(dataset: data.Dataset, found: list[list[str]], per_group: int = 5) -> dict[str, list[dict[str, Any]]]:
    contents = {m.key: m.content for m in dataset.memories}
    out: dict[str, list[dict[str, Any]]] = {}
    for q, hits in zip(dataset.questions, found, strict=False):
        group = "current" if q.kind == "current" else f"past:{q.subkind}"
        if (not hits or hits[0] != q.gold) and len(out.setdefault(group, [])) < per_group:
            out[group].append(
                {
                    "question": q.text,
                    "window": q.window,
                    "gold": contents[q.gold],
                    "first_hit": contents.get(hits[0]) if hits else None,
                }
            )
    return out


def run_mode(
    mode: str,
    dataset: data.Dataset,
    args: argparse.Namespace,
    tmp: Path,
    support: dict[str, dict[str, Any]] | None,
    *,
    recency: bool = True,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    if support is not None:
        lacking = [f for f in NEEDS[mode] if not support[f]["supported"]]
        if lacking:
            return {"status": "n/a", "reason": "; ".join(support[f]["detail"] for f in lacking)}, support
    started = time.perf_counter()
    env = {} if recency else {"MEMORY_RECALL_RECENCY": "false"}
    with Server(tmp / f"{mode}{'' if recency else '-no-recency'}", ranking=args.ranking, env=env) as server:
        support = probe(server)
        lacking = [f for f in NEEDS[mode] if not support[f]["supported"]]
        if lacking:
            return {"status": "n/a", "reason": "; ".join(support[f]["detail"] for f in lacking)}, support
        links, filters = "supersedes" in NEEDS[mode], "time_filters" in NEEDS[mode]
        store_seconds = store(server, dataset, links=links)
        query_start = time.perf_counter()
        found, latencies = ask(server, dataset, time_filters=filters, limit=args.limit)
        result = {
            "status": "ok",
            "recency": recency,
            "supersedes_links": sum(1 for m in dataset.memories if m.supersedes) if links else 0,
            "time_filters": filters,
            "groups": score(dataset, found),
            "startup_seconds": round(server.startup_seconds, 1),
            "store_seconds": round(store_seconds, 1),
            "query_seconds": round(time.perf_counter() - query_start, 1),
            "median_recall_ms": round(statistics.median(latencies) * 1000, 1),
            "misses": misses(dataset, found),
        }
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result, support


def run(args: argparse.Namespace) -> dict[str, Any]:
    dataset = data.generate(args.seed)
    modes = MODES if args.mode == "every" else (args.mode,)
    recencies = {"on": (True,), "off": (False,), "both": (True, False)}[args.recency]
    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "evolving",
        "seed": args.seed,
        "ranking": args.ranking,
        "limit": args.limit,
        "slots": len(dataset.slots),
        "memories": len(dataset.memories),
        "versions": {str(n): sum(1 for s in dataset.slots if len(s.keys) == n) for n in (2, 3, 4)},
        "updates": {
            "with supersedes": sum(1 for m in dataset.memories if m.supersedes),
            "plain": sum(1 for m in dataset.memories if m.version and m.version > 1 and not m.supersedes),
        },
        "distractors": sum(1 for m in dataset.memories if m.slot is None),
        "questions": {
            "current": sum(q.kind == "current" for q in dataset.questions),
            "past": sum(q.kind == "past" for q in dataset.questions),
        },
        "targets": TARGETS,
        "modes": {},
    }
    support = None
    with tempfile.TemporaryDirectory(prefix="bench-evolving-") as tmp:
        for mode in modes:
            for recency in recencies:
                name = mode if recency else f"{mode} -recency"
                report["modes"][name], support = run_mode(mode, dataset, args, Path(tmp), support, recency=recency)
                print(f"{name}: {_summary(report['modes'][name])}", file=sys.stderr, flush=True)
    report["support"] = support
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    return report


def _summary(result: dict[str, Any]) -> str:
    if result["status"] != "ok":
        return f"n/a ({result['reason']})"
    g = result["groups"]
    return f"current top-1 {g['current']['top1']:.3f}, past top-1 {g['past']['top1']:.3f} ({result['seconds']} s)"


def print_table(report: dict[str, Any]) -> None:
    q = report["questions"]
    print(
        f"\nEvolving facts through recall(limit={report['limit']}), ranking {report['ranking']}, seed "
        f"{report['seed']}: {report['slots']} facts, {report['memories']} memories "
        f"({report['distractors']} distractors), {q['current']} current + {q['past']} past questions"
    )
    cols = [
        ("current", "top1"),
        ("current", "R@3"),
        ("past", "top1"),
        ("past", "R@3"),
        ("past:as_of", "top1"),
        ("past:changed_in", "top1"),
        ("past:before", "top1"),
        ("current", "other_version_top1"),
    ]
    heads = [
        "cur top-1",
        "cur R@3",
        "past top-1",
        "past R@3",
        "as_of top-1",
        "chg_in top-1",
        "before top-1",
        "cur stale@1",
    ]
    print(f"{'mode':<22}" + "".join(f"{h:>14}" for h in heads) + f"{'median ms':>11}")
    for mode, result in report["modes"].items():
        if result["status"] != "ok":
            print(f"{mode:<22}n/a ({result['reason']})")
            continue
        row = "".join(f"{result['groups'][g][k]:>14.3f}" for g, k in cols)
        print(f"{mode:<22}{row}{result['median_recall_ms']:>11.1f}")
    print("targets: " + "; ".join(f"{name} >= {value:.2f}" for name, value in report["targets"].items()))
    print(f"total {report['total_seconds']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=(*MODES, "every"), default="every")
    parser.add_argument("--seed", type=int, default=data.DEFAULT_SEED)
    parser.add_argument("--ranking", choices=("production", "dense", "lexical"), default="production")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument(
        "--recency",
        choices=("on", "off", "both"),
        default="both",
        help="run each mode with the recency ranking, without it, or both",
    )
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
