"""Recall in many languages: parallel reading-comprehension data asked through a real server.

Data: XQuAD (the same paragraphs and questions in English, Spanish, German, Russian, Chinese, Vietnamese, and
more) and FaQuAD (Portuguese), in SQuAD v1.1 layout, one file per language: `xquad.<lang>.json`,
`faquad.pt.json` (`--data DIR`, default bench/data/multilingual/, the development halves). Every paragraph is
one memory (`POST /v1/memories`) in its language's bucket; every question one `POST /v1/recall` (limit 10) in a
bucket; the gold is the question's own paragraph.
A language L is asked in its own bucket; a pair Q->M asks language Q's questions in the bucket of language M's
paragraphs (the same paragraphs, translated): "es->en" is a Spanish question about memories written in
English. Reported per language and pair: hit@1 (the gold first), hit@5 and MRR@10, for each ranking on its own
fresh `memory-server serve` process (`MEMORY_RECALL_RANKING=dense|lexical|production`).

    python bench/multilingual.py [--data DIR] [--languages en,es,...] [--pairs es:en,...]
                                 [--mode dense|lexical|production|all] [--json OUT]
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

from bench.serverproc import Server  # noqa: E402

MODES = ("dense", "lexical", "production")
# The development halves, in the repository with their sources and licences (bench/data/multilingual/README.md).
DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "multilingual"
DEFAULT_LANGUAGES = "en,es,de,ru,zh,vi,pt"
DEFAULT_PAIRS = "es:en,en:es,de:en,zh:en"


def load(data: Path, language: str) -> tuple[list[str], list[tuple[str, int]]]:
    """(paragraphs, [(question, index of its paragraph)]) of one language's file."""
    matches = sorted(data.glob(f"*.{language}.json"))
    if not matches:
        raise SystemExit(f"no *.{language}.json in {data}")
    paragraphs: list[str] = []
    questions: list[tuple[str, int]] = []
    for article in json.loads(matches[0].read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            questions += [(qa["question"].strip(), len(paragraphs)) for qa in paragraph["qas"]]
            paragraphs.append(paragraph["context"].lstrip("\ufeff"))
    return paragraphs, questions


def ask(server: Server, questions: list[tuple[str, int]], bucket: str) -> tuple[dict[str, float], list[float]]:
    ranks: list[int | None] = []
    latencies: list[float] = []
    for text, gold in questions:
        start = time.perf_counter()
        hits = server.recall(text, limit=10, bucket=bucket)
        latencies.append(time.perf_counter() - start)
        keys = [hit["metadata"].get("paragraph") for hit in hits]
        ranks.append(keys.index(gold) + 1 if gold in keys else None)
    return scores(ranks), latencies


def scores(ranks: list[int | None]) -> dict[str, float]:
    """hit@1, hit@5 and MRR@10 of the gold's rank in each answer (None: not in the first ten)."""
    n = len(ranks)
    return {
        "questions": n,
        "hit@1": round(sum(r == 1 for r in ranks) / n, 3),
        "hit@5": round(sum(r is not None and r <= 5 for r in ranks) / n, 3),
        "MRR@10": round(sum(1 / r for r in ranks if r is not None) / n, 3),
    }


def run_mode(
    mode: str, corpus: dict[str, tuple[list[str], list[tuple[str, int]]]], pairs: list[tuple[str, str]], tmp: Path
) -> dict[str, Any]:
    started = time.perf_counter()
    with Server(tmp / mode, ranking=mode) as server:
        for language, (paragraphs, _) in corpus.items():
            for index, paragraph in enumerate(paragraphs):
                server.remember(
                    {"content": paragraph, "bucket": f"ml-{language}", "type": "fact", "metadata": {"paragraph": index}}
                )
        stored = time.perf_counter() - started
        results: dict[str, Any] = {}
        latencies: list[float] = []
        for language, (_, questions) in corpus.items():
            results[language], spent = ask(server, questions, f"ml-{language}")
            latencies += spent
        for asked, stored_in in pairs:
            results[f"{asked}->{stored_in}"], spent = ask(server, corpus[asked][1], f"ml-{stored_in}")
            latencies += spent
    return {
        "results": results,
        "store_seconds": round(stored, 1),
        "median_recall_ms": round(statistics.median(latencies) * 1000, 1),
        "seconds": round(time.perf_counter() - started, 1),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",") if p]
    languages = list(dict.fromkeys([*args.languages.split(","), *(lang for pair in pairs for lang in pair)]))
    corpus = {language: load(args.data, language) for language in languages}
    for asked, stored_in in pairs:
        if len(corpus[asked][0]) != len(corpus[stored_in][0]):
            raise SystemExit(f"{asked} and {stored_in} are not parallel (different paragraph counts)")
    report: dict[str, Any] = {
        "benchmark": "multilingual",
        "data": str(args.data),
        "paragraphs": {lang: len(c[0]) for lang, c in corpus.items()},
        "questions": {lang: len(c[1]) for lang, c in corpus.items()},
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-multilingual-") as tmp:
        for mode in MODES if args.mode == "all" else (args.mode,):
            report["modes"][mode] = run_mode(mode, corpus, pairs, Path(tmp))
            print(
                f"{mode}: "
                + " ".join(f"{name} {r['hit@1']:.3f}" for name, r in report["modes"][mode]["results"].items()),
                file=sys.stderr,
                flush=True,
            )
    return report


def print_table(report: dict[str, Any]) -> None:
    modes = list(report["modes"])
    names = list(report["modes"][modes[0]]["results"])
    print("\nhit@1 / hit@5 / MRR@10 through recall(limit=10), one bucket per language")
    print(f"{'':<12}" + "".join(f"{m:>24}" for m in modes))
    for name in names:
        cells = [
            "{hit@1:.3f} / {hit@5:.3f} / {MRR@10:.3f}".format(**report["modes"][m]["results"][name]) for m in modes
        ]
        print(f"{name:<12}" + "".join(f"{c:>24}" for c in cells))
    print(f"{'median ms':<12}" + "".join(f"{report['modes'][m]['median_recall_ms']:>24.1f}" for m in modes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--languages", default=DEFAULT_LANGUAGES)
    parser.add_argument("--pairs", default=DEFAULT_PAIRS, help="Q:M pairs, Q's questions asked of M's paragraphs")
    parser.add_argument("--mode", choices=(*MODES, "all"), default="all")
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
