"""Which memories a request may see: the site, the caller's bounds and the request's own filters, as one
`Scope` every store applies (its SQL in each backend's scope module, its vector-index filter in
memory_server.index.filters)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from memory_server.storage.records import KINDS, StoredMemory
from memory_server.timestamps import now_rfc3339


@dataclass(frozen=True, slots=True)
class Scope:
    """Which memories a request may see: the site, the caller's bounds, and the request's own filters.

    The keyword fields other than `site_id` are sets of allowed values (None: any); `tags` means "has every
    tag". `occurred_after` / `occurred_before` (normalised RFC3339, as stored) keep the memories whose
    occurred_at lies in [occurred_after, occurred_before). `current` leaves out the memories superseded by
    the end of the window: those with a successor, unless it came at or after `occurred_before` (a memory
    still valid when the window closes is current in it). `at` is the instant the read happens at: a memory
    whose expires_at is at or before it is never seen.
    """

    site_id: int
    teams: frozenset[str] | None = None
    projects: frozenset[str] | None = None
    buckets: frozenset[str] | None = None
    types: frozenset[str] | None = None
    tags: frozenset[str] = frozenset()
    occurred_after: str | None = None
    occurred_before: str | None = None
    current: bool = False
    kinds: frozenset[str] | None = None  # memory, turn (memory_server/logs/indexing.py); None: both
    at: str = field(default_factory=now_rfc3339, compare=False)

    def narrowed(
        self,
        *,
        team: str | None = None,
        project: str | None = None,
        bucket: str | None = None,
        type: str | None = None,
        tags: Iterable[str] = (),
    ) -> Scope:
        return replace(
            self,
            teams=_narrow(self.teams, team),
            projects=_narrow(self.projects, project),
            buckets=_narrow(self.buckets, bucket),
            types=_narrow(self.types, type),
            tags=self.tags | frozenset(tags),
        )

    def within(self, *, occurred_after: str | None, occurred_before: str | None) -> Scope:
        """Narrowed to a time window (both bounds normalised RFC3339, either None)."""
        after = max(filter(None, (self.occurred_after, occurred_after)), default=None)
        before = min(filter(None, (self.occurred_before, occurred_before)), default=None)
        return replace(self, occurred_after=after, occurred_before=before)

    def only_current(self, current: bool = True) -> Scope:
        return replace(self, current=current)

    def of_kinds(self, kinds: Iterable[str] | None) -> Scope:
        """Narrowed to entries of these kinds (None: as it was); both kinds is no condition at all."""
        if kinds is None:
            return self
        wanted = frozenset(kinds) if self.kinds is None else self.kinds & frozenset(kinds)
        return replace(self, kinds=None if wanted == frozenset(KINDS) else wanted)

    def superseded(self, memory: StoredMemory) -> bool:
        """Whether the memory was superseded by the end of the window (see `current`)."""
        return memory.superseded_by is not None and self.replaced_in_window(memory.valid_to)

    def replaced_in_window(self, valid_to: str | None) -> bool:
        """Whether a memory that has a successor, valid until `valid_to`, was replaced by the end of the window."""
        return self.occurred_before is None or valid_to is None or valid_to < self.occurred_before

    def admits(self, memory: StoredMemory) -> bool:
        """Whether a memory read by id meets the conditions the vector index can only approximate (its
        timestamps are whole seconds): checked on the hits of an index-only search."""
        if self.kinds is not None and memory.kind not in self.kinds:
            return False
        if self.occurred_after is not None and memory.occurred_at < self.occurred_after:
            return False
        if self.occurred_before is not None and memory.occurred_at >= self.occurred_before:
            return False
        if memory.expires_at is not None and memory.expires_at <= self.at:
            return False
        return not (self.current and self.superseded(memory))

    @property
    def empty(self) -> bool:
        return any(s is not None and not s for s in (self.teams, self.projects, self.buckets, self.types, self.kinds))

    def restrictions(self) -> list[tuple[str, frozenset[str]]]:
        """(column, allowed values) for each bounded keyword column."""
        return [
            (column, allowed)
            for column, allowed in (
                ("team", self.teams),
                ("project", self.projects),
                ("bucket", self.buckets),
                ("type", self.types),
            )
            if allowed is not None
        ]


def _narrow(allowed: frozenset[str] | None, wanted: str | None) -> frozenset[str] | None:
    if wanted is None:
        return allowed
    return frozenset({wanted}) if allowed is None else allowed & {wanted}
