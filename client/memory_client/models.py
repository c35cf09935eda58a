"""Typed responses. Every model ignores fields it does not know, so a newer server never breaks this client.

Timestamps are parsed into timezone-aware `datetime`s; log payloads are the JSON objects exactly as they
were appended (same keys, same order, same values).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --- saved memories -----------------------------------------------------------------------------------


class MemoryFields(Model):
    reference: str
    type: str
    content: str
    location: str | None = None
    project: str | None = None
    team: str | None = None
    bucket: str = "default"
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    occurred_at: datetime
    created_at: datetime
    # Changing memories (v2 of the contract): absent on servers that do not have them yet.
    supersedes: str | None = None
    superseded_by: str | None = None
    valid_to: datetime | None = None
    expires_at: datetime | None = None


class Memory(MemoryFields):
    """One saved memory, as `get`, `update` and `list_memories` return it."""

    updated_at: datetime | None = None


class Hit(MemoryFields):
    """A ranked result of `recall` or `search`; `score` as the server's docs/tools.md ("Scores") defines it per tool."""

    score: float
    updated_at: datetime | None = None


class Remembered(Model):
    reference: str
    created: bool


class Forgotten(Model):
    reference: str
    forgotten: bool


class MemoryPage(Model):
    memories: list[Memory]
    next_cursor: str | None = None


class Budget(Model):
    max_items: int
    max_tokens: int
    used_items: int
    used_tokens: int
    dropped: int
    shortened: int


class ContextItem(Model):
    reference: str
    type: str
    location: str | None = None
    score: float
    occurred_at: datetime
    content: str
    shortened: bool = False
    supersedes: str | None = None
    superseded_by: str | None = None
    valid_to: datetime | None = None
    expires_at: datetime | None = None


class ContextPack(Model):
    """The structured context pack of `POST /v1/context` (`recall_context`)."""

    version: str
    retrieval_plan: dict[str, Any] = Field(default_factory=dict)
    budget: Budget
    items: list[ContextItem]
    context_text: str


# --- conversation logs --------------------------------------------------------------------------------


class LogItem(Model):
    seq: int
    recorded_at: datetime
    payload: dict[str, Any]


class AppendAck(Model):
    """The acknowledgement of an append: the items are durable. `duplicate` when the key was seen before."""

    conversation_id: str
    first_seq: int
    last_seq: int
    count: int
    recorded_at: datetime
    duplicate: bool


class ConversationSummary(Model):
    conversation_id: str
    item_count: int
    first_recorded_at: datetime
    last_recorded_at: datetime


class ConversationPage(Model):
    conversations: list[ConversationSummary]
    next_cursor: str | None = None


class ConversationDeleted(Model):
    """A conversation deleted for good; memories that named it in their provenance lost the link."""

    conversation_id: str
    deleted: bool
    item_count: int
    memories_unlinked: int = 0
