"""A Scope as an SQL condition on the memories table: the one translation both backends apply. Each backend
names its dialect (placeholder, a column in a set of values, a tag in the JSON list); the conditions are the
same, so a new filter is written here once."""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass

from memory_server.storage.scope import Scope


@dataclass(frozen=True, slots=True)
class Dialect:
    mark: str  # the driver's placeholder
    postgres: bool  # arrays and jsonb (PostgreSQL), or expanded marks and json_each (SQLite)

    def marks(self, values: Sized) -> str:
        """`?,?,?` for a sized collection of bound values."""
        return ",".join([self.mark] * len(values))

    def one_of(self, column: str, values: list[str]) -> tuple[str, list[object]]:
        if self.postgres:
            return f"{column} = ANY({self.mark}::text[])", [values]
        return f"{column} IN ({self.marks(values)})", list(values)

    def has_tag(self, column: str) -> str:
        if self.postgres:  # tags is the JSON list as written; `?` is true for a string element equal to the tag
            return f"{column}::jsonb ? {self.mark}"
        return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE value = {self.mark})"


SQLITE = Dialect(mark="?", postgres=False)
POSTGRES = Dialect(mark="%s", postgres=True)
marks = SQLITE.marks  # SQLite's IN lists outside a scope


def scope_sql(scope: Scope, dialect: Dialect, alias: str = "m") -> tuple[str, list[object]]:
    """The condition that keeps the rows of `alias` the scope sees, and its bound values."""
    clauses = [f"{alias}.site_id = {dialect.mark}"]
    args: list[object] = [scope.site_id]

    def add(clause: str, *values: object) -> None:
        clauses.append(clause)
        args.extend(values)

    for column, allowed in scope.restrictions():
        clause, values = dialect.one_of(f"{alias}.{column}", sorted(allowed))
        add(clause, *values)
    for tag in sorted(scope.tags):
        add(dialect.has_tag(f"{alias}.tags"), tag)
    if scope.kinds is not None:  # only when asked: recall's covering indexes leave the kind out
        add(f"{alias}.kind IN ({dialect.marks(scope.kinds)})", *sorted(scope.kinds))
    # occurred_at and expires_at are stored normalised (UTC, microseconds, Z), so text order is time order.
    if scope.occurred_after is not None:
        add(f"{alias}.occurred_at >= {dialect.mark}", scope.occurred_after)
    if scope.occurred_before is not None:
        add(f"{alias}.occurred_at < {dialect.mark}", scope.occurred_before)
    add(f"({alias}.expires_at IS NULL OR {alias}.expires_at > {dialect.mark})", scope.at)
    if scope.current:  # not superseded by the end of the window (see Scope)
        if scope.occurred_before is None:
            add(f"{alias}.superseded_by IS NULL")
        else:
            add(f"({alias}.superseded_by IS NULL OR {alias}.valid_to >= {dialect.mark})", scope.occurred_before)
    return " AND ".join(clauses), args
