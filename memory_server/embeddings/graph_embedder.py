"""The onnxruntime embedder both bundled models run on: token ids in, unit vectors out, no torch.

A model is three things here: a tokenizer (text -> piece ids), a word table (ids -> vectors, looked up in
numpy so a large multilingual table can stay 4-bit on disk) and the encoder graph (embedding_graph), which
mean-pools its last layer over the mask. Long texts are either cut at the model's length (what
sentence-transformers does, and so what all-MiniLM-L6-v2's stored vectors are) or split into windows whose
pooled vectors are averaged by their token counts (what multilingual-e5-small's own engine does).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from memory_server.embeddings.query_cache import QueryCache
from memory_server.embeddings.similarity import REFERENCE, Similarity

if TYPE_CHECKING:  # imported when a session opens: importing this module stays cheap
    import onnxruntime

# Documents are tokenised and length-sorted this many batches at a time: most of the padding saving of
# sorting everything, with memory bounded for a large reindex.
_SORT_WINDOW_BATCHES = 16
# A batch holds at most this many tokens, padding included: 64 windows of 512 tokens held 2 GB of attention
# scores at once; two windows of 512 run no slower than more, and 40 short texts are still one batch.
_BATCH_TOKENS = 1024


@dataclass(frozen=True)
class ModelParts:
    """What a model brings: its name, the ids of its special tokens and how it turns text into vectors."""

    name: str
    dimension: int
    max_tokens: int  # the sequence length the model reads, both special tokens included
    first: int  # [CLS] / <s>
    last: int  # [SEP] / </s>
    pad: int
    tokenize: Callable[[list[str]], list[list[int]]]  # content ids, no special tokens, nothing cut
    word_vectors: Callable[[np.ndarray], np.ndarray]  # int64 [batch, length] -> float32 [batch, length, dim]
    graph: bytes  # embedding_graph.build_graph's model
    windows: bool  # long texts: averaged windows (True) or cut (False)
    query_prefix: str = ""
    document_prefix: str = ""
    similarity: Similarity = REFERENCE


@dataclass(frozen=True)
class _Window:
    text: int  # which input text
    ids: list[int]  # special tokens included


class GraphEmbedder:
    """`Embedder` over ModelParts: CPU, normalised float32, cached queries. onnxruntime's `run()` is
    thread-safe, so concurrent calls need no lock."""

    def __init__(
        self, parts: ModelParts, *, threads: int = 1, batch_size: int = 64, query_cache_size: int = 1024
    ) -> None:
        self._parts = parts
        self.name: str = parts.name
        self.dimension: int = parts.dimension
        self.similarity: Similarity = parts.similarity
        self._session = open_session(parts.graph, threads=threads)
        self._batch_size = max(1, batch_size)
        self._cache = QueryCache(query_cache_size)
        self._parallel_batches = max(1, (os.cpu_count() or 1) // max(1, threads))
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @property
    def max_seq_length(self) -> int:
        """Tokens (including the two special tokens) the model reads at once."""
        return self._parts.max_tokens

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Shape (len(texts), dimension), float32, unit rows."""
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        window = self._batch_size * _SORT_WINDOW_BATCHES
        for start in range(0, len(texts), window):
            chunk = [self._parts.document_prefix + t for t in texts[start : start + window]]
            vectors[start : start + len(chunk)] = self._embed(chunk)
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        """Shape (dimension,), float32, unit length; repeated queries come from an LRU cache."""
        return self._cache.get_or_compute(text, lambda t: self._embed([self._parts.query_prefix + t])[0])

    def clear_cache(self) -> None:
        """Forget cached query vectors (benchmarks compare paths with the same cold cache)."""
        self._cache.clear()

    def _embed(self, texts: list[str]) -> np.ndarray:
        windows = self._windows(self._parts.tokenize(texts))
        # Longest first, batched: rows of similar length pad little; each window knows its text.
        order = sorted(range(len(windows)), key=lambda i: -len(windows[i].ids))
        batches: list[list[_Window]] = []
        for i in order:
            # The first window of a batch is its longest, so it sets the padded width.
            if (
                not batches
                or len(batches[-1]) == self._batch_size
                or (len(batches[-1]) + 1) * len(batches[-1][0].ids) > _BATCH_TOKENS
            ):
                batches.append([])
            batches[-1].append(windows[i])
        sums = np.zeros((len(texts), self.dimension), dtype=np.float64)
        weights = np.zeros(len(texts), dtype=np.float64)
        for batch, pooled in zip(batches, self._run_all(batches), strict=True):
            for window, vector in zip(batch, pooled, strict=True):
                # A window's weight is its content tokens, so windows average to the whole text's mean.
                weight = max(1, len(window.ids) - 2)
                sums[window.text] += weight * vector
                weights[window.text] += weight
        means = sums / np.maximum(weights, 1)[:, None]
        norms = np.linalg.norm(means, axis=1, keepdims=True)
        vectors: np.ndarray = (means / np.maximum(norms, 1e-12)).astype(np.float32)
        return vectors

    def _windows(self, tokenized: list[list[int]]) -> list[_Window]:
        width = self._parts.max_tokens - 2
        first, last = self._parts.first, self._parts.last
        windows: list[_Window] = []
        for text, ids in enumerate(tokenized):
            if not self._parts.windows:
                ids = ids[:width]
            starts = range(0, max(1, len(ids)), width)
            windows += [_Window(text, [first, *ids[start : start + width], last]) for start in starts]
        return windows

    def _run_all(self, batches: list[list[_Window]]) -> Iterator[np.ndarray]:
        """Several batches (a bulk import) run side by side, one per core: each run uses `threads` threads,
        and one thread per run keeps a single query steady while a bulk load can still use every core."""
        if len(batches) == 1 or self._parallel_batches == 1:
            return map(self._run, batches)
        if self._pool is None:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._parallel_batches, thread_name_prefix="embed")
        return self._pool.map(self._run, batches)

    def _run(self, batch: list[_Window]) -> np.ndarray:
        """Pad one batch to its longest window and run the graph: the mean of each window's tokens."""
        ids, mask = padded([window.ids for window in batch], self._parts.pad)
        (pooled,) = self._session.run(None, {"word_vectors": self._parts.word_vectors(ids), "mask": mask})
        return np.asarray(pooled, dtype=np.float32)


def padded(rows: list[list[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Token id rows as the graph's inputs: int64 ids padded to the longest row, and the float32 mask."""
    width = max(map(len, rows))
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.float32)
    for row, tokens in enumerate(rows):
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1.0
    return ids, mask


def open_session(graph: bytes, *, threads: int) -> onnxruntime.InferenceSession:
    # Read when onnxruntime is imported: no telemetry, and no device id written to (or warned about under) $HOME.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # `threads` per call; on 2 cores one thread is steadier under contention than two.
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle pool threads would otherwise spin on a core the HTTP server and SQLite writer need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only: graph-optimiser notices are noise in stdio MCP logs
    return onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
