"""A Scope as a PostgreSQL condition on the memories table (the same rows SQLite's scope_sql selects)."""

from __future__ import annotations

from server.storage.records import Scope


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
    # occurred_at is stored normalised (UTC, microseconds, Z), so text order is time order.
    if scope.occurred_after is not None:
        clauses.append(f"{alias}.occurred_at >= %s")
        args.append(scope.occurred_after)
    if scope.occurred_before is not None:
        clauses.append(f"{alias}.occurred_at < %s")
        args.append(scope.occurred_before)
    clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > %s)")  # normalised: text order
    args.append(scope.at)
    if scope.current:  # not superseded by the end of the window (see Scope)
        if scope.occurred_before is None:
            clauses.append(f"{alias}.superseded_by IS NULL")
        else:
            clauses.append(f"({alias}.superseded_by IS NULL OR {alias}.valid_to >= %s)")
            args.append(scope.occurred_before)
    return " AND ".join(clauses), args
