"""Pytest plugin: the real embedding models and tokenizer, loaded once for the session (loading costs seconds)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memory_server.embeddings.base import Embedder
from memory_server.embeddings.factory import ModelChoice, load_embedder, minilm_dir, resolve_model
from memory_server.embeddings.graph_embedder import GraphEmbedder
from memory_server.embeddings.sentence import SentenceEmbedder
from memory_server.embeddings.tokens import TokenCounter

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def model_choice() -> ModelChoice:
    """The model the server loads in this test run (MEMORY_EMBEDDING_MODEL, else the default)."""
    return resolve_model(os.environ.get("MEMORY_EMBEDDING_MODEL"), project_root=REPO_ROOT)


@pytest.fixture(scope="session")
def embedder(model_choice: ModelChoice) -> Embedder:
    """The model and engine the server uses by default."""
    return load_embedder(model_choice, threads=1)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """all-MiniLM-L6-v2's sentence-transformers directory (the English-only choice)."""
    return minilm_dir(REPO_ROOT)


@pytest.fixture(scope="session")
def minilm_embedder(model_dir: Path) -> GraphEmbedder:
    embedder = load_embedder(ModelChoice("all-MiniLM-L6-v2", model_dir), threads=1)
    assert isinstance(embedder, GraphEmbedder)
    return embedder


@pytest.fixture(scope="session")
def torch_embedder(model_dir: Path) -> SentenceEmbedder:
    """The sentence-transformers engine, for parity checks only: loading it costs seconds and ~600 MB."""
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    return SentenceEmbedder(model_dir, threads=1)


@pytest.fixture(scope="session")
def token_counter() -> TokenCounter:
    return TokenCounter()
