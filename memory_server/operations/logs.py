"""The conversation-log operations, each once: append, tail, replay, list, delete. Basic credentials only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypedDict

import anyio

from memory_server.auth.principal import Principal
from memory_server.errors import NotFound, UnprocessableParameters
from memory_server.logs.deletion import delete_conversation
from memory_server.logs.params import (
    AppendParams,
    DeleteConversationParams,
    ListConversationsParams,
    ReplayParams,
    TailParams,
)
from memory_server.logs.validation import (
    LogLimits,
    check_idempotency_key,
    decode_cursor,
    encode_cursor,
    serialize_items,
)
from memory_server.storage.protocols import LogStore
from memory_server.storage.records import AppendAck, ConversationSummary, RawItem

BASIC_ONLY = "this operation requires the site's Basic authentication (conversation logs take no tokens)"


class ConversationsAnswer(TypedDict):
    conversations: list[ConversationSummary]
    next_cursor: str | None


class DeletedAnswer(TypedDict):
    conversation_id: str
    deleted: bool
    item_count: int
    memories_unlinked: int
    turns_deleted: int


def require_basic(principal: Principal) -> None:
    if not principal.is_basic:
        raise UnprocessableParameters(BASIC_ONLY)


class LogOperations:
    def __init__(
        self, store: LogStore, limits: LogLimits, *, observe_append: Callable[[AppendAck], None] | None = None
    ) -> None:
        self.store = store
        self.limits = limits
        self.observe = observe_append
        self.appended: Callable[[], None] | None = None  # set once a log indexer runs (memory_server/logs/indexing.py)

    def prepare(self, principal: Principal, params: AppendParams) -> tuple[list[str], str | None]:
        """Everything an append checks before it writes (cheap: the fast path runs it on the event loop)."""
        require_basic(principal)
        return serialize_items(params.items, self.limits), check_idempotency_key(params.idempotency_key)

    async def append(
        self, principal: Principal, params: AppendParams, prepared: tuple[list[str], str | None] | None = None
    ) -> AppendAck:
        """`prepared`: what `prepare` returned for these params, when the caller ran it already."""
        payloads, key = prepared if prepared is not None else self.prepare(principal, params)
        ack = await self.store.append(
            principal.site_id, params.conversation_id, payloads, key, index=params.index, bucket=params.bucket
        )
        if self.observe is not None:
            self.observe(ack)
        if self.appended is not None:  # the log indexer looks for items to index, after the acknowledgement
            self.appended()
        return ack

    async def tail(self, principal: Principal, params: TailParams) -> list[RawItem]:
        require_basic(principal)
        return await anyio.to_thread.run_sync(self.store.tail, principal.site_id, params.conversation_id, params.count)

    async def replay(self, principal: Principal, params: ReplayParams) -> list[RawItem]:
        require_basic(principal)
        return await anyio.to_thread.run_sync(
            self.store.replay, principal.site_id, params.conversation_id, params.offset, params.limit
        )

    async def count(self, principal: Principal) -> int:
        """How many conversations the site has."""
        require_basic(principal)
        return await anyio.to_thread.run_sync(self.store.count_conversations, principal.site_id)

    def list_prepare(self, principal: Principal, params: ListConversationsParams) -> tuple[int, str] | None:
        require_basic(principal)
        return decode_cursor(params.cursor) if params.cursor is not None else None

    async def conversations(self, principal: Principal, params: ListConversationsParams) -> ConversationsAnswer:
        after = self.list_prepare(principal, params)
        page = await anyio.to_thread.run_sync(self.store.conversations, principal.site_id, params.limit, after)
        return {
            "conversations": page.conversations,
            "next_cursor": encode_cursor(page.following) if page.following is not None else None,
        }

    async def delete_conversation(self, principal: Principal, params: DeleteConversationParams) -> DeletedAnswer:
        """Delete a conversation for good: its items, its idempotency keys, its indexed turns, the links of
        memories whose provenance names it. Answers once nothing of it is left; not_found for a conversation the
        site does not have (or no longer has)."""
        require_basic(principal)
        deleted = await anyio.to_thread.run_sync(
            delete_conversation, self.store, principal.site_id, params.conversation_id
        )
        if deleted is None:
            raise NotFound(f"no conversation {params.conversation_id!r}")
        return {
            "conversation_id": deleted.conversation_id,
            "deleted": True,
            "item_count": deleted.item_count,
            "memories_unlinked": deleted.memories_unlinked,
            "turns_deleted": deleted.turns_deleted,
        }


def items_answer(rows: list[RawItem]) -> dict[str, list[dict[str, Any]]]:
    """`{"items": [{seq, recorded_at, payload}]}`, each payload parsed from its stored JSON text."""
    return {"items": [{"seq": seq, "recorded_at": at, "payload": json.loads(text)} for seq, at, text in rows]}
