"""The Embedder protocol: what the server needs from an embedding model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    """Turns text into unit-length float32 vectors.

    `name` identifies the model (recorded with the index so a different model is refused at start-up);
    `dimension` is the vector length. Both methods return L2-normalised vectors, so a dot product is the
    cosine similarity.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape (len(texts), dimension), dtype float32."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Return a vector of shape (dimension,), dtype float32."""
        ...
