"""Builds the configured vector index; backend modules are imported only when chosen.

Importing qdrant_client costs time and memory an embedded deployment never needs, and the other way
round, so neither backend is imported at module level.
"""

from __future__ import annotations

from pathlib import Path

from .base import VectorIndex

BACKENDS = ("embedded", "server")
SERVER_TIMEOUT_S = 10


def open_index(
    *,
    backend: str,
    path: Path | None,
    url: str | None,
    api_key: str | None,
    collection: str,
) -> VectorIndex:
    if backend == "embedded":
        if path is None:
            raise ValueError("the embedded index needs a directory (path)")
        from .edge import EdgeIndex

        return EdgeIndex(path)
    if backend == "server":
        if not url:
            raise ValueError("the server index needs a Qdrant URL")
        from qdrant_client import QdrantClient

        from .qdrant import QdrantServerIndex

        # No compatibility probe at construction: it only warns; an unreachable server surfaces as
        # IndexUnavailable on the first call instead, with the URL in the message.
        client = QdrantClient(url=url, api_key=api_key, timeout=SERVER_TIMEOUT_S, check_compatibility=False)
        return QdrantServerIndex(client, collection, url=url)
    raise ValueError(f"unknown index backend {backend!r}: expected one of {BACKENDS}")
