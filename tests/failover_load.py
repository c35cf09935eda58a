"""Writers through memory-server replicas across a PostgreSQL failover, and the check of what survived.

Used by tests/test_failover.py and bench/failover.py. Each replica gets `appenders` clients appending small
batches (with idempotency keys) to conversations shared by all of them, and `rememberers` clients
remembering memories, all over REST. A client retries the same request after 50 ms while the answer is 503
`unavailable`; anything else that is not a success is recorded as a fault: a 500, a 503 without Retry-After,
with another code or as an unclassified "internal error", a dropped connection.

`run_failover` loads, optionally takes the standby away for a while (stopped, so it falls behind: what a
disconnected or slow standby is), crashes the primary, brings the standby back and promotes it
`promote_after_s` after the crash, and loads on until every replica has acknowledged `after_promotion`
writes on the new primary. `verify` then reads everything back through a replica.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2

CONVERSATIONS = [f"failover-log-{n}" for n in range(4)]
RETRY_S = 0.05
REQUEST_TIMEOUT_S = 60.0
PAGE = 1000


class Pair(Protocol):
    """A primary and its standby (tests/postgres.py ReplicatedPostgres)."""

    def crash_primary(self) -> None: ...
    def promote(self) -> None: ...
    def stop_standby(self) -> None: ...
    def start_standby(self) -> None: ...


@dataclass(frozen=True)
class Replica:
    name: str
    base: str  # http://127.0.0.1:PORT
    auth: tuple[str, str]  # the site's Basic credential


@dataclass
class Ack:
    replica: str
    sent: float  # time.monotonic() when the request that succeeded was sent (its commit came after)
    at: float  # time.monotonic() when its acknowledgement arrived
    answer: dict[str, Any]


@dataclass
class Ledger:
    """Every acknowledged write, and every answer that was neither a success nor `unavailable`."""

    appends: dict[str, tuple[str, int, Ack]] = field(default_factory=dict)  # key -> (conversation, size, ack)
    memories: dict[str, tuple[str, Ack]] = field(default_factory=dict)  # reference -> (content, ack)
    unavailable: Counter[str] = field(default_factory=Counter)  # replica -> 503 answers
    faults: list[str] = field(default_factory=list)

    def acks(self) -> dict[str, Ack]:
        """Every acknowledged write by its name: an append's idempotency key, a memory's reference."""
        return {
            **{key: ack for key, (_, _, ack) in self.appends.items()},
            **{ref: ack for ref, (_, ack) in self.memories.items()},
        }

    def acked_after(self, replica: str, at: float) -> int:
        return sum(1 for ack in self.acks().values() if ack.replica == replica and ack.at > at)

    def written_between(self, start: float, end: float) -> set[str]:
        """Writes committed after `start` and acknowledged before `end`: sent after `start`, and not answered
        as a duplicate of an earlier commit."""
        return {
            name
            for name, ack in self.acks().items()
            if ack.sent > start and ack.at < end and not ack.answer.get("duplicate") and ack.answer.get("created", True)
        }


async def _send(
    http: httpx2.AsyncClient, replica: Replica, ledger: Ledger, path: str, body: dict[str, Any], stop: asyncio.Event
) -> tuple[dict[str, Any], float] | None:
    """POST one write, retried while `unavailable`: its answer and when the request that succeeded was
    sent; None once stopped, or on a fault."""
    while not stop.is_set():
        sent = time.monotonic()
        try:
            response = await http.post(path, json=body)
        except httpx2.HTTPError as exc:
            ledger.faults.append(f"{replica.name} {path}: {type(exc).__name__}: {exc}")
            return None
        if response.status_code in (200, 201):
            return dict(response.json()), sent
        error = response.json().get("error", {}) if response.content else {}
        # A generic "internal error" is how an exception no one classified is answered: a fault here.
        if (
            response.status_code != 503
            or error.get("code") != "unavailable"
            or "retry-after" not in response.headers
            or "internal error" in error.get("message", "")
        ):
            ledger.faults.append(
                f"{replica.name} {path}: {response.status_code} {response.headers.get('retry-after')}"
                f" {response.text[:300]}"
            )
            return None
        ledger.unavailable[replica.name] += 1
        await asyncio.sleep(RETRY_S)
    return None


async def appender(replica: Replica, writer: int, ledger: Ledger, stop: asyncio.Event) -> None:
    rng = random.Random(writer)
    async with httpx2.AsyncClient(base_url=replica.base, auth=replica.auth, timeout=REQUEST_TIMEOUT_S) as http:
        batch = 0
        while not stop.is_set():
            conversation = CONVERSATIONS[rng.randrange(len(CONVERSATIONS))]
            key, size = f"{replica.name}-w{writer}-b{batch}", rng.choice([1, 3, 5])
            items = [{"writer": writer, "batch": batch, "pos": pos, "size": size, "key": key} for pos in range(size)]
            done = await _send(
                http,
                replica,
                ledger,
                f"/v1/conversations/{conversation}/items",
                {"items": items, "idempotency_key": key},
                stop,
            )
            if done is None:
                return
            ledger.appends[key] = (conversation, size, Ack(replica.name, done[1], time.monotonic(), done[0]))
            batch += 1


def note(replica: str, writer: int, n: int) -> str:
    return f"Failover note {replica}-{writer}-{n}: the spare router of rack {n} is on shelf {writer}."


async def rememberer(replica: Replica, writer: int, ledger: Ledger, stop: asyncio.Event) -> None:
    async with httpx2.AsyncClient(base_url=replica.base, auth=replica.auth, timeout=REQUEST_TIMEOUT_S) as http:
        n = 0
        while not stop.is_set():
            # Retrying the same content is safe: an identical memory is answered with the existing one.
            content = note(replica.name, writer, n)
            done = await _send(http, replica, ledger, "/v1/memories", {"content": content, "bucket": "failover"}, stop)
            if done is None:
                return
            ledger.memories[str(done[0]["reference"])] = (
                content,
                Ack(replica.name, done[1], time.monotonic(), done[0]),
            )
            n += 1


@dataclass
class Failover:
    """What one run did and measured (times are time.monotonic(); durations are seconds from the crash)."""

    standby_stopped_at: float | None = None  # when the standby had stopped, if it was taken away
    crashed_at: float = 0.0  # when the primary was crashed
    primary_gone_at: float = 0.0  # when its crash was over: nothing sent later can have committed there
    promoted_s: float = 0.0  # the standby accepts writes
    first_ack_s: dict[str, float] = field(default_factory=dict)  # per replica: its first acknowledgement after
    acknowledged_before_crash: int = 0

    def first_ack_after_promotion_s(self) -> dict[str, float]:
        return {name: seconds - self.promoted_s for name, seconds in self.first_ack_s.items()}


async def _until(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.02)


async def run_failover(
    replicas: list[Replica],
    pair: Pair,
    *,
    appenders: int = 3,
    rememberers: int = 1,
    warm_up: int = 20,
    standby_away_s: float = 0.0,
    promote_after_s: float = 0.0,
    after_promotion: int = 20,
    within_s: float = 60.0,
) -> tuple[Ledger, Failover]:
    """Load; with `standby_away_s`, stop the standby for that long under load; crash the primary; start the
    standby again if it was stopped; promote it `promote_after_s` after the crash; load on until every
    replica acknowledged `after_promotion` writes after the promotion; then stop every client."""
    ledger, stop, result = Ledger(), asyncio.Event(), Failover()
    tasks = [asyncio.create_task(appender(r, n, ledger, stop)) for r in replicas for n in range(appenders)]
    tasks += [asyncio.create_task(rememberer(r, n, ledger, stop)) for r in replicas for n in range(rememberers)]
    try:
        await _until(
            lambda: all(ledger.acked_after(r.name, 0) >= warm_up for r in replicas) or bool(ledger.faults),
            within_s,
            "the warm-up",
        )
        if standby_away_s:
            await asyncio.to_thread(pair.stop_standby)
            result.standby_stopped_at = time.monotonic()
            await asyncio.sleep(standby_away_s)
        crashed = result.crashed_at = time.monotonic()
        await asyncio.to_thread(pair.crash_primary)
        result.primary_gone_at = time.monotonic()
        result.acknowledged_before_crash = sum(1 for ack in ledger.acks().values() if ack.at <= crashed)
        if standby_away_s:
            await asyncio.to_thread(pair.start_standby)
        await asyncio.sleep(max(0.0, promote_after_s - (time.monotonic() - crashed)))
        await asyncio.to_thread(pair.promote)
        promoted = time.monotonic()
        result.promoted_s = promoted - crashed
        await _until(
            lambda: (
                all(ledger.acked_after(r.name, promoted) >= after_promotion for r in replicas) or bool(ledger.faults)
            ),
            within_s,
            "writes acknowledged on the new primary by every replica",
        )
        for ack in ledger.acks().values():
            if ack.at > promoted:
                first = result.first_ack_s.get(ack.replica, float("inf"))
                result.first_ack_s[ack.replica] = min(first, ack.at - crashed)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), REQUEST_TIMEOUT_S + 10)
    return ledger, result


@dataclass
class Survival:
    """Acknowledged writes found on the new primary, and those lost: appends by idempotency key, memories by
    reference."""

    appends_kept: int = 0
    memories_kept: int = 0
    lost: set[str] = field(default_factory=set)
    lost_memories: dict[str, str] = field(default_factory=dict)  # reference -> content


async def read_log(http: httpx2.AsyncClient, conversation: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        response = await http.get(
            f"/v1/conversations/{conversation}/items", params={"offset": len(items), "limit": PAGE}
        )
        assert response.status_code == 200, response.text
        page = response.json()["items"]
        items += page
        if len(page) < PAGE:
            return items


def check_log(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """One conversation's batches by idempotency key; asserts seq 0..n-1 in order and every batch whole,
    contiguous and of one commit."""
    assert [item["seq"] for item in items] == list(range(len(items))), "seqs are not 0..n-1 in order"
    batches: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        batches.setdefault(item["payload"]["key"], []).append(item)
    for key, members in batches.items():
        size, first = members[0]["payload"]["size"], members[0]["seq"]
        assert [m["payload"]["pos"] for m in members] == list(range(size)), f"batch {key} is partial or repeated"
        assert [m["seq"] for m in members] == list(range(first, first + size)), f"batch {key} is not contiguous"
        assert len({m["recorded_at"] for m in members}) == 1, f"batch {key} has several recorded_at"
    return batches


async def verify(replica: Replica, ledger: Ledger) -> Survival:
    """Read every conversation and every acknowledged memory back through `replica`. A kept batch must be
    where its acknowledgement said, a kept memory must say what was remembered."""
    survival = Survival()
    async with httpx2.AsyncClient(base_url=replica.base, auth=replica.auth, timeout=REQUEST_TIMEOUT_S) as http:
        stored: dict[str, list[dict[str, Any]]] = {}
        for conversation in CONVERSATIONS:
            stored |= check_log(await read_log(http, conversation))
        for key, (_, size, ack) in ledger.appends.items():
            members = stored.get(key)
            if members is None:
                survival.lost.add(key)
                continue
            assert len(members) == size, key
            assert (members[0]["seq"], members[-1]["seq"]) == (ack.answer["first_seq"], ack.answer["last_seq"]), key
            assert members[0]["recorded_at"] == ack.answer["recorded_at"], key
            survival.appends_kept += 1
        for reference, (content, _) in ledger.memories.items():
            response = await http.get(f"/v1/memories/{reference}")
            if response.status_code == 404:
                survival.lost.add(reference)
                survival.lost_memories[reference] = content
                continue
            assert response.status_code == 200, response.text
            assert response.json()["content"] == content, reference
            survival.memories_kept += 1
    return survival


async def searched(replica: Replica, query: str) -> list[str]:
    """The references POST /v1/search returns for `query` through `replica` (every score)."""
    async with httpx2.AsyncClient(base_url=replica.base, auth=replica.auth, timeout=REQUEST_TIMEOUT_S) as http:
        response = await http.post("/v1/search", json={"query": query, "min_score": 0.0, "limit": 50})
        assert response.status_code == 200, response.text
        return [hit["reference"] for hit in response.json()["results"]]
