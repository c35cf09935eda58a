"""The three quality benchmarks in one process, for comparing ranking variants quickly.

The LoCoMo dev split (as bench/locomo.py stores it), the profiles dataset (bench/profiles.py) and the evolving
dataset (bench/evolving.py) are stored through the server's own write path (`MemoryWrites`: real SQLite in a
temporary directory, the embedded vector index, the bundled model) and asked through its own `Retrieval.recall`,
as the REST and MCP tools call it. What it saves over the benchmarks themselves is time: the model's vectors of
every text (documents, words and queries) are kept in a cache file (`--cache`), so a second run embeds nothing
and a variant costs a minute or two. A variant is a set of module constants changed before the memories are stored
(`--set module.NAME=value`, e.g. `--set memory_server.ranking.fusion.W_LEXICAL=0.3`).

    python bench/offline.py [--datasets locomo,profiles,evolving,multilingual,updates]
                            [--modes production,dense,lexical]
                            [--set MODULE.NAME=VALUE]... [--vary "SETTING;SETTING"]... [--json OUT]

`--vary`: LoCoMo and updates only, rank again with each set of recall-time settings over the memories stored once.
Reported: LoCoMo R@5 / R@10 per category (leave-one-conversation-out figures are in docs/ranking.md); profiles
R@1 / R@5 / R@10 per category; evolving top-1 and R@3 per kind in the modes "nothing" (no links, no windows, no
recency), "recency", "windows", "windows recency", "links", "links recency" and "all three" (links, windows and
recency), as bench/evolving.py's modes. On 2026-12-03 its production, dense and
lexical figures were those of bench/locomo.py, bench/profiles.py and bench/evolving.py to the third decimal
but for two profiles dense ones (category R@5 0.589 here against 0.593 through REST, relative date R@5 0.394
against 0.424: the dense side alone orders near-ties by the order the store gives them).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Unpack

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from memory_server.embeddings.base import Embedder  # noqa: E402
from memory_server.embeddings.similarity import Similarity  # noqa: E402
from memory_server.memories.params import RecallParams  # noqa: E402
from memory_server.operations.memories import retrieval_scope  # noqa: E402
from memory_server.services import open_services  # noqa: E402
from memory_server.settings import Settings  # noqa: E402

from bench import locomo  # noqa: E402
from bench.datasets import evolving as evolving_data  # noqa: E402
from bench.datasets import profiles as profiles_data  # noqa: E402

CACHE = Path(tempfile.gettempdir()) / "memory-server-bench" / "vectors.npz"


class CachedEmbedder:
    """The real embedder with every vector it computes kept by text (documents and queries alike: the model is
    the same for both)."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        self.new = 0
        if path.exists():
            stored = np.load(path, allow_pickle=False)
            self.vectors = {str(t): v for t, v in zip(stored["texts"], stored["vectors"], strict=True)}

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    @property
    def similarity(self) -> Similarity:
        return self.inner.similarity

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if missing:
            for text, vector in zip(missing, self.inner.embed_documents(missing), strict=True):
                self.vectors[text] = np.asarray(vector, dtype=np.float32)
            self.new += len(missing)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.vectors[t] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        key = "\0query\0" + text
        if key not in self.vectors:
            self.vectors[key] = np.asarray(self.inner.embed_query(text), dtype=np.float32)
            self.new += 1
        return self.vectors[key].copy()

    def clear_cache(self) -> None:
        pass

    def save(self) -> None:
        if not self.new:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        texts = list(self.vectors)
        partial = self.path.with_suffix(".partial.npz")
        np.savez(partial, texts=np.array(texts), vectors=np.stack([self.vectors[t] for t in texts]))
        partial.replace(self.path)
        self.new = 0


class Store:
    """A fresh data directory with the server's services on it."""

    def __init__(self, root: Path, embedder: Embedder) -> None:
        self.services = open_services(Settings(data_dir=root, embedding_threads=2))
        self.memories = self.services.load_memories(embedder=embedder)
        self.principal = self.services.local_principal("bench")

    def store(self, bodies: Sequence[dict[str, Any]]) -> None:
        writes = self.memories.writes
        writes.remember_many(self.principal.site_id, [writes.validate(**body) for body in bodies])

    def remember(self, body: dict[str, Any]) -> str:
        writes = self.memories.writes
        return writes.remember(self.principal, writes.validate(**body)).reference

    def recall(
        self, query: str, bucket: str, limit: int = 10, **window: Unpack[evolving_data.Window]
    ) -> list[dict[str, Any]]:
        scope = retrieval_scope(self.principal, RecallParams(query=query, limit=limit, bucket=bucket, **window))
        return self.memories.retrieval.recall(scope, query, limit)

    def close(self) -> None:
        self.services.close()


def run_locomo(root: Path, embedder: Embedder, modes: Sequence[str], variants: Sequence[str] = ()) -> dict[str, Any]:
    bodies, questions = locomo.load(locomo.DEFAULT_DATA)
    store = Store(root, embedder)
    try:
        store.store(bodies)
        out = {}
        for mode in modes:
            store.memories.retrieval.ranking = mode
            for variant in variants or [""]:
                undo = apply(variant.split(";") if variant else [])
                found = [
                    [hit["metadata"]["dia_id"] for hit in store.recall(q["question"], q["bucket"])] for q in questions
                ]
                apply(undo)
                out[f"{mode} {variant}" if variant else mode] = locomo.score(questions, found)
        return out
    finally:
        store.close()


def run_profiles(root: Path, embedder: Embedder, modes: Sequence[str]) -> dict[str, Any]:
    from bench import profiles

    dataset = profiles_data.generate(profiles_data.DEFAULT_SEED)
    store = Store(root, embedder)
    try:
        store.store([m.remember_body() for m in dataset.memories])
        out = {}
        for mode in modes:
            store.memories.retrieval.ranking = mode
            found = [
                [hit["metadata"].get("key", "?") for hit in store.recall(q.text, q.bucket)] for q in dataset.questions
            ]
            out[mode] = profiles.score(dataset, found)
        return out
    finally:
        store.close()


def run_evolving(root: Path, embedder: Embedder, modes: Sequence[str]) -> dict[str, Any]:
    from bench import evolving

    dataset = evolving_data.generate(evolving_data.DEFAULT_SEED)
    out: dict[str, Any] = {}
    for name, links in (("plain", False), ("links", True)):
        store = Store(root / name, embedder)
        try:
            refs: dict[str, str] = {}
            for memory in dataset.memories:
                link = refs[memory.supersedes] if links and memory.supersedes else None
                refs[memory.key] = store.remember(memory.remember_body(link=link))
            retrieval = store.memories.retrieval
            runs = (
                (
                    ("nothing", False, False),
                    ("recency", True, False),
                    ("windows", False, True),
                    ("windows recency", True, True),
                )
                if not links
                else (("links", False, False), ("links recency", True, False), ("all three", True, True))
            )
            for mode in modes:
                retrieval.ranking = mode
                for label, recency, windows in runs:
                    if mode != "production" and "recency" in label:
                        continue
                    retrieval.recency = recency
                    found = []
                    for q in dataset.questions:
                        window = q.window if windows and q.kind == "past" else {}
                        found.append(
                            [
                                hit["metadata"].get("key", "?")
                                for hit in store.recall(q.text, evolving_data.BUCKET, **window)
                            ]
                        )
                    groups = evolving.score(dataset, found)
                    out[f"{mode} {label}"] = {g: {"top1": v["top1"], "R@3": v["R@3"]} for g, v in groups.items()}
        finally:
            store.close()
    return out


def run_multilingual(root: Path, embedder: Embedder, modes: Sequence[str]) -> dict[str, Any]:
    """bench/multilingual.py's languages and pairs, hit@1 / hit@5 / MRR@10."""
    from bench import multilingual

    pairs = [tuple(p.split(":")) for p in multilingual.DEFAULT_PAIRS.split(",")]
    corpus = {
        lang: multilingual.load(multilingual.DEFAULT_DATA, lang) for lang in multilingual.DEFAULT_LANGUAGES.split(",")
    }
    store = Store(root, embedder)
    try:
        for lang, (paragraphs, _) in corpus.items():
            store.store(
                [
                    {"content": p, "bucket": f"ml-{lang}", "type": "fact", "metadata": {"paragraph": i}}
                    for i, p in enumerate(paragraphs)
                ]
            )
        out: dict[str, Any] = {}
        asks = [(lang, lang) for lang in corpus] + pairs
        for mode in modes:
            store.memories.retrieval.ranking = mode
            for asked, stored_in in asks:
                ranks = []
                for text, gold in corpus[asked][1]:
                    keys = [hit["metadata"].get("paragraph") for hit in store.recall(text, f"ml-{stored_in}")]
                    ranks.append(keys.index(gold) + 1 if gold in keys else None)
                name = asked if asked == stored_in else f"{asked}->{stored_in}"
                out.setdefault(mode, {})[name] = multilingual.scores(ranks)
        return out
    finally:
        store.close()


def run_updates(root: Path, embedder: Embedder, modes: Sequence[str], variants: Sequence[str] = ()) -> dict[str, Any]:
    """bench/updates.py's figures for seeds UPDATE_SEEDS, each seed in a store of its own."""
    from bench import updates
    from bench.datasets import updates as updates_data

    out: dict[str, Any] = {}
    for seed in UPDATE_SEEDS:
        dataset = updates_data.generate(seed)
        store = Store(root / f"updates-{seed}", embedder)
        try:
            store.store([m.remember_body() for m in dataset.memories])
            for mode in modes:
                store.memories.retrieval.ranking = mode
                for variant in variants or [""]:
                    undo = apply(variant.split(";") if variant else [])
                    found = [
                        [h["metadata"].get("key", "?") for h in store.recall(q.text, updates_data.BUCKET)]
                        for q in dataset.questions
                    ]
                    apply(undo)
                    out[f"{seed} {mode} {variant}".strip()] = updates.score(dataset, found)
        finally:
            store.close()
    return out


UPDATE_SEEDS = (11, 12, 13)
RUNS = {
    "locomo": run_locomo,
    "profiles": run_profiles,
    "evolving": run_evolving,
    "multilingual": run_multilingual,
    "updates": run_updates,
}


def apply(settings: Sequence[str]) -> list[str]:
    """Set each MODULE.NAME=VALUE; returns the settings that undo them."""
    undo = []
    for item in settings:
        target, _, raw = item.partition("=")
        module_name, _, name = target.rpartition(".")
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            raise SystemExit(f"{module_name} has no {name}")
        undo.append(f"{target}={getattr(module, name)!r}")
        setattr(module, name, ast.literal_eval(raw))
    return undo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="locomo,profiles,evolving")
    parser.add_argument("--modes", default="production", help="comma list of production,dense,lexical")
    parser.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE")
    parser.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="SETTING;SETTING",
        help="LoCoMo and updates only: rank again with each of these recall-time settings (stored once)",
    )
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    apply(args.set)
    from memory_server.embeddings.factory import load_embedder, resolve_model
    from memory_server.services import PROJECT_ROOT

    inner = load_embedder(resolve_model(os.environ.get("MEMORY_EMBEDDING_MODEL"), project_root=PROJECT_ROOT), threads=2)
    embedder = CachedEmbedder(inner, args.cache)
    report: dict[str, Any] = {"set": args.set}
    modes = args.modes.split(",")
    try:
        for name in args.datasets.split(","):
            started = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix=f"bench-offline-{name}-") as tmp:
                report[name] = (
                    RUNS[name](Path(tmp), embedder, modes, args.vary)  # type: ignore[call-arg]
                    if name in ("locomo", "updates")
                    else RUNS[name](Path(tmp), embedder, modes)
                )
            print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            embedder.save()
    finally:
        embedder.save()
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
