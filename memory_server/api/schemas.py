"""The shapes of the answers: the REST OpenAPI document is generated from these, and the MCP tools answer with
the same shapes (tests/test_mcp_surface.py checks; the tools publish no output schema: memory_server.api.mcp.registry).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from memory_server.errors import AppError

ERROR_CODES = tuple(sorted(cls.code for cls in AppError.__subclasses__()))


class McpMemoryItem(BaseModel):
    seq: int = Field(
        ge=0, description="Sequence number of the item: per conversation, 0-based, gapless, in append order."
    )
    recorded_at: str = Field(
        description="Server-side commit time of the item's batch, as an RFC3339 "
        "timestamp; all items appended in one batch share it."
    )
    payload: dict[str, Any] = Field(
        description="The JSON object exactly as it was appended: stored verbatim, never interpreted."
    )


class AppendResult(BaseModel):
    conversation_id: str
    first_seq: int
    last_seq: int
    count: int
    recorded_at: str
    duplicate: bool


class ItemsResult(BaseModel):
    items: list[McpMemoryItem]


class ConversationSummary(BaseModel):
    conversation_id: str
    item_count: int
    first_recorded_at: str
    last_recorded_at: str


class ConversationsResult(BaseModel):
    conversations: list[ConversationSummary]
    next_cursor: str | None


class ConversationDeleted(BaseModel):
    conversation_id: str
    deleted: Literal[True]
    item_count: int = Field(description="How many items the log held when it was deleted.")
    turns_deleted: int = Field(0, description="Its indexed turns (entries recall found), deleted with it.")
    memories_unlinked: int = Field(
        description="Saved memories whose provenance named the conversation: they "
        "are kept, without provenance.conversation_id and provenance.seq."
    )


class MemoryFields(BaseModel):
    """The attributes of a saved memory, as every answer that returns one carries them."""

    reference: str
    type: str
    location: str | None
    content: str
    project: str | None
    team: str | None
    bucket: str
    tags: list[str]
    metadata: dict[str, Any]
    provenance: dict[str, Any]
    occurred_at: str
    created_at: str


class Lifecycle(BaseModel):
    """How a memory stands among the ones that replaced each other, and when it expires."""

    supersedes: str | None = Field(None, description="The reference of the memory this one replaced.")
    superseded_by: str | None = Field(
        None, description="The reference of the memory that replaced this one: null while it is current."
    )
    valid_to: str | None = Field(None, description="When it was replaced (its successor's occurred_at).")
    expires_at: str | None = Field(None, description="When it expires: never returned from then on, then deleted.")
    kind: Literal["memory", "turn"] = Field(
        "memory",
        description=(
            "memory: saved with remember; turn: a conversation log item, indexed (its provenance names the "
            "conversation_id and seq, to read around it with replay_memory)."
        ),
    )


class PublicHit(MemoryFields):
    """A hit with the fields of the public tool profile (docs/spec.md, "Tool profiles"): no lifecycle fields."""

    score: float


class PublicResults(BaseModel):
    results: list[PublicHit]


class Hit(MemoryFields, Lifecycle):
    score: float
    copies: list[str] | None = Field(
        None,
        description="recall only: the references of memories saying the same thing, folded into this hit.",
    )


class Results(BaseModel):
    results: list[Hit]
    notice: str | None = Field(
        None,
        description=(
            "Present only while the answer is made differently from usual: while the memories are embedded again "
            "with a new model, recall ranks by words alone and search_memory sees only the memories done so far."
        ),
    )


class Memory(MemoryFields, Lifecycle):
    updated_at: str


class MemoryPage(BaseModel):
    memories: list[Memory] = Field(description="Newest first (created_at, then creation order).")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class Similar(BaseModel):
    reference: str
    score: float


class Remembered(BaseModel):
    reference: str
    created: bool
    similar: list[Similar] = Field(
        default_factory=list,
        description="Memories the caller can see, filed alike, that already say the same thing in other words "
        "(best first): recall folds them into one hit.",
    )


class Forgotten(BaseModel):
    reference: str
    forgotten: bool


class Budget(BaseModel):
    max_items: int
    max_tokens: int
    used_items: int
    used_tokens: int
    dropped: int
    shortened: int


class ContextItem(BaseModel):
    reference: str
    type: str
    location: str | None
    score: float
    occurred_at: str
    content: str
    shortened: bool


class ContextPack(BaseModel):
    version: str
    retrieval_plan: dict[str, Any]
    budget: Budget
    items: list[ContextItem]
    context_text: str


class ErrorDetail(BaseModel):
    code: Literal[
        "invalid_parameters",
        "unprocessable_parameters",
        "unauthorized",
        "forbidden",
        "not_found",
        "payload_too_large",
        "rate_limited",
        "unavailable",
    ]
    message: str = Field(description="`code: human explanation` without the code; never a stack trace.")
    retryable: bool = Field(description="True only for `unavailable` and `rate_limited`: safe to retry later.")


class ErrorBody(BaseModel):
    error: ErrorDetail
