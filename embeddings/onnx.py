"""The onnxruntime embedder: the same vectors as SentenceEmbedder without importing torch.

`make models` exports the model's transformer to `<model_dir>/onnx/model.onnx` (embeddings.onnx_export).
Here the text is tokenised with `tokenizers` from tokenizer.json, run through that graph, mean-pooled over the
attention mask and L2-normalised: the Transformer -> Pooling(mean) -> Normalize pipeline sentence-transformers
runs for all-MiniLM-L6-v2. Loads in well under a second and a fraction of torch's memory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tokenizers import Encoding, Tokenizer

from embeddings.model_files import ModelNotFoundError, model_name, read_pipeline
from embeddings.query_cache import QueryCache

if TYPE_CHECKING:  # imported in the constructor: importing this module stays cheap
    import onnxruntime

# Where the export writes the graph, relative to the model directory (sentence-transformers' own ONNX layout).
ONNX_FILE = Path("onnx") / "model.onnx"
_TOKENIZER_FILE = "tokenizer.json"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Documents are tokenised and length-sorted this many batches at a time: most of the padding saving of
# sorting everything, with memory bounded for a large reindex.
_SORT_WINDOW_BATCHES = 16


class OnnxModelMissingError(ModelNotFoundError):
    """The model directory has no ONNX export (the factory falls back to the torch engine)."""


def onnx_path(model_dir: Path) -> Path:
    return Path(model_dir) / ONNX_FILE


class OnnxEmbedder:
    """`Embedder` over an ONNX export of a local sentence-transformers model: CPU, normalised float32,
    cached queries. `run()` on an onnxruntime session is thread-safe, so concurrent calls need no lock."""

    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int = 1,
        batch_size: int = 64,
        query_cache_size: int = 1024,
    ) -> None:
        model_dir = Path(model_dir)
        pipeline = read_pipeline(model_dir)  # raises ModelNotFoundError / UnsupportedPipelineError
        graph = onnx_path(model_dir)
        if not graph.is_file():
            raise OnnxModelMissingError(model_dir, f"no ONNX export at {ONNX_FILE}")
        tokenizer_file = pipeline.transformer_dir / _TOKENIZER_FILE
        if not tokenizer_file.is_file():
            raise ModelNotFoundError(model_dir, f"no {_TOKENIZER_FILE}")

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        # As sentence-transformers calls the tokenizer: [CLS] text [SEP], right-truncated to max_seq_length
        # (the file's own settings truncate and pad to 128). Padding happens per batch, in _run.
        tokenizer.enable_truncation(max_length=pipeline.max_seq_length)
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._session = _open_session(model_dir, graph, threads=threads)
        self._inputs = [i.name for i in self._session.get_inputs()]
        if unknown := sorted(set(self._inputs) - set(_INPUTS)):
            raise ModelNotFoundError(model_dir, f"the ONNX graph wants inputs {unknown} this engine cannot feed")
        output = self._session.get_outputs()[0]
        if output.shape and isinstance(output.shape[-1], int) and output.shape[-1] != pipeline.dimension:
            raise ModelNotFoundError(model_dir, f"the ONNX graph gives {output.shape[-1]} dimensions, "
                                                f"the pooling config {pipeline.dimension}")
        self._output = output.name

        self.name: str = model_name(model_dir)
        self.dimension: int = pipeline.dimension
        self.model_dir = model_dir
        self._max_seq_length = pipeline.max_seq_length
        self._batch_size = max(1, batch_size)
        self._cache = QueryCache(query_cache_size)
        self._parallel_batches = max(1, (os.cpu_count() or 1) // max(1, threads))
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Shape (len(texts), dimension), float32, unit rows. Texts past max_seq_length are truncated."""
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        window = self._batch_size * _SORT_WINDOW_BATCHES
        for start in range(0, len(texts), window):
            encodings = self._tokenizer.encode_batch(list(texts[start : start + window]))
            # Longest first, batched: rows of similar length pad little; `order` puts each row back.
            order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
            batches = [order[first : first + self._batch_size] for first in range(0, len(order), self._batch_size)]
            outputs = self._run_all([[encodings[i] for i in rows] for rows in batches])
            for rows, batch_vectors in zip(batches, outputs, strict=True):
                vectors[[start + i for i in rows]] = batch_vectors
        return vectors

    def _run_all(self, batches: list[list[Encoding]]) -> Iterator[np.ndarray]:
        """Several batches (a bulk import) run side by side, one per core: each run uses `threads` threads,
        and one thread per run keeps a single query steady while a bulk load can still use every core."""
        if len(batches) == 1 or self._parallel_batches == 1:
            return map(self._run, batches)
        if self._pool is None:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._parallel_batches, thread_name_prefix="embed")
        return self._pool.map(self._run, batches)

    def embed_query(self, text: str) -> np.ndarray:
        """Shape (dimension,), float32, unit length; repeated queries come from an LRU cache."""
        return self._cache.get_or_compute(text, lambda t: self._run([self._tokenizer.encode(t)])[0])

    def clear_cache(self) -> None:
        """Forget cached query vectors (benchmarks compare paths with the same cold cache)."""
        self._cache.clear()

    @property
    def max_seq_length(self) -> int:
        """Tokens (including the two special tokens) the model reads; the rest of a text is ignored."""
        return self._max_seq_length

    def _run(self, encodings: Sequence[Encoding]) -> np.ndarray:
        """Pad one batch to its longest row, run the graph, mean-pool over real tokens, L2-normalise."""
        width = max(len(e.ids) for e in encodings)
        feed = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in _INPUTS}
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            feed["input_ids"][row, :n] = encoding.ids
            feed["attention_mask"][row, :n] = encoding.attention_mask
            feed["token_type_ids"][row, :n] = encoding.type_ids
        (hidden,) = self._session.run([self._output], {name: feed[name] for name in self._inputs})
        mask = feed["attention_mask"].astype(np.float32)
        # sentence-transformers' Pooling(mean) then Normalize, in the same float32 arithmetic.
        summed = np.einsum("bsd,bs->bd", hidden.astype(np.float32, copy=False), mask)
        mean = summed / np.clip(mask.sum(axis=1, keepdims=True), 1e-9, None)
        norms = np.linalg.norm(mean, axis=1, keepdims=True)
        pooled: np.ndarray = (mean / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
        return pooled


def _open_session(model_dir: Path, graph: Path, *, threads: int) -> onnxruntime.InferenceSession:
    # Read when onnxruntime is imported: no telemetry, and no device id written to (or warned about under) $HOME.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

    options = onnxruntime.SessionOptions()
    # `threads` per call, like torch.set_num_threads for the torch engine; on 2 cores one thread is steadier
    # under contention than two (DESIGN.md).
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle pool threads would otherwise spin on a core the HTTP server and SQLite writer need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only: graph-optimiser notices are noise in stdio MCP logs
    try:
        return onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    except (OSError, RuntimeError, ort_errors.Fail, ort_errors.InvalidArgument, ort_errors.NoSuchFile,
            ort_errors.InvalidProtobuf, ort_errors.InvalidGraph, ort_errors.RuntimeException) as exc:
        raise ModelNotFoundError(model_dir, f"loading {ONNX_FILE} failed ({exc}); rerun `make models`") from exc
