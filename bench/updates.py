"""Facts that change, repeat and stay, in three languages: is what is true now first, is the past still found,
is a fact that never changed kept, does an overview show distinct facts?

The dataset (bench/datasets/updates.py, generated from a seed) is 50 subjects written about in English,
Spanish or Portuguese, each with two facts that change (2-4 versions, no `supersedes` link) and one that never
does, every version remembered 1-3 times in other words. Every memory is a `remember` (REST `POST
/v1/memories`) with `occurred_at`, saved in date order into one bucket of a fresh `memory-server serve` process
(bench/serverproc.py); every question is one `POST /v1/recall` (limit 10). Reported:
- current first: a current question's first hit states the fact's current value (any of its wordings); older
  first: it states an older value; with and without a word for the present ("now", "ahora", "agora");
- past first, per language: a question about a month ("in March 2025", "en marzo de 2025", "em maio de 2024")
  gets first a memory of the value then; newer first: a later value;
- stable in top 5: a fact that never changed has a memory in the first five (with and without "now"), and the
  same for those that look like a changing one (a home city beside an office, production beside staging);
- overview ("What do we know about X?"): X's distinct current facts in the first five (at most 3), copies
  (a hit stating the same version of a fact as one above it), and the share of X's facts with no memory there.

    python bench/updates.py [--seed N]... [--ranking production|dense|lexical] [--json OUT] [--dump LINES]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.datasets import updates as data  # noqa: E402
from bench.serverproc import Server  # noqa: E402

TOP = 5  # the first hits a fact must be among


def _share(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 3) if flags else None


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


class Key:
    """What a hit's metadata key says: the fact and the version it states."""

    def __init__(self, key: str) -> None:
        fact, _, rest = key.rpartition("/v")
        self.fact = fact
        self.version = int(rest.split("/")[0]) if rest[:1].isdigit() else -1


def score(dataset: data.Dataset, found: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The figures of the module docstring from each question's hits (memory keys, best first)."""
    facts = {f.id: f for f in dataset.facts}
    by_subject: dict[str, list[data.FactRecord]] = {}
    for f in dataset.facts:
        by_subject.setdefault(f.subject, []).append(f)
    current: dict[str, list[tuple[bool, bool]]] = {}
    past: dict[str, list[tuple[bool, bool]]] = {}
    stable: dict[str, list[bool]] = {}
    distinct, copies, lost = [], [], []
    for q, hits in zip(dataset.questions, found, strict=True):
        keys = [Key(h) for h in hits]
        first = keys[0] if keys else None
        if q.kind == "current" and q.fact:
            last = len(facts[q.fact].values) - 1
            flags = (
                first is not None and first.fact == q.fact and first.version == last,
                first is not None and first.fact == q.fact and first.version < last,
            )
            for group in ("all", "now" if q.cue else "plain", q.language):
                current.setdefault(group, []).append(flags)
        elif q.kind == "past" and q.fact and q.version is not None:
            flags = (
                first is not None and first.fact == q.fact and first.version == q.version,
                first is not None and first.fact == q.fact and first.version > q.version,
            )
            for group in ("all", q.language):
                past.setdefault(group, []).append(flags)
        elif q.kind == "stable" and q.fact:
            kept = any(k.fact == q.fact for k in keys[:TOP])
            name = facts[q.fact].name
            for group in ("all", "now" if q.cue else "plain", *(["look-alike"] if name in data.LOOK_ALIKES else [])):
                stable.setdefault(group, []).append(kept)
        elif q.kind == "overview":
            own = by_subject[q.subject]
            shown = [(k.fact, k.version) for k in keys[:TOP]]
            now = {(f.id, len(f.values) - 1) for f in own}
            distinct.append(len(now & set(shown)))
            copies.append(sum(1 for i, s in enumerate(shown) if s in shown[:i]))
            lost.append(sum(1 for f in own if f.id not in {fact for fact, _ in shown}) / len(own))
    return {
        "current first": {g: _share([a for a, _ in v]) for g, v in current.items()},
        "older first": {g: _share([b for _, b in v]) for g, v in current.items()},
        "past first": {g: _share([a for a, _ in v]) for g, v in past.items()},
        "past newer first": {g: _share([b for _, b in v]) for g, v in past.items()},
        "stable in top 5": {g: _share(v) for g, v in stable.items()},
        "overview": {
            "distinct current facts in top 5": _mean(distinct),
            "max": _mean([min(TOP, len(by_subject[q.subject])) for q in dataset.questions if q.kind == "overview"]),
            "copies in top 5": _mean(copies),
            "facts lost from top 5": _mean(lost),
        },
        "questions": {
            kind: sum(q.kind == kind for q in dataset.questions) for kind in ("current", "past", "stable", "overview")
        },
    }


def run_seed(seed: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    dataset = data.generate(seed)
    started = time.perf_counter()
    with Server(tmp / f"seed{seed}", ranking=args.ranking) as server:
        for memory in dataset.memories:
            server.remember(memory.remember_body())
        stored = time.perf_counter()
        answers = [server.recall(q.text, limit=args.limit, bucket=data.BUCKET) for q in dataset.questions]
        found = [[hit["metadata"].get("key", "?") for hit in hits] for hits in answers]
    if args.dump:
        with args.dump.open("a") as out:
            for q, hits in zip(dataset.questions, answers, strict=True):
                shown = [[h["metadata"].get("key"), h["occurred_at"][:10], h["content"]] for h in hits[:TOP]]
                out.write(json.dumps({"seed": seed, "question": q.__dict__, "hits": shown}, ensure_ascii=False) + "\n")
    result = score(dataset, found)
    result |= {
        "seed": seed,
        "memories": len(dataset.memories),
        "store_seconds": round(stored - started, 1),
        "query_seconds": round(time.perf_counter() - stored, 1),
    }
    return result


ROWS = (
    ("current first", "all"),
    ("current first", "plain"),
    ("current first", "now"),
    ("older first", "all"),
    ("past first", "en"),
    ("past first", "es"),
    ("past first", "pt"),
    ("past newer first", "all"),
    ("stable in top 5", "plain"),
    ("stable in top 5", "now"),
    ("stable in top 5", "look-alike"),
)
OVERVIEW_ROWS = ("distinct current facts in top 5", "copies in top 5", "facts lost from top 5")


def print_table(report: dict[str, Any]) -> None:
    seeds = report["seeds"]
    print(f"\nUpdates through recall(limit={report['limit']}), ranking {report['ranking']}")
    print(f"{'':<34}" + "".join(f"{'seed ' + str(s['seed']):>10}" for s in seeds))
    for metric, group in ROWS:
        cells = "".join(f"{s[metric].get(group) or 0:>10.3f}" for s in seeds)
        print(f"{metric + ' (' + group + ')':<34}{cells}")
    for name in OVERVIEW_ROWS:
        print(f"{'overview: ' + name:<34}" + "".join(f"{s['overview'][name]:>10.3f}" for s in seeds))
    print(f"{'overview: max':<34}" + "".join(f"{s['overview']['max']:>10.3f}" for s in seeds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default: the dataset's seed")
    parser.add_argument("--ranking", choices=("production", "dense", "lexical"), default="production")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the JSON report here")
    parser.add_argument("--dump", type=Path, help="append each question and its first hits here (JSON lines)")
    args = parser.parse_args()
    report: dict[str, Any] = {"benchmark": "updates", "ranking": args.ranking, "limit": args.limit, "seeds": []}
    with tempfile.TemporaryDirectory(prefix="bench-updates-") as tmp:
        for seed in args.seed or [data.DEFAULT_SEED]:
            report["seeds"].append(run_seed(seed, args, Path(tmp)))
            print(f"seed {seed}: done", file=sys.stderr, flush=True)
    print(json.dumps(report, indent=1))
    print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
