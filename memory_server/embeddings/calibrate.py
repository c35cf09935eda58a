"""Measure the activation maxima the int8 graph's smoothing needs (memory_server/embeddings/int8.py) and ship them.

    python -m memory_server.embeddings.calibrate                 # every e5 variant
    python -m memory_server.embeddings.calibrate multilingual-e5-small

Runs the 4-bit graph over `calibration/texts.txt` (each text as a passage and as a query) and writes, per
variant, the largest absolute value each input channel of each linear layer took over real tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from memory_server.embeddings.e5 import VARIANTS, package_file
from memory_server.embeddings.e5_image import read_image
from memory_server.embeddings.e5_tokenizer import E5Tokenizer
from memory_server.embeddings.encoder_graph import build_tapped_graph
from memory_server.embeddings.graph_embedder import open_session, padded
from memory_server.embeddings.int8 import CALIBRATION_DIR, maxima_file

TEXTS_FILE = CALIBRATION_DIR / "texts.txt"
_BATCH = 16


def calibration_texts() -> list[str]:
    lines = TEXTS_FILE.read_text(encoding="utf-8").splitlines()
    texts = [line for line in lines if line.strip() and not line.startswith("#")]
    return [prefix + text for prefix in ("passage: ", "query: ") for text in texts]


def measure(model_file: Path) -> dict[str, np.ndarray]:
    """Per tap ("l<n>.qkv" …), the per-channel maximum of |input| over the calibration texts."""
    image = read_image(model_file)
    tokenizer = E5Tokenizer(image.vocabulary)
    graph, taps = build_tapped_graph(image.encoder)
    session = open_session(graph, threads=2)
    width = image.encoder.max_positions - 2
    rows = [[tokenizer.bos, *ids[:width], tokenizer.eos] for ids in tokenizer.ids_batch(calibration_texts())]
    maxima: dict[str, np.ndarray] = {}
    for start in range(0, len(rows), _BATCH):
        ids, mask = padded(rows[start : start + _BATCH], tokenizer.pad)
        outputs = session.run(list(taps.values()), {"word_vectors": image.word_vectors(ids), "mask": mask})
        for tap, values in zip(taps, outputs, strict=True):
            peak = (np.abs(values) * mask[..., None]).reshape(-1, values.shape[-1]).max(axis=0)
            maxima[tap] = np.maximum(maxima[tap], peak) if tap in maxima else peak
    return {tap: peak.astype(np.float32) for tap, peak in maxima.items()}


def main(argv: list[str]) -> int:
    for model in argv or list(VARIANTS):
        if model not in VARIANTS:
            print(f"unknown model {model!r}; expected one of {', '.join(VARIANTS)}", file=sys.stderr)
            return 2
        target = maxima_file(model)
        maxima: dict[str, Any] = dict(measure(package_file(model)))
        np.savez_compressed(target, **maxima)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
