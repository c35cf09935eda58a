"""What both embedding engines read from a sentence-transformers model directory, without importing either.

The model's name, the error that says how to get the model, and the module pipeline (modules.json, the
pooling config, the sequence-length limit) the ONNX engine must reproduce.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Marker file of a sentence-transformers model directory (lists the Transformer/Pooling/Normalize modules).
# Without it SentenceTransformer would silently build a mean-pooling model from a bare transformers checkpoint.
MODULES_FILE = "modules.json"

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"


class ModelNotFoundError(Exception):
    """The configured embedding model directory is missing or is not a sentence-transformers model."""

    def __init__(self, model_dir: Path, reason: str) -> None:
        self.model_dir = model_dir
        super().__init__(
            f"Embedding model not usable at {model_dir}: {reason}. "
            "Set MEMORY_EMBEDDING_MODEL to multilingual-e5-small or all-MiniLM-L6-v2 (bundled), "
            "or to a local sentence-transformers model directory."
        )


def model_name(model_dir: Path) -> str:
    """A name for the model that does not depend on where its directory lives.

    Sentence-transformers model cards carry the model's name as the first `# ` heading after the YAML
    front matter (the bundled card says `# all-MiniLM-L6-v2`); without a card, the directory name.
    """
    model_dir = Path(model_dir)
    card = model_dir / "README.md"
    if card.is_file():
        in_front_matter = in_code = False
        for number, raw in enumerate(card.read_text(encoding="utf-8", errors="replace").splitlines()):
            line = raw.strip()
            if line == "---" and (number == 0 or in_front_matter):
                in_front_matter = number == 0
                continue
            if line.startswith("```"):
                in_code = not in_code  # code samples contain `# comment` lines that are not headings
                continue
            if not in_front_matter and not in_code and line.startswith("# ") and line[2:].strip():
                return line[2:].strip()
    return model_dir.resolve().name


def check_model_dir(model_dir: Path) -> None:
    """Raise ModelNotFoundError unless `model_dir` looks like a sentence-transformers model directory."""
    if not model_dir.is_dir():
        raise ModelNotFoundError(model_dir, "the directory does not exist")
    if not (model_dir / MODULES_FILE).is_file():
        raise ModelNotFoundError(model_dir, f"no {MODULES_FILE}, so it is not a sentence-transformers model")


class UnsupportedPipelineError(ModelNotFoundError):
    """The model's modules are not the Transformer -> mean Pooling [-> Normalize] the ONNX engine reproduces."""


@dataclass(frozen=True)
class Pipeline:
    """The parts of a Transformer -> mean Pooling [-> Normalize] model that ONNX inference needs."""

    transformer_dir: Path  # config.json, tokenizer.json and the weights live here
    dimension: int
    max_seq_length: int


def read_pipeline(model_dir: Path) -> Pipeline:
    """Parse modules.json and the configs exactly as sentence-transformers applies them to this model.

    Raises UnsupportedPipelineError for anything but Transformer -> mean Pooling [-> Normalize]: other
    poolings or extra modules (Dense, ...) would make the ONNX vectors silently differ from torch's.
    """
    check_model_dir(model_dir)
    modules = _load_json(model_dir, model_dir / MODULES_FILE)
    types = [m.get("type") for m in modules] if isinstance(modules, list) else []
    if types not in ([_TRANSFORMER, _POOLING], [_TRANSFORMER, _POOLING, _NORMALIZE]):
        raise UnsupportedPipelineError(
            model_dir, f"the ONNX engine supports Transformer -> Pooling [-> Normalize] only, not {types}"
        )
    transformer_dir = model_dir / modules[0].get("path", "")
    pooling = _load_json(model_dir, model_dir / modules[1].get("path", "") / "config.json")
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True)
    if modes != ["pooling_mode_mean_tokens"]:
        raise UnsupportedPipelineError(model_dir, f"the ONNX engine supports mean pooling only, not {modes}")

    # sentence-transformers: sentence_bert_config.json's max_seq_length, else the tokenizer's
    # model_max_length, capped at the model's max_position_embeddings.
    sbert = _load_json(model_dir, transformer_dir / "sentence_bert_config.json", missing={})
    limit = sbert.get("max_seq_length")
    if limit is None:
        limit = _load_json(model_dir, transformer_dir / "tokenizer_config.json", missing={}).get("model_max_length")
    positions = _load_json(model_dir, transformer_dir / "config.json", missing={}).get("max_position_embeddings")
    limits = [int(v) for v in (limit, positions) if isinstance(v, (int, float))]
    if not limits:
        raise UnsupportedPipelineError(model_dir, "no max_seq_length in sentence_bert_config.json")
    dimension = pooling.get("word_embedding_dimension")
    if not isinstance(dimension, int):
        raise UnsupportedPipelineError(model_dir, "no word_embedding_dimension in the pooling config")
    return Pipeline(transformer_dir=transformer_dir, dimension=dimension, max_seq_length=min(limits))


def _load_json(model_dir: Path, path: Path, *, missing: Any = None) -> Any:
    if not path.is_file():
        if missing is not None:
            return missing
        raise ModelNotFoundError(model_dir, f"no {path.relative_to(model_dir)}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelNotFoundError(model_dir, f"{path.relative_to(model_dir)} is not valid JSON ({exc})") from exc
