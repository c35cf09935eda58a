"""The read path of saved memories: `recall` (hybrid ranking over the candidate set) and `search_memory`
(strict: the vector index's nearest, at or above a threshold). Blocking: call from a worker thread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from embeddings.base import Embedder
from server.errors import Unavailable
from server.index.base import VectorIndex
from server.ranking.baselines import rank_single
from server.ranking.candidates import CandidateSource
from server.ranking.expansion import expansion_terms
from server.ranking.fusion import Candidate, rank
from server.ranking.lexical import analyze
from server.ranking.vocabulary import WordVectors
from server.storage.protocols import MemoryStore
from server.storage.records import Scope

RANKINGS = ("production", "dense", "lexical")


class Retrieval:
    def __init__(self, memories: MemoryStore, source: CandidateSource, index: VectorIndex, embedder: Embedder,
                 words: WordVectors, *, ranking: str = "production") -> None:
        self.memories = memories
        self.source = source
        self.index = index
        self.embedder = embedder
        self.words = words
        self.ranking = ranking  # "production"; "dense" or "lexical" alone are baselines for benchmarks

    def recall(self, scope: Scope, query: str, limit: int) -> list[dict[str, Any]]:
        """Best first, best effort: weak matches allowed, empty only if nothing visible exists."""
        if scope.empty:
            return []
        vector = self.embedder.embed_query(query)
        candidates = self.source.candidates(scope, query, vector)
        if self.ranking == "production":
            ranked = rank(query, vector, candidates, limit=limit,
                          expansion=self.expansion(scope.site_id, query, candidates))
        else:
            ranked = rank_single(self.ranking, query, vector, candidates, limit=limit)
        return self._hits([(c.id, score) for c, score in ranked])

    def search(self, scope: Scope, query: str, limit: int, min_score: float) -> list[dict[str, Any]]:
        """Strict: every filter matches exactly and the cosine similarity is at least min_score."""
        if scope.empty:
            return []
        vector = self.embedder.embed_query(query)
        try:
            found = self.index.search(vector, where=scope.index_filter(), limit=limit)
        except Exception as exc:
            raise Unavailable(f"the vector index is unavailable: {exc}") from exc
        # The index's time window is whole seconds, widened: the exact one is checked on the rows read back.
        return self._hits([(hit.id, hit.score) for hit in found if hit.score >= min_score], scope)

    def expansion(self, site_id: int, query: str, candidates: Sequence[Candidate]) -> dict[str, float]:
        """Near-synonyms of the query's words among the candidates' words (server/ranking/expansion.py)."""
        if not candidates:
            return {}
        stems, vectors = self.words.pool(site_id, candidates)
        return expansion_terms(query, analyze(query), self.words.for_query(site_id, query), stems, vectors)

    def _hits(self, scored: Sequence[tuple[int, float]], scope: Scope | None = None) -> list[dict[str, Any]]:
        found = self.memories.by_ids([i for i, _ in scored])
        # A memory forgotten between ranking and here is simply skipped.
        return [{**found[i].hit_fields(), "score": round(score, 6)} for i, score in scored
                if i in found and (scope is None or scope.admits(found[i]))]
