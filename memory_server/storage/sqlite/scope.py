"""A Scope as an SQL condition on the memories table."""

from __future__ import annotations

from collections.abc import Sized

from memory_server.storage.lifecycle_sql import lifecycle_clauses
from memory_server.storage.scope import Scope


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
    lifecycle, lifecycle_args = lifecycle_clauses(scope, alias, "?")
    clauses += lifecycle
    args += lifecycle_args
    return " AND ".join(clauses), args


def marks(values: Sized) -> str:
    """`?,?,?` for a sized collection of bound values."""
    return ",".join("?" * len(values))
