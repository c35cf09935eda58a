"""Pytest plugin: one real embedding model and tokenizer for the whole session (loading costs seconds)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from embeddings.factory import load_embedder, resolve_model_dir
from embeddings.onnx import OnnxEmbedder
from embeddings.sentence import SentenceEmbedder
from embeddings.tokens import TokenCounter

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return resolve_model_dir(os.environ.get("MEMORY_EMBEDDING_MODEL"), project_root=REPO_ROOT)


@pytest.fixture(scope="session")
def embedder(model_dir: Path) -> OnnxEmbedder | SentenceEmbedder:
    """The engine the server uses by default (onnx; torch if the model has no ONNX export)."""
    return load_embedder(model_dir, threads=1)


@pytest.fixture(scope="session")
def torch_embedder(model_dir: Path) -> SentenceEmbedder:
    """The sentence-transformers engine, for parity checks only: loading it costs seconds and ~600 MB."""
    return SentenceEmbedder(model_dir, threads=1)


@pytest.fixture(scope="session")
def token_counter(model_dir: Path) -> TokenCounter:
    return TokenCounter(model_dir)
