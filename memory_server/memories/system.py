"""The saved-memory machinery of one process, built once the model is loaded and the index is open."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from memory_server.embeddings.base import Embedder
from memory_server.embeddings.tokens import TokenCounter
from memory_server.index.base import PAYLOAD_VERSION, VectorIndex
from memory_server.memories.follower import FOLLOW_FILE, IndexFollower
from memory_server.memories.outbox import Outbox
from memory_server.memories.reembedding import Reembedding
from memory_server.memories.writes import TERMS_VERSION, MemoryWrites, document_terms
from memory_server.retrieval.candidates import CandidateSource
from memory_server.retrieval.recall import Retrieval
from memory_server.retrieval.vocabulary import WordVectors
from memory_server.settings import Settings
from memory_server.storage.backends import Backend
from memory_server.storage.protocols import Storage

log = logging.getLogger("memory_server.memories")

# A backlog up to this size (a crash's last writes) is indexed before the server reports ready, so
# search_memory is complete at once; a larger one (an offline import, a lost index) is indexed by the
# maintenance thread, so start-up time does not grow with it.
STARTUP_SYNC_LIMIT = 1000


@dataclass
class Memories:
    storage: Storage
    index: VectorIndex
    embedder: Embedder
    tokens: TokenCounter
    words: WordVectors
    outbox: Outbox
    writes: MemoryWrites
    source: CandidateSource
    retrieval: Retrieval
    reembedding: Reembedding
    follower: IndexFollower | None = None  # this server's own index follows a shared authority

    def backfill_words(self) -> int:
        """Embed the words of memories saved without word vectors from this model (query expansion)."""
        return self.words.backfill(self.storage.words)

    def reindex(self) -> int:
        rewrite_terms(self.storage, force=True)
        done = self.follower.rebuild() if self.follower is not None else self.outbox.reindex()
        self.reembedding.finish()
        self.words.load(self.storage.words)
        self.backfill_words()
        return done


def follows_authority(backend: Backend, index: VectorIndex) -> bool:
    """An index of this server's own on a shared authority (PostgreSQL, maybe several replicas) follows its
    change feed; otherwise the index belongs to the authority's one process (SQLite) or is shared by every
    server (Qdrant server), and the outbox keeps it."""
    return backend.shared and not index.shared


def build_memories(
    storage: Storage,
    settings: Settings,
    *,
    embedder: Embedder,
    tokens: TokenCounter,
    index: VectorIndex,
    follow: bool | None = None,
) -> Memories:
    """`follow`: whether the index follows the authority's change feed (default: `follows_authority`)."""
    words = WordVectors(embedder)
    outbox = Outbox(storage.outbox, index, embedder)
    follower = None
    if follows_authority(storage.backend, index) if follow is None else follow:
        follower = IndexFollower(
            outbox,
            storage.outbox,
            words,
            storage.words,
            authority=storage.identity,
            state_path=settings.index_path / FOLLOW_FILE,
        )
    source = CandidateSource(storage.candidates, index, model=embedder.name, change_mark=storage.outbox.change_mark)
    reembedding = Reembedding(settings.index_path, _remaining(storage, follower))
    return Memories(
        storage=storage,
        index=index,
        embedder=embedder,
        tokens=tokens,
        words=words,
        outbox=outbox,
        writes=MemoryWrites(
            storage.memories, follower or outbox, embedder, words, max_content_bytes=settings.max_content_bytes
        ),
        source=source,
        retrieval=Retrieval(
            storage.memories,
            source,
            index,
            embedder,
            words,
            ranking=settings.recall_ranking,
            recency=settings.recall_recency,
            dates=settings.recall_dates,
            speakers=settings.recall_speakers,
            answers=settings.recall_answers,
            reembedding=reembedding,
        ),
        reembedding=reembedding,
        follower=follower,
    )


def _remaining(storage: Storage, follower: IndexFollower | None) -> Callable[[], int]:
    """How many memories the index does not hold yet: the outbox's backlog, or what a follower's rebuild has
    not reached (with its total counted once per rebuild)."""
    if follower is None:
        return storage.outbox.backlog
    total: list[int] = []

    def remaining() -> int:
        if not follower.needs_rebuild:
            total.clear()
            return 0
        if not total:
            total.append(storage.memories.count())
        return max(0, total[0] - follower.rebuilt)

    return remaining


def rewrite_terms(storage: Storage, *, force: bool = False) -> int:
    """Write the memories' lexical terms again when they are older than this version's (TERMS_VERSION: the
    date terms came with version 2), or always with `force` (`reindex`); how many changed. They are derived
    from each memory's content and occurred_at alone, so this is safe to repeat."""
    if not force and storage.memories.terms_version() >= TERMS_VERSION:
        return 0
    changed = storage.memories.rewrite_terms(document_terms, TERMS_VERSION)
    log.info("wrote the lexical terms of the memories again (version %d): %d changed", TERMS_VERSION, changed)
    return changed


def repair(memories: Memories, *, startup_sync_limit: int = STARTUP_SYNC_LIMIT) -> None:
    """At start-up: bring the stored lexical terms up to this version's, begin embedding every memory again
    when the index was built with another model, load the words, index a small backlog now."""
    rewrite_terms(memories.storage)
    follower = memories.follower
    built_with = memories.index.info()
    new_index = memories.outbox.check_model(outbox=follower is None)
    memories.reembedding.resume(memories.embedder.name)
    if new_index and built_with is not None and built_with != memories.outbox.expected():
        memories.reembedding.begin(built_with.model, memories.embedder.name, memories.storage.memories.count())
    outdated = not new_index and memories.index.payload_version() < PAYLOAD_VERSION
    if outdated:
        log.info(
            "the vector index predates the payload fields this version filters on (version %d < %d): "
            "writing every point again from the authority",
            memories.index.payload_version(),
            PAYLOAD_VERSION,
        )
        if follower is None:
            # Marked first: a crash before the index records the new version only means marking them again.
            memories.storage.outbox.mark_all_unindexed()
            memories.index.upgrade_payload()
    memories.words.load(memories.storage.words)
    if follower is not None:
        follower.start(new_index=new_index or outdated)  # a rebuild makes the index anew
        lag = follower.lag()
        if lag > startup_sync_limit:
            log.info("the index is %d changes behind the authority: catching up in the background", lag)
        elif follower.catch_up():
            log.info("the index caught up with the authority")
        return
    backlog = memories.outbox.backlog()
    if backlog > startup_sync_limit:
        log.info("%d memories are not in the vector index yet: indexing them in the background", backlog)
        return
    repaired = memories.outbox.sync()
    if repaired:
        log.info("indexed %d memories left unindexed by an earlier run", repaired)
