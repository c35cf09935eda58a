"""A check's result, as `memory-server doctor` prints it: ok, WARN, FAIL or skip, a detail, and the fix; and
what the checks of either backend's database share: what they leave for the later checks, and the schema's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

OK, WARN, FAIL, SKIP = "ok", "WARN", "FAIL", "skip"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # OK, FAIL or SKIP
    detail: str
    fix: str | None = None

    def render(self) -> str:
        line = f"{self.status:<4}  {self.name}: {self.detail}"
        if self.status in (FAIL, WARN) and self.fix:
            line += f" -- fix: {self.fix}"
        return line


class _Connection(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Connection)


@dataclass
class CheckedDatabase(Generic[C]):
    """What a backend's checks leave for the index checks after them: the open read-only connection, and the
    memory counts once the schema has them."""

    conn: C | None = None
    counts: tuple[int, int, int, int] | None = None  # memories, indexed, unindexed, queued deletions

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def schema_check(found: int | None, current: int) -> Check:
    """The stored schema version (None: no schema at all) against this server's."""
    start = "start the server or run `memory-server site list`: either brings the schema up to date"
    if found is None:
        return Check("schema", FAIL, "no memory-server schema in this database", start)
    if found == current:
        return Check("schema", OK, f"version {found} (current)")
    if found < current:
        return Check("schema", FAIL, f"version {found}, this memory-server uses {current}", start)
    return Check(
        "schema",
        FAIL,
        f"version {found} is newer than this memory-server's ({current})",
        "upgrade memory-server to the version that wrote this database",
    )
