"""multilingual-e5-small's int8 graph: the shipped calibration is what the calibration texts measure, and
without it the model runs in 4-bit. (That its vectors match the package engine's: test_model_engines.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memory_server.embeddings import int8
from memory_server.embeddings.calibrate import measure
from memory_server.embeddings.e5 import e5_parts, package_file
from memory_server.embeddings.encoder_graph import Int8Columns, Linear, Q4Blocks, _joined
from memory_server.embeddings.graph_embedder import GraphEmbedder

MODEL = "multilingual-e5-small"


def test_the_shipped_maxima_are_what_the_calibration_texts_measure() -> None:
    shipped = int8.read_maxima(MODEL)
    assert shipped is not None, "run python -m memory_server.embeddings.calibrate"
    measured = measure(package_file(MODEL))
    assert sorted(shipped) == sorted(measured)
    for tap, values in measured.items():
        np.testing.assert_allclose(shipped[tap], values, rtol=1e-3, atol=1e-4, err_msg=tap)


def test_without_calibration_the_model_runs_in_4_bit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    texts = ["Ana mora em Lisboa desde 2019.", "The winter tyres are in crate 7."]
    four_bit = GraphEmbedder(e5_parts(package_file(MODEL), name=MODEL, int8=False)).embed_documents(texts)
    monkeypatch.setattr(int8, "CALIBRATION_DIR", tmp_path)
    uncalibrated = GraphEmbedder(e5_parts(package_file(MODEL), name=MODEL)).embed_documents(texts)
    np.testing.assert_array_equal(uncalibrated, four_bit)
    monkeypatch.undo()
    default = GraphEmbedder(e5_parts(package_file(MODEL), name=MODEL)).embed_documents(texts)
    assert not np.array_equal(default, four_bit)
    assert float(np.min(np.sum(default * four_bit, axis=1))) >= 0.999


def test_smoothing_leaves_the_product_unchanged() -> None:
    rng = np.random.default_rng(3)
    weights = rng.normal(size=(8, 64)).astype(np.float32)
    smooth = rng.uniform(0.2, 5.0, size=64).astype(np.float32)
    columns = Int8Columns.of(weights, smooth)
    x = rng.normal(size=(4, 64)).astype(np.float32)
    product = (x / smooth) @ (columns.values.astype(np.float32) * columns.scales[None, :])
    exact = x @ weights.T
    assert np.linalg.norm(product - exact) / np.linalg.norm(exact) < 0.05  # int8 rounding only
    unsmoothed = Int8Columns.of(weights * smooth[None, :])  # the smoothing itself is what puts x back
    assert np.linalg.norm(x @ (unsmoothed.values * unsmoothed.scales[None, :]) - exact) > 0.5 * np.linalg.norm(exact)


def test_the_three_projections_join_only_in_one_format() -> None:
    rng = np.random.default_rng(4)
    floats = [Linear(rng.normal(size=(4, 32)).astype(np.float32), np.zeros(4, np.float32)) for _ in range(3)]
    joined = _joined(*floats)
    assert isinstance(joined.weight, np.ndarray) and joined.weight.shape == (12, 32) and joined.bias.shape == (12,)
    packed = Q4Blocks(packed=np.zeros((4, 1, 16), np.uint8), scales=np.ones((4, 1), np.float32))
    with pytest.raises(ValueError, match="weight format"):
        _joined(floats[0], floats[1], Linear(packed, np.zeros(4, np.float32)))
