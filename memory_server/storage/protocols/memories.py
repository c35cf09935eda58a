"""Saved memories."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from memory_server.storage.records import BY_CREATED, Document, Inserted, Kept, NewMemory, StoredMemory, ToIndex, Words
from memory_server.storage.scope import Scope


class MemoryStore(Protocol):
    """Saved memories: the write path and the reads REST and hits need."""

    def find_duplicate(self, site_id: int, dedup_key: str) -> str | None:
        """The reference of the site's memory with this content and filing, if any."""
        ...

    def decided(self, site_id: int, memory: NewMemory, kept: Kept | None) -> Inserted | None:
        """The outcome of inserting `memory` when rows already stored decide it (no new row), else None."""
        ...

    def insert(
        self, site_id: int, batch: Sequence[tuple[NewMemory, Document, Kept | None]], words: Words
    ) -> list[Inserted]:
        """Insert a batch in one transaction with the site's new words; each decided again inside it. A memory
        that `supersedes` another is linked to it, which must be the newest of its chain (else StaleRow); one
        with a `Kept` (an import) keeps the links it carries instead."""
        ...

    def insert_turns(
        self, at: ToIndex, next_seq: int, skipped: int, batch: Sequence[tuple[NewMemory, Document]], words: Words
    ) -> list[Inserted] | None:
        """In one transaction: insert a conversation's turns (kind turn) with the site's new words, and move its
        `indexed_seq` on to `next_seq`, counting `skipped` items without text, if it is still as `at` read it
        (the same log, not being deleted, no other indexer moved it on); else None, writing nothing."""
        ...

    def update(
        self,
        site_id: int,
        reference: str,
        memory: NewMemory,
        *,
        based_on: Mapping[str, Any],
        document: Document | None,
        words: Words,
    ) -> int | None:
        """Replace a memory's attributes; its id, or None if it is gone. `based_on`: the attributes the
        change did not set but was computed from (the merge, the kept embedding), as they were read; if the
        memory no longer has them, StaleRow (the attributes the change sets are last-writer-wins).
        `document` None keeps the stored vector and terms (the text did not change). InvalidParameters if it
        would become identical to another memory. A change of `supersedes` moves the link (the new one must
        be the newest of its chain, else StaleRow; a cycle is InvalidParameters)."""
        ...

    def delete(self, scope: Scope, reference: str) -> int | None:
        """Delete a visible memory (queued for removal from the index); its id, or None if not visible. The
        memory it superseded is then superseded by its successor, or current again."""
        ...

    def get(self, scope: Scope, reference: str) -> StoredMemory | None: ...

    def page(
        self,
        scope: Scope,
        *,
        location: str | None,
        provenance: dict[str, str],
        limit: int,
        after: tuple[str, int] | None,
        occurred_after: str | None = None,
        occurred_before: str | None = None,
        order: str = BY_CREATED,
    ) -> tuple[list[StoredMemory], tuple[str, int] | None]:
        """Visible memories newest first, and the key after the page if there are more: by (created_at, id),
        or with `order` BY_OCCURRED by (occurred_at, id). `occurred_after` / `occurred_before` (normalised
        RFC3339, as stored): only memories whose occurred_at is at or after the one, and strictly before the
        other (a half-open range)."""
        ...

    def count_listed(
        self,
        scope: Scope,
        *,
        location: str | None,
        provenance: dict[str, str],
        up_to: int,
        occurred_after: str | None = None,
        occurred_before: str | None = None,
    ) -> int:
        """How many memories `page` lists with these filters in all, counted up to `up_to` + 1 at most."""
        ...

    def occurred_per_day(self, scope: Scope, since: str, before: str) -> list[tuple[str, int]]:
        """(UTC day "YYYY-MM-DD", count) of the visible memories whose occurred_at is at or after `since` and
        before `before` (normalised RFC3339), ascending by day; days with none are left out."""
        ...

    def by_ids(self, ids: Sequence[int]) -> dict[int, StoredMemory]: ...

    def terms_version(self) -> int:
        """The version of the lexical terms stored with the memories (memory_server/memories/writes.py TERMS_VERSION;
        1 for a store that never recorded one)."""
        ...

    def rewrite_terms(self, terms: Callable[[str, str | None], str], version: int) -> int:
        """Write every memory's lexical terms again as `terms(content, occurred_at)`, a batch of memories a
        transaction, then record `version`; how many memories' terms changed."""
        ...

    def replaced(self, site_id: int, ids: Sequence[int]) -> dict[int, str | None]:
        """Those of these memories of the site that have a successor, with their valid_to: what recall needs of the
        memories it ranked best to place the superseded ones, without reading them whole."""
        ...

    def newest(self, scope: Scope, references: Sequence[str]) -> dict[str, StoredMemory]:
        """For each of `references` that is superseded, the memory furthest along its chain of successors that
        the scope sees (none if it sees none of them)."""
        ...

    def chain_head(self, site_id: int, reference: str) -> str | None:
        """The newest memory of the chain `reference` is in (itself if nothing supersedes it), whatever its
        bounds; None if the site has no memory `reference`."""
        ...

    def purge_expired(self, at: str, limit: int) -> list[int]:
        """Delete up to `limit` memories whose expires_at is at or before `at` (normalised RFC3339), oldest
        expiry first, in one short transaction (their chains joined, each queued for removal from the index);
        their ids."""
        ...

    def count(self) -> int: ...
