"""The storage seam: what the rest of the server asks of its authority, whatever the backend.

Seven narrow protocols, each implemented once per backend (`server.storage.sqlite`,
`server.storage.postgres`): conversation logs, sites and tokens, OAuth clients and grants, saved memories,
the outbox to the vector index, the reads recall ranks from, and the words query expansion uses. No SQL,
connection or backend type appears in a signature.

Writes that callers await (`LogStore.append`) are coroutines; everything else blocks and is called from a
worker thread (the SQLite writer thread serialises writes; reads use per-thread connections).
Failures are AppErrors (`unavailable` for a busy, full or damaged store) or the records' own exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from server.storage.health import StorageHealth
from server.storage.oauth_records import (
    IssuedToken,
    NewGrant,
    OAuthClient,
    OAuthCode,
    OAuthGrant,
    OAuthTokenRecord,
    PendingAuthorization,
)
from server.storage.records import (
    BY_CREATED,
    AppendAck,
    CandidateRow,
    ChangePage,
    ConversationPage,
    Document,
    IndexingProgress,
    IndexRow,
    Inserted,
    Kept,
    LogDeletion,
    NewMemory,
    PurgeStep,
    RawItem,
    SessionRecord,
    SiteCredential,
    SiteRecord,
    StoredMemory,
    ToIndex,
    TokenRecord,
    Words,
)
from server.storage.scope import Scope


class LogStore(Protocol):
    async def append(self, site_id: int, conversation_id: str, payloads: Sequence[str],
                     idempotency_key: str | None, *, index: bool | None = None,
                     bucket: str | None = None) -> AppendAck:
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

    def import_items(self, site_id: int, conversation_id: str, items: Sequence[RawItem], *, index: bool | None = None,
                     bucket: str | None = None) -> list[str]:
        """Add items that keep their seq and recorded_at; per item "appended", "present" or an error text.
        `index`, `bucket`: the conversation's own indexing choice and bucket, as an append sets them."""
        ...

    # Deletion (server/storage/deletion.py): a conversation is marked in one small transaction, hidden from
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

    # Indexing (server/logs/indexing.py): a conversation that is `indexing` has its items from `indexed_seq`
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


class SiteStore(Protocol):
    def create_site(self, name: str, secret_hash: str) -> int:
        """The new site's id; InvalidParameters if the name is taken."""
        ...

    def set_secret(self, name: str, secret_hash: str) -> bool:
        """Replace a site's secret hash; False if there is no such site."""
        ...

    def site_id(self, name: str) -> int | None: ...

    def sites(self) -> list[SiteRecord]: ...

    def set_log_indexing(self, name: str, on: bool) -> bool:
        """Index the site's log items, or stop (its conversations that chose for themselves keep their
        choice); False if there is no such site. Turned on, the items already logged are indexed too."""
        ...

    def set_log_retention(self, name: str, days: int | None) -> bool:
        """Keep the site's conversation logs `days` after their last activity (None: until deleted); False
        if there is no such site."""
        ...

    def delete_site(self, name: str) -> bool:
        """Delete a site with its tokens and every memory and log of it; False if there is no such site."""
        ...

    def credential(self, name: str, *, nowait: bool = False) -> SiteCredential | None:
        """The site's secret hash for sign-in. nowait: answer only if it needs no waiting, else WouldBlock."""
        ...

    def add_token(self, token: TokenRecord, token_hash: str) -> None: ...

    def tokens(self, site_id: int) -> list[TokenRecord]: ...

    def revoke_token(self, token_id: str) -> bool:
        """False if there is no such active token."""
        ...

    def mark_token_used(self, token_id: str, at: str) -> None:
        """Record a use of the token: last_used_at becomes the later of the stored one and `at` (RFC3339)."""
        ...

    def token(self, token_hash: str, *, nowait: bool = False) -> TokenRecord | None:
        """The token with this hash, for sign-in (revoked ones included: the caller refuses them)."""
        ...

    # Console sessions: kept in the authority so every replica on it honours them; ended by deletion.

    def add_session(self, session: SessionRecord) -> None: ...

    def session(self, id_hash: str) -> SessionRecord | None:
        """The session with this id hash, expired or not (the caller decides)."""
        ...

    def touch_session(self, id_hash: str, seen_at: float) -> None:
        """Record activity: seen_at becomes the later of the stored one and this (unix seconds)."""
        ...

    def delete_session(self, id_hash: str) -> None:
        """End a session (nothing happens if there is none)."""
        ...

    def prune_sessions(self, *, seen_before: float, created_before: float) -> int:
        """Delete sessions idle since before `seen_before` or created before `created_before`; how many."""
        ...


class OAuthStore(Protocol):
    """The authorization server's state: clients, pending requests, codes, grants and their tokens.

    Keys are SHA-256 hex digests of the secrets (see `oauth_records`); `now` is the caller's clock. Every
    read goes to the authority (no caching), so a revocation is seen by every replica on its next request.
    Deleting a site deletes its codes, grants and tokens (not the clients: they belong to no site)."""

    def add_client(self, client: OAuthClient, *, max_unused: int | None = None) -> bool:
        """Store a registered client; False, storing nothing, if `max_unused` clients that never signed in
        (granted_at None) are stored already."""
        ...

    def client(self, client_id: str) -> OAuthClient | None: ...

    def forget_unused_clients(self, *, registered_before: float) -> int:
        """Delete the clients registered before `registered_before` that never signed in; how many."""
        ...

    def add_request(self, request_hash: str, request: PendingAuthorization, *, now: float,
                    max_pending: int | None = None) -> bool:
        """Store a pending authorization request (and forget the expired ones); False, storing nothing, if
        `max_pending` unexpired ones are stored already."""
        ...

    def request(self, request_hash: str, *, now: float) -> PendingAuthorization | None:
        """The pending request, or None if there is none or it expired."""
        ...

    def set_request_csrf(self, request_hash: str, csrf_hash: str, *, now: float) -> bool:
        """Replace the request's CSRF token digest; False if the request is gone or expired."""
        ...

    def take_request(self, request_hash: str, *, now: float) -> PendingAuthorization | None:
        """Delete the request and return it: of concurrent callers exactly one gets it. None if it was gone
        or expired."""
        ...

    def add_code(self, code_hash: str, code: OAuthCode, *, now: float) -> bool:
        """Store an unused code (and forget codes expired long enough that a replay no longer matters);
        False, storing nothing, if its site no longer exists."""
        ...

    def code(self, code_hash: str) -> OAuthCode | None:
        """The code, used or not, expired or not (the caller decides)."""
        ...

    def redeem_code(self, code_hash: str, grant: NewGrant, tokens: Sequence[IssuedToken], *, now: float) -> bool:
        """Atomically: if the code exists, is unused, has not expired and its site exists, mark it used by
        `grant`, store the grant (last used `now`) and its tokens, mark its client as signed in (granted_at
        `now`), and return True. Otherwise store nothing: False."""
        ...

    def token(self, token_hash: str, *, nowait: bool = False) -> OAuthTokenRecord | None:
        """An access or refresh token with its grant, for sign-in and refresh. nowait: as `SiteStore.token`."""
        ...

    def rotate_refresh(self, token_hash: str, tokens: Sequence[IssuedToken], *, now: float,
                       grant_expires_at: float) -> bool:
        """Atomically: if this refresh token exists, was never rotated, has not expired and its grant is
        not revoked, mark it rotated, store `tokens` for the same grant, move the grant's expiry to
        `grant_expires_at` and its last use to `now` (and forget the grant's expired tokens); True.
        Otherwise store nothing: False."""
        ...

    def grants(self, site_id: int) -> list[OAuthGrant]:
        """The site's grants, oldest first, revoked ones included."""
        ...

    def revoke_grant(self, grant_id: str) -> bool:
        """Revoke a grant (every token of it stops working); False if there is no such unrevoked grant."""
        ...

    def mark_grant_used(self, grant_id: str, at: str) -> None:
        """Record a use of one of the grant's access tokens: last_used_at becomes the later of the stored one
        and `at` (RFC3339)."""
        ...


class MemoryStore(Protocol):
    """Saved memories: the write path and the reads REST and hits need."""

    def find_duplicate(self, site_id: int, dedup_key: str) -> str | None:
        """The reference of the site's memory with this content and filing, if any."""
        ...

    def decided(self, site_id: int, memory: NewMemory, kept: Kept | None) -> Inserted | None:
        """The outcome of inserting `memory` when rows already stored decide it (no new row), else None."""
        ...

    def insert(self, site_id: int, batch: Sequence[tuple[NewMemory, Document, Kept | None]],
               words: Words) -> list[Inserted]:
        """Insert a batch in one transaction with the site's new words; each decided again inside it. A memory
        that `supersedes` another is linked to it, which must be the newest of its chain (else StaleRow); one
        with a `Kept` (an import) keeps the links it carries instead."""
        ...

    def insert_turns(self, at: ToIndex, next_seq: int, skipped: int, batch: Sequence[tuple[NewMemory, Document]],
                     words: Words) -> list[Inserted] | None:
        """In one transaction: insert a conversation's turns (kind turn) with the site's new words, and move its
        `indexed_seq` on to `next_seq`, counting `skipped` items without text, if it is still as `at` read it
        (the same log, not being deleted, no other indexer moved it on); else None, writing nothing."""
        ...

    def update(self, site_id: int, reference: str, memory: NewMemory, *, based_on: Mapping[str, Any],
               document: Document | None, words: Words) -> int | None:
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

    def page(self, scope: Scope, *, location: str | None, provenance: dict[str, str], limit: int,
             after: tuple[str, int] | None, occurred_after: str | None = None,
             occurred_before: str | None = None, order: str = BY_CREATED,
             ) -> tuple[list[StoredMemory], tuple[str, int] | None]:
        """Visible memories newest first, and the key after the page if there are more: by (created_at, id),
        or with `order` BY_OCCURRED by (occurred_at, id). `occurred_after` / `occurred_before` (normalised
        RFC3339, as stored): only memories whose occurred_at is at or after the one, and strictly before the
        other (a half-open range)."""
        ...

    def count_listed(self, scope: Scope, *, location: str | None, provenance: dict[str, str], up_to: int,
                     occurred_after: str | None = None, occurred_before: str | None = None) -> int:
        """How many memories `page` lists with these filters in all, counted up to `up_to` + 1 at most."""
        ...

    def occurred_per_day(self, scope: Scope, since: str, before: str) -> list[tuple[str, int]]:
        """(UTC day "YYYY-MM-DD", count) of the visible memories whose occurred_at is at or after `since` and
        before `before` (normalised RFC3339), ascending by day; days with none are left out."""
        ...

    def by_ids(self, ids: Sequence[int]) -> dict[int, StoredMemory]: ...

    def terms_version(self) -> int:
        """The version of the lexical terms stored with the memories (server/memories/writes.py TERMS_VERSION;
        1 for a store that never recorded one)."""
        ...

    def rewrite_terms(self, terms: Callable[[str, str | None], str], version: int) -> int:
        """Write every memory's lexical terms again as `terms(content, occurred_at)`, a batch of memories a
        transaction, then record `version`; how many memories' terms changed."""
        ...

    def replaced(self, ids: Sequence[int]) -> dict[int, str | None]:
        """Those of these memories that have a successor, with their valid_to: what recall needs of the
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


class OutboxStore(Protocol):
    """The memories the vector index does not have yet, and the deletions it has not applied."""

    def backlog(self) -> int:
        """Memories not yet indexed plus deletions not yet applied."""
        ...

    def unindexed(self, limit: int) -> list[int]: ...

    def deletions(self) -> list[int]: ...

    def index_rows(self, ids: Sequence[int]) -> list[IndexRow]: ...

    def set_vectors(self, vectors: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        """Store (id, updated_at, vector) as embedded with `model`, in one transaction; a row changed since
        `updated_at` keeps what its change gave it."""
        ...

    def mark_indexed(self, versions: Sequence[tuple[int, str]]) -> None:
        """Mark rows indexed if they are still at the version that was written to the index."""
        ...

    def clear_deletions(self, ids: Sequence[int]) -> None: ...

    def mark_all_unindexed(self) -> None: ...

    def clear_all_deletions(self) -> None: ...

    def present(self, ids: Sequence[int]) -> set[int]:
        """Which of these ids still have a row."""
        ...

    def counts(self) -> tuple[int, int, int]:
        """(indexed memories, unindexed memories, queued deletions)."""
        ...

    # The change feed: every insert, change and deletion of a memory, numbered in commit order, so a server
    # with an index of its own (one replica of several on a shared authority) can follow what others write.

    def change_mark(self) -> int:
        """The number of the newest change (0: none yet)."""
        ...

    def ids_after(self, after: int, limit: int) -> list[int]:
        """Ids of stored memories above `after`, ascending (a whole index rebuilt page by page)."""
        ...

    def changes(self, after: int, limit: int) -> ChangePage:
        """Up to `limit` changes after change number `after`, oldest first."""
        ...

    def prune_changes(self, older_than_s: float) -> int:
        """Forget changes older than this (never the numbering); returns how many went."""
        ...


class CandidateStore(Protocol):
    """The reads recall ranks from."""

    def visible_count(self, scope: Scope, up_to: int) -> int:
        """How many memories the scope sees, counted up to `up_to` + 1 at most."""
        ...

    def load(self, scope: Scope, ids: Sequence[int] | None, model: str, cached: Callable[[int, str], bool],
             up_to: int | None = None) -> tuple[list[tuple[int, str]], list[CandidateRow]]:
        """(id, updated_at) of the visible memories embedded with `model` (all of them, or of `ids`), in id
        order, and the rows of those `cached(id, updated_at)` does not hold already: both of one state of the
        store. With `up_to`, at most `up_to` + 1 of them, and no rows when there are more than `up_to`."""
        ...

    def newest(self, model: str, limit: int) -> Iterator[list[CandidateRow]]:
        """The rows of the newest `limit` memories embedded with `model` (of every site), in id order, a chunk
        at a time: what start-up reads into recall's candidate cache."""
        ...

    def next_expiry(self, scope: Scope) -> str | None:
        """The earliest expires_at of the memories the scope sees (None: none of them expires)."""
        ...

    def bucket_sizes(self, model: str) -> list[tuple[int, str | None, int]]:
        """(site id, bucket or None, how many memories embedded with `model` it holds) of every bucket, the
        most recently written to first."""
        ...

    def doc_freqs(self, terms: Sequence[str], up_to: int | None = None) -> dict[str, int]:
        """How many memories (of every site) hold each analysed term; with `up_to`, counted up to `up_to` + 1
        at most."""
        ...

    def top_id(self) -> int:
        """The highest memory id: a cheap measure of how much the corpus has grown."""
        ...

    def best_by_terms(self, scope: Scope, terms: Sequence[str], limit: int) -> list[int]:
        """Visible memories holding any of `terms`, best first by BM25."""
        ...

    def neighbours(self, ids: Sequence[int], reach: int) -> set[int]:
        """Ids of the memories within `reach` seq of these in the same conversation (these included)."""
        ...


class WordStore(Protocol):
    """Single-word vectors of each site's vocabulary (query expansion)."""

    def all_words(self, model: str) -> Iterator[tuple[int, str, np.ndarray]]:
        """(site id, word, vector) of every word embedded with `model`."""
        ...

    def backfill_mark(self, model: str) -> int:
        """The id of the last memory whose words are stored for `model` (0: none)."""
        ...

    def texts_after(self, after_id: int, limit: int) -> list[tuple[int, int, str, str]]:
        """(id, site id, content, occurred_at) of memories after `after_id`, in id order."""
        ...

    def save_backfill(self, words: Iterable[tuple[int, Words]], model: str, through_id: int) -> None:
        """Store words per site and move the backfill mark, in one transaction."""
        ...

    def vectors(self, site_id: int, words: Sequence[str], model: str) -> Words:
        """The stored vectors (made by `model`) of those of `words` the site has."""
        ...


class Snapshot(Protocol):
    """A consistent read-only view of the whole store (or one site), for export."""

    counts: dict[str, int]  # memories, conversations, log_items

    def memories(self) -> Iterator[dict[str, Any]]:
        """Each memory's public fields with its site's name (`site`), in creation order."""
        ...

    def log_items(self) -> Iterator[tuple[str, str, RawItem]]:
        """(site, conversation_id, item) per item, each conversation in seq order."""
        ...

    def indexing_sites(self) -> list[str]:
        """The names of the sites (of the snapshot) that index their logs."""
        ...

    def conversation_choices(self) -> list[tuple[str, str, bool | None, str | None]]:
        """(site, conversation_id, its own indexing choice, its turns' bucket) of the conversations that have
        either."""
        ...

    def close(self) -> None: ...


class Storage(Protocol):
    """One authority: its stores, what it learned while serving, and its backend's own operations."""

    # Read-only members (properties to the type checker), so an implementation may hold its own store types.
    @property
    def logs(self) -> LogStore: ...
    @property
    def sites(self) -> SiteStore: ...
    @property
    def oauth(self) -> OAuthStore: ...
    @property
    def memories(self) -> MemoryStore: ...
    @property
    def outbox(self) -> OutboxStore: ...
    @property
    def candidates(self) -> CandidateStore: ...
    @property
    def words(self) -> WordStore: ...
    @property
    def health(self) -> StorageHealth: ...
    @property
    def identity(self) -> str:
        """Names this authority (random, made with its schema): an index that follows it records whose
        changes it applied."""
        ...
    @property
    def integrity_unchecked(self) -> bool:
        """Start-up's bounded integrity check ran out of time: the full check is still to run."""
        ...

    def check_integrity(self) -> str | None:
        """Check the whole store; a message saying what is damaged, or None."""
        ...

    def snapshot(self, site: str | None) -> Snapshot: ...

    def probe(self) -> list[str]:
        """Why the store cannot serve right now (for /readyz); empty when it can. Blocking."""
        ...

    def close(self) -> None: ...
