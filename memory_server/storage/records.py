"""What the stores take and give back: plain typed records, the same for every storage backend.

Nothing here knows SQL. A `NewMemory` is a validated memory as it is written; `StoredMemory` is a memory as
read back; the log and credential records are what the log and site stores answer. Which memories a request
may see is a `Scope` (memory_server/storage/scope.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

import numpy as np

# (seq, recorded_at, payload JSON text exactly as stored)
RawItem = tuple[int, str, str]


# --- conversation logs ------------------------------------------------------------------------------------


class AppendAck(TypedDict):
    conversation_id: str
    first_seq: int
    last_seq: int
    count: int
    recorded_at: str
    duplicate: bool


class ConversationSummary(TypedDict):
    conversation_id: str
    item_count: int
    first_recorded_at: str
    last_recorded_at: str


@dataclass(frozen=True, slots=True)
class ConversationPage:
    conversations: list[ConversationSummary]
    following: tuple[int, str] | None  # (activity, conversation_id) after the last one, if there are more


@dataclass(frozen=True, slots=True)
class LogDeletion:
    """A conversation marked for deletion: hidden from every read at once, its rows purged in small steps."""

    conversation_id: str
    item_count: int
    started: bool  # False: it was being deleted already (this call joins that deletion)
    # When it was marked: its indexed turns, and the other memories whose provenance names it. Another purger
    # (the retention task, another server) may purge them before this call does.
    turns: int = 0
    linked: int = 0


@dataclass(frozen=True, slots=True)
class PurgeStep:
    """What one purge transaction removed; `done` once the conversation is gone for good."""

    unlinked: int  # memories whose provenance named the conversation, now without the link
    items: int
    keys: int  # idempotency keys
    done: bool
    turns: int = 0  # its indexed turns (memory_server/logs/indexing.py), deleted

    @property
    def rows(self) -> int:
        return self.unlinked + self.items + self.keys + self.turns


@dataclass(frozen=True, slots=True)
class ToIndex:
    """A conversation whose items are to be turned into recallable entries (memory_server/logs/indexing.py) from
    `indexed_seq` on. `first_recorded_at` tells this log from a later one under the same id (a deleted
    conversation starts again at seq 0)."""

    site_id: int
    conversation_id: str
    indexed_seq: int
    item_count: int
    first_recorded_at: str
    bucket: str | None


@dataclass(frozen=True, slots=True)
class IndexingProgress:
    """How far a site's (or every site's) log indexing is: items waiting, and the items indexed or skipped."""

    waiting: int = 0
    indexed: int = 0  # items looked at (turned into entries, or skipped)
    skipped: int = 0  # of those, items without text


class ConversationDeleting(Exception):
    """The conversation is being deleted: an append waits until it is gone, then starts a new log at seq 0."""


# --- sites and tokens -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SiteRecord:
    id: int
    name: str
    created_at: str
    log_retention_days: int | None = None  # None: conversation logs are kept until deleted
    index_logs: bool = False  # its log items become recallable entries (memory_server/logs/indexing.py)


@dataclass(frozen=True, slots=True)
class SiteCredential:
    site_id: int
    name: str
    secret_hash: str


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: str
    site_id: int
    site: str
    scopes: tuple[str, ...]
    teams: tuple[str, ...] | None
    projects: tuple[str, ...] | None
    buckets: tuple[str, ...] | None
    created_at: str
    revoked_at: str | None
    label: str | None = None  # what it is for, as named when it was created
    last_used_at: str | None = None  # RFC3339, to the minute (memory_server/auth/usage.py); None: never used


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A signed-in console session. Only a hash of its id is stored (the id itself is the browser's cookie).
    `credential` is what it was signed in with, as the sign-in check finds it again on every request: a digest
    of the site's stored secret hash (Basic) or the token's hash (Bearer), so a rotated secret or a revoked
    token ends the session. Times are unix seconds."""

    id_hash: str
    site_id: int
    site: str
    kind: str  # "basic" or "bearer"
    credential: str
    created_at: float
    seen_at: float


# --- saved memories ---------------------------------------------------------------------------------------

# The kinds of entries recall finds: memories saved with `remember`, and turns (indexed log items).
MEMORY, TURN = "memory", "turn"
KINDS = (MEMORY, TURN)


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A validated memory, as `remember` (or a PATCH, after merging) writes it."""

    content: str
    type: str
    location: str | None
    project: str | None
    team: str | None
    bucket: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    provenance: dict[str, Any]
    occurred_at: str
    supersedes: str | None = None  # the reference of the memory this one replaces (the newest of its chain)
    expires_at: str | None = None  # never returned from then on, and purged
    kind: str = MEMORY  # TURN: a log item's indexed text (memory_server/logs/indexing.py)

    @property
    def dedup_key(self) -> str:
        # Identity of a memory for idempotent `remember`: its content and where it is filed. A turn's is the
        # log item it came from, so one item never becomes two entries whatever its text.
        if self.kind == TURN:
            raw = json.dumps([TURN, *self.conversation_position])
        else:
            raw = json.dumps(
                [self.content, self.type, self.location, self.project, self.team, self.bucket], ensure_ascii=False
            )
        return hashlib.sha256(raw.encode()).hexdigest()

    @property
    def conversation_position(self) -> tuple[str | None, int | None]:
        """The log entry it came from, when its provenance names one: (conversation_id, seq)."""
        cid, seq = self.provenance.get("conversation_id"), self.provenance.get("seq")
        if isinstance(cid, str) and isinstance(seq, int) and not isinstance(seq, bool):
            return cid, seq
        return None, None


@dataclass(frozen=True, slots=True)
class Kept:
    """What an import keeps from its file instead of minting it: the reference and the timestamps."""

    reference: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    superseded_by: str | None = None  # the links as exported: an import stores them as they were
    valid_to: str | None = None


CREATED, DUPLICATE, PRESENT, CONFLICT = "created", "duplicate", "present", "conflict"
APPENDED = "appended"  # an imported log item that was new (PRESENT: the same item was there already)
# The orders of a listing of memories, newest first: by occurred_at or by created_at (then id, descending).
BY_OCCURRED, BY_CREATED = "occurred", "created"


@dataclass(frozen=True, slots=True)
class Inserted:
    """The outcome of inserting one memory.

    created: a new row (`row_id`); duplicate: the same content and filing exists as `reference`;
    present: the kept reference already holds this memory; conflict: the kept reference holds another
    memory (`detail` says which way), nothing is written.
    """

    row_id: int | None
    reference: str
    outcome: str
    detail: str = ""
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)  # when this write embedded it

    @property
    def created(self) -> bool:
        return self.outcome == CREATED


@dataclass(frozen=True, slots=True)
class Words:
    """A site's words new to it, with their single-word vectors: saved with the memory that brought them."""

    words: tuple[str, ...] = ()
    vectors: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """What a memory is indexed as: its document text's vector (with the model that made it) and its
    analysed terms (what lexical search matches)."""

    vector: np.ndarray
    model: str
    terms: str  # the analysed terms, space-joined


@dataclass(frozen=True, slots=True)
class StoredMemory:
    """A memory as stored. `version` (its updated_at) changes with every write of the row."""

    id: int
    reference: str
    site_id: int
    content: str
    type: str
    location: str | None
    project: str | None
    team: str | None
    bucket: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    provenance: dict[str, Any]
    occurred_at: str
    created_at: str
    updated_at: str
    supersedes: str | None = None  # the memory this one replaced
    superseded_by: str | None = None  # the memory that replaced this one
    valid_to: str | None = None  # when it was replaced: its successor's occurred_at
    expires_at: str | None = None
    kind: str = MEMORY
    vector_model: str | None = field(default=None, compare=False)
    has_vector: bool = field(default=False, compare=False)

    def hit_fields(self) -> dict[str, Any]:
        """The public attributes, as a hit carries them (without score)."""
        return {
            "reference": self.reference,
            "type": self.type,
            "location": self.location,
            "content": self.content,
            "project": self.project,
            "team": self.team,
            "bucket": self.bucket,
            "tags": list(self.tags),
            "metadata": self.metadata,
            "provenance": self.provenance,
            "occurred_at": self.occurred_at,
            "created_at": self.created_at,
            "supersedes": self.supersedes,
            "superseded_by": self.superseded_by,
            "valid_to": self.valid_to,
            "expires_at": self.expires_at,
            "kind": self.kind,
        }

    def fields(self) -> dict[str, Any]:
        """Every public attribute (a hit's fields plus updated_at)."""
        return {**self.hit_fields(), "updated_at": self.updated_at}

    def as_new(self) -> NewMemory:
        """The attributes in the shape `remember` validates (for merging a PATCH)."""
        return NewMemory(
            content=self.content,
            type=self.type,
            location=self.location,
            project=self.project,
            team=self.team,
            bucket=self.bucket,
            tags=self.tags,
            metadata=self.metadata,
            provenance=self.provenance,
            occurred_at=self.occurred_at,
            supersedes=self.supersedes,
            expires_at=self.expires_at,
            kind=self.kind,
        )


@dataclass(frozen=True, slots=True)
class ChangePage:
    """The memories changed after a point of the authority's change feed (numbered in commit order), each
    once, with what became of it last."""

    changed: list[int]  # inserted or changed
    deleted: list[int]
    mark: int  # the last change read: `after` for the next page
    more: bool  # cut at the limit: more changes follow
    # Only a rebuild from the whole store catches up: changes after `after` were pruned, or the store's
    # numbering is behind `after` (it lost changes a reader had seen: a failover to a lagging standby).
    truncated: bool
    # When change `after` and change `mark` were made, as the store has them (None: not kept). A reader
    # that finds `after` made at another time than the change it applied under that number knows the
    # store lost that change and numbered a later one the same.
    after_at: float | None = None
    mark_at: float | None = None


def collapse_changes(
    rows: Sequence[tuple[int, int, bool, float]], after: int, limit: int, truncated: bool, after_at: float | None
) -> ChangePage:
    """(seq, id, deleted, changed_at) rows in seq order -> each id once, as its last change left it."""
    last: dict[int, bool] = {}
    for _, row_id, deleted, _ in rows:
        last.pop(row_id, None)  # re-inserted last, so the order follows each id's final change
        last[row_id] = deleted
    return ChangePage(
        changed=[i for i, gone in last.items() if not gone],
        deleted=[i for i, gone in last.items() if gone],
        mark=rows[-1][0] if rows else after,
        more=len(rows) >= limit,
        truncated=truncated,
        after_at=after_at,
        mark_at=rows[-1][3] if rows else after_at,
    )


@dataclass(frozen=True, slots=True)
class IndexRow:
    """What the vector index needs of a memory: its vector (if stored with `vector_model`) and payload."""

    id: int
    site_id: int
    team: str | None
    project: str | None
    bucket: str
    type: str
    tags: tuple[str, ...]
    vector: np.ndarray | None
    vector_model: str | None
    updated_at: str
    content: str
    occurred_at: str
    valid_to: str | None = None
    expires_at: str | None = None
    turn_seq: int | None = None  # a turn's seq in its conversation (None: a saved memory)


@dataclass(frozen=True, slots=True)
class CandidateRow:
    """What recall ranks a memory by: its text, vector, analysed terms and conversation position."""

    id: int
    site_id: int
    updated_at: str
    content: str
    occurred_at: str
    conversation_id: str | None
    seq: int | None
    vector: np.ndarray
    terms: list[str]


class StaleRow(Exception):
    """The row changed between reading it and the update's transaction; the caller retries."""


class WouldBlock(Exception):
    """A nowait read would have had to wait (a lock); ask again without nowait."""


class Row(Protocol):
    """A row as both backends read it (a sqlite3.Row, a psycopg dict row): its values by column name."""

    def __getitem__(self, key: str, /) -> Any: ...
