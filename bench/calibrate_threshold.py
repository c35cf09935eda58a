"""Calibrate search_memory's default min_score, and a model's similarity scale, on LoCoMo.

search_memory's score is the cosine similarity between the query's embedding and the memory's stored
embedding (of `document_text`), on the reference scale (memory_server/embeddings/similarity.py). For every question of
categories 1-4 this measures the score of
  - its evidence turns (should pass the threshold),
  - the other turns of the same conversation (mostly not about the question), and
  - every turn of the other conversations (unrelated: a topic never saved in that bucket),
and prints, per threshold, the share of each that passes, plus precision within the conversation. It also
prints the model's raw cosines between unrelated pairs (mean and spread) for texts and for the words of the
memories: with the reference model's, they give the model's Scale (`--model NAME` picks one).

    python bench/calibrate_threshold.py [--data PATH] [--model NAME] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from memory_server.embeddings.factory import load_embedder, resolve_model  # noqa: E402
from memory_server.ranking.expansion import vocabulary_words  # noqa: E402
from memory_server.ranking.fusion import document_text  # noqa: E402
from memory_server.services import PROJECT_ROOT  # noqa: E402

from bench.locomo import DEFAULT_DATA, load  # noqa: E402

THRESHOLDS = [round(t, 2) for t in np.arange(0.20, 0.71, 0.05)]


def spread(cosines: np.ndarray) -> dict[str, float]:
    q99, q999 = np.percentile(cosines, [99, 99.9])
    return {
        "mean": round(float(cosines.mean()), 4),
        "sd": round(float(cosines.std()), 4),
        "q99": round(float(q99), 4),
        "q99.9": round(float(q999), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", default=os.environ.get("MEMORY_EMBEDDING_MODEL"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    memories, questions = load(args.data)
    embedder = load_embedder(resolve_model(args.model, project_root=PROJECT_ROOT), threads=1)
    docs = embedder.embed_documents([document_text(m["content"], m["occurred_at"]) for m in memories])
    queries = np.stack([embedder.embed_query(q["question"]) for q in questions])
    buckets = np.array([m["bucket"] for m in memories])
    dia = [m["metadata"]["dia_id"] for m in memories]
    raw = queries @ docs.T
    scores = embedder.similarity.text.of(raw)
    evidence, same, other = [], [], []
    for qi, q in enumerate(questions):
        in_bucket = buckets == q["bucket"]
        is_evidence = np.array([b and d in q["evidence"] for b, d in zip(in_bucket, dia, strict=False)])
        evidence.append(scores[qi][is_evidence])
        same.append(scores[qi][in_bucket & ~is_evidence])
        other.append(scores[qi][~in_bucket])
    ev, sm, ot = (np.concatenate(x) for x in (evidence, same, other))
    rows = []
    for t in THRESHOLDS:
        tp, fp = int((ev >= t).sum()), int((sm >= t).sum())
        rows.append(
            {
                "min_score": t,
                "evidence_pass": round(float((ev >= t).mean()), 3),
                "same_conversation_pass": round(float((sm >= t).mean()), 4),
                "unrelated_pass": round(float((ot >= t).mean()), 5),
                "precision_in_conversation": round(tp / (tp + fp), 3) if tp + fp else None,
                "questions_with_any_unrelated_hit": round(float(np.mean([(o >= t).any() for o in other])), 3),
            }
        )
    unrelated = np.concatenate([raw[qi][buckets != q["bucket"]] for qi, q in enumerate(questions)])
    words = sorted({w for m in memories for w in vocabulary_words(m["content"])})[:4000]
    word_cosines = embedder.embed_documents(words)
    word_pairs = (word_cosines @ word_cosines.T)[np.triu_indices(len(words), 1)]
    report = {
        "model": embedder.name,
        "pairs": {"evidence": len(ev), "same_conversation": len(sm), "unrelated": len(ot)},
        "raw_unrelated_texts": spread(unrelated),
        "raw_word_pairs": {**spread(word_pairs), "words": len(words)},
        "thresholds": rows,
    }
    print(json.dumps(report, indent=2))
    print(
        f"\n{'min_score':>9} {'evidence':>9} {'same conv':>10} {'unrelated':>10} {'precision':>10} {'q w/ unrel':>11}"
    )
    for r in rows:
        print(
            f"{r['min_score']:>9.2f} {r['evidence_pass']:>9.3f} {r['same_conversation_pass']:>10.4f}"
            f" {r['unrelated_pass']:>10.5f} {str(r['precision_in_conversation']):>10} "
            f"{r['questions_with_any_unrelated_hit']:>11.3f}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
