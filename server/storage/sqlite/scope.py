"""A Scope as an SQL condition on the memories table."""

from __future__ import annotations

from collections.abc import Sized

from server.storage.records import Scope


def scope_sql(scope: Scope, alias: str = "m") -> tuple[str, list[object]]:
    clauses: list[str] = [f"{alias}.site_id = ?"]
    args: list[object] = [scope.site_id]
    for column, allowed in scope.restrictions():
        values = sorted(allowed)
        clauses.append(f"{alias}.{column} IN ({','.join('?' * len(values))})")
        args += values
    for tag in sorted(scope.tags):
        clauses.append(f"EXISTS (SELECT 1 FROM json_each({alias}.tags) WHERE value = ?)")
        args.append(tag)
    # occurred_at is stored normalised (UTC, microseconds, Z), so text order is time order.
    if scope.occurred_after is not None:
        clauses.append(f"{alias}.occurred_at >= ?")
        args.append(scope.occurred_after)
    if scope.occurred_before is not None:
        clauses.append(f"{alias}.occurred_at < ?")
        args.append(scope.occurred_before)
    clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)")  # normalised: text order
    args.append(scope.at)
    if scope.current:  # not superseded by the end of the window (see Scope)
        if scope.occurred_before is None:
            clauses.append(f"{alias}.superseded_by IS NULL")
        else:
            clauses.append(f"({alias}.superseded_by IS NULL OR {alias}.valid_to >= ?)")
            args.append(scope.occurred_before)
    return " AND ".join(clauses), args


def marks(values: Sized) -> str:
    """`?,?,?` for a sized collection of bound values."""
    return ",".join("?" * len(values))
