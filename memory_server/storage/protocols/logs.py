"""Conversation logs: appends, reads, imports, deletion and retention, and the indexing of log items."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memory_server.storage.records import (
    AppendAck,
    ConversationPage,
    IndexingProgress,
    LogDeletion,
    PurgeStep,
    RawItem,
    ToIndex,
)


class LogStore(Protocol):
    async def append(
        self,
        site_id: int,
        conversation_id: str,
        payloads: Sequence[str],
        idempotency_key: str | None,
        *,
        index: bool | None = None,
        bucket: str | None = None,
    ) -> AppendAck:
        """Append one all-or-nothing batch; acknowledged once durable. A known key returns its first ack.
        `index`: the conversation's own choice to have its items indexed (kept for its later appends; None:
        unchanged, a new conversation as its site); `bucket`: its indexed turns' bucket (None: unchanged)."""
        ...

    def tail(self, site_id: int, conversation_id: str, count: int) -> list[RawItem]:
        """The last `count` items, ascending."""
        ...

    def replay(self, site_id: int, conversation_id: str, offset: int, limit: int) -> list[RawItem]:
        """Up to `limit` items from seq `offset`, ascending."""
        ...

    def conversations(self, site_id: int, limit: int, after: tuple[int, str] | None) -> ConversationPage:
        """Conversations newest activity first, after the key of the previous page's last one."""
        ...

    def count_conversations(self, site_id: int) -> int:
        """How many conversations the site has (any with at least one item)."""
        ...

    def import_items(
        self,
        site_id: int,
        conversation_id: str,
        items: Sequence[RawItem],
        *,
        index: bool | None = None,
        bucket: str | None = None,
    ) -> list[str]:
        """Add items that keep their seq and recorded_at; per item "appended", "present" or an error text.
        `index`, `bucket`: the conversation's own indexing choice and bucket, as an append sets them."""
        ...

    # Deletion (memory_server/storage/deletion.py): a conversation is marked in one small transaction, hidden from
    # then on (reads find nothing, appends wait), and purged in steps that each stay small.

    def delete_conversation(self, site_id: int, conversation_id: str) -> LogDeletion | None:
        """Mark a conversation for deletion; None if the site has no such conversation. One already marked
        answers again with started=False."""
        ...

    def expire(self, now_us: int, limit: int) -> int:
        """Mark up to `limit` conversations, of sites with a log retention, whose last activity (unix µs) is
        older than `now_us` minus the retention; how many were marked."""
        ...

    def purging(self, limit: int) -> list[tuple[int, str]]:
        """(site id, conversation id) of conversations marked for deletion and not purged yet."""
        ...

    def purge_step(self, site_id: int, conversation_id: str, budget: int) -> PurgeStep:
        """One transaction of a marked conversation's purge, of at most `budget` rows: its indexed turns,
        memory links, then items, then idempotency keys; the conversation row goes with the step that finds
        nothing more (done). Done at once if the conversation is not marked (purged already)."""
        ...

    # Indexing (memory_server/logs/indexing.py): a conversation that is `indexing` has its items from `indexed_seq`
    # on still to turn into recallable entries (MemoryStore.insert_turns moves it on).

    def to_index(self, limit: int) -> list[ToIndex]:
        """Up to `limit` conversations (of every site, not being deleted) with items still to index."""
        ...

    def index_waiting(self) -> int:
        """How many items of every site are still to index."""
        ...

    def index_progress(self, site_id: int) -> IndexingProgress:
        """The site's items still to index, and those looked at (and skipped) so far."""
        ...

    def mark_for_indexing(self, site_id: int, active_since_us: int) -> int:
        """If the site indexes its logs: set indexing the conversations active since then (unix µs) that follow
        it and are not; how many."""
        ...
