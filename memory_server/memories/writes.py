"""The write path of saved memories: remember, bulk remember (imports too), update, forget.

Each write commits to the authority first, with the memory's embedding and the site's new words, then
tells the vector index (through the outbox, or this server's follower of a shared authority).
Blocking: call from a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from memory_server.auth.principal import WRITE, Principal
from memory_server.embeddings.base import Embedder
from memory_server.errors import Forbidden, InvalidParameters, NotFound, Unavailable
from memory_server.index.base import batched
from memory_server.memories.outbox import IndexSync
from memory_server.memories.validation import check_write_bounds, plausible_reference, scope_for, validate_new
from memory_server.ranking.dates import date_terms
from memory_server.ranking.fusion import document_text
from memory_server.ranking.languages import detect
from memory_server.ranking.lexical import analyzed_text
from memory_server.retrieval.vocabulary import WordVectors
from memory_server.storage.protocols import MemoryStore
from memory_server.storage.records import (
    DUPLICATE,
    TURN,
    Document,
    Inserted,
    Kept,
    NewMemory,
    StaleRow,
    StoredMemory,
    ToIndex,
    Words,
)
from memory_server.storage.scope import Scope
from memory_server.timestamps import now_rfc3339

# Bulk remember embeds and commits this many memories at a time: several model batches per call, which the
# onnx engine runs one per core (64 at a time: 156 memories/s on 2 cores; 512: about twice that).
EMBED_BATCH = 512
# The attributes a change may set; the rest of a memory follows from them.
EDITABLE = (
    "content",
    "type",
    "location",
    "project",
    "team",
    "bucket",
    "tags",
    "metadata",
    "provenance",
    "occurred_at",
    "supersedes",
    "expires_at",
)
UPDATE_ATTEMPTS = 5
# Expired memories deleted per transaction: each transaction stays short, so it never holds up other writes.
PURGE_BATCH = 200


# What `document_terms` writes: version 2 added the date terms; 3 reads days written with a two-digit year
# ("3 May '23"); 4 analyses each memory in its own language; 5 keeps combining marks inside words (Hindi's vowel
# signs), cuts Burmese and Khmer into pairs and drops Greek, Arabic and Hindi function words. A store whose terms
# are older has them written again at start-up (memory_server/memories/system.py `repair`) and by `reindex`.
TERMS_VERSION = 5


def document_terms(content: str, occurred_at: str | None) -> str:
    """A memory's lexical document as stored: the analysed terms of its document text in the language of its
    content, then the date terms of the days and weeks its content names (memory_server/ranking/dates.py)."""
    terms = analyzed_text(document_text(content, occurred_at), detect(content))
    return " ".join([terms, *date_terms(content, occurred_at)]).strip()


class MemoryWrites:
    """Every change to saved memories: validated, written to the store with its outbox row in one transaction,
    then indexed (remember, patch, supersede, forget)."""

    def __init__(
        self, store: MemoryStore, index: IndexSync, embedder: Embedder, words: WordVectors, *, max_content_bytes: int
    ) -> None:
        self.store = store
        self.index = index
        self.embedder = embedder
        self.words = words
        self.max_content_bytes = max_content_bytes

    def validate(self, **fields: Any) -> NewMemory:
        return validate_new(**fields, max_content_bytes=self.max_content_bytes)

    def _document(self, memory: NewMemory, vector: np.ndarray) -> Document:
        return Document(
            vector=vector, model=self.embedder.name, terms=document_terms(memory.content, memory.occurred_at)
        )

    def remember(self, principal: Principal, memory: NewMemory) -> Inserted:
        principal.require(WRITE)
        check_write_bounds(principal, memory)
        existing = self._duplicate(principal.site_id, memory)
        if existing is not None:  # decided before any model time
            if memory.supersedes is not None:  # the same memory again, now replacing another: link it
                self.update(principal, existing, {"supersedes": memory.supersedes})
            return Inserted(None, existing, DUPLICATE)
        if memory.supersedes is None:
            return self._insert_batch(principal.site_id, [(memory, None)])[0]
        text = document_text(memory.content, memory.occurred_at)
        document = self._document(memory, self.embedder.embed_documents([text])[0])
        words = self.words.new_words(principal.site_id, [text])
        for _ in range(UPDATE_ATTEMPTS):  # the memory to supersede was superseded meanwhile: follow its chain
            older = self._older(principal, memory.supersedes)
            linked = replace(memory, supersedes=older.reference)
            try:
                inserted = self.store.insert(principal.site_id, [(linked, document, None)], words)[0]
            except StaleRow:
                continue
            self.words.add(principal.site_id, words)
            if inserted.row_id is not None:
                self.index.written([inserted.row_id, older.id])
            return replace(inserted, vector=document.vector)
        raise Unavailable("the memory to supersede is being changed concurrently; retry")

    def _duplicate(self, site_id: int, memory: NewMemory) -> str | None:
        """The reference of the site's memory with this content and filing. One that expired (and is not
        purged yet) is purged now: the memory is new again."""
        for _ in range(UPDATE_ATTEMPTS):
            existing = self.store.find_duplicate(site_id, memory.dedup_key)
            if existing is None or self.store.get(Scope(site_id), existing) is not None:
                return existing
            self.index.deleted(self.store.purge_expired(now_rfc3339(), PURGE_BATCH))
        raise Unavailable("an expired copy of this memory is being purged; retry")

    def purge_expired(self) -> int:
        """Delete the memories that have expired, PURGE_BATCH per transaction; how many went."""
        done = 0
        while True:
            ids = self.store.purge_expired(now_rfc3339(), PURGE_BATCH)
            if ids:
                self.index.deleted(ids)
                done += len(ids)
            if len(ids) < PURGE_BATCH:
                return done

    def _older(self, principal: Principal, reference: str, *, newer: str | None = None) -> StoredMemory:
        """The memory a write by `principal` may supersede when it names `reference`: the newest of its chain,
        visible to the caller like `reference` itself (else forbidden; an unknown one is not_found, and
        `newer` already in that chain is a cycle)."""
        scope = scope_for(principal)
        if plausible_reference(reference) and self.store.get(scope, reference) is None:
            if self.store.get(Scope(principal.site_id), reference) is not None:
                raise Forbidden(f"memory {reference} is outside this token's bounds: it cannot be superseded here")
        head = self.store.chain_head(principal.site_id, reference) if plausible_reference(reference) else None
        found = self.store.get(scope, head) if head is not None else None
        if head is None or (found is None and self.store.get(Scope(principal.site_id), head) is None):
            raise NotFound(f"no memory with reference {reference!r} to supersede")
        if found is None:
            raise Forbidden(f"memory {reference} was superseded by {head}, which is outside this token's bounds")
        if found.kind == TURN:
            raise InvalidParameters(
                f"{found.reference} is an indexed turn of a conversation log: it cannot be superseded"
            )
        if newer is not None and (head == newer or self.store.chain_head(principal.site_id, newer) == head):
            raise InvalidParameters(
                f"{newer} cannot supersede {reference}: they are in one chain of superseded memories already (a cycle)"
            )
        return found

    def remember_many(
        self, site_id: int, memories: Sequence[NewMemory], kept: Sequence[Kept | None] | None = None
    ) -> list[Inserted]:
        """Bulk remember, the path of imports too: memories decided by stored rows (duplicates, references
        already present) are settled first without model time; the rest are embedded EMBED_BATCH at a time,
        committed one transaction per batch with their words, then indexed. `kept`: per memory, the
        reference and timestamps an import keeps."""
        keeps = list(kept) if kept is not None else [None] * len(memories)
        results: list[Inserted] = []
        for batch in batched(list(zip(memories, keeps, strict=True)), EMBED_BATCH):
            decided = [self.store.decided(site_id, m, k) for m, k in batch]
            todo = [pair for pair, outcome in zip(batch, decided, strict=True) if outcome is None]
            inserted = iter(self._insert_batch(site_id, todo) if todo else [])
            results += [outcome if outcome is not None else next(inserted) for outcome in decided]
        return results

    def _insert_batch(self, site_id: int, batch: Sequence[tuple[NewMemory, Kept | None]]) -> list[Inserted]:
        documents = [document_text(m.content, m.occurred_at) for m, _ in batch]
        vectors = self.embedder.embed_documents(documents)
        words = self.words.new_words(site_id, documents)
        rows = [(m, self._document(m, v), k) for (m, k), v in zip(batch, vectors, strict=True)]
        inserted = self.store.insert(site_id, rows, words)
        self.words.add(site_id, words)
        self.index.written([i.row_id for i in inserted if i.row_id is not None])
        return [replace(i, vector=v) for i, v in zip(inserted, vectors, strict=True)]

    def insert_turns(
        self, at: ToIndex, next_seq: int, skipped: int, turns: Sequence[NewMemory]
    ) -> list[Inserted] | None:
        """Embed a conversation's turns (memory_server/logs/indexing.py) and commit them with the move of its
        indexed_seq to `next_seq` (None: it changed meanwhile, nothing written), then index them."""
        documents = [document_text(m.content, m.occurred_at) for m in turns]
        vectors = self.embedder.embed_documents(documents) if documents else np.zeros((0, self.embedder.dimension))
        words = self.words.new_words(at.site_id, documents) if documents else Words()
        rows = [(m, self._document(m, v)) for m, v in zip(turns, vectors, strict=True)]
        inserted = self.store.insert_turns(at, next_seq, skipped, rows, words)
        if inserted is None:
            return None
        self.words.add(at.site_id, words)
        self.index.written([i.row_id for i in inserted if i.row_id is not None])
        return inserted

    def forget(self, principal: Principal, reference: str) -> None:
        principal.require(WRITE)
        scope = scope_for(principal)
        current = self.store.get(scope, reference) if plausible_reference(reference) else None
        row_id = self.store.delete(scope, reference) if current is not None else None
        if row_id is None or current is None:
            raise NotFound(f"no memory with reference {reference!r}")
        self.index.deleted([row_id])
        # Its neighbours in a chain of superseded memories were joined (their payload changed).
        neighbours = [
            self.store.get(Scope(scope.site_id), r)
            for r in (current.supersedes, current.superseded_by)
            if r is not None
        ]
        self.index.written([m.id for m in neighbours if m is not None])

    def update(self, principal: Principal, reference: str, changes: dict[str, Any]) -> StoredMemory:
        """Change some attributes of a visible memory (PATCH). `changes` maps attribute names to new values;
        None resets an attribute to what `remember` would default it to (content and occurred_at cannot be
        reset). The merged memory is validated as `remember` validates, must stay inside a bounded token's
        bounds, and may not take the identity of another memory. A change of content or occurred_at
        re-embeds; any change re-indexes the memory."""
        principal.require(WRITE)
        unknown = set(changes) - set(EDITABLE)
        if unknown:
            raise InvalidParameters(f"cannot change {', '.join(sorted(unknown))}")
        for name in ("content", "occurred_at"):
            if name in changes and changes[name] is None:
                raise InvalidParameters(f"{name} cannot be null")
        scope = scope_for(principal)
        for _ in range(UPDATE_ATTEMPTS):  # a concurrent update of the same memory: recompute from its new state
            current = self.store.get(scope, reference) if plausible_reference(reference) else None
            if current is None:
                raise NotFound(f"no memory with reference {reference!r}")
            if current.kind == TURN:
                raise InvalidParameters(
                    f"{reference} is an indexed turn of a conversation log: it follows its log "
                    "item and cannot be changed (forget it, or delete the conversation)"
                )
            merged = {name: getattr(current, name) for name in EDITABLE}
            merged["tags"] = list(current.tags)
            merged.update(changes)
            self.validate(**merged)  # every attribute checked as remember checks it, before any lookup by them
            linked: list[int] = []  # the other memories whose links change
            target = merged["supersedes"]
            if target is not None and target != current.supersedes:
                older = self._older(principal, target, newer=reference)
                merged["supersedes"] = older.reference
                linked.append(older.id)
            if current.supersedes is not None and merged["supersedes"] != current.supersedes:
                previous = self.store.get(Scope(scope.site_id), current.supersedes)
                linked += [previous.id] if previous is not None else []
            elif current.supersedes is not None and merged["occurred_at"] != current.occurred_at:
                previous = self.store.get(Scope(scope.site_id), current.supersedes)  # its valid_to moves
                linked += [previous.id] if previous is not None else []
            memory = self.validate(**merged)
            check_write_bounds(principal, memory)
            if memory == current.as_new():
                return current  # nothing changes: no write, updated_at kept
            text = document_text(memory.content, memory.occurred_at)
            document, words = None, Words()
            if (
                text != document_text(current.content, current.occurred_at)
                or current.vector_model != self.embedder.name
                or not current.has_vector
            ):
                document = self._document(memory, self.embedder.embed_documents([text])[0])
                words = self.words.new_words(scope.site_id, [text])
            based_on = {name: getattr(current, name) for name in EDITABLE if name not in changes}
            try:
                row_id = self.store.update(
                    scope.site_id, reference, memory, based_on=based_on, document=document, words=words
                )
            except StaleRow:
                continue
            self.words.add(scope.site_id, words)
            if row_id is None:
                raise NotFound(f"no memory with reference {reference!r}")
            self.index.written([row_id, *linked])
            # Read back as written, even when this change made it expire (the answer to the change itself).
            updated = self.store.get(replace(scope, at=""), reference)
            if updated is None:
                raise NotFound(f"no memory with reference {reference!r}")
            return updated
        raise Unavailable("the memory is being changed concurrently; retry")
