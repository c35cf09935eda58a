"""The vector index interface. SQLite is the authority; an index only holds what can be rebuilt from it.

Points are keyed by the memory's integer row id in SQLite. Each point carries a small keyword payload
(`site`, `team`, `project`, `bucket`, `type`, `tags`), integer timestamps (seconds since the epoch:
`occurred`; `valid_to` on a superseded memory, `expires` on one that expires) and the days the memory is about
(`days`: whole days since the epoch, its own and those its content names) so filters run inside the index; an
indexed log item also carries its seq (`turn`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

T = TypeVar("T")

# Payload fields that get a keyword index and can appear in a filter.
FILTER_FIELDS = ("site", "team", "project", "bucket", "type", "tags")
# Integer payload fields that get a range index and can appear in a Range: whole seconds since the epoch, and
# `days`, a list of whole days since it (a range holds a point when it holds any of them).
RANGE_FIELDS = ("occurred", "valid_to", "expires", "days", "turn")
# The shape of the points' payload. An index recorded with an older one is upgraded at start-up: its range
# indexes are created and every point is written again from the authority (stored vectors: no model time).
# 1: keywords only; 2: `occurred`; 3: `valid_to` (superseded memories); 4: `expires`;
# 5: `days` (the days a memory is about: ranking/dates.py memory_days); 6: `turn` (an indexed log item's seq,
# only on those: recall's `kinds` filter).
PAYLOAD_VERSION = 6


class IndexUnavailable(Exception):
    """The index cannot serve requests now (server unreachable, not initialised, closed)."""


class IndexLocked(IndexUnavailable):
    """Another process holds the embedded index directory; `holder` is its pid when known."""

    def __init__(self, message: str, *, holder: str = "unknown") -> None:
        super().__init__(message)
        self.holder = holder


class IndexDimensionError(ValueError):
    """A vector's length differs from the dimension the index was built with."""


@dataclass(frozen=True, slots=True)
class Condition:
    """`field` must match one of `values` (for `tags`, a list field: any element matches)."""

    field: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Range:
    """`field` (an integer payload) lies within [gte, lte]; None leaves that side open. A point without the
    field lies in no range; one whose field is a list lies in it when any of its values does."""

    field: str
    gte: int | None = None
    lte: int | None = None


@dataclass(frozen=True, slots=True)
class IndexFilter:
    """A conjunction: a point matches when every condition holds, it lies in every range of `ranges`, and in
    none of `excluded` (a point without an excluded range's field is kept)."""

    conditions: tuple[Condition, ...] = ()
    ranges: tuple[Range, ...] = ()
    excluded: tuple[Range, ...] = ()


@dataclass(frozen=True, slots=True)
class IndexPoint:
    id: int
    vector: np.ndarray
    payload: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IndexHit:
    id: int
    score: float  # cosine similarity, higher is closer


@dataclass(frozen=True, slots=True)
class IndexInfo:
    """What the index was built with; a mismatch with the running model means `reindex`."""

    model: str
    dimension: int


class VectorIndex(Protocol):
    # Whether every server of a deployment uses this one index (a Qdrant server), rather than each its own.
    shared: bool

    def info(self) -> IndexInfo | None:
        """The recorded model/dimension, or None for an index never initialised."""
        ...

    def reset(self, info: IndexInfo) -> None:
        """Drop every point and (re)create the index for `info`."""
        ...

    def upsert(self, points: Sequence[IndexPoint]) -> None: ...

    def delete(self, ids: Sequence[int]) -> None: ...

    def search(self, vector: np.ndarray, *, where: IndexFilter, limit: int) -> list[IndexHit]:
        """Nearest points matching `where`, best first."""
        ...

    def ids(self) -> Iterator[int]:
        """Every point id in the index (used to reconcile with SQLite at start-up)."""
        ...

    def count(self) -> int: ...

    def problems(self) -> list[str]:
        """Why the index cannot serve, beyond what a failing call shows (for /readyz); empty when it can."""
        ...

    def optimize(self) -> None:
        """Build search structures (HNSW); slow, called off the request path."""
        ...

    def payload_version(self) -> int:
        """The payload shape the index was made for (PAYLOAD_VERSION when new; 1 before it was recorded)."""
        ...

    def upgrade_payload(self) -> None:
        """Create the payload indexes of PAYLOAD_VERSION the index lacks and record it. The caller has the
        authority write every point again (their payload is still of the older shape)."""
        ...

    def flush(self) -> None:
        """Make acknowledged writes survive power loss (a process crash never loses them)."""
        ...

    def close(self) -> None: ...


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def as_vector(vector: np.ndarray, dimension: int) -> list[float]:
    """`vector` as the float list both engines take, after checking its length against the index."""
    array = np.asarray(vector, dtype=np.float32)
    if array.ndim != 1 or array.shape[0] != dimension:
        raise IndexDimensionError(
            f"vector has shape {array.shape} but the index was built for {dimension} dimensions: "
            "if the embedding model changed, run `reindex`"
        )
    if not np.isfinite(array).all():
        raise ValueError("vector contains NaN or infinity")
    values: list[float] = array.tolist()
    return values


def checked_conditions(where: IndexFilter) -> list[Condition] | None:
    """The filter's conditions after checking their fields; None when one has no values.

    A condition with no values can match no point, so callers skip the engine and return nothing
    (Qdrant's `MatchAny([])` agrees, but saying so here keeps both backends identical).
    """
    for condition in where.conditions:
        if condition.field not in FILTER_FIELDS:
            raise ValueError(f"cannot filter on {condition.field!r}: not one of {FILTER_FIELDS}")
    for bound in (*where.ranges, *where.excluded):
        if bound.field not in RANGE_FIELDS:
            raise ValueError(f"cannot filter on {bound.field!r} by range: not one of {RANGE_FIELDS}")
    if any(not condition.values for condition in where.conditions):
        return None
    return list(where.conditions)


def plain_payload(payload: dict[str, object]) -> dict[str, object]:
    """The payload with tuples/sets as lists: engines store JSON, and Edge rejects a tuple of tags."""
    plain: dict[str, object] = {}
    for key, value in payload.items():
        if isinstance(value, (set, frozenset)):
            value = sorted(value)
        elif isinstance(value, tuple):
            value = list(value)
        plain[key] = value
    return plain
