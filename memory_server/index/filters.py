"""A `Scope` as the vector index's filter: the conditions its payload can check, widened to whole seconds where
the payload rounds (the exact conditions are applied to the rows read back: `Scope.admits`)."""

from __future__ import annotations

from memory_server.index.base import Condition, IndexFilter, Range
from memory_server.storage.records import MEMORY, TURN
from memory_server.storage.scope import Scope
from memory_server.timestamps import epoch_seconds


def scope_filter(scope: Scope) -> IndexFilter:
    conditions = [Condition("site", (str(scope.site_id),))]
    conditions += [Condition(column, tuple(sorted(allowed))) for column, allowed in scope.restrictions()]
    conditions += [Condition("tags", (tag,)) for tag in sorted(scope.tags)]
    # Whole seconds, widened to hold every memory of the window (the exact window is applied to the
    # rows read back): occurred_at >= after -> floor(occurred) >= floor(after), < before -> <= floor(before).
    ranges = []
    if scope.occurred_after is not None or scope.occurred_before is not None:
        ranges.append(
            Range(
                "occurred",
                gte=None if scope.occurred_after is None else epoch_seconds(scope.occurred_after),
                lte=None if scope.occurred_before is None else epoch_seconds(scope.occurred_before),
            )
        )
    # Superseded by the window's end: valid_to < before -> floor(valid_to) <= floor(before) - 1 leaves out
    # only memories that are (the rest is checked exactly); without an end, any valid_to.
    excluded = []
    if scope.current:
        excluded.append(
            Range("valid_to", lte=None if scope.occurred_before is None else epoch_seconds(scope.occurred_before) - 1)
        )
    # Expired: expires_at <= at. The payload is rounded up, so ceil(expires) <= floor(at) holds only then.
    excluded.append(Range("expires", lte=epoch_seconds(scope.at)))
    # Only a turn's point has `turn` (its seq, never negative).
    if scope.kinds == frozenset({TURN}):
        ranges.append(Range("turn", gte=0))
    elif scope.kinds == frozenset({MEMORY}):
        excluded.append(Range("turn", gte=0))
    return IndexFilter(tuple(conditions), ranges=tuple(ranges), excluded=tuple(excluded))
