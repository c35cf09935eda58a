"""The candidate set recall ranks: every visible memory when there are few, else a bounded prefetch.

A visible set up to FULL_SCAN_LIMIT is scored whole (exact: every memory a candidate). Above it, the
candidates are the union of the vector index's and the lexical index's best PREFETCH, plus their
conversation neighbours. Memories ranked recently are kept as ready-made candidates (checked against their
version), so only the others are read in full: their vectors and terms are most of a recall's reads.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from server.errors import Unavailable
from server.index.base import VectorIndex
from server.ranking.fusion import LEXICAL_CONTEXT_WEIGHTS, NEIGHBOUR_SCORE_WEIGHTS, Candidate, document_text
from server.ranking.lexical import analyze, prefetch_terms
from server.ranking.term_arrays import TERM_IDS
from server.storage.protocols import CandidateStore
from server.storage.records import CandidateRow, Scope

FULL_SCAN_LIMIT = 5000
PREFETCH = 200
# Memories kept as ready-made ranking candidates (~2.5 KB each with a 384-dimension vector: 250 MB at most).
CANDIDATE_CACHE = 100_000
# The lexical prefetch ranks the query's rarest terms by BM25 while their postings add up to at most this
# many, and takes memories with the common rest newest first (see `lexical_ids`).
LEXICAL_POSTINGS = 1000
DF_CACHE_TERMS = 100_000  # distinct query terms whose document frequency is kept (see `doc_freqs`)
# How far (in conversation seq) the ranking looks at neighbours; prefetched candidates bring theirs along.
NEIGHBOUR_REACH = max(abs(o) for o in (*LEXICAL_CONTEXT_WEIGHTS, *NEIGHBOUR_SCORE_WEIGHTS))


class CandidateSource:
    def __init__(self, store: CandidateStore, index: VectorIndex, *, model: str,
                 full_scan_limit: int = FULL_SCAN_LIMIT, lexical_postings: int = LEXICAL_POSTINGS,
                 cache_size: int = CANDIDATE_CACHE) -> None:
        self.store = store
        self.index = index
        self.model = model
        self.full_scan_limit = full_scan_limit
        self.lexical_postings = lexical_postings
        self.cache_size = cache_size
        self._cache: dict[int, tuple[str, Candidate]] = {}  # id -> (version, candidate)
        self._cache_lock = threading.Lock()
        self._df_cache: dict[str, tuple[int, int]] = {}  # term -> (memories holding it, top id then)

    def candidates(self, scope: Scope, query: str, vector: np.ndarray) -> list[Candidate]:
        visible = self.store.visible_count(scope, self.full_scan_limit)
        if visible == 0:
            return []
        if visible <= self.full_scan_limit:
            return self._load(scope, None)
        ids = set(self._dense_ids(scope, vector)) | set(self.lexical_ids(scope, query))
        ids |= self.store.neighbours(sorted(ids), NEIGHBOUR_REACH)
        # The scope is applied again when loading: neighbours must be visible too.
        return self._load(scope, sorted(ids)) if ids else []

    def cached(self, row_id: int) -> Candidate | None:
        entry = self._cache.get(row_id)
        return entry[1] if entry is not None else None

    def _load(self, scope: Scope, ids: Sequence[int] | None) -> list[Candidate]:
        cache = self._cache

        def fresh(row_id: int, version: str) -> bool:
            entry = cache.get(row_id)
            return entry is not None and entry[0] == version

        visible, rows = self.store.load(scope, ids, self.model, fresh)
        if rows:
            self._remember(rows)
        found = [cache.get(row_id) for row_id in visible]
        # A row deleted between the two reads, or without analysed terms, is not a candidate.
        return [entry[1] for entry in found if entry is not None]

    def _remember(self, rows: Sequence[CandidateRow]) -> None:
        entries = {row.id: (row.updated_at, Candidate(
            id=row.id, text=document_text(row.content, row.occurred_at), vector=row.vector,
            occurred_at=row.occurred_at, conversation_id=row.conversation_id, seq=row.seq, terms=row.terms,
            term_ids=TERM_IDS.of(row.terms) if row.terms is not None else None))
            for row in rows}
        with self._cache_lock:
            self._cache.update(entries)
            while len(self._cache) > self.cache_size:  # oldest entries first
                del self._cache[next(iter(self._cache))]

    def _dense_ids(self, scope: Scope, vector: np.ndarray) -> list[int]:
        try:
            return [hit.id for hit in self.index.search(vector, where=scope.index_filter(), limit=PREFETCH)]
        except Exception as exc:
            raise Unavailable(f"the vector index is unavailable: {exc}") from exc

    def lexical_ids(self, scope: Scope, query: str) -> list[int]:
        """Up to PREFETCH visible memories the lexical index finds for the query, at a cost bounded by
        `lexical_postings` rather than by the corpus (BM25 over a common term reads its whole posting list,
        growing with the corpus). In order of preference:
          1. memories with the query's rarest terms (postings adding up to at most `lexical_postings`), by BM25;
          2. memories holding every other (common) term, newest first;
          3. memories holding any common term, newest first.
        Steps 2 and 3 stop as soon as enough visible memories are found."""
        terms = sorted(set(analyze(query)))
        if not terms:
            return []
        selective, common = prefetch_terms(self.doc_freqs(terms), self.lexical_postings)
        found = self.store.best_by_terms(scope, selective, PREFETCH) if selective else []
        for every in (True, False) if len(common) > 1 else (False,):
            if not common or len(found) >= PREFETCH:
                break
            found += self.store.newest_with_terms(scope, common, every=every, limit=PREFETCH - len(found),
                                                  examine=max(self.lexical_postings, PREFETCH), exclude=set(found))
        return found

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """How many memories hold each term. Reading them walks each term's postings (linear in the corpus),
        and they only choose how the prefetch asks the lexical index, so they are cached while the corpus has
        grown or shrunk by at most 1% (judged by the highest memory id)."""
        top = self.store.top_id()
        fresh = max(100, top // 100)
        cache = self._df_cache
        out: dict[str, int] = {}
        for term in terms:
            hit = cache.get(term)
            if hit is not None and abs(top - hit[1]) <= fresh:
                out[term] = hit[0]
        missing = [t for t in terms if t not in out]
        if missing:
            found = self.store.doc_freqs(missing)
            if len(cache) > DF_CACHE_TERMS:
                cache.clear()  # rare; refilled by the next queries
            cache.update((term, (df, top)) for term, df in found.items())
            out.update(found)
        return out
