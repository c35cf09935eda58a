"""The asynchronous client: the same operations as `Client`, awaitable, over one `httpx.AsyncClient`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from memory_client import _api
from memory_client._api import UNSET, Call, Timestamp, Unset
from memory_client.client import DEFAULT_TIMEOUT, PAGE, Client, connection_headers
from memory_client.errors import TransportError
from memory_client.models import (
    AppendAck,
    ContextPack,
    ConversationDeleted,
    ConversationPage,
    ConversationSummary,
    Forgotten,
    Hit,
    LogItem,
    Memory,
    MemoryPage,
    Remembered,
)
from memory_client.recorder import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    CLOSE_TIMEOUT,
    MAX_BATCH_BYTES,
    MAX_BATCH_ITEMS,
    MAX_BUFFER_BYTES,
    MAX_BUFFER_ITEMS,
    MAX_DELAY,
    AsyncRecorder,
    DeadLetterHandler,
    Recorder,
)

T = TypeVar("T")


class AsyncClient:
    """`AsyncClient("http://127.0.0.1:8765", auth=("site", secret))` or `AsyncClient(url, token=...)`;
    `async with` it or `await close()`."""

    def __init__(
        self,
        url: str,
        *,
        auth: tuple[str, str] | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._auth = auth
        self._token = token
        self._extra_headers = dict(headers or {})
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=connection_headers(auth, token, headers), timeout=timeout, transport=transport
        )
        self._recorders: set[AsyncRecorder] = set()

    async def _call(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(
                call.method, call.path, params=call.params, json=call.json, content=call.content, headers=call.headers
            )
        except httpx.TimeoutException as exc:
            raise TransportError(f"{call.method} {call.path} timed out: {exc}") from exc
        except httpx.TransportError as exc:
            raise TransportError(f"{call.method} {call.path} failed: {exc}") from exc
        return _api.read(response, call)

    async def ready(self) -> bool:
        """Whether `/readyz` says the server can serve every operation (False also when unreachable)."""
        try:
            return (await self._http.get("/readyz")).status_code == 200
        except httpx.HTTPError:
            return False

    # --- saved memories -------------------------------------------------------------------------------

    async def remember(
        self,
        content: str,
        *,
        type: str | None = None,
        location: str | None = None,
        project: str | None = None,
        team: str | None = None,
        bucket: str | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        provenance: Mapping[str, Any] | None = None,
        occurred_at: Timestamp | None = None,
        supersedes: str | None = None,
        expires_at: Timestamp | None = None,
    ) -> Remembered:
        """Save a memory (`POST /v1/memories`). `created` is False when it was already there."""
        return await self._call(
            _api.remember(
                content,
                type=type,
                location=location,
                project=project,
                team=team,
                bucket=bucket,
                tags=tags,
                metadata=metadata,
                provenance=provenance,
                occurred_at=occurred_at,
                supersedes=supersedes,
                expires_at=expires_at,
            )
        )

    async def recall(
        self,
        query: str,
        *,
        limit: int = 5,
        project: str | None = None,
        team: str | None = None,
        bucket: str | None = None,
        type: str | None = None,
        tags: Sequence[str] | None = None,
        occurred_after: Timestamp | None = None,
        occurred_before: Timestamp | None = None,
        include_superseded: bool | None = None,
    ) -> list[Hit]:
        """Best-effort ranked lookup (`POST /v1/recall`), best first."""
        found = _api.filters(
            project=project,
            team=team,
            bucket=bucket,
            type=type,
            tags=tags,
            occurred_after=occurred_after,
            occurred_before=occurred_before,
            include_superseded=include_superseded,
        )
        return await self._call(_api.recall(query, limit=limit, found=found))

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        min_score: float | None = None,
        project: str | None = None,
        team: str | None = None,
        bucket: str | None = None,
        type: str | None = None,
        tags: Sequence[str] | None = None,
        occurred_after: Timestamp | None = None,
        occurred_before: Timestamp | None = None,
    ) -> list[Hit]:
        """Strict search (`POST /v1/search`): only exact filter matches scoring at least `min_score`."""
        found = _api.filters(
            project=project,
            team=team,
            bucket=bucket,
            type=type,
            tags=tags,
            occurred_after=occurred_after,
            occurred_before=occurred_before,
            include_superseded=None,
        )
        return await self._call(_api.search(query, limit=limit, min_score=min_score, found=found))

    async def context(
        self,
        query: str,
        *,
        max_items: int = 8,
        max_tokens: int = 1500,
        project: str | None = None,
        team: str | None = None,
        bucket: str | None = None,
        type: str | None = None,
        tags: Sequence[str] | None = None,
        occurred_after: Timestamp | None = None,
        occurred_before: Timestamp | None = None,
    ) -> ContextPack:
        """A context pack within `max_items` and `max_tokens` (`POST /v1/context`)."""
        found = _api.filters(
            project=project,
            team=team,
            bucket=bucket,
            type=type,
            tags=tags,
            occurred_after=occurred_after,
            occurred_before=occurred_before,
            include_superseded=None,
        )
        return await self._call(_api.context(query, max_items=max_items, max_tokens=max_tokens, found=found))

    async def forget(self, reference: str) -> Forgotten:
        """Delete a memory (`DELETE /v1/memories/{reference}`); NotFound if there is none."""
        return await self._call(_api.forget(reference))

    async def get(self, reference: str) -> Memory:
        """One memory (`GET /v1/memories/{reference}`); NotFound if there is none."""
        return await self._call(_api.get(reference))

    async def update(
        self,
        reference: str,
        *,
        content: str | Unset = UNSET,
        type: str | None | Unset = UNSET,
        location: str | None | Unset = UNSET,
        project: str | None | Unset = UNSET,
        team: str | None | Unset = UNSET,
        bucket: str | None | Unset = UNSET,
        tags: Sequence[str] | None | Unset = UNSET,
        metadata: Mapping[str, Any] | None | Unset = UNSET,
        provenance: Mapping[str, Any] | None | Unset = UNSET,
        occurred_at: Timestamp | Unset = UNSET,
        supersedes: str | None | Unset = UNSET,
        expires_at: Timestamp | None | Unset = UNSET,
    ) -> Memory:
        """Change some fields (`PATCH /v1/memories/{reference}`): only the ones passed; None resets one to
        its `remember` default. Returns the updated memory."""
        changes = dict(
            content=content,
            type=type,
            location=location,
            project=project,
            team=team,
            bucket=bucket,
            tags=tags,
            metadata=metadata,
            provenance=provenance,
            occurred_at=occurred_at,
            supersedes=supersedes,
            expires_at=expires_at,
        )
        return await self._call(_api.update(reference, changes))

    async def list_memories(
        self,
        *,
        project: str | None = None,
        team: str | None = None,
        bucket: str | None = None,
        type: str | None = None,
        tags: Sequence[str] | None = None,
        location: str | None = None,
        provenance_source: str | None = None,
        provenance_agent: str | None = None,
        provenance_conversation_id: str | None = None,
        occurred_after: Timestamp | None = None,
        occurred_before: Timestamp | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> MemoryPage:
        """One page of memories, newest first (`GET /v1/memories`); follow `next_cursor`."""
        return await self._call(
            _api.list_memories(
                project=project,
                team=team,
                bucket=bucket,
                type=type,
                tags=tags,
                location=location,
                provenance_source=provenance_source,
                provenance_agent=provenance_agent,
                provenance_conversation_id=provenance_conversation_id,
                occurred_after=occurred_after,
                occurred_before=occurred_before,
                limit=limit,
                cursor=cursor,
            )
        )

    async def iter_memories(self, *, page_size: int = 100, **filters: Any) -> AsyncIterator[Memory]:
        """Every memory `list_memories(**filters)` would page through, newest first."""
        cursor: str | None = None
        while True:
            page = await self.list_memories(limit=page_size, cursor=cursor, **filters)
            for each in page.memories:
                yield each
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # --- conversation logs (Basic credential) ---------------------------------------------------------

    async def append(
        self, conversation_id: str, items: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> AppendAck:
        """Append 1-1000 items as one durable batch and wait for the acknowledgement. In a conversation,
        prefer `recorder()`, which never waits."""
        return await self._call(_api.append(conversation_id, items, idempotency_key))

    async def delete_conversation(self, conversation_id: str) -> ConversationDeleted:
        """Delete a conversation log for good (`DELETE /v1/conversations/{id}`); NotFound if there is none.
        Returns once nothing of it is left; the id may then start a new log at seq 0."""
        return await self._call(_api.delete_conversation(conversation_id))

    async def tail(self, conversation_id: str, count: int = 50) -> list[LogItem]:
        """The last `count` items (0-1000), ascending (`recall_memory`)."""
        return await self._call(_api.tail(conversation_id, count))

    async def replay(self, conversation_id: str, *, offset: int = 0, limit: int = 100) -> list[LogItem]:
        """Up to `limit` items (0-1000) from `offset`, ascending (`replay_memory`); short page = end."""
        return await self._call(_api.replay(conversation_id, offset, limit))

    async def iter_log(self, conversation_id: str, offset: int = 0, *, page_size: int = PAGE) -> AsyncIterator[LogItem]:
        """Every item from `offset` to the end, page by page; stops at the first short page."""
        while True:
            page = await self.replay(conversation_id, offset=offset, limit=page_size)
            for each in page:
                yield each
            if len(page) < page_size:
                return
            offset = page[-1].seq + 1

    async def list_conversations(self, *, limit: int = 100, cursor: str | None = None) -> ConversationPage:
        """One page of the site's conversations, newest activity first."""
        return await self._call(_api.list_conversations(limit, cursor))

    async def iter_conversations(self, *, page_size: int = 100) -> AsyncIterator[ConversationSummary]:
        cursor: str | None = None
        while True:
            page = await self.list_conversations(limit=page_size, cursor=cursor)
            for each in page.conversations:
                yield each
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def recorder(
        self,
        conversation_id: str,
        spool: str | os.PathLike[str] | None = None,
        *,
        max_batch_items: int = MAX_BATCH_ITEMS,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        max_delay: float = MAX_DELAY,
        max_buffer_items: int = MAX_BUFFER_ITEMS,
        max_buffer_bytes: int = MAX_BUFFER_BYTES,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
        on_dead_letter: DeadLetterHandler | None = None,
        spool_fsync: bool = False,
        close_timeout: float = CLOSE_TIMEOUT,
    ) -> AsyncRecorder:
        """A background recorder for one conversation, as `Client.recorder`. Its worker is a thread with
        its own sync connection to the same server, so `record()` is a plain call that never awaits and
        delivery does not depend on this event loop; `await recorder.flush(t)` / `await recorder.close()`."""
        sender = Client(
            self.url, auth=self._auth, token=self._token, timeout=self._timeout, headers=self._extra_headers
        )
        wrapper: AsyncRecorder | None = None

        def closed() -> None:
            sender.close()
            self._recorders.discard(wrapper)

        try:
            inner = Recorder(
                sender,
                conversation_id,
                spool=spool,
                max_batch_items=max_batch_items,
                max_batch_bytes=max_batch_bytes,
                max_delay=max_delay,
                max_buffer_items=max_buffer_items,
                max_buffer_bytes=max_buffer_bytes,
                backoff_initial=backoff_initial,
                backoff_max=backoff_max,
                on_dead_letter=on_dead_letter,
                spool_fsync=spool_fsync,
                close_timeout=close_timeout,
                on_close=closed,
            )
        except BaseException:
            sender.close()
            raise
        wrapper = AsyncRecorder(inner)
        self._recorders.add(wrapper)
        return wrapper

    async def close(self) -> None:
        """Close the recorders this client made (each flushing up to its `close_timeout`), then the pool."""
        for recorder in list(self._recorders):
            await recorder.close()
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
