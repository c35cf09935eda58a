"""The conditions a Scope puts on a memory's place in time, the same SQL on both backends: its time window,
its expiry and whether it was superseded; and the kinds of entries it holds. `mark` is the backend's placeholder."""

from __future__ import annotations

from memory_server.storage.scope import Scope


def lifecycle_clauses(scope: Scope, alias: str, mark: str) -> tuple[list[str], list[object]]:
    clauses: list[str] = []
    args: list[object] = []
    if scope.kinds is not None:  # only when asked: recall's covering indexes leave the kind out
        clauses.append(f"{alias}.kind IN ({', '.join([mark] * len(scope.kinds))})")
        args += sorted(scope.kinds)
    # occurred_at and expires_at are stored normalised (UTC, microseconds, Z), so text order is time order.
    if scope.occurred_after is not None:
        clauses.append(f"{alias}.occurred_at >= {mark}")
        args.append(scope.occurred_after)
    if scope.occurred_before is not None:
        clauses.append(f"{alias}.occurred_at < {mark}")
        args.append(scope.occurred_before)
    clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > {mark})")
    args.append(scope.at)
    if scope.current:  # not superseded by the end of the window (see Scope)
        if scope.occurred_before is None:
            clauses.append(f"{alias}.superseded_by IS NULL")
        else:
            clauses.append(f"({alias}.superseded_by IS NULL OR {alias}.valid_to >= {mark})")
            args.append(scope.occurred_before)
    return clauses, args
