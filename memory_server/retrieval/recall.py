"""The read path of saved memories: `recall` (hybrid ranking over the candidate set) and `search_memory`
(strict: the vector index's nearest, at or above a threshold). Blocking: call from a worker thread.
The ranking step by step, and its measurements: docs/ranking.md."""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from memory_server.embeddings.base import Embedder
from memory_server.errors import Unavailable
from memory_server.index.base import IndexFilter, VectorIndex
from memory_server.index.filters import scope_filter
from memory_server.ranking.answers import answer_boost, asked_kinds
from memory_server.ranking.baselines import rank_single
from memory_server.ranking.candidate_set import ID, Candidate, CandidateSet, stacked_vectors
from memory_server.ranking.dates import (
    as_of_end,
    date_boost,
    dated_inside,
    dated_spans,
    prefetch_windows,
    query_date_terms,
)
from memory_server.ranking.expansion import expansion_terms
from memory_server.ranking.facts import COPY, copies_of, is_copy, names, older_statements
from memory_server.ranking.fusion import ranked_positions
from memory_server.ranking.landmarks import landmark_terms, without_landmarks
from memory_server.ranking.lexical import analyze_query
from memory_server.ranking.periods import Period, query_periods
from memory_server.ranking.recency import as_of_first, asks_for_recent, newest_first, newest_of_fact_first, seconds_of
from memory_server.ranking.speakers import asked_speaker, speaker_boost, speakers
from memory_server.retrieval.candidates import PREFETCH, CandidateSource
from memory_server.retrieval.vocabulary import WordVectors
from memory_server.storage.protocols import MemoryStore
from memory_server.storage.records import Inserted, StoredMemory
from memory_server.storage.scope import Scope

log = logging.getLogger("memory_server.memories")

RANKINGS = ("production", "dense", "lexical")
# Searches of the vector index made at start-up, before the server reports ready (see `warm_up`).
WARM_UP_SEARCHES = 32
WARM_UP_QUERY = "warm up"
# Start-up prepares the scopes ranked whole for at most this long (see `_prepare_scopes`): long enough for a
# 100k-memory store on a slow machine, as a scope left unprepared pays for it on its first recall.
PREPARE_SECONDS = 20.0
# recall looks this many times `limit` down the ranking for superseded memories to place below their successor.
DEMOTION_WINDOW = 3
# recall folds the copies among this many times `limit` of its best (see `_distinct_facts`).
FOLD_WINDOW = 3
# remember looks at this many of a new memory's nearest for the ones saying the same thing (see `copies`).
SIMILAR_LOOKED = 8
# Where recall's query embedding runs, beside the work that does not need it (the lexical prefetch, the dates
# and words the query names): onnxruntime and SQLite release the GIL while they work, so on 2 cores the two
# overlap. One worker a core: more embeddings at once would only share the cores.
QUERY_EMBEDDINGS = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="query-embedding")


class Degraded(Protocol):
    """Whether the stored vectors are another model's for now (memory_server/memories/reembedding.py)."""

    @property
    def active(self) -> bool: ...

    def notice(self) -> str | None: ...


class Retrieval:
    """Reads of saved memories by meaning: `recall` (candidates, fusion, adjustments), `search_memory` (the
    vector index with strict filters) and the words a query is expanded with."""

    def __init__(
        self,
        memories: MemoryStore,
        source: CandidateSource,
        index: VectorIndex,
        embedder: Embedder,
        words: WordVectors,
        *,
        ranking: str = "production",
        recency: bool = True,
        dates: bool = True,
        speakers: bool = True,
        answers: bool = True,
        facts: bool = True,
        reembedding: Degraded | None = None,
    ) -> None:
        self.memories = memories
        self.source = source
        self.index = index
        self.embedder = embedder
        self.words = words
        self.ranking = ranking  # "production"; "dense" or "lexical" alone are baselines for benchmarks
        self.recency = recency  # off only for comparisons
        self.dates = dates  # likewise
        self.speakers = speakers  # likewise
        self.answers = answers  # likewise
        self.facts = facts  # likewise: the newest statement of a fact first, copies folded (ranking/facts.py)
        self.reembedding = reembedding  # while memories are embedded again with a new model

    def notice(self) -> str | None:
        """What an answer should say about how it was made (while memories are embedded again)."""
        return self.reembedding.notice() if self.reembedding is not None else None

    def recall(self, scope: Scope, query: str, limit: int, *, demote: bool = True) -> list[dict[str, Any]]:
        """Best first, best effort: weak matches allowed, empty only if nothing visible exists. A query that
        asks for the present state ranks the newest relevant memories first (ranking/recency.py). With `demote`,
        a memory superseded (by the end of the scope's window) ranks below the newest memory of its chain the
        scope sees, which is brought in when the ranking left it out."""
        if scope.empty:
            return []
        if self.reembedding is not None and self.reembedding.active:
            return self._by_words(scope, query, limit)
        # In the request's context, so that what it logs carries the request's id.
        embedding = QUERY_EMBEDDINGS.submit(contextvars.copy_context().run, self.embedder.embed_query, query)
        asked = query_periods(query) if self.dates and self.ranking == "production" else []
        candidates = self.source.candidates(scope, query, embedding.result, windows=prefetch_windows(asked))
        if self.ranking == "production":
            recent, until, current = self._times(query, asked, scope)
            expansion = without_landmarks(
                query, self.expansion(scope.site_id, query, candidates) | query_date_terms(asked)
            )
            vector = embedding.result()
            ids = candidates.column(ID)
            ranked = ranked_positions(
                query,
                vector,
                candidates,
                limit=len(candidates),
                expansion=expansion,
                adjust=self._adjustment(query, vector, candidates, asked, recent, until, current),
            )
            scored = [(ids[i], score) for i, score in ranked]
            positions = [i for i, _ in ranked]
            if self.facts:
                # not what held before a landmark ("before Emacs"): the older statement is the answer
                now = current and not landmark_terms(query)
                scored, copies = self._distinct_facts(scored, positions, candidates, limit, now, scope.site_id)
            else:
                copies = {}
        else:
            vector = embedding.result()
            scored = [
                (c.id, score)
                for c, score in rank_single(self.ranking, query, vector, candidates, limit=len(candidates))
            ]
            copies = {}
        hits = self._hits(scored[:limit], limit) if not demote else self._successors_first(scope, scored, limit)
        return self._with_copies(hits, copies) if copies else hits

    def _distinct_facts(
        self,
        scored: list[tuple[int, float]],
        positions: Sequence[int],
        candidates: CandidateSet,
        limit: int,
        current: bool,
        site_id: int,
    ) -> tuple[list[tuple[int, float]], dict[int, list[int]]]:
        """`scored` (at `positions` of the candidates) with its best FOLD_WINDOW x limit holding distinct facts
        (ranking/facts.py): without the copies, and for each memory kept, the ids of its copies; when what is
        true now answers the query (`current`), an older statement of a fact a newer hit states is placed
        below the others of the window, so the first places go to other facts; one with an explicit successor
        stays where it is, for `_successors_first` to place by its chain."""
        window = scored[: max(limit * FOLD_WINDOW, limit + 10)]
        if len(window) < 2:
            return scored, {}
        at = positions[: len(window)]
        vectors = stacked_vectors([candidates[n].vector for n in at])
        scale = self.embedder.similarity.text
        found = [names(candidates[n].text) for n in at]
        into = copies_of(range(len(window)), vectors, found, scale)
        copies: dict[int, list[int]] = {}
        for place, folded_into in into.items():
            copies.setdefault(window[folded_into][0], []).append(window[place][0])
        kept = [place for place in range(len(window)) if place not in into]
        older: set[int] = set()  # places in `kept`
        if current:
            seconds = [seconds_of(candidates[at[p]]) for p in kept]
            older = older_statements(vectors[kept], [found[p] for p in kept], seconds, scale)
        if older:
            linked = self.memories.replaced(site_id, [window[kept[n]][0] for n in older])
            older = {n for n in older if window[kept[n]][0] not in linked}
        if not into and not older:
            return scored, copies
        first: list[tuple[int, float]] = []
        moved: list[tuple[int, float]] = []
        for n, place in enumerate(kept):
            (moved if n in older else first).append(window[place])
        # below the last of the others, in their order (scores only order the answer)
        floor = first[-1][1] if first else 0.0
        below = [(row_id, floor - (n + 1) * 1e-6) for n, (row_id, _) in enumerate(moved)]
        return [*first, *below, *scored[len(window) :]], copies

    def _with_copies(self, hits: list[dict[str, Any]], copies: dict[int, list[int]]) -> list[dict[str, Any]]:
        """Each hit with the references of the copies folded into it (`copies`: by id)."""
        shown = self.memories.by_ids([i for ids in copies.values() for i in ids])
        kept = self.memories.by_ids(list(copies))
        folded = {
            kept[i].reference: [shown[c].reference for c in ids if c in shown] for i, ids in copies.items() if i in kept
        }
        for hit in hits:
            references = folded.get(hit["reference"])
            if references:
                hit["copies"] = references
        return hits

    def _by_words(self, scope: Scope, query: str, limit: int) -> list[dict[str, Any]]:
        """While the stored vectors are another model's: the lexical index's best for the query, which sees
        every memory whatever its vector, scored by rank."""
        ids = self.source.words_alone_ids(scope, query, limit)
        return self._hits([(row_id, 1.0 / (1.0 + rank)) for rank, row_id in enumerate(ids)], limit, scope)

    def _adjustment(
        self,
        query: str,
        vector: np.ndarray,
        candidates: CandidateSet,
        asked: Sequence[Period],
        recent: bool,
        until: float | None,
        current: bool,
    ) -> Callable[[np.ndarray], np.ndarray] | None:
        """What the query itself asks of the fused scores: the memories said by a person it names
        (ranking/speakers.py), those holding the kind of answer it asks for (a time, a number, a name:
        ranking/answers.py), memories dated in a period it names (ranking/dates.py), then, for a query
        about the present, the newest relevant ones, and for one about a past period without a time window,
        the newest relevant ones written by its end (ranking/recency.py); `recent`, `until` and `current` as
        `_times` reads them."""
        person = asked_speaker(query, speakers(candidates)) if self.speakers else None
        kinds = asked_kinds(query) if self.answers else []
        scale = self.embedder.similarity.text

        def adjust(fused: np.ndarray) -> np.ndarray:
            if person:
                fused = speaker_boost(fused, person, candidates)
            if kinds:
                fused = answer_boost(fused, kinds, candidates)
            if asked:
                fused = date_boost(fused, asked, candidates)
            if until is not None:
                naming = dated_inside(asked, candidates)
                return as_of_first(fused, vector, candidates, until, naming, scale, query if self.facts else None)
            if current:
                return newest_of_fact_first(fused, query, vector, candidates, scale)
            return newest_first(fused, vector, candidates, scale) if recent else fused

        return adjust

    def _times(self, query: str, asked: Sequence[Period], scope: Scope) -> tuple[bool, float | None, bool]:
        """Whether the query asks for the present state (`recent`); `until`, the end of a period it names with
        its year when the caller gave no time window (what was the case then: recency.py; not one relative to
        today, "last year", "in June": the memories may be from any time); and whether what is true now answers
        it (`current`: a period named without its year, "last week", asks what happened then: the dates decide)."""
        recent = self.recency and asks_for_recent(query)
        windowed = scope.occurred_before is not None or scope.occurred_after is not None
        until = None if recent or windowed or not asked else as_of_end(query)
        return recent, until, self.facts and self.recency and until is None and (recent or not asked)

    def _successors_first(self, scope: Scope, scored: Sequence[tuple[int, float]], limit: int) -> list[dict[str, Any]]:
        """The best `limit`, each superseded memory among them placed below the memories that superseded it.
        A chain's newest visible memory and the superseded ones that lead to it form a group, newest first
        (by valid_to: a memory replaced later is newer); each takes the best score of itself and every older
        one of the group, so the group keeps its order wherever its best member ranked, and a tie goes to the
        newer. Looked at: the best DEMOTION_WINDOW x limit (a memory ranked lower cannot end up in the
        answer, however it moves)."""
        position = {row_id: n for n, (row_id, _) in enumerate(scored)}
        score = dict(scored)
        top = scored[: max(limit * DEMOTION_WINDOW, limit + 10)]
        best = dict(top)
        # Which of them have a successor, from an index; only those are read whole (rarely any), and the
        # rest once the order is known: reading the 30 whole took 0.9 ms, most of it decoding their JSON.
        replaced = self.memories.replaced(scope.site_id, list(best))
        superseded = self.memories.by_ids([i for i in best if i in replaced and scope.replaced_in_window(replaced[i])])
        newest = self.memories.newest(scope, [m.reference for m in superseded.values()]) if superseded else {}
        found = dict(superseded)
        groups: dict[int, list[StoredMemory]] = {}
        for memory in superseded.values():
            successor = newest.get(memory.reference)
            if successor is not None:  # else replaced by a memory this scope does not see: it stays put
                found[successor.id] = successor
                groups.setdefault(successor.id, []).append(memory)
        behind: dict[int, int] = {}  # place in its group, 0 for the newest
        for head, members in groups.items():
            chain = [found[head], *sorted(members, key=lambda m: m.valid_to or "", reverse=True)]
            running = 0.0
            for place, memory in reversed(list(enumerate(chain))):
                running = max(running, best.get(memory.id, score.get(memory.id, 0.0)))
                best[memory.id], behind[memory.id] = running, place
        order = sorted(best, key=lambda i: (-best[i], behind.get(i, 0), position.get(i, len(position))))
        return self._hits([(i, best[i]) for i in order], limit, found=found)

    def warm_up(self, searches: int = WARM_UP_SEARCHES) -> None:
        """Run the query model once, prepare the held sets (`_prepare_scopes`), read the newest memories into
        the candidate cache (CandidateSource.warm) and search the vector index with `searches` random
        directions, so the first recalls after a start do not pay for first touches. Best effort: a store or
        an index that cannot be read is simply not warmed (recall reports it itself)."""
        self.embedder.embed_query(WARM_UP_QUERY)
        try:
            # The held sets first: each keeps its vectors in one matrix, which its cached memories then use,
            # so reading the newest memories after them does not copy those vectors again.
            self._prepare_scopes()
            log.info("read %d memories into the candidate cache", self.source.warm(self.words))
        except Exception as exc:  # noqa: BLE001 - a damaged page is reported by /readyz and the reads
            log.warning("the candidate cache was not warmed: %s", exc)
        rng = np.random.default_rng(0)
        try:
            for _ in range(searches):
                direction = rng.standard_normal(self.embedder.dimension).astype(np.float32)
                self.index.search(direction / np.linalg.norm(direction), where=IndexFilter(), limit=PREFETCH)
        except Exception:  # noqa: BLE001 - recall reports an unavailable index itself
            return

    def _prepare_scopes(self, seconds: float = PREPARE_SECONDS) -> None:
        """Recall once in each site and bucket small enough to be ranked whole (CandidateSource.
        scopes_ranked_whole), so that its candidate set and what the ranking derives from it are ready for
        its first recall, which would otherwise cost several times the next ones."""
        deadline, prepared = time.monotonic() + seconds, 0
        for scope in self.source.scopes_ranked_whole():
            if time.monotonic() > deadline:
                break
            self.recall(scope, WARM_UP_QUERY, 1)
            held = self.source.held(scope)
            if held is not None:
                dated_spans(held)  # ~15 us a memory: a 1,000-memory bucket's first query naming a date paid 15 ms
            prepared += 1
        log.info("prepared the candidates of %d sites and buckets", prepared)

    def copies(self, scope: Scope, inserted: Inserted, content: str) -> list[dict[str, Any]]:
        """The memories of `scope` that say what the memory just `inserted` says (ranking/facts.py), best
        first, as references and similarities on the reference scale: what recall will fold together."""
        if inserted.vector is None or inserted.row_id is None or scope.empty:
            return []
        try:
            found = self.index.search(inserted.vector, where=scope_filter(scope), limit=SIMILAR_LOOKED + 1)
        except Exception:  # noqa: BLE001 - the memory is saved; what resembles it is only advice
            log.warning("the memories like a new one were not looked for: the vector index is unavailable")
            return []
        scale = self.embedder.similarity.text
        close = {hit.id: scale(hit.score) for hit in found if hit.id != inserted.row_id and scale(hit.score) >= COPY}
        own = names(content)
        rows = self.memories.by_ids(list(close))
        return [
            {"reference": rows[i].reference, "score": round(close[i], 4)}
            for i in sorted(close, key=lambda i: -close[i])
            if i in rows and scope.admits(rows[i]) and is_copy(close[i], own, names(rows[i].content))
        ]

    def search(self, scope: Scope, query: str, limit: int, min_score: float) -> list[dict[str, Any]]:
        """Strict: every filter matches exactly and the similarity (the model's cosine on the reference scale,
        memory_server/embeddings/similarity.py) is at least min_score."""
        if scope.empty:
            return []
        vector = self.embedder.embed_query(query)
        try:
            found = self.index.search(vector, where=scope_filter(scope), limit=limit)
        except Exception as exc:
            raise Unavailable(f"the vector index is unavailable: {exc}") from exc
        # The index's time window is whole seconds, widened: the exact one is checked on the rows read back.
        scale = self.embedder.similarity.text
        scored = [(hit.id, min(1.0, max(0.0, scale(hit.score)))) for hit in found]
        return self._hits([(i, score) for i, score in scored if score >= min_score], limit, scope)

    def expansion(self, site_id: int, query: str, candidates: Sequence[Candidate]) -> dict[str, float]:
        """Near-synonyms of the query's words among the candidates' words (memory_server/ranking/expansion.py)."""
        if not candidates:
            return {}
        stems, vectors = self.words.pool(site_id, candidates)
        return expansion_terms(
            query,
            analyze_query(query),
            self.words.for_query(site_id, query),
            stems,
            vectors,
            scale=self.embedder.similarity.word,
        )

    def _hits(
        self,
        scored: Sequence[tuple[int, float]],
        limit: int,
        scope: Scope | None = None,
        *,
        found: dict[int, StoredMemory] | None = None,
    ) -> list[dict[str, Any]]:
        """The first `limit` of `scored` (best first) that can still be read and that `scope` admits, read by
        id `limit` at a time: a memory forgotten since it was ranked is skipped and the next one taken.
        `found`: memories read already."""
        found = {} if found is None else found
        hits: list[dict[str, Any]] = []
        step = max(1, limit)
        for first in range(0, len(scored), step):
            chunk = scored[first : first + step]
            found.update(self.memories.by_ids([i for i, _ in chunk if i not in found]))
            hits += [
                {**found[i].hit_fields(), "score": round(score, 6)}
                for i, score in chunk
                if i in found and (scope is None or scope.admits(found[i]))
            ]
            if len(hits) >= limit:
                break
        return hits[:limit]
