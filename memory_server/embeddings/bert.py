"""A BERT sentence-transformers model directory (all-MiniLM-L6-v2) run on onnxruntime without torch.

The weights are read from `model.safetensors` with numpy, the graph is built in memory (encoder_graph) and
the text is tokenised with `tokenizers` from `tokenizer.json`, [CLS] text [SEP] cut at max_seq_length: the
Transformer -> Pooling(mean) -> Normalize pipeline sentence-transformers runs, giving the same vectors.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from memory_server.embeddings.encoder_graph import Encoder, Layer, Linear, Norm, build_graph
from memory_server.embeddings.graph_embedder import ModelParts
from memory_server.embeddings.model_files import ModelNotFoundError, UnsupportedPipelineError, model_name, read_pipeline

_WEIGHTS = "model.safetensors"
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def bert_parts(model_dir: Path) -> ModelParts:
    """ModelParts of a sentence-transformers directory holding a BERT checkpoint in safetensors; raises
    UnsupportedPipelineError for anything else (the torch engine can still load it)."""
    model_dir = Path(model_dir)
    pipeline = read_pipeline(model_dir)
    source = pipeline.transformer_dir
    config = _json(model_dir, source / "config.json")
    if (
        config.get("model_type") != "bert"
        or config.get("hidden_act", "gelu") != "gelu"
        or config.get("position_embedding_type", "absolute") != "absolute"
    ):
        raise UnsupportedPipelineError(model_dir, "only BERT checkpoints (absolute positions, GELU) run without torch")
    if not (source / _WEIGHTS).is_file() or not (source / "tokenizer.json").is_file():
        raise UnsupportedPipelineError(model_dir, f"no {_WEIGHTS} and tokenizer.json to run without torch")
    tensors = read_safetensors(source / _WEIGHTS)
    tensors = {name.removeprefix("bert."): value for name, value in tensors.items()}
    table = tensors["embeddings.word_embeddings.weight"]
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def tokenize(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]

    def special(token: str) -> int:
        found = tokenizer.token_to_id(token)
        if found is None:
            raise UnsupportedPipelineError(model_dir, f"the tokenizer has no {token}")
        return int(found)

    return ModelParts(
        name=model_name(model_dir),
        dimension=pipeline.dimension,
        max_tokens=pipeline.max_seq_length,
        first=special("[CLS]"),
        last=special("[SEP]"),
        pad=int(config.get("pad_token_id", 0)),
        tokenize=tokenize,
        word_vectors=lambda ids: table[ids],
        graph=build_graph(_encoder(tensors, config)),
        windows=False,
    )


def _encoder(tensors: dict[str, np.ndarray], config: dict[str, Any]) -> Encoder:
    def linear(name: str) -> Linear:
        return Linear(tensors[f"{name}.weight"], tensors[f"{name}.bias"])

    def norm(name: str) -> Norm:
        return Norm(tensors[f"{name}.weight"], tensors[f"{name}.bias"])

    def layer(n: int) -> Layer:
        at = f"encoder.layer.{n}"
        return Layer(
            query=linear(f"{at}.attention.self.query"),
            key=linear(f"{at}.attention.self.key"),
            value=linear(f"{at}.attention.self.value"),
            attention_out=linear(f"{at}.attention.output.dense"),
            attention_norm=norm(f"{at}.attention.output.LayerNorm"),
            intermediate=linear(f"{at}.intermediate.dense"),
            output=linear(f"{at}.output.dense"),
            output_norm=norm(f"{at}.output.LayerNorm"),
        )

    layers = int(config["num_hidden_layers"])
    return Encoder(
        heads=int(config["num_attention_heads"]),
        eps=float(config.get("layer_norm_eps", 1e-12)),
        positions=tensors["embeddings.position_embeddings.weight"],
        token_type=tensors["embeddings.token_type_embeddings.weight"][0],
        embedding_norm=norm("embeddings.LayerNorm"),
        layers=[layer(n) for n in range(layers)],
    )


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as float32 (or its integer type): an 8-byte header length, a JSON
    header of names, dtypes, shapes and byte ranges, then the data."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    data = memoryview(raw)[8 + length :]
    tensors: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] not in _DTYPES:
            continue
        start, end = entry["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=_DTYPES[entry["dtype"]]).reshape(entry["shape"])
        tensors[name] = array.astype(np.float32) if array.dtype == np.float16 else array
    return tensors


def _json(model_dir: Path, path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(model_dir, f"cannot read {path.name} ({exc})") from exc
    if not isinstance(value, dict):
        raise ModelNotFoundError(model_dir, f"{path.name} is not a JSON object")
    return value
