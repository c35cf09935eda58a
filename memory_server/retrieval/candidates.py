"""The candidate set recall ranks: every visible memory when there are few, else a bounded prefetch.

A visible set up to FULL_SCAN_LIMIT is scored whole (exact: every memory a candidate). Above it, the
candidates are the union of the vector index's and the lexical index's best PREFETCH, plus their
conversation neighbours. Memories ranked recently are kept as ready-made candidates (checked against their
version), so only the others are read in full: their vectors and terms are most of a recall's reads.

A scope's size test is remembered for LARGE_SCOPE_SECONDS; a cached candidate is a plain tuple of plain values
(`Row`), which the garbage collector stops tracking; the candidate set of a scope ranked whole is held (`Held`)
and given again while its site's change number stays and none of its memories expired; start-up fills the
cache (`warm`) and prepares the held sets (Retrieval.warm_up). Measurements: docs/ranking.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from memory_server.errors import Unavailable
from memory_server.index.base import Range, VectorIndex
from memory_server.index.filters import scope_filter
from memory_server.ranking.candidate_set import CONVERSATION_ID, ID, Candidate, CandidateSet, Row, compact
from memory_server.ranking.fusion import LEXICAL_CONTEXT_WEIGHTS, NEIGHBOUR_SCORE_WEIGHTS, document_text
from memory_server.ranking.lexical import analyze_query, prefetch_terms
from memory_server.ranking.term_arrays import TERM_IDS
from memory_server.retrieval.vocabulary import WordVectors
from memory_server.storage.fts5 import fts_tokens
from memory_server.storage.protocols import CandidateStore
from memory_server.storage.records import CandidateRow
from memory_server.storage.scope import Scope

FULL_SCAN_LIMIT = 5000
# Memories each prefetch brings: more buys no recall and makes every later stage of a large scope's recall
# work on more.
PREFETCH = 100
# Memories kept as ready-made ranking candidates (their vectors kept compact).
CANDIDATE_CACHE = 100_000
# Candidates of the sets of scopes ranked whole kept for their next recall (`_whole`), beyond the cached
# candidates they share (their documents as arrays, their neighbours' positions).
WHOLE_SET_CANDIDATES = 100_000
# The lexical prefetch ranks the query's rarest terms by BM25 while their postings add up to at most this
# many (see `lexical_ids`), and at most LEXICAL_POSTINGS_SHARE of the store's memories when that is more
# than LEXICAL_POSTINGS_FLOOR: a larger share buys nothing but time.
LEXICAL_POSTINGS = 2000
LEXICAL_POSTINGS_SHARE = 0.05
LEXICAL_POSTINGS_FLOOR = 500
# Start-up reads the newest memories into the cache for at most this long (see `warm`).
WARM_SECONDS = 20.0
# Start-up prepares the scopes ranked whole of at least this many memories: a smaller one's first recall
# costs little more than the next (see `scopes_ranked_whole`).
PREPARE_MIN_MEMORIES = 200
# A scope found to see more than the full-scan limit is taken to still do so for this long (see `_is_large`).
LARGE_SCOPE_SECONDS = 60.0
LARGE_SCOPES = 4096  # scopes remembered as large (cleared when full)

# A cached candidate: its version (updated_at) and the candidate's fields (a plain tuple, see `Row`).
Entry = tuple[str, Row]
DF_CACHE_TERMS = 100_000  # distinct query tokens whose document frequency is kept (see `doc_freqs`)
# How far (in conversation seq) the ranking looks at neighbours; prefetched candidates bring theirs along.
NEIGHBOUR_REACH = max(abs(o) for o in (*LEXICAL_CONTEXT_WEIGHTS, *NEIGHBOUR_SCORE_WEIGHTS))


FOREVER = "9999-12-31T23:59:59.999999Z"  # after every instant a Scope can have


Fingerprint = tuple[int, int]


def fingerprint(visible: Sequence[tuple[int, str]]) -> Fingerprint:
    """What a held set keeps of the (id, version) list it was made of, to tell whether the scope still sees
    the same memories: their count and the list's 64-bit hash (two different lists of one scope agree with
    a chance of about 2**-64). The list itself held ~160 bytes a memory: 16 MB at 100k memories."""
    return len(visible), hash(tuple(visible))


@dataclass
class Held:
    """A scope's candidate set, with the fingerprint of the (id, version) of the memories it was made of, the
    site's change number when they were last looked at, and when the first of them expires."""

    visible: Fingerprint
    candidates: CandidateSet
    mark: int | None = None
    valid_until: str = FOREVER


EMPTY_HELD = Held(fingerprint(()), CandidateSet(()))


class CandidateSource:
    """The memories a recall ranks: the whole visible set when small, else the union of the vector and lexical
    prefetches and their conversation neighbours, read through a cache of ready-made candidates."""

    def __init__(
        self,
        store: CandidateStore,
        index: VectorIndex,
        *,
        model: str,
        full_scan_limit: int = FULL_SCAN_LIMIT,
        lexical_postings: int = LEXICAL_POSTINGS,
        cache_size: int = CANDIDATE_CACHE,
        whole_set_candidates: int = WHOLE_SET_CANDIDATES,
        prefetch: int = PREFETCH,
        change_mark: Callable[[int], int] | None = None,
    ) -> None:
        """`change_mark`: a site's change number (OutboxStore.change_mark), which grows with every change of
        one of its memories: while it stays, a scope's held set needs no look at the store."""
        self.store = store
        self.index = index
        self.model = model
        self.full_scan_limit = full_scan_limit
        self.lexical_postings = lexical_postings
        self.cache_size = cache_size
        self.prefetch = prefetch
        # id -> (version, then the fields of its Candidate): plain values only, so the garbage collector
        # stops tracking the tuple (see the module docstring).
        self._cache: dict[int, Entry] = {}
        self._cache_lock = threading.Lock()
        # (site, token) -> (the site's memories holding it, the site's size then)
        self._df_cache: dict[tuple[int, str], tuple[int, int]] = {}
        self._large: dict[Scope, float] = {}  # scope (its `at` aside) -> when it was counted as large
        self._whole_sets: dict[Scope, Held] = {}  # the last set of each scope ranked whole (`_whole`)
        self._held_candidates = 0
        self.whole_set_candidates = whole_set_candidates
        self.change_mark = change_mark

    def candidates(
        self,
        scope: Scope,
        query: str,
        vector: np.ndarray | Callable[[], np.ndarray],
        windows: Sequence[tuple[int, int]] = (),
    ) -> CandidateSet:
        """`vector`: the query's embedding, or what gives it when called: it is asked for only after the
        lexical prefetch, which does not need it, so the embedding can be computed meanwhile (see
        Retrieval.recall). `windows`: the (first, last) days around the days the query names; in a large
        scope the vector index's nearest about a day inside each (dated in it, or naming it) are prefetched
        too (see dates.prefetch_windows)."""
        if not self._is_large(scope):
            whole = self._whole(scope)
            if whole is not None:
                return whole
            self._remember_large(scope)
        # The lexical side and its neighbours first: they do not need the query's vector.
        lexical = set(self.lexical_ids(scope, query))
        ids = lexical | self._neighbours(scope.site_id, lexical)
        if callable(vector):
            vector = vector()
        nearest = set(self._dense_ids(scope, vector))
        # By the days a memory is about (its own and those its content names, dates.memory_days), not a
        # window on its occurred_at: a memory telling of the day is often dated days after it.
        for first, last in windows:
            nearest |= set(self._dense_ids(scope, vector, Range("days", gte=first, lte=last)))
        ids |= nearest | self._neighbours(scope.site_id, nearest - lexical)
        if not ids:
            return CandidateSet(())
        # The scope is applied again when loading: neighbours must be visible too.
        visible, rows = self.store.load(scope, sorted(ids), self.model, self._fresh)
        return CandidateSet.of_rows(self._candidates(visible, rows))

    def _neighbours(self, site_id: int, ids: set[int]) -> set[int]:
        """The conversation neighbours of `ids`, looked up for those that may have any: a memory cached
        without a conversation has none (saved facts, notes), and asking the store for them cost 0.2 ms a
        lookup of 100-200 ids at 100k memories. A cached memory given a conversation since is taken as it
        was cached until it is read again: its neighbours are missed by the prefetch meanwhile."""
        cache = self._cache
        asked = sorted(i for i in ids if (entry := cache.get(i)) is None or entry[1][CONVERSATION_ID] is not None)
        return self.store.neighbours(site_id, asked, NEIGHBOUR_REACH) if asked else set()

    def _whole(self, scope: Scope) -> CandidateSet | None:
        """Every memory the scope sees, or None when it sees more than the full-scan limit. The set of the
        last recall of this scope is given again while its memories and their versions are the same: without
        a look at them while the store has had no change since and none of them has expired (`Held`)."""
        # A time window is asked for once, as a rule: its set is not held (200 random 30-day windows at 100k
        # memories, ~4,100 in each, held 360 MB more for nothing).
        holds = scope.occurred_after is None and scope.occurred_before is None
        mark = self.change_mark(scope.site_id) if holds and self.change_mark is not None else None
        held = self._whole_sets.get(scope) if holds else None
        if held is not None and mark is not None and held.mark == mark and scope.at < held.valid_until:
            return held.candidates
        visible, rows = self.store.load(scope, None, self.model, self._fresh, up_to=self.full_scan_limit)
        if len(visible) > self.full_scan_limit:
            return None
        if not holds:
            return CandidateSet.of_rows(self._candidates(visible, rows))
        seen = fingerprint(visible)
        if held is None or held.visible != seen:
            # An expiry set or changed since would have changed a version: the same set, the same expiry.
            held = Held(
                seen,
                self._stacked(self._candidates(visible, rows)),
                valid_until=self.store.next_expiry(scope) or FOREVER,
            )
        held.mark = mark
        with self._cache_lock:
            replaced = self._whole_sets.pop(scope, EMPTY_HELD)
            self._held_candidates -= len(replaced.candidates)
            if replaced is not held:
                self._uncache_left(replaced.candidates, held.candidates)
            self._whole_sets[scope] = held
            self._held_candidates += len(held.candidates)
            while self._held_candidates > self.whole_set_candidates:  # the least recently built first
                self._held_candidates -= len(self._whole_sets.pop(next(iter(self._whole_sets))).candidates)
        return held.candidates

    def _uncache_left(self, old: CandidateSet, new: CandidateSet) -> None:
        """Uncache the memories of a scope's old set that its new set no longer holds (forgotten, expired, filed
        elsewhere). A cached vector is a row of the matrix of the last set built with it, which may be this old
        set or one a concurrent recall of the scope built: left cached, each would keep that whole matrix
        alive (n x 768 bytes for a set of n) until evicted. Under the cache lock."""
        cache = self._cache
        for row_id in set(old.column(ID)).difference(new.column(ID)):
            cache.pop(row_id, None)

    def held(self, scope: Scope) -> CandidateSet | None:
        """The set held for the scope, if any (as its last recall left it)."""
        held = self._whole_sets.get(scope)
        return held.candidates if held is not None else None

    def _stacked(self, rows: Sequence[Row]) -> CandidateSet:
        """A set to hold, its vectors stacked into one matrix once; the cached candidates then use its rows
        as their vectors, so the matrix is no second copy of them. A held bucket's ranking spent 1.2 ms of
        1.8 stacking its thousand vectors anew each time."""
        if not rows:
            return CandidateSet(())
        matrix = np.stack([vector for _, _, vector, *_ in rows])
        viewed: list[Row] = [
            (row_id, text, matrix[n], occurred_at, conversation_id, seq, terms, term_ids)
            for n, (row_id, text, _, occurred_at, conversation_id, seq, terms, term_ids) in enumerate(rows)
        ]
        with self._cache_lock:
            cache = self._cache
            for old, new in zip(rows, viewed, strict=True):
                entry = cache.get(new[0])
                if entry is not None and entry[1] is old:
                    cache[new[0]] = (entry[0], new)
        return CandidateSet.of_rows(viewed, matrix, lasting=True)

    def _is_large(self, scope: Scope) -> bool:
        """Whether the scope was counted above the full-scan limit in the last LARGE_SCOPE_SECONDS. New
        memories only make a scope larger; forgetting, expiry or supersession could bring it under the
        limit meanwhile, and then recall ranks a prefetch rather than every memory for up to that long,
        which is what it does for a large scope anyway. (Scope equality leaves out its `at`.)"""
        counted = self._large.get(scope)
        return counted is not None and time.monotonic() - counted < LARGE_SCOPE_SECONDS

    def _remember_large(self, scope: Scope) -> None:
        if len(self._large) >= LARGE_SCOPES:
            self._large.clear()
        self._large[scope] = time.monotonic()

    def cached(self, row_id: int) -> Candidate | None:
        entry = self._cache.get(row_id)
        return Candidate._make(entry[1]) if entry is not None else None

    def _fresh(self, row_id: int, version: str) -> bool:
        entry = self._cache.get(row_id)
        return entry is not None and entry[0] == version

    def _candidates(self, visible: Sequence[tuple[int, str]], rows: Sequence[CandidateRow]) -> list[Row]:
        if rows:
            self._remember(rows)
        cache = self._cache
        found = [(row_id, cache.get(row_id)) for row_id, _ in visible]
        # A row without analysed terms is not a candidate.
        return [entry[1] for _, entry in found if entry is not None]

    def _remember(self, rows: Sequence[CandidateRow]) -> None:
        """Cache the rows as candidates."""
        entries: dict[int, Entry] = {}
        # Compacted in one numpy call rather than one a row (23 us each: a third of preparing a bucket at
        # start-up); each row's vector is a view of the batch's matrix, freed with the last of them.
        vectors = compact(np.stack([row.vector for row in rows])) if rows else ()
        for row, vector in zip(rows, vectors, strict=True):
            # The terms as ids only (their strings would be ~180 bytes more a candidate).
            entries[row.id] = (
                row.updated_at,
                (
                    row.id,
                    document_text(row.content, row.occurred_at),
                    vector,
                    row.occurred_at,
                    row.conversation_id,
                    row.seq,
                    None,
                    TERM_IDS.of(row.terms),
                ),
            )
        with self._cache_lock:
            self._cache.update(entries)
            while len(self._cache) > self.cache_size:  # oldest entries first
                del self._cache[next(iter(self._cache))]

    def warm(self, words: WordVectors, *, seconds: float = WARM_SECONDS) -> int:
        """Read the newest memories into the cache (as many as it still has room for: start-up prepares the
        held sets first, see Retrieval.warm_up), with their words' rows, so the
        first recall of each bucket after a start does not read them one bucket at a time. Stops after
        `seconds`; returns how many were read."""
        deadline = time.monotonic() + seconds
        read = 0
        for rows in self.store.newest(self.model, self.cache_size):
            # A memory already cached as it is (a prepared set's, whose vector is a row of that set's matrix,
            # and whose words its recall found) is kept: caching it again would hold its vector
            # twice until the set is built anew.
            room = self.cache_size - len(self._cache)
            if room <= 0:
                break
            new = [row for row in rows if not self._fresh(row.id, row.updated_at)][:room]
            self._remember(new)
            cached = [(row.site_id, row.id, self._cache.get(row.id)) for row in new]
            texts = [(site_id, row_id, entry[1][1]) for site_id, row_id, entry in cached if entry is not None]
            words.warm(texts)
            read += len(rows)
            if time.monotonic() > deadline:
                break
        return read

    def scopes_ranked_whole(self) -> Iterator[Scope]:
        """The scopes of a site or a bucket small enough to be ranked whole and of at least
        PREPARE_MIN_MEMORIES, the most recently written to first, as many as the held sets have room for:
        what start-up prepares (see Retrieval.warm_up)."""
        sizes = self.store.bucket_sizes(self.model)
        sites: dict[int, int] = {}
        for site_id, _, count in sizes:
            sites[site_id] = sites.get(site_id, 0) + count
        room = self.whole_set_candidates
        scopes = [(Scope(site_id), count) for site_id, count in sites.items()]
        scopes += [
            (Scope(site_id).narrowed(bucket=bucket), count) for site_id, bucket, count in sizes if bucket is not None
        ]
        for scope, count in scopes:
            if PREPARE_MIN_MEMORIES <= count <= min(self.full_scan_limit, room):
                room -= count
                yield scope

    def _dense_ids(self, scope: Scope, vector: np.ndarray, *about: Range) -> list[int]:
        """The index's nearest in the scope and inside every range of `about`."""
        where = scope_filter(scope)
        where = replace(where, ranges=where.ranges + about)
        try:
            return [hit.id for hit in self.index.search(vector, where=where, limit=self.prefetch)]
        except Exception as exc:
            raise Unavailable(f"the vector index is unavailable: {exc}") from exc

    def lexical_ids(self, scope: Scope, query: str) -> list[int]:
        """Up to PREFETCH visible memories the lexical index finds for the query, at a cost bounded by
        `lexical_postings` rather than by the corpus (BM25 over a common term reads its whole posting list,
        growing with the corpus): the memories holding the query's rarest terms (postings adding up to at
        most `postings_budget`), best first by BM25. Memories reached only through common terms come from
        the dense prefetch and their neighbours. Every statistic is the scope's site's own, so what other
        sites write never changes what is found."""
        freqs, size = self._query_doc_freqs(scope.site_id, query)
        return self._best_by_terms(scope, prefetch_terms(freqs, self.postings_budget(size)))

    def words_alone_ids(self, scope: Scope, query: str, wanted: int) -> list[int]:
        """`lexical_ids` when there is no dense side to reach the memories holding only common terms (while
        they are embedded again): when the bounded prefetch finds fewer than `wanted`, every term of the
        query is searched, at a cost that grows with the corpus for as long as that lasts."""
        freqs, size = self._query_doc_freqs(scope.site_id, query)
        selective = prefetch_terms(freqs, self.postings_budget(size))
        found = self._best_by_terms(scope, selective)
        held = sorted(term for term, df in freqs.items() if df > 0)
        if len(found) >= wanted or len(held) == len(selective):  # nothing left out that could add more
            return found
        return list(dict.fromkeys([*found, *self._best_by_terms(scope, held)]))

    def _query_doc_freqs(self, site_id: int, query: str) -> tuple[dict[str, int], int]:
        """The query's distinct analysed terms (sorted) with their document frequencies in the site, and the
        site's size they were counted at."""
        terms = sorted(set(analyze_query(query)))
        if not terms:
            return {}, 0
        size = self.store.site_size(site_id)
        return self.doc_freqs(site_id, terms, size), size

    def _best_by_terms(self, scope: Scope, terms: list[str]) -> list[int]:
        return self.store.best_by_terms(scope, terms, self.prefetch) if terms else []

    def postings_budget(self, memories: int) -> int:
        """The lexical prefetch's postings budget in a site of `memories` memories."""
        share = max(LEXICAL_POSTINGS_FLOOR, int(memories * LEXICAL_POSTINGS_SHARE))
        return min(self.lexical_postings, share)

    def doc_freqs(self, site_id: int, terms: Sequence[str], size: int | None = None) -> dict[str, int]:
        """How many of the site's memories hold each term, counted up to the postings budget + 1. The lexical
        index holds a term as FTS5's tokens of it (accents folded, a Hindi word in pieces), so a term counts
        its rarest token's memories: at least as many as hold the term, as a search for the term finds
        them."""
        tokens = {term: fts_tokens(term) for term in terms}
        counted = self._token_doc_freqs(site_id, sorted({token for held in tokens.values() for token in held}), size)
        return {term: min((counted[token] for token in held), default=0) for term, held in tokens.items()}

    def _token_doc_freqs(self, site_id: int, tokens: Sequence[str], size: int | None) -> dict[str, int]:
        """How many of the site's memories hold each of FTS5's tokens. Reading them walks each token's postings
        (linear in the corpus, up to the budget on PostgreSQL), and they only choose how the prefetch asks the
        lexical index, so they are cached while the site has grown or shrunk by at most 1%."""
        size = self.store.site_size(site_id) if size is None else size
        fresh = max(100, size // 100)
        cache = self._df_cache
        out: dict[str, int] = {}
        for token in tokens:
            hit = cache.get((site_id, token))
            if hit is not None and abs(size - hit[1]) <= fresh:
                out[token] = hit[0]
        missing = [token for token in tokens if token not in out]
        if missing:
            # Counted only as far as the budget: a term more frequent than it is never searched.
            found = self.store.doc_freqs(site_id, missing, up_to=self.lexical_postings)
            if len(cache) > DF_CACHE_TERMS:
                cache.clear()  # rare; refilled by the next queries
            cache.update(((site_id, token), (df, size)) for token, df in found.items())
            out.update(found)
        return out
