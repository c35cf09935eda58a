"""Export a sentence-transformers model's transformer to ONNX for the onnxruntime engine (build time only).

    python -m embeddings.onnx_export models/all-MiniLM-L6-v2

writes `<model_dir>/onnx/model.onnx`: fp32, dynamic batch and sequence axes, inputs input_ids /
attention_mask / token_type_ids, output last_hidden_state (pooling and normalising happen in
embeddings.onnx). Needs torch, transformers and onnx, all of which the build has; the serving process
needs none of them. The export is checked against torch before it replaces an earlier one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from embeddings.model_files import read_pipeline
from embeddings.onnx import ONNX_FILE, OnnxEmbedder

OPSET = 17
# Largest difference in any token embedding tolerated between torch and onnxruntime (measured: ~4e-6).
TOLERANCE = 1e-3
_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
# The traced example must contain padding: transformers skips building the attention mask when every
# token is real, and tracing would then bake "no mask" into the graph, wrong for every padded batch.
_EXAMPLE = ["a short example", "a somewhat longer example sentence, so that the first row is padded"]
_CHECK = ["", "Where do I park my bike?", "Héllo wörld: 日本語のテキスト 🙂 " * 3, "word " * 400, "x"]


def export_onnx(model_dir: Path, *, opset: int = OPSET) -> Path:
    """Write `<model_dir>/onnx/model.onnx` and return its path; raises RuntimeError if it disagrees with torch."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # unannotated in transformers
    pipeline = read_pipeline(model_dir)
    tokenizer = Tokenizer.from_file(str(pipeline.transformer_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=pipeline.max_seq_length)
    tokenizer.enable_padding()
    # Eager attention traces to plain MatMul/Softmax, which onnxruntime's optimiser fuses; the vectors
    # equal the SDPA path sentence-transformers uses to ~1e-6.
    model = AutoModel.from_pretrained(str(pipeline.transformer_dir), local_files_only=True,
                                      attn_implementation="eager").eval()

    def batch(texts: list[str]) -> dict[str, Any]:
        encodings = tokenizer.encode_batch(texts)
        return {"input_ids": torch.tensor([e.ids for e in encodings]),
                "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
                "token_type_ids": torch.tensor([e.type_ids for e in encodings])}

    check = batch(_CHECK)
    with torch.no_grad():  # before exporting: tracing leaves the module in a state unfit for reference runs
        expected = model(**check).last_hidden_state.numpy()

    target = model_dir / ONNX_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        candidate = Path(tmp) / target.name
        example = batch(_EXAMPLE)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # TracerWarnings about Python-side shape checks; verified below
            torch.onnx.export(
                _last_hidden_state(model), tuple(example[n] for n in _NAMES), str(candidate),
                input_names=_NAMES, output_names=["last_hidden_state"],
                dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*_NAMES, "last_hidden_state"]},
                opset_version=opset, do_constant_folding=True, dynamo=False,
            )
        _verify(candidate, {n: t.numpy() for n, t in check.items()}, expected)
        os.replace(candidate, target)
    return target


def _last_hidden_state(model: Any) -> Any:
    """Wrap a transformers model as a module taking the three inputs positionally, returning one tensor."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    return LastHiddenState()


def _verify(graph: Path, feed: dict[str, np.ndarray], expected: np.ndarray) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, feed)
    mask = feed["attention_mask"][..., None].astype(bool)  # padded positions are ignored by pooling
    worst = float(np.abs(np.where(mask, got - expected, 0.0)).max())
    if worst > TOLERANCE:
        raise RuntimeError(f"the ONNX export differs from torch by up to {worst:.2e} (> {TOLERANCE}); not kept")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Export a sentence-transformers model to ONNX (fp32).")
    parser.add_argument("model_dir", type=Path, help="a local sentence-transformers model directory")
    parser.add_argument("--opset", type=int, default=OPSET)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    target = export_onnx(args.model_dir, opset=args.opset)
    # Load it the way the server will, so a graph the engine cannot use fails the build, not the server.
    embedder = OnnxEmbedder(args.model_dir, threads=1)
    if embedder.embed_query("ok").shape != (embedder.dimension,):
        raise RuntimeError("the exported model does not give vectors of the model's dimension")
    size_mb = target.stat().st_size / 1e6
    print(f"exported {target} ({size_mb:.0f} MB, opset {args.opset}) in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
