"""The saved-memory machinery of one process, built once the model is loaded and the index is open."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from embeddings.base import Embedder
from embeddings.tokens import TokenCounter
from server.index.base import VectorIndex
from server.memories.outbox import Outbox
from server.memories.writes import MemoryWrites
from server.ranking.candidates import CandidateSource
from server.ranking.recall import Retrieval
from server.ranking.vocabulary import WordVectors
from server.settings import Settings
from server.storage.protocols import Storage

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

    def backfill_words(self) -> int:
        """Embed the words of memories saved without word vectors from this model (query expansion)."""
        return self.words.backfill(self.storage.words)

    def reindex(self) -> int:
        done = self.outbox.reindex()
        self.words.load(self.storage.words)
        self.backfill_words()
        return done


def build_memories(storage: Storage, settings: Settings, *, embedder: Embedder, tokens: TokenCounter,
                   index: VectorIndex) -> Memories:
    words = WordVectors(embedder)
    outbox = Outbox(storage.outbox, index, embedder)
    source = CandidateSource(storage.candidates, index, model=embedder.name)
    return Memories(
        storage=storage, index=index, embedder=embedder, tokens=tokens, words=words, outbox=outbox,
        writes=MemoryWrites(storage.memories, outbox, embedder, words, max_content_bytes=settings.max_content_bytes),
        source=source,
        retrieval=Retrieval(storage.memories, source, index, embedder, words, ranking=settings.recall_ranking),
    )


def repair(memories: Memories, *, startup_sync_limit: int = STARTUP_SYNC_LIMIT) -> None:
    """At start-up: refuse an index built with another model, load the words, index a small backlog now."""
    memories.outbox.check_model()
    memories.words.load(memories.storage.words)
    backlog = memories.outbox.backlog()
    if backlog > startup_sync_limit:
        log.info("%d memories are not in the vector index yet: indexing them in the background", backlog)
        return
    repaired = memories.outbox.sync()
    if repaired:
        log.info("indexed %d memories left unindexed by an earlier run", repaired)
