"""Saved memories: remember, recall, search, context packs, forget — and keeping the index in step.

SQLite is the authority; the vector index is derived. Every write commits to SQLite first (with the
embedding, `indexed = 0`), then writes the index, then marks the row indexed; `sync_index()` repairs what a
crash or an index outage left behind, and runs at start-up and in the background.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import anyio
import numpy as np

from embeddings.base import Embedder
from server.memories import rows
from server.auth.core import READ, WRITE, Principal
from server.storage.sqlite.db import Readers, Writer
from server.errors import InvalidParameters, NotFound, Unavailable
from server.ranking.expansion import expansion_terms
from server.index.base import IndexInfo, IndexPoint, IndexUnavailable, VectorIndex, batched
from server.logging_setup import Throttle
from server.ranking.lexical import BM25Corpus, analyze, fts_phrase, prefetch_terms
from server.memories.rows import NewMemory, Scope, scope_for
from server.ranking.fusion import LEXICAL_CONTEXT_WEIGHTS, NEIGHBOUR_SCORE_WEIGHTS, Candidate, document_text, rank
from server.ranking.vocabulary import WordVectors

log = logging.getLogger("memory_server.memories")

# A visible set up to this size is scored whole (exact, every memory a candidate); above it, the
# candidates are the union of the vector index's and FTS5's best PREFETCH, plus their neighbours.
FULL_SCAN_LIMIT = 5000
PREFETCH = 200
# Memories kept as ready-made ranking candidates (~2.5 KB each with a 384-dimension vector: 250 MB at most).
CANDIDATE_CACHE = 100_000
_NO_ENTRY: tuple[None, None] = (None, None)
# The lexical prefetch ranks the query's rarest terms by bm25 while their postings add up to at most this
# many, and takes rows with the common rest newest first (see `_lexical_ids`).
LEXICAL_POSTINGS = 1000
DF_CACHE_TERMS = 100_000  # distinct query terms whose document frequency is kept (see `_doc_freqs`)
# Bulk import embeds and commits this many memories at a time: several model batches per call, which the
# onnx engine runs one per core (64 at a time: 156 memories/s on 2 cores; 512: about twice that).
EMBED_BATCH = 512
# Recall's reader connections map up to this much of the database file instead of reading it a page at a
# time: a full scan of a thousand memories reads ~2 MB of scattered rows, ~40% less CPU mapped (mapped
# pages count in RSS once touched, as the OS page cache holds them anyway).
READ_MMAP_BYTES = 256 * 1024 * 1024
# How far (in conversation seq) the ranking looks at neighbours; prefetched candidates bring theirs along.
NEIGHBOUR_REACH = max(abs(o) for o in (*LEXICAL_CONTEXT_WEIGHTS, *NEIGHBOUR_SCORE_WEIGHTS))


def rank_single(side: str, query: str, vector: np.ndarray, candidates: Sequence[Candidate], *,
                limit: int) -> list[tuple[Candidate, float]]:
    """Baseline rankings for comparison: dense cosine alone, or BM25 alone."""
    if not candidates:
        return []
    if side == "dense":
        scores = np.stack([c.vector for c in candidates]) @ vector
    else:
        corpus = BM25Corpus([c.terms if c.terms is not None else analyze(c.text) for c in candidates])
        scores = corpus.score(analyze(query))
    order = np.argsort(-scores, kind="stable")[:limit]
    return [(candidates[i], float(scores[i])) for i in order]


class IndexMismatch(Exception):
    """The index was built with another model; its vectors cannot be compared with this model's."""


@dataclass(frozen=True, slots=True)
class Filters:
    project: str | None = None
    team: str | None = None
    bucket: str | None = None
    type: str | None = None
    tags: tuple[str, ...] = ()


class MemoryService:
    def __init__(self, *, writer: Writer, readers: Readers, embedder: Embedder, index: VectorIndex,
                 max_content_bytes: int, ranking: str = "production",
                 full_scan_limit: int = FULL_SCAN_LIMIT, lexical_postings: int = LEXICAL_POSTINGS,
                 candidate_cache_size: int = CANDIDATE_CACHE) -> None:
        self.writer = writer
        self.readers = readers
        self.embedder = embedder
        self.index = index
        self.max_content_bytes = max_content_bytes
        self.ranking = ranking  # "production"; "dense" or "lexical" alone are baselines for benchmarks
        self.full_scan_limit = full_scan_limit
        self.lexical_postings = lexical_postings
        self._index_lock = threading.Lock()  # index writes from request threads and the repair loop
        self._throttle = Throttle(log)
        self._mapped = threading.local()  # the reader connection of this thread that maps the file
        # id -> (updated_at, Candidate) of rows ranked recently; see _load_candidates.
        self._candidate_cache: dict[int, tuple[str, Candidate]] = {}
        self._candidate_cache_lock = threading.Lock()
        self.candidate_cache_size = candidate_cache_size
        self._df_cache: dict[str, tuple[int, int]] = {}  # term -> (memories holding it, max(id) then)
        self.words = WordVectors(embedder)  # single-word vectors for query expansion

    # --- start-up ---------------------------------------------------------------------------------

    def check_model(self) -> None:
        """Refuse an index built with another model; initialise a new one."""
        expected = IndexInfo(model=self.embedder.name, dimension=self.embedder.dimension)
        info = self.index.info()
        self.words.load(self.readers.get())
        if info is None:
            self.index.reset(expected)
            self._mark_all_unindexed()
            return
        if info != expected:
            raise IndexMismatch(
                f"the vector index was built with {info.model} ({info.dimension} dimensions) but the "
                f"configured model is {expected.model} ({expected.dimension} dimensions); run "
                "`memory-server reindex` to rebuild the index from SQLite with the configured model"
            )

    def _mark_all_unindexed(self) -> None:
        self.writer.run_sync(lambda conn: conn.execute("UPDATE memories SET indexed = 0 WHERE indexed = 1"))

    # --- writes -----------------------------------------------------------------------------------

    def validate(self, **fields: Any) -> NewMemory:
        return rows.validate_new(**fields, max_content_bytes=self.max_content_bytes)

    async def remember(self, principal: Principal, memory: NewMemory) -> dict[str, Any]:
        principal.require(WRITE)
        rows.check_write_bounds(principal, memory)
        existing = await anyio.to_thread.run_sync(
            lambda: rows.find_duplicate(self.readers.get(), principal.site_id, memory))  # not on the event loop
        if existing is not None:
            return {"reference": existing, "created": False}
        document = document_text(memory.content, memory.occurred_at)
        site_id = principal.site_id
        vectors, words = await anyio.to_thread.run_sync(self._embed, site_id, [document])

        def insert(conn: Any) -> rows.Inserted:
            inserted = rows.insert_memory(conn, site_id, memory, document=document, vector=vectors[0],
                                          model=self.embedder.name)
            self._store_words(conn, site_id, words)
            return inserted

        inserted = await self.writer.run(insert)
        self.words.add(site_id, *words)
        if inserted.row_id is not None:
            await anyio.to_thread.run_sync(self._index_ids, [inserted.row_id])
        return {"reference": inserted.reference, "created": inserted.created}

    def remember_many(self, site_id: int, memories: Sequence[NewMemory],
                      kept: Sequence[rows.Kept | None] | None = None) -> list[rows.Inserted]:
        """Bulk remember (blocking), the path of imports too: memories decided by stored rows (duplicates,
        references already present) are settled first without model time; the rest are embedded EMBED_BATCH at
        a time, committed one transaction per batch with their words, then indexed. `kept`: per memory, the
        reference and timestamps an import keeps."""
        keeps = list(kept) if kept is not None else [None] * len(memories)
        results: list[rows.Inserted] = []
        for batch in batched(list(zip(memories, keeps)), EMBED_BATCH):
            conn = self.readers.get()
            decided = [rows.decided_by_stored(conn, site_id, m, k) for m, k in batch]
            todo = [pair for pair, outcome in zip(batch, decided) if outcome is None]
            inserted = iter(self._insert_batch(site_id, todo) if todo else [])
            results += [outcome if outcome is not None else next(inserted) for outcome in decided]
        return results

    def _insert_batch(self, site_id: int, batch: Sequence[tuple[NewMemory, rows.Kept | None]]) -> list[rows.Inserted]:
        documents = [document_text(m.content, m.occurred_at) for m, _ in batch]
        vectors, words = self._embed(site_id, documents)

        def insert(conn: Any) -> list[rows.Inserted]:
            self._store_words(conn, site_id, words)
            return [rows.insert_memory(conn, site_id, m, document=d, vector=v, model=self.embedder.name, kept=k)
                    for (m, k), d, v in zip(batch, documents, vectors)]

        inserted = self.writer.run_sync(insert)
        self.words.add(site_id, *words)
        self._index_ids([i.row_id for i in inserted if i.row_id is not None])
        return inserted

    def _embed(self, site_id: int, documents: Sequence[str]) -> tuple[np.ndarray, tuple[list[str], np.ndarray]]:
        """The documents' vectors, and the site's new words with their vectors (saved with the memory)."""
        vectors = self.embedder.embed_documents(documents)
        words = self.words.unseen(site_id, documents)
        return vectors, (words, self.words.embed(words))

    def _store_words(self, conn: Any, site_id: int, words: tuple[list[str], np.ndarray]) -> None:
        if words[0]:
            self.words.store(conn, site_id, words[0], words[1], self.embedder.name)

    async def forget(self, principal: Principal, reference: str) -> dict[str, Any]:
        principal.require(WRITE)
        if not isinstance(reference, str) or not 1 <= len(reference) <= 128:
            raise NotFound("no memory with that reference")
        scope = scope_for(principal)
        row_id = await self.writer.run(lambda conn: rows.delete_memory(conn, scope, reference))
        if row_id is None:
            raise NotFound(f"no memory with reference {reference!r}")
        await anyio.to_thread.run_sync(self._apply_deletions, [row_id])
        return {"reference": reference, "forgotten": True}

    # --- the outbox -------------------------------------------------------------------------------

    def _index_ids(self, ids: Sequence[int]) -> None:
        """Write committed rows to the index and mark them indexed; on failure they stay in the backlog."""
        if not ids:
            return
        conn = self.readers.get()
        with self._index_lock:
            # Rows are read under the lock: a row updated after this read is indexed again by its updater,
            # after us, so the index never ends on an older state of a row than SQLite holds.
            points, versions = [], []
            for chunk in batched(ids, 500):
                found = conn.execute(
                    f"SELECT id, site_id, team, project, bucket, type, tags, vector, vector_model, updated_at"
                    f" FROM memories WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                points += [self._point(row) for row in found]
                versions += [(int(row["id"]), row["updated_at"]) for row in found]
            try:
                self.index.upsert(points)
                # Marked indexed only once the index has it on disk: a point lost to a power cut after
                # the mark would never be repaired.
                self.index.flush()
            except IndexUnavailable as exc:  # a full disk, an unreachable server: expected, said once a minute
                self._throttle.log(logging.WARNING, "index write", "vector index write failed; %d memories stay "
                                   "in the backlog: %s", len(points), exc)
                return
            except Exception:
                self._throttle.log(logging.WARNING, "index write", "vector index write failed; %d memories stay "
                                   "in the backlog", len(points), exc_info=True)
                return
        # Only rows still as they were read: one updated meanwhile stays in the backlog for its updater.
        self.writer.run_sync(lambda c: rows.mark_indexed_versions(c, versions))

    def _point(self, row: Any) -> IndexPoint:
        if row["vector_model"] == self.embedder.name and row["vector"] is not None:
            vector = rows.vector_of(row)
        else:  # stored with another model: the SQLite content is the authority, embed it again
            full = self.readers.get().execute(
                "SELECT content, occurred_at FROM memories WHERE id = ?", (row["id"],)
            ).fetchone()
            vector = self.embedder.embed_documents([document_text(full["content"], full["occurred_at"])])[0]
            self.writer.run_sync(
                lambda c: c.execute(
                    "UPDATE memories SET vector = ?, vector_model = ? WHERE id = ?",
                    (vector.astype(np.float32).tobytes(), self.embedder.name, row["id"]),
                )
            )
        return IndexPoint(id=int(row["id"]), vector=vector, payload=rows.index_payload(row))

    def _apply_deletions(self, ids: Sequence[int]) -> None:
        try:
            with self._index_lock:
                self.index.delete(list(ids))
        except Exception as exc:
            self._throttle.log(logging.WARNING, "index delete", "vector index delete failed; %d deletions stay "
                               "queued: %s", len(ids), exc, exc_info=not isinstance(exc, IndexUnavailable))
            return
        self.writer.run_sync(lambda c: rows.clear_deletions(c, ids))

    def backlog(self) -> int:
        conn = self.readers.get()
        pending = conn.execute("SELECT count(*) FROM memories WHERE indexed = 0").fetchone()[0]
        deletions = conn.execute("SELECT count(*) FROM index_deletions").fetchone()[0]
        return int(pending) + int(deletions)

    def sync_index(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Apply queued deletions and index every unindexed row; return how many rows were indexed."""
        conn = self.readers.get()
        deletions = [r[0] for r in conn.execute("SELECT id FROM index_deletions").fetchall()]
        for chunk in batched(deletions, 1000):
            self._apply_deletions(chunk)
        done = 0
        while True:
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM memories WHERE indexed = 0 ORDER BY id LIMIT 500").fetchall()]
            if not ids:
                return done
            before = self.backlog()
            self._index_ids(ids)
            done += len(ids)
            if progress:
                progress(len(ids))
            if self.backlog() >= before:  # the index refused: stop, the next sync retries
                return done

    def reconcile(self) -> int:
        """Remove index points whose SQLite row is gone (e.g. a site deleted while the server was down)."""
        conn = self.readers.get()
        orphans = []
        for chunk in batched(self.index.ids(), 1000):
            present = {r[0] for r in conn.execute(
                f"SELECT id FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk).fetchall()}
            orphans += [i for i in chunk if i not in present]
        for chunk in batched(orphans, 1000):
            with self._index_lock:
                self.index.delete(chunk)
        return len(orphans)

    def reindex(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the index from SQLite alone."""
        with self._index_lock:
            self.index.reset(IndexInfo(model=self.embedder.name, dimension=self.embedder.dimension))
        self.writer.run_sync(lambda c: c.execute("DELETE FROM index_deletions"))
        self._mark_all_unindexed()
        done = self.sync_index(progress=progress)
        self.words.load(self.readers.get())  # reindex runs without check_model, which loads them otherwise
        self.backfill_words()
        return done

    def backfill_words(self) -> int:
        """Embed the words of memories saved without word vectors from this model (query expansion)."""
        return self.words.backfill(self.readers.get, self.writer.run_sync)

    # --- reads ------------------------------------------------------------------------------------

    def _reader(self) -> Any:
        """This thread's read connection, mapping the database file (see READ_MMAP_BYTES)."""
        conn = self.readers.get()
        if getattr(self._mapped, "conn", None) is not conn:
            conn.execute(f"PRAGMA mmap_size = {READ_MMAP_BYTES}")
            self._mapped.conn = conn
        return conn

    def read_scope(self, principal: Principal, filters: Filters) -> Scope:
        principal.require(READ)
        return scope_for(principal).narrowed(
            team=filters.team, project=filters.project, bucket=filters.bucket, type=filters.type,
            tags=filters.tags,
        )

    async def recall(self, principal: Principal, query: str, limit: int, filters: Filters) -> list[dict[str, Any]]:
        scope = self.read_scope(principal, filters)
        if scope.empty:
            return []
        vector = await anyio.to_thread.run_sync(self.embedder.embed_query, query)
        return await anyio.to_thread.run_sync(self._ranked_hits, scope, query, vector, limit)

    def _ranked_hits(self, scope: Scope, query: str, vector: np.ndarray, limit: int) -> list[dict[str, Any]]:
        candidates = self._candidates(scope, query, vector)
        if self.ranking == "production":
            ranked = rank(query, vector, candidates, limit=limit,
                          expansion=self._expansion(scope.site_id, query, candidates))
        else:
            ranked = rank_single(self.ranking, query, vector, candidates, limit=limit)
        return self._hits([(c.id, score) for c, score in ranked])

    def _expansion(self, site_id: int, query: str, candidates: Sequence[Candidate]) -> dict[str, float]:
        """Near-synonyms of the query's words among the candidates' words (server/expansion.py)."""
        if not candidates:
            return {}
        stems, vectors = self.words.pool(site_id, candidates)
        return expansion_terms(query, analyze(query), self.words.for_query(site_id, query), stems, vectors)

    def _candidates(self, scope: Scope, query: str, vector: np.ndarray) -> list[Candidate]:
        conn = self._reader()
        where, args = scope.sql("m")
        # Counted only up to the limit: a full count would walk every visible row of a large site.
        visible = conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT ?)",
                               [*args, self.full_scan_limit + 1]).fetchone()[0]
        if visible == 0:
            return []
        if visible <= self.full_scan_limit:
            return self._load_candidates("memories m", where, args)
        ids = set(self._dense_ids(scope, vector)) | set(self._lexical_ids(scope, query))
        ids |= self._neighbour_ids(ids)
        if not ids:
            return []
        id_list = sorted(ids)
        # The scope is applied again: neighbours must be visible too. NOT INDEXED: the ids are looked up by
        # rowid; otherwise the planner may walk the whole site through an index on site_id.
        return self._load_candidates("memories m NOT INDEXED", f"{where} AND m.id IN ({','.join('?' * len(id_list))})",
                                     [*args, *id_list])

    def _load_candidates(self, source: str, where: str, args: list[Any]) -> list[Candidate]:
        """The visible rows as candidates, in row order. Rows ranked recently come from `_candidate_cache`
        (checked against updated_at, which every change of content, date, provenance or vector moves);
        only the others are read in full: their vectors and analysed terms are most of a recall's reads."""
        conn = self._reader()
        cursor = conn.cursor()
        cursor.row_factory = None  # plain tuples: up to FULL_SCAN_LIMIT rows per recall
        with _snapshot(conn):  # the rows and their analysed terms from one state of the database
            visible = cursor.execute(
                f"SELECT m.id, m.updated_at FROM {source} WHERE {where} AND m.vector_model = ?"
                " AND m.vector IS NOT NULL ORDER BY m.id", [*args, self.embedder.name],
            ).fetchall()
            cache = self._candidate_cache
            missing = [row_id for row_id, updated_at in visible if cache.get(row_id, _NO_ENTRY)[0] != updated_at]
            for chunk in batched(missing, 500):
                self._cache_candidates(cursor, chunk)
        found = [cache.get(row_id, _NO_ENTRY) for row_id, _ in visible]
        # A row deleted between the two reads, or without analysed terms, is not a candidate.
        return [candidate for updated_at, candidate in found if candidate is not None]

    def _cache_candidates(self, cursor: Any, ids: Sequence[int]) -> None:
        marks = ",".join("?" * len(ids))
        # NOT INDEXED: looked up by rowid, never by walking an index of the site.
        found = cursor.execute(
            "SELECT m.id, m.updated_at, m.content, m.occurred_at, m.conversation_id, m.conversation_seq, m.vector"
            f" FROM memories m NOT INDEXED WHERE m.id IN ({marks})", list(ids),
        ).fetchall()
        # A second query rather than a join: joining the FTS5 table re-opens its cursor for every row
        # (about 5x slower than this rowid IN list).
        terms = dict(cursor.execute(f"SELECT rowid, terms FROM memories_fts WHERE rowid IN ({marks})",
                                    list(ids)).fetchall())
        entries = {
            row_id: (updated_at, Candidate(
                id=row_id, text=document_text(content, occurred_at),
                vector=np.frombuffer(blob, dtype=np.float32), occurred_at=occurred_at,
                conversation_id=conversation_id, seq=seq, terms=terms[row_id].split()))
            for row_id, updated_at, content, occurred_at, conversation_id, seq, blob in found
            if row_id in terms and blob is not None
        }
        with self._candidate_cache_lock:
            cache = self._candidate_cache
            cache.update(entries)
            while len(cache) > self.candidate_cache_size:  # oldest entries first
                del cache[next(iter(cache))]

    def _dense_ids(self, scope: Scope, vector: np.ndarray) -> list[int]:
        try:
            return [hit.id for hit in self.index.search(vector, where=scope.index_filter(), limit=PREFETCH)]
        except Exception as exc:
            raise Unavailable(f"the vector index is unavailable: {exc}") from exc

    def _lexical_ids(self, scope: Scope, query: str) -> list[int]:
        """Up to PREFETCH visible rows FTS5 finds for the query, at a cost bounded by `lexical_postings`
        rather than by the corpus (bm25() reads every matching row and each term's whole doclist, so one
        common term would make it grow with the corpus). In order of preference:
          1. rows with the query's rarest terms (their postings add up to at most `lexical_postings`), by bm25;
          2. rows holding every other (common) term, newest first (FTS5 intersects by seeking);
          3. rows holding any common term, newest first.
        Steps 2 and 3 stop as soon as enough visible rows are found."""
        terms = sorted(set(analyze(query)))
        if not terms:
            return []
        conn = self._reader()
        selective, common = prefetch_terms(self._doc_freqs(conn, terms), self.lexical_postings)
        where, args = scope.sql("m")
        found: list[int] = []
        if selective:
            # CROSS JOIN keeps FTS5 the outer loop: driven from `memories`, the planner would run the MATCH
            # once per visible row.
            found = [r[0] for r in conn.execute(
                "SELECT m.id FROM memories_fts f CROSS JOIN memories m ON m.id = f.rowid"
                f" WHERE memories_fts MATCH ? AND {where} ORDER BY bm25(memories_fts) LIMIT ?",
                [" OR ".join(fts_phrase(t) for t in selective), *args, PREFETCH],
            ).fetchall()]
        for operator in (" AND ", " OR ") if len(common) > 1 else (" OR ",):
            if not common or len(found) >= PREFETCH:
                break
            match = operator.join(fts_phrase(t) for t in common)
            found += self._newest_ids(conn, scope, match, PREFETCH - len(found), exclude=set(found))
        return found

    def _doc_freqs(self, conn: Any, terms: Sequence[str]) -> dict[str, int]:
        """How many memories hold each term. Reading them walks each term's doclist (linear in the corpus),
        and they only choose how the prefetch asks FTS5, so they are cached while the corpus has grown or
        shrunk by at most 1% (judged by the highest row id, a B-tree lookup)."""
        top = conn.execute("SELECT max(id) FROM memories").fetchone()[0] or 0
        fresh = max(100, top // 100)
        cache = self._df_cache
        out: dict[str, int] = {}
        for term in terms:
            hit = cache.get(term)
            if hit is not None and abs(top - hit[1]) <= fresh:
                out[term] = hit[0]
        missing = [t for t in terms if t not in out]
        if missing:
            found = _read_doc_freqs(conn, missing)
            if len(cache) > DF_CACHE_TERMS:
                cache.clear()  # rare; refilled by the next queries
            cache.update((term, (df, top)) for term, df in found.items())
            out.update(found)
        return out

    def _newest_ids(self, conn: Any, scope: Scope, match: str, wanted: int, *, exclude: set[int]) -> list[int]:
        """The newest visible rows matching an FTS5 expression: FTS5 yields rowids newest first (and stops
        when we do); the scope is checked a page at a time. At most max(lexical_postings, PREFETCH) rows are
        examined, so the rows of other sites cannot make the walk long."""
        where, args = scope.sql("m")
        cursor = conn.execute(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
            [match, max(self.lexical_postings, PREFETCH)],
        )
        found: list[int] = []
        try:
            while len(found) < wanted:
                fetched = cursor.fetchmany(PREFETCH)
                if not fetched:
                    break
                page = [r[0] for r in fetched if r[0] not in exclude]
                if not page:
                    continue
                visible = {r[0] for r in conn.execute(
                    f"SELECT m.id FROM memories m NOT INDEXED WHERE m.id IN ({','.join('?' * len(page))})"
                    f" AND {where}", [*page, *args]).fetchall()}
                found += [i for i in page if i in visible][: wanted - len(found)]
        finally:
            cursor.close()
        return found

    def _neighbour_ids(self, ids: set[int]) -> set[int]:
        if not ids:
            return set()
        conn = self._reader()
        id_list = sorted(ids)
        found = conn.execute(
            "SELECT n.id FROM memories m JOIN memories n ON n.site_id = m.site_id"
            " AND n.conversation_id = m.conversation_id"
            " AND n.conversation_seq BETWEEN m.conversation_seq - ? AND m.conversation_seq + ?"
            f" WHERE m.id IN ({','.join('?' * len(id_list))}) AND m.conversation_id IS NOT NULL",
            [NEIGHBOUR_REACH, NEIGHBOUR_REACH, *id_list],
        ).fetchall()
        return {r[0] for r in found}

    def _hits(self, scored: Sequence[tuple[int, float]]) -> list[dict[str, Any]]:
        if not scored:
            return []
        conn = self._reader()
        ids = [i for i, _ in scored]
        found = {
            row["id"]: row
            for row in conn.execute(
                f"SELECT {rows.ROW_COLUMNS} FROM memories WHERE id IN ({','.join('?' * len(ids))})", ids
            ).fetchall()
        }
        # A row forgotten between ranking and here is simply skipped.
        return [{**rows.hit_fields(found[i]), "score": round(score, 6)} for i, score in scored if i in found]

    async def search(
        self, principal: Principal, query: str, limit: int, filters: Filters, min_score: float
    ) -> list[dict[str, Any]]:
        """Strict: every filter matches exactly and the cosine similarity is at least min_score."""
        scope = self.read_scope(principal, filters)
        if scope.empty:
            return []
        vector = await anyio.to_thread.run_sync(self.embedder.embed_query, query)
        return await anyio.to_thread.run_sync(self._strict_hits, scope, vector, limit, min_score)

    def _strict_hits(self, scope: Scope, vector: np.ndarray, limit: int, min_score: float) -> list[dict[str, Any]]:
        try:
            found = self.index.search(vector, where=scope.index_filter(), limit=limit)
        except Exception as exc:
            raise Unavailable(f"the vector index is unavailable: {exc}") from exc
        return self._hits([(hit.id, hit.score) for hit in found if hit.score >= min_score])

    def get(self, principal: Principal, reference: str) -> dict[str, Any]:
        scope = self.read_scope(principal, Filters())
        where, args = scope.sql("m")
        row = self.readers.get().execute(
            f"SELECT {', '.join('m.' + c.strip() for c in rows.ROW_COLUMNS.split(','))} FROM memories m"
            f" WHERE m.reference = ? AND {where}",
            [reference, *args],
        ).fetchone()
        if row is None:
            raise NotFound(f"no memory with reference {reference!r}")
        return rows.hit_fields(row)

    # --- REST: list, read and update one memory ---------------------------------------------------

    def list_memories(
        self,
        principal: Principal,
        filters: Filters,
        *,
        location: str | None = None,
        provenance: dict[str, str] | None = None,
        limit: int,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A page of visible memories, newest first, and the opaque cursor of the next page (or None)."""
        after = rows.decode_list_cursor(cursor) if cursor is not None else None
        scope = self.read_scope(principal, filters)
        if scope.empty:
            return {"memories": [], "next_cursor": None}
        page, following = rows.list_rows(self.readers.get(), scope, location=location,
                                         provenance=provenance or {}, limit=limit, after=after)
        return {
            "memories": [rows.memory_fields(row) for row in page],
            "next_cursor": rows.encode_list_cursor(following) if following is not None else None,
        }

    def fetch(self, principal: Principal, reference: str) -> dict[str, Any]:
        """One visible memory with every attribute (updated_at included)."""
        scope = self.read_scope(principal, Filters())
        row = rows.visible_row(self.readers.get(), scope, reference) if _plausible(reference) else None
        if row is None:
            raise NotFound(f"no memory with reference {reference!r}")
        return rows.memory_fields(row)

    async def update(self, principal: Principal, reference: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change some attributes of a visible memory (PATCH). `changes` maps attribute names to new values;
        None resets an attribute to what `remember` would default it to (content and occurred_at cannot be
        reset). The merged memory is validated as `remember` validates, must stay inside a bounded token's
        bounds, and may not take the identity of another memory. A change of content or occurred_at
        re-embeds; any change re-indexes through the outbox."""
        principal.require(WRITE)
        unknown = set(changes) - set(rows.EDITABLE)
        if unknown:
            raise InvalidParameters(f"cannot change {', '.join(sorted(unknown))}")
        for name in ("content", "occurred_at"):
            if name in changes and changes[name] is None:
                raise InvalidParameters(f"{name} cannot be null")
        if not _plausible(reference):
            raise NotFound(f"no memory with reference {reference!r}")
        scope = scope_for(principal)
        for _ in range(5):  # a concurrent update of the same memory: recompute from its new state
            row = await anyio.to_thread.run_sync(lambda: rows.visible_row(self.readers.get(), scope, reference))
            if row is None:
                raise NotFound(f"no memory with reference {reference!r}")
            current = rows.as_new_memory(row)
            merged = {name: getattr(current, name) for name in rows.EDITABLE}
            merged["tags"] = list(current.tags)
            merged.update(changes)
            memory = self.validate(**merged)
            rows.check_write_bounds(principal, memory)
            if memory == current:
                return rows.memory_fields(row)  # nothing changes: no write, updated_at kept
            document = document_text(memory.content, memory.occurred_at)
            vector = None
            words: tuple[list[str], np.ndarray] = ([], np.empty((0, self.embedder.dimension), np.float32))
            if (document != document_text(current.content, current.occurred_at)
                    or row["vector_model"] != self.embedder.name or row["vector"] is None):
                vectors, words = await anyio.to_thread.run_sync(self._embed, scope.site_id, [document])
                vector = vectors[0]
            based_on = rows.kept_values(row, changes)

            def write(conn: Any, vector: np.ndarray | None = vector, words: Any = words) -> int | None:
                row_id = rows.update_memory(conn, scope, reference, memory, based_on=based_on,
                                            document=document, vector=vector, model=self.embedder.name)
                self._store_words(conn, scope.site_id, words)
                return row_id

            try:
                row_id = await self.writer.run(write)
            except rows.StaleRow:
                continue
            self.words.add(scope.site_id, *words)
            if row_id is None:
                raise NotFound(f"no memory with reference {reference!r}")
            await anyio.to_thread.run_sync(self._index_ids, [row_id])
            return await anyio.to_thread.run_sync(self.fetch, principal, reference)
        raise Unavailable("the memory is being changed concurrently; retry")


@contextmanager
def _snapshot(conn: Any) -> Iterator[None]:
    """One read transaction around several SELECTs (WAL: they all see the same commit)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _read_doc_freqs(conn: Any, terms: Sequence[str]) -> dict[str, int]:
    """How many memories hold each term (all sites): FTS5's vocabulary, read through a per-connection temp
    table (fts5vocab walks only these terms' doclists, without scoring)."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memories_fts_terms"
                 " USING fts5vocab(main, 'memories_fts', 'row')")
    found = conn.execute(
        f"SELECT term, doc FROM temp.memories_fts_terms WHERE term IN ({','.join('?' * len(terms))})", list(terms)
    ).fetchall()
    return {term: 0 for term in terms} | {row[0]: int(row[1]) for row in found}


def _plausible(reference: object) -> bool:
    return isinstance(reference, str) and 1 <= len(reference) <= 128
