"""Deleting a conversation log, the part every storage backend shares.

A deletion has two phases, so that no transaction grows with the log. First one small transaction marks the
conversation `deleting`: from its commit on, no read sees the conversation (tail, replay, the listing, an
export), and appends to it wait. Then purge steps, each one small transaction of at most a budget of rows,
clear the link of every memory whose provenance names the conversation, delete its items, then its
idempotency keys; the step that finds nothing left deletes the conversation's row. An append that waited
then starts a new log at seq 0. A purge cut short (a crash, a shutdown) is finished by the next one that
looks: the background retention task resumes every marked conversation.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from memory_server.errors import Unavailable
from memory_server.storage.records import ConversationDeleting

T = TypeVar("T")

# Rows one purge transaction removes at most: a few milliseconds of work, so a writer waiting behind it
# (SQLite has one at a time) waits no longer than that.
PURGE_BUDGET = 500
# How long an append waits for the deletion of its conversation to finish before it answers `unavailable`.
DELETION_WAIT_S = 10.0
FIRST_POLL_S, MAX_POLL_S = 0.01, 0.2
DAY_US = 86_400_000_000  # a day of retention, in the microseconds of last_activity_us


def deleting_message(conversation_id: str) -> str:
    return f"conversation {conversation_id} is being deleted; retry once it is gone (it then starts again at seq 0)"


def unlinked_provenance(text: str) -> str:
    """A memory's provenance (as stored) without its link to a conversation: conversation_id and seq."""
    provenance = json.loads(text)
    if isinstance(provenance, dict):
        provenance.pop("conversation_id", None)
        provenance.pop("seq", None)
    return json.dumps(provenance, ensure_ascii=False)


async def after_deletion(attempt: Callable[[], Awaitable[T]], conversation_id: str) -> T:
    """Run an append; while its conversation is being deleted (ConversationDeleting), wait and try again,
    for up to DELETION_WAIT_S, then `unavailable`."""
    wait_s = DELETION_WAIT_S
    deadline: float | None = None
    delay = FIRST_POLL_S
    while True:
        try:
            return await attempt()
        except ConversationDeleting:
            now = time.monotonic()
            deadline = deadline if deadline is not None else now + wait_s
            if now >= deadline:
                raise Unavailable(deleting_message(conversation_id)) from None
        await asyncio.sleep(min(delay, deadline - now))
        delay = min(delay * 2, MAX_POLL_S)
