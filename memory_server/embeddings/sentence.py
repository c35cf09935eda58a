"""The sentence-transformers embedder: loads a model from a local directory only, never from the network."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

# Defined in model_files (shared with the ONNX engine, importable without torch); re-exported here because
# callers import them from this module.
from memory_server.embeddings.model_files import ModelNotFoundError, check_model_dir, model_name
from memory_server.embeddings.query_cache import QueryCache
from memory_server.embeddings.similarity import REFERENCE, Similarity

if TYPE_CHECKING:  # the real import costs 6-8 s, so it happens in the constructor only
    from sentence_transformers import SentenceTransformer

__all__ = ["ModelNotFoundError", "SentenceEmbedder", "model_name"]


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
        check_model_dir(model_dir)

        # Belt and braces against any hub lookup; huggingface_hub reads these when first imported, which is
        # why they are set before the import below. An explicit setting by the operator wins.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        # Process-wide: on 2 cores one thread is steadier under contention than two (two: 89-484 ms a query).
        torch.set_num_threads(max(1, threads))
        # A "Loading weights" tqdm bar on stderr is noise in a server (and in stdio MCP logs).
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # unannotated in transformers
        try:
            self._model: SentenceTransformer = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
        except (OSError, ValueError) as exc:  # missing weights/tokenizer, unrecognised config
            raise ModelNotFoundError(model_dir, f"loading failed ({exc})") from exc
        self._model.eval()

        dimension = self._model.get_embedding_dimension()
        if dimension is None:
            raise ModelNotFoundError(model_dir, "the model does not report an embedding dimension")
        self.name: str = model_name(model_dir)
        self.dimension: int = int(dimension)
        # The reference scale: a model of MiniLM's family unless measured otherwise.
        self.similarity: Similarity = REFERENCE
        self.model_dir = model_dir
        self._batch_size = batch_size
        # One encode at a time: the torch module is shared and torch already uses `threads` threads per
        # call, so concurrent calls from a worker pool would only contend for the same cores.
        self._encode_lock = threading.Lock()
        self._cache = QueryCache(query_cache_size)

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
        return self._cache.get_or_compute(text, lambda t: self._encode([t])[0])

    def clear_cache(self) -> None:
        """Forget cached query vectors (benchmarks compare paths with the same cold cache)."""
        self._cache.clear()

    @property
    def max_seq_length(self) -> int:
        """Tokens (including the two special tokens) the model reads; the rest of a text is ignored."""
        length = self._model.max_seq_length
        assert length is not None  # the bundled pipeline sets it (sentence_bert_config.json)
        return int(length)
