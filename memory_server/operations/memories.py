"""The saved-memory operations, each once: remember, recall, search, context, forget, get, update, list.

Every transport (MCP tools, REST routes, the console) calls these with a validated parameter model; bounds
and defaults live in the models (memory_server.memories.params), the settings-dependent ones (the search threshold,
content limit) here. Blocking work runs in worker threads.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import anyio

from memory_server.auth.principal import READ, Principal
from memory_server.errors import InvalidParameters, NotFound, Unavailable
from memory_server.memories.params import (
    ActivityParams,
    ContextParams,
    FilterParams,
    ListMemoriesParams,
    RecallParams,
    ReferenceParams,
    RememberParams,
    SearchParams,
    UpdateParams,
)
from memory_server.memories.system import Memories
from memory_server.memories.validation import (
    Filters,
    decode_list_cursor,
    encode_list_cursor,
    filters,
    plausible_reference,
    read_scope,
)
from memory_server.retrieval import context
from memory_server.settings import Settings
from memory_server.storage.records import MEMORY
from memory_server.storage.scope import Scope

# A count of visible memories stops here: past it a status page says "more than" (a full count walks rows).
COUNT_CAP = 1_000_000
# A listing's count stops sooner, since every page of the list shows it: counting reads each matching row
# (~3 µs on SQLite: 10,000 in ~30 ms, 100,000 in ~320 ms).
LIST_COUNT_CAP = 10_000


def filters_of(params: FilterParams) -> Filters:
    return filters(project=params.project, team=params.team, bucket=params.bucket, type=params.type, tags=params.tags)


def check_window(occurred_after: str | None, occurred_before: str | None) -> None:
    """A time window [occurred_after, occurred_before) holds something (both bounds come normalised)."""
    if occurred_after is not None and occurred_before is not None and occurred_after >= occurred_before:
        raise InvalidParameters("occurred_after must be earlier than occurred_before")


def retrieval_scope(principal: Principal, params: FilterParams) -> Scope:
    """What recall, search_memory and recall_context look at: the caller's bounds narrowed by the request's
    filters and its time window."""
    check_window(params.occurred_after, params.occurred_before)
    return (
        read_scope(principal, filters_of(params))
        .within(occurred_after=params.occurred_after, occurred_before=params.occurred_before)
        .of_kinds(params.kinds)
    )


def described(params: FilterParams) -> dict[str, Any]:
    """The request's filters, for a retrieval plan."""
    found = filters_of(params).described()
    if params.kinds is not None:
        found["kinds"] = list(params.kinds)
    found.update(
        {
            name: value
            for name, value in (("occurred_after", params.occurred_after), ("occurred_before", params.occurred_before))
            if value is not None
        }
    )
    if params.include_superseded:
        found["include_superseded"] = True
    return found


class MemoryOperations:
    def __init__(
        self,
        memories: Callable[[], Memories],
        settings: Settings,
        *,
        observe_remember: Callable[[bool], None] | None = None,
    ) -> None:
        self._memories = memories  # raises unavailable while the model loads
        self.settings = settings
        self.observe = observe_remember

    def loaded(self) -> Memories:
        return self._memories()

    async def remember(self, principal: Principal, params: RememberParams) -> dict[str, Any]:
        memories = self._memories()
        new = memories.writes.validate(**params.model_dump())
        inserted = await anyio.to_thread.run_sync(memories.writes.remember, principal, new)
        if self.observe is not None:
            self.observe(inserted.created)
        similar: list[dict[str, Any]] = []
        if READ in principal.scopes:  # a credential that cannot read is told nothing about other memories
            filing = read_scope(principal, filters(project=new.project, team=new.team, bucket=new.bucket))
            copies = memories.retrieval.copies
            similar = await anyio.to_thread.run_sync(copies, filing.of_kinds([MEMORY]), inserted, new.content)
        return {"reference": inserted.reference, "created": inserted.created, "similar": similar}

    async def recall(self, principal: Principal, params: RecallParams) -> list[dict[str, Any]]:
        memories = self._memories()
        scope = retrieval_scope(principal, params)
        return await anyio.to_thread.run_sync(
            lambda: memories.retrieval.recall(scope, params.query, params.limit, demote=not params.include_superseded)
        )

    def notice(self) -> str | None:
        """What recall and search answers should say about how they were made right now, if anything."""
        return self._memories().retrieval.notice()

    def answer(self, hits: list[dict[str, Any]]) -> dict[str, Any]:
        """The results of recall or search_memory, with the notice when there is one."""
        notice = self.notice()
        return {"results": hits, **({"notice": notice} if notice else {})}

    async def search(self, principal: Principal, params: SearchParams) -> list[dict[str, Any]]:
        memories = self._memories()
        scope = retrieval_scope(principal, params).only_current(not params.include_superseded)
        threshold = self.settings.search_min_score if params.min_score is None else float(params.min_score)
        return await anyio.to_thread.run_sync(memories.retrieval.search, scope, params.query, params.limit, threshold)

    async def context(self, principal: Principal, params: ContextParams) -> dict[str, Any]:
        """Ranked as recall, packed in rank order under max_items and max_tokens: the structured pack."""
        memories = self._memories()
        scope = retrieval_scope(principal, params).only_current(not params.include_superseded)

        def build() -> dict[str, Any]:
            hits = memories.retrieval.recall(
                scope, params.query, params.max_items, demote=not params.include_superseded
            )
            packed = context.pack(
                hits, max_items=params.max_items, max_tokens=params.max_tokens, tokens=memories.tokens
            )
            plan = {"ranking": "recall", "candidates": len(hits), "filters": described(params)}
            return context.structured(packed, tokens=memories.tokens, plan=plan)

        return await anyio.to_thread.run_sync(build)

    async def forget(self, principal: Principal, params: ReferenceParams) -> dict[str, Any]:
        memories = self._memories()
        await anyio.to_thread.run_sync(memories.writes.forget, principal, params.reference)
        return {"reference": params.reference, "forgotten": True}

    async def get(self, principal: Principal, params: ReferenceParams) -> dict[str, Any]:
        memories = self._memories()
        scope = read_scope(principal, Filters())
        found = await anyio.to_thread.run_sync(
            lambda: (
                memories.storage.memories.get(scope, params.reference)
                if plausible_reference(params.reference)
                else None
            )
        )
        if found is None:
            raise NotFound(f"no memory with reference {params.reference!r}")
        return found.fields()

    async def update(self, principal: Principal, reference: str, params: UpdateParams) -> dict[str, Any]:
        memories = self._memories()
        updated = await anyio.to_thread.run_sync(memories.writes.update, principal, reference, params.changes())
        return updated.fields()

    async def list(self, principal: Principal, params: ListMemoriesParams) -> dict[str, Any]:
        """A page of visible memories, newest first (by created_at, or by occurred_at), and the cursor of the
        next page (or None)."""
        memories = self._memories()
        after = decode_list_cursor(params.cursor, params.order) if params.cursor is not None else None
        scope, provenance = listing(principal, params)
        if scope.empty:
            return {"memories": [], "next_cursor": None}
        page, following = await anyio.to_thread.run_sync(
            lambda: memories.storage.memories.page(
                scope,
                location=params.location,
                provenance=provenance,
                limit=params.limit,
                after=after,
                occurred_after=params.occurred_after,
                occurred_before=params.occurred_before,
                order=params.order,
            )
        )
        return {
            "memories": [m.fields() for m in page],
            "next_cursor": encode_list_cursor(following, params.order) if following is not None else None,
        }

    async def count_listed(self, principal: Principal, params: ListMemoriesParams) -> dict[str, Any]:
        """How many memories `list` gives with these filters in all (counted up to LIST_COUNT_CAP)."""
        memories = self._memories()
        scope, provenance = listing(principal, params)
        total = (
            0
            if scope.empty
            else await anyio.to_thread.run_sync(
                lambda: memories.storage.memories.count_listed(
                    scope,
                    location=params.location,
                    provenance=provenance,
                    up_to=LIST_COUNT_CAP,
                    occurred_after=params.occurred_after,
                    occurred_before=params.occurred_before,
                )
            )
        )
        return {"total": min(total, LIST_COUNT_CAP), "capped": total > LIST_COUNT_CAP}

    async def activity(self, principal: Principal, params: ActivityParams) -> dict[str, Any]:
        """How many memories the caller sees (counted up to COUNT_CAP), and how many of them occurred on each
        of the last `days` UTC days, today included (every day listed, oldest first)."""
        memories = self._memories()
        scope = read_scope(principal, Filters())
        today = datetime.now(UTC).date()
        first = today - timedelta(days=params.days - 1)

        def read() -> tuple[int, list[tuple[str, int]]]:
            if scope.empty:
                return 0, []
            total = memories.storage.candidates.visible_count(scope, COUNT_CAP)
            return total, memories.storage.memories.occurred_per_day(
                scope, day_start(first), day_start(today + timedelta(days=1))
            )

        total, counted = await anyio.to_thread.run_sync(read)
        per_day = dict(counted)
        days = [(first + timedelta(days=n)).isoformat() for n in range(params.days)]
        return {
            "memories": min(total, COUNT_CAP),
            "capped": total > COUNT_CAP,
            "per_day": [{"day": day, "count": per_day.get(day, 0)} for day in days],
        }


def day_start(day: date) -> str:
    """The instant a UTC day starts, normalised as timestamps are stored."""
    return f"{day.isoformat()}T00:00:00.000000Z"


def listing(principal: Principal, params: ListMemoriesParams) -> tuple[Scope, dict[str, str]]:
    """What a listing reads: the caller's bounds narrowed by the filters, and the provenance it must carry."""
    check_window(params.occurred_after, params.occurred_before)
    scope = read_scope(
        principal,
        filters(project=params.project, team=params.team, bucket=params.bucket, type=params.type, tags=params.tag),
    ).of_kinds(params.kinds)
    provenance = {
        key: value
        for key, value in (
            ("source", params.provenance_source),
            ("agent", params.provenance_agent),
            ("conversation_id", params.provenance_conversation_id),
        )
        if value is not None
    }
    return scope, provenance


def unavailable_until_loaded(error: str | None) -> Unavailable:
    if error:
        return Unavailable(f"saved memories are unavailable: {error}")
    return Unavailable("the embedding model is still loading; retry shortly")
