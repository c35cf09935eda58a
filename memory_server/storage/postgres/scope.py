"""A Scope as a PostgreSQL condition on the memories table (the same rows SQLite's scope_sql selects)."""

from __future__ import annotations

from memory_server.storage.lifecycle_sql import lifecycle_clauses
from memory_server.storage.scope import Scope


def scope_sql(scope: Scope, alias: str = "m") -> tuple[str, list[object]]:
    clauses: list[str] = [f"{alias}.site_id = %s"]
    args: list[object] = [scope.site_id]
    for column, allowed in scope.restrictions():
        clauses.append(f"{alias}.{column} = ANY(%s::text[])")
        args.append(sorted(allowed))
    for tag in sorted(scope.tags):
        # tags is the JSON list as written; `?` is true for a string element equal to the tag.
        clauses.append(f"{alias}.tags::jsonb ? %s")
        args.append(tag)
    lifecycle, lifecycle_args = lifecycle_clauses(scope, alias, "%s")
    clauses += lifecycle
    args += lifecycle_args
    return " AND ".join(clauses), args
