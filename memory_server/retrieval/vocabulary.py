"""Single-word embeddings for query expansion (memory_server/ranking/expansion.py).

Each site's vocabulary -- the `vocabulary_words` of its memories' document texts -- is embedded word by word
with the bundled model when the memory is saved, stored in SQLite (`memory_words`, one row per site and
word, with the model that made the vector) and held in memory as one matrix per site. Query words are
looked up there, and the few that no memory uses are embedded on demand and kept in a small LRU.

Saving a memory embeds only the words the site has not seen yet, so after the first few hundred memories
a save adds almost nothing. Words stay until the site is deleted; vectors from another model are ignored
and re-embedded by `backfill` (run by the maintenance thread after a start-up or a `reindex`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np

from memory_server.embeddings.base import Embedder
from memory_server.ranking.candidate_set import ID, TEXT, Candidate, CandidateSet
from memory_server.ranking.expansion import vocabulary_words
from memory_server.ranking.fusion import document_text
from memory_server.ranking.lexical import stem
from memory_server.storage.protocols import WordStore
from memory_server.storage.records import Words

# Embedding batch for words: single words are a few tokens, so a large batch stays cheap.
WORD_BATCH = 256
# Query words that no memory of the site uses, kept per process.
QUERY_WORD_CACHE = 4096
# Memories whose word rows are kept between recalls (oldest dropped first).
CANDIDATE_WORD_CACHE = 200_000


class _SiteWords:
    """One site's words: word -> row of an append-only matrix, with each row's stem."""

    def __init__(self, dimension: int) -> None:
        self.rows: dict[str, int] = {}
        self.stems: list[str] = []
        self.matrix = np.empty((64, dimension), dtype=np.float32)

    def add(self, word: str, vector: np.ndarray) -> None:
        if word in self.rows:
            return
        n = len(self.stems)
        if n == len(self.matrix):  # grow by doubling; readers keep the old array, whose rows stay valid
            grown = np.empty((2 * n, self.matrix.shape[1]), dtype=np.float32)
            grown[:n] = self.matrix[:n]
            self.matrix = grown
        self.matrix[n] = vector
        self.stems.append(stem(word))
        self.rows[word] = n  # last: a row is visible only once written


class WordVectors:
    def __init__(self, embedder: Embedder, *, query_cache_size: int = QUERY_WORD_CACHE) -> None:
        self.embedder = embedder
        self._sites: dict[int, _SiteWords] = {}
        self._lock = threading.Lock()
        self._query_words: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache_size = query_cache_size
        self._candidate_rows: dict[tuple[int, int, str], np.ndarray] = {}

    # --- persistence ------------------------------------------------------------------------------

    def load(self, store: WordStore) -> int:
        """Read every stored word vector made by the current model (merged with what is held already, so
        a word saved meanwhile is not lost); returns how many rows were read."""
        found = list(store.all_words(self.embedder.name))
        with self._lock:
            for site_id, word, vector in found:
                self._site(site_id).add(word, vector)
        return len(found)

    def add(self, site_id: int, words: Words) -> None:
        """Make stored words visible to recall (after their transaction committed)."""
        if not words.words or words.vectors is None:
            return
        with self._lock:
            site = self._site(site_id)
            for word, vector in zip(words.words, words.vectors, strict=True):
                site.add(word, vector)

    def vocabulary(self, site_id: int) -> set[str]:
        """The words the site has a vector for."""
        site = self._sites.get(site_id)
        return set(site.rows) if site is not None else set()

    def _site(self, site_id: int) -> _SiteWords:
        site = self._sites.get(site_id)
        if site is None:
            site = self._sites[site_id] = _SiteWords(self.embedder.dimension)
        return site

    # --- saving memories --------------------------------------------------------------------------

    def unseen(self, site_id: int, documents: Iterable[str]) -> list[str]:
        """The words of `documents` (document texts) the site has no vector for, in first-seen order."""
        site = self._sites.get(site_id)
        known = site.rows if site is not None else {}
        words = (w for d in documents for w in vocabulary_words(d))
        return [w for w in dict.fromkeys(words) if w not in known]

    def new_words(self, site_id: int, documents: Iterable[str]) -> Words:
        """The site's words in `documents` it has no vector for yet, embedded (saved with their memory)."""
        words = self.unseen(site_id, documents)
        return Words(tuple(words), self.embed(words)) if words else Words()

    def embed(self, words: Sequence[str]) -> np.ndarray:
        if not words:
            return np.empty((0, self.embedder.dimension), dtype=np.float32)
        return np.concatenate(
            [self.embedder.embed_documents(list(words[i : i + WORD_BATCH])) for i in range(0, len(words), WORD_BATCH)]
        )

    def backfill(self, store: WordStore, *, chunk: int = 1000) -> int:
        """Embed the words of stored memories that have no vector from the current model (memories saved
        before this table existed, or after a model change). Returns how many words were added.

        The store records how far a backfill for which model got: memories saved since then carry their
        words already, so a restart reads only those, not the whole table again."""
        model = self.embedder.name
        added, after = 0, store.backfill_mark(model)
        while True:
            found = store.texts_after(after, chunk)
            if not found:
                return added
            after = found[-1][0]
            by_site: dict[int, list[str]] = {}
            for _, site_id, content, occurred_at in found:
                by_site.setdefault(site_id, []).append(document_text(content, occurred_at))
            new = [
                (site_id, words)
                for site_id, documents in by_site.items()
                if (words := self.new_words(site_id, documents)).words
            ]
            store.save_backfill(new, model, after)
            for site_id, words in new:
                self.add(site_id, words)
                added += len(words.words)

    # --- recall -----------------------------------------------------------------------------------

    def pool(self, site_id: int, candidates: Sequence[Candidate]) -> tuple[list[str], np.ndarray]:
        """The candidates' distinct words as (stems, vectors), row for row. Each candidate's rows are
        worked out once and kept while its text is unchanged; a CandidateSet keeps its whole pool once every
        word of it has its vector (a set reused for an unchanged scope skips this)."""
        site = self._sites.get(site_id)
        if site is None or not candidates:
            return [], np.empty((0, self.embedder.dimension), dtype=np.float32)
        matrix, stems = site.matrix, site.stems  # rows already present never change
        # The set keeps the words and their rows, not a copy of their vectors (a few MB for a large bucket).
        key = f"words of site {site_id}"
        if isinstance(candidates, CandidateSet) and (held := candidates.held(key)) is not None:
            words, rows = held
            return words, matrix[rows]
        pool = CandidateSet.of(candidates)
        parts = []
        complete = True
        for row_id, text in zip(pool.column(ID), pool.column(TEXT), strict=True):
            rows, known = self._rows_of(site, site_id, row_id, text)
            parts.append(rows)
            complete = complete and known
        unique = np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int32)
        present = unique[unique < len(matrix)]  # rows added after `matrix` was read are left out
        words = [stems[i] for i in present]
        if complete and len(present) == len(unique) and isinstance(candidates, CandidateSet):
            candidates.keep(key, (words, present))
        return words, matrix[present]

    def _rows_of(self, site: _SiteWords, site_id: int, row_id: int, text: str) -> tuple[np.ndarray, bool]:
        """A memory's words as rows of its site's matrix, and whether every one of them has its row yet;
        kept while its text is unchanged, once complete."""
        key = (site_id, row_id, text)
        rows = self._candidate_rows.get(key)
        if rows is not None:
            return rows, True
        words = vocabulary_words(text)
        # 32-bit rows (a site's vocabulary is far below 2**31 words): 4 MB less for 100k memories than 64.
        rows = np.fromiter((site.rows[w] for w in words if w in site.rows), dtype=np.int32)
        if len(rows) < len(words):  # a word still being embedded: work it out again next time
            return rows, False
        with self._lock:
            cache = self._candidate_rows
            cache[key] = rows
            while len(cache) > CANDIDATE_WORD_CACHE:
                cache.pop(next(iter(cache)))
        return rows, True

    def warm(self, memories: Iterable[tuple[int, int, str]]) -> None:
        """Work out the word rows of these (site id, memory id, document text), as their first recall would."""
        for site_id, row_id, text in memories:
            site = self._sites.get(site_id)
            if site is not None:
                self._rows_of(site, site_id, row_id, text)

    def for_query(self, site_id: int, query: str) -> dict[str, np.ndarray]:
        """Vectors of the query's words: the site's, or embedded now and cached for the others."""
        site = self._sites.get(site_id)
        out: dict[str, np.ndarray] = {}
        missing = []
        with self._lock:
            for word in vocabulary_words(query):
                row = site.rows.get(word) if site is not None else None
                if site is not None and row is not None:
                    out[word] = site.matrix[row]
                    continue
                cached = self._query_words.get(word)
                if cached is None:
                    missing.append(word)
                else:
                    self._query_words.move_to_end(word)
                    out[word] = cached
        if missing:
            vectors = self.embed(missing)
            with self._lock:
                for word, vector in zip(missing, vectors, strict=True):
                    out[word] = self._query_words[word] = vector
                while len(self._query_words) > self._query_cache_size:
                    self._query_words.popitem(last=False)
        return out
