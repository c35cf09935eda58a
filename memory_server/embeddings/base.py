"""The Embedder protocol: what the server needs from an embedding model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from memory_server.embeddings.similarity import Similarity


class Embedder(Protocol):
    """Turns text into unit-length float32 vectors.

    `name` identifies the model (recorded with the index and with each stored vector);
    `dimension` is the vector length. Both methods return L2-normalised vectors, so a dot product is the
    cosine similarity.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    @property
    def similarity(self) -> Similarity:
        """How this model's cosines map onto the one scale every similarity threshold is stated on."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape (len(texts), dimension), dtype float32."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Return a vector of shape (dimension,), dtype float32."""
        ...
