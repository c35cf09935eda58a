"""Who gets room under the OAuth caps, the same SQL and rule on both backends (`mark` is the placeholder).

Registrations that never signed in and authorization requests waiting on the consent page are stored for
anyone who asks, so each kind is capped (a `Quota`): in all, per network and per address (`Source`). A new
row that would pass a share takes the place of an older one rather than being refused, chosen so that whoever
holds the most pays: at its own address's share, that address's oldest; at its network's share, the oldest
of that network's address holding the most; at the cap in all, the oldest of the address holding the most
within the network holding the most. Oldest unused first: a request whose consent page was never opened
goes before one being looked at, and a registration in the middle of a sign-in (an unexpired request or code
of it) is never taken, so a new registration is refused only when every candidate is one; `Refused` says
when the first of them ends.

The caller runs `admit` inside the transaction that inserts the row, serialized with every other admission
of its kind (SQLite's single writer, a PostgreSQL advisory lock), and rolls back on `Refused`: a refused
row removes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from memory_server.storage.oauth_records import Quota, Source

# One statement, its arguments: the rows it returns (positional).
Run = Callable[[str, Sequence[object]], Sequence[Sequence[Any]]]


class Refused(Exception):
    """No row may be taken: nothing is added (the caller rolls back), and room is sure at `retry_at`."""

    def __init__(self, retry_at: float | None) -> None:
        super().__init__("no room under the OAuth caps")
        self.retry_at = retry_at


@dataclass(frozen=True, slots=True)
class Held:
    """The SQL of one kind of row under a Quota (`{m}` is the placeholder, `t` the table's alias)."""

    table: str
    key: str
    held: str  # the rows that count against the quota (takes no argument)
    age: tuple[str, ...]  # oldest-unused-first within one address
    rank: str  # between holders of as many rows: the least `min(rank)` first (as `age` orders rows)
    takeable: str  # may the row be taken (takes `takeable_args` times `now`)
    takeable_args: int
    ends: str  # for a refusal: when the first protection ends (takes `now` twice, then the scope's arguments)


CLIENTS = Held(
    table="oauth_clients",
    key="client_id",
    held="t.granted_at IS NULL",
    age=("t.created_at",),
    rank="t.created_at",  # in the source index: ranking reads no row
    takeable=(
        "NOT EXISTS (SELECT 1 FROM oauth_requests r WHERE r.client_id = t.client_id AND r.expires_at > {m})"
        " AND NOT EXISTS (SELECT 1 FROM oauth_codes c WHERE c.client_id = t.client_id AND c.grant_id IS NULL"
        " AND c.expires_at > {m})"
    ),
    takeable_args=2,
    ends=(
        "SELECT min(x.e) FROM (SELECT r.expires_at AS e, r.client_id AS k FROM oauth_requests r"
        " WHERE r.expires_at > {m} UNION ALL SELECT c.expires_at, c.client_id FROM oauth_codes c"
        " WHERE c.grant_id IS NULL AND c.expires_at > {m}) x JOIN oauth_clients t ON t.client_id = x.k"
        " WHERE t.granted_at IS NULL"
    ),
)

REQUESTS = Held(  # the caller deletes the expired ones first
    table="oauth_requests",
    key="request_hash",
    held="1 = 1",
    age=("CASE WHEN t.csrf_hash IS NULL THEN 0 ELSE 1 END", "t.expires_at"),
    rank="t.expires_at + CASE WHEN t.csrf_hash IS NULL THEN 0 ELSE 1e12 END",  # an opened page: after any other
    takeable="1 = 1",
    takeable_args=0,
    ends="",
)

PAGE = 8  # holders ranked per query: the first one nearly always has a row that may be taken


def admit(run: Run, mark: str, kind: Held, source: Source, quota: Quota, now: float) -> int:
    """Make room for one more row of `kind` from `source`: how many rows were taken. Refused if a share is
    full of rows that may not be taken."""
    levels: list[tuple[str, list[object], int]] = [
        (
            f"t.source_network = {mark} AND t.source_address = {mark}",
            [source.network, source.address],
            quota.per_address,
        ),
        (f"t.source_network = {mark}", [source.network], quota.per_network),
        ("1 = 1", [], quota.total),
    ]
    taken = 0
    for where, args, cap in levels:
        scope = f"{kind.held} AND {where}"
        ((count,),) = run(f"SELECT count(*) FROM {kind.table} t WHERE {scope}", args)
        for _ in range(int(count) - min(cap, quota.total) + 1):
            victim = _oldest_of_the_largest(run, mark, kind, scope, args, now)
            if victim is None:
                raise Refused(_room_at(run, mark, kind, where, args, now))
            run(f"DELETE FROM {kind.table} WHERE {kind.key} = {mark}", [victim])
            taken += 1
    return taken


def _oldest_of_the_largest(run: Run, mark: str, kind: Held, scope: str, args: list[object], now: float) -> str | None:
    """Within `scope`: the networks by how many rows they hold (then the oldest first), in each its addresses
    likewise, and of the first address with a row that may be taken, its oldest such row. Counted on the
    source index alone, so a choice among 10,000 rows reads no row but the one taken."""
    for network in _ranked(run, kind, "t.source_network", scope, args):
        in_network = f"{scope} AND t.source_network = {mark}"
        for address in _ranked(run, kind, "t.source_address", in_network, [*args, network]):
            rows = run(
                f"SELECT t.{kind.key} FROM {kind.table} t WHERE {in_network} AND t.source_address = {mark}"
                f" AND {kind.takeable.replace('{m}', mark)} ORDER BY {', '.join(kind.age)}, t.{kind.key} LIMIT 1",
                [*args, network, address, *[now] * kind.takeable_args],
            )
            if rows:
                return str(rows[0][0])
    return None


def _ranked(run: Run, kind: Held, column: str, scope: str, args: list[object]) -> Iterator[str]:
    """The values of `column` within `scope`, those holding the most rows first (then the oldest row)."""
    offset = 0
    while True:
        rows = run(
            f"SELECT {column}, count(*) AS n, min({kind.rank}) AS a FROM {kind.table} t WHERE {scope}"
            f" GROUP BY {column} ORDER BY n DESC, a, {column} LIMIT {PAGE} OFFSET {offset}",
            args,
        )
        yield from (str(row[0]) for row in rows)
        if len(rows) < PAGE:
            return
        offset += PAGE


def _room_at(run: Run, mark: str, kind: Held, where: str, args: list[object], now: float) -> float | None:
    if not kind.ends:
        return None
    rows = run(f"{kind.ends} AND {where}".replace("{m}", mark), [now, now, *args])
    value = rows[0][0] if rows else None
    return float(value) if value is not None else None
