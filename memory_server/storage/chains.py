"""Supersede chains, kept inside the caller's write transaction, with the same SQL on every backend.

A memory that supersedes another holds its reference in `supersedes`; the older one holds the newer one's
in `superseded_by` and, in `valid_to`, the newer one's occurred_at. Each memory supersedes at most one and
is superseded by at most one, so the links of a site form chains, oldest to newest. Writes link a memory to
the newest of a chain only: the chain stays one line. Deleting a memory joins its neighbours (or makes the
one it superseded current again), so a chain never points at a memory that is gone.

A successor never occurred before the memory it replaces (equal is allowed): a memory's validity, from its
occurred_at until its successor's, never ends before it starts. Every write that links or moves a memory of a
chain checks it here, on the rows as the transaction sees them (`out_of_order`); a break is invalid_parameters
and the transaction writes nothing.

`conn` is an open connection inside a write transaction (sqlite3 or psycopg: both `execute(sql, args)`),
`mark` the backend's placeholder; rows whose links change are queued for the vector index (`indexed = 0`:
`valid_to` is in its payload) and get a new updated_at (their version).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from memory_server.errors import InvalidParameters
from memory_server.storage.records import NewMemory, StaleRow, StoredMemory
from memory_server.timestamps import now_rfc3339

MAX_CHAIN = 10_000  # steps followed before a chain is taken as damaged (a loop written from outside)
CHANGED = "updated_at = ?, indexed = 0"


class Chains:
    def __init__(self, conn: Any, *, mark: str = "?", lock: str = "") -> None:
        self._conn = conn
        self._mark = mark
        self._lock = lock  # appended to the read of a row about to be linked (PostgreSQL: FOR UPDATE)

    def _run(self, sql: str, *args: Any) -> Any:
        return self._conn.execute(sql.replace("?", self._mark), args)

    def link(self, site_id: int, reference: str, occurred_at: str, older: str) -> int:
        """`reference` supersedes `older`, which must still be the newest of its chain (StaleRow if it is
        gone or was superseded meanwhile: the caller resolves it again). Returns the older one's id."""
        row = self._run(
            f"SELECT id, superseded_by, occurred_at FROM memories WHERE site_id = ? AND reference = ?{self._lock}",
            site_id,
            older,
        ).fetchone()
        if row is None or row[1] is not None:
            raise StaleRow(older)
        self._run(
            f"UPDATE memories SET superseded_by = ?, valid_to = ?, {CHANGED} WHERE site_id = ? AND id = ?",
            reference,
            occurred_at,
            now_rfc3339(),
            site_id,
            row[0],
        )
        if self._follows(site_id, reference, older):  # reference was already older than `older`
            raise InvalidParameters(
                f"{reference} cannot supersede {older}: {older} already supersedes it, "
                "directly or through others (a cycle)"
            )
        out_of_order(occurred_at, older, str(row[2]))  # after the cycle: its message says more
        return int(row[0])

    def unlink(self, site_id: int, reference: str, older: str) -> int | None:
        """`reference` no longer supersedes `older`, which becomes current again; its id if it was linked."""
        row = self._run(
            f"UPDATE memories SET superseded_by = NULL, valid_to = NULL, {CHANGED}"
            " WHERE site_id = ? AND reference = ? AND superseded_by = ? RETURNING id",
            now_rfc3339(),
            site_id,
            older,
            reference,
        ).fetchone()
        return int(row[0]) if row is not None else None

    def moved(self, site_id: int, reference: str, occurred_at: str, older: str) -> int | None:
        """`reference` (which supersedes `older`) now occurred at `occurred_at`: the older one's valid_to."""
        row = self._run(
            f"UPDATE memories SET valid_to = ?, {CHANGED}"
            " WHERE site_id = ? AND reference = ? AND superseded_by = ? RETURNING id, occurred_at",
            occurred_at,
            now_rfc3339(),
            site_id,
            older,
            reference,
        ).fetchone()
        if row is None:
            return None
        out_of_order(occurred_at, older, str(row[1]))
        return int(row[0])

    def bridge(self, site_id: int, reference: str, older: str | None, newer: str | None) -> list[int]:
        """Before `reference` is deleted: the memory it superseded is superseded by the one that superseded
        it (or is current again). The ids of the rows changed."""
        changed: list[int] = []
        now = now_rfc3339()
        successor = None
        if newer is not None:
            successor = self._run(
                "SELECT id, occurred_at FROM memories WHERE site_id = ? AND reference = ? AND supersedes = ?",
                site_id,
                newer,
                reference,
            ).fetchone()
        if older is not None:
            if successor is not None:
                row = self._run(
                    f"UPDATE memories SET superseded_by = ?, valid_to = ?, {CHANGED}"
                    " WHERE site_id = ? AND reference = ? AND superseded_by = ? RETURNING id",
                    newer,
                    successor[1],
                    now,
                    site_id,
                    older,
                    reference,
                ).fetchone()
            else:
                row = self._run(
                    f"UPDATE memories SET superseded_by = NULL, valid_to = NULL, {CHANGED}"
                    " WHERE site_id = ? AND reference = ? AND superseded_by = ? RETURNING id",
                    now,
                    site_id,
                    older,
                    reference,
                ).fetchone()
            if row is not None:
                changed.append(int(row[0]))
        if successor is not None:
            linked = older if changed else None
            self._run(
                f"UPDATE memories SET supersedes = ?, {CHANGED} WHERE site_id = ? AND id = ?",
                linked,
                now,
                site_id,
                successor[0],
            )
            changed.append(int(successor[0]))
        return changed

    def head(self, site_id: int, reference: str) -> str | None:
        """The newest memory of `reference`'s chain (itself when nothing supersedes it); None if the site has
        no memory `reference`."""
        last: str | None = None
        for current in self._successors(site_id, reference):
            last = current
        return last

    def _follows(self, site_id: int, reference: str, later: str) -> bool:
        """Whether `later` is among the memories that supersede `reference`, directly or through others."""
        return any(current == later for current in self._successors(site_id, reference, first=False))

    def _successors(self, site_id: int, reference: str, *, first: bool = True) -> Iterator[str]:
        """`reference` (if the site has it and `first`), then each memory superseding the one before, up to
        the newest; a link to a memory that is gone ends it."""
        current: str | None = reference
        for step in range(MAX_CHAIN):
            row = self._run(
                "SELECT superseded_by FROM memories WHERE site_id = ? AND reference = ?", site_id, current
            ).fetchone()
            if row is None:
                return
            if first or step:
                yield str(current)
            if row[0] is None or (step and current == reference):
                return
            current = str(row[0])
        raise InvalidParameters(f"the chain of memories superseding {reference} is longer than {MAX_CHAIN}")


def relink(chains: Chains, site_id: int, reference: str, before: StoredMemory, after: NewMemory) -> list[int]:
    """After the row of `reference` changed from `before` to `after`: its link to the memory it supersedes
    follows (unlinked, linked to another, or that one's valid_to moved with occurred_at). The ids of the
    other rows changed."""
    if before.superseded_by is not None and before.valid_to is not None and after.occurred_at > before.valid_to:
        raise InvalidParameters(
            f"occurred_at {after.occurred_at} is after {before.valid_to}, when {before.superseded_by} (which "
            f"supersedes this memory) occurred: a memory cannot have occurred after the one that replaced it "
            f"(give an occurred_at at or before {before.valid_to})"
        )
    changed: list[int | None] = []
    if after.supersedes != before.supersedes:
        if before.supersedes is not None:
            changed.append(chains.unlink(site_id, reference, before.supersedes))
        if after.supersedes is not None:
            changed.append(chains.link(site_id, reference, after.occurred_at, after.supersedes))
    elif after.supersedes is not None and after.occurred_at != before.occurred_at:
        changed.append(chains.moved(site_id, reference, after.occurred_at, after.supersedes))
    return [i for i in changed if i is not None]


def out_of_order(occurred_at: str, older: str, older_occurred_at: str) -> None:
    """Refuse a memory that occurred at `occurred_at` as the successor of `older`, which occurred later (both
    stored normalised, so text order is time order)."""
    if occurred_at < older_occurred_at:
        raise InvalidParameters(
            f"occurred_at {occurred_at} is before {older_occurred_at}, when {older}, the memory it supersedes, "
            f"occurred: a memory cannot replace one that occurred after it (give an occurred_at at or after "
            f"{older_occurred_at})"
        )


def chain_sql(starts: str, *, site: str = "c.site_id") -> str:
    """A recursive CTE `chain(start, ref, depth)`: for each memory `c.reference {starts}` that is superseded,
    every memory superseding it, `depth` steps later (1: its successor). Its arguments: the site id, those of
    `starts`, the site id again, MAX_CHAIN. `site`: how the starts' site column is written (SQLite's `+c.site_id`
    keeps its planner on the references' own index)."""
    return (
        "WITH RECURSIVE chain (start, ref, depth) AS ("
        " SELECT c.reference, c.superseded_by, 1 FROM memories c"
        f" WHERE {site} = ? AND c.reference {starts} AND c.superseded_by IS NOT NULL"
        " UNION ALL SELECT chain.start, c.superseded_by, chain.depth + 1 FROM chain"
        " JOIN memories c ON c.site_id = ? AND c.reference = chain.ref"
        " WHERE c.superseded_by IS NOT NULL AND chain.depth < ?) "
    )


def newest_of(rows: Iterable[tuple[str, int, StoredMemory]]) -> dict[str, StoredMemory]:
    """(start, depth, memory) rows of `chain_sql` that a scope sees -> per start, the one furthest along."""
    best: dict[str, tuple[int, StoredMemory]] = {}
    for start, depth, memory in rows:
        if start not in best or depth > best[start][0]:
            best[start] = (depth, memory)
    return {start: memory for start, (_, memory) in best.items()}
