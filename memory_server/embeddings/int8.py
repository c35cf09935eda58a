"""An encoder's linear layers in int8, for speed: about twice the passages a second of the 4-bit graph,
and half the time a query.

Activations are quantized a token at a time, and a few input channels of a layer carry values ten to forty
times the others (the feed-forward's inputs most of all); their range is moved into the weights
(SmoothQuant), which keeps the vectors within cosine 0.999 of the 4-bit model's. The activation maxima are
measured once on the texts in `calibration/texts.txt` (`python -m memory_server.embeddings.calibrate`) and
shipped beside them, one file per model variant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from memory_server.embeddings.encoder_graph import Encoder, Int8Columns, Linear, Q4Blocks

CALIBRATION_DIR = Path(__file__).parent / "calibration"
# How much of an input channel's range moves into the weights (0.5: the closest vectors on held-out texts).
_ALPHA = 0.5
# The inputs a layer's linear parts read: q, k and v share one, each other reads its own.
TAPS = {"query": "qkv", "key": "qkv", "value": "qkv", "attention_out": "ao", "intermediate": "fi", "output": "fo"}


def maxima_file(model: str) -> Path:
    return CALIBRATION_DIR / f"{model}.npz"


def read_maxima(model: str) -> dict[str, np.ndarray] | None:
    """Per-channel activation maxima keyed "l<layer>.<tap>", or None when none were shipped for `model`."""
    path = maxima_file(model)
    if not path.is_file():
        return None
    with np.load(path) as stored:
        return {name: np.asarray(stored[name], dtype=np.float32) for name in stored.files}


def to_int8(encoder: Encoder, maxima: Mapping[str, np.ndarray]) -> Encoder:
    """`encoder` with every linear layer's weights in int8, smoothed by the activation maxima."""
    layers = []
    for number, layer in enumerate(encoder.layers):
        weights = {field: _floats(getattr(layer, field).weight) for field in TAPS}
        smooth = {
            tap: _smoothing(maxima[f"l{number}.{tap}"], np.concatenate([weights[f] for f in TAPS if TAPS[f] == tap]))
            for tap in set(TAPS.values())
        }
        converted = {
            field: Linear(Int8Columns.of(weights[field], smooth[tap]), getattr(layer, field).bias)
            for field, tap in TAPS.items()
        }
        layers.append(
            dataclasses.replace(
                layer,
                query=converted["query"],
                key=converted["key"],
                value=converted["value"],
                attention_out=converted["attention_out"],
                intermediate=converted["intermediate"],
                output=converted["output"],
            )
        )
    return dataclasses.replace(encoder, layers=layers)


def _floats(weight: np.ndarray | Q4Blocks | Int8Columns) -> np.ndarray:
    if isinstance(weight, Q4Blocks):
        return weight.dequantize()
    if isinstance(weight, Int8Columns):
        raise ValueError("the layer is int8 already")
    return np.asarray(weight, dtype=np.float32)


def _smoothing(activation_max: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """activation max ^ alpha / weight max ^ (1 - alpha) per input channel."""
    weight_max = np.abs(weights).max(axis=0)
    factors: np.ndarray = np.maximum(activation_max, 1e-5) ** _ALPHA / np.maximum(weight_max, 1e-5) ** (1 - _ALPHA)
    return factors.astype(np.float32)
