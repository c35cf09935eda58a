"""One authority with all its stores, and its snapshots for export."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from memory_server.storage.backends import Backend
from memory_server.storage.health import StorageHealth
from memory_server.storage.protocols.candidates import CandidateStore
from memory_server.storage.protocols.logs import LogStore
from memory_server.storage.protocols.memories import MemoryStore
from memory_server.storage.protocols.oauth import OAuthStore
from memory_server.storage.protocols.outbox import OutboxStore
from memory_server.storage.protocols.sites import SiteStore
from memory_server.storage.protocols.words import WordStore
from memory_server.storage.records import RawItem


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
    def backend(self) -> Backend:
        """Which backend this is and what it can do (memory_server.storage.backends)."""
        ...

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
