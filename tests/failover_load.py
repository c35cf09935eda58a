"""Writers through memory-server replicas across a PostgreSQL failover, and the check of what survived.

Used by tests/test_failover.py and bench/failover.py. Each replica gets `appenders` clients appending small
batches (with idempotency keys) to conversations shared by all of them, and `rememberers` clients
remembering memories, all over REST. A client retries the same request after 50 ms while the answer is 503
`unavailable`; anything else that is not a success is recorded as a fault: a 500, a 503 without Retry-After,
with another code or as an unclassified "internal error", a dropped connection. `run_failover` crashes the
primary mid-load, promotes the standby `promote_after_s` later, and goes on until every replica has
acknowledged `after_promotion` writes on the new primary; `verify` then reads everything back through a
replica.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2

CONVERSATIONS = [f"failover-log-{n}" for n in range(4)]
RETRY_S = 0.05
REQUEST_TIMEOUT_S = 60.0
PAGE = 1000


@dataclass(frozen=True)
class Replica:
    name: str
    base: str  # http://127.0.0.1:PORT
    auth: tuple[str, str]  # the site's Basic credential


@dataclass
class Ack:
    replica: str
    at: float  # time.monotonic() when the acknowledgement arrived
    answer: dict[str, Any]


@dataclass
class Ledger:
    """Every acknowledged write, and every answer that was neither a success nor `unavailable`."""

    appends: dict[str, tuple[str, int, Ack]] = field(default_factory=dict)  # key -> (conversation, size, ack)
    memories: dict[str, tuple[str, Ack]] = field(default_factory=dict)  # reference -> (content, ack)
    unavailable: Counter[str] = field(default_factory=Counter)  # replica -> 503 answers
    faults: list[str] = field(default_factory=list)

    def acks(self) -> list[Ack]:
        return [ack for _, _, ack in self.appends.values()] + [ack for _, ack in self.memories.values()]

    def first_ack_after(self, at: float) -> dict[str, float]:
        """Per replica: seconds from `at` to its first acknowledgement after `at`."""
        first: dict[str, float] = {}
        for ack in self.acks():
            if ack.at > at:
                first[ack.replica] = min(first.get(ack.replica, float("inf")), ack.at - at)
        return first

    def acked_after(self, replica: str, at: float) -> int:
        return sum(1 for ack in self.acks() if ack.replica == replica and ack.at > at)


async def _send(http: httpx2.AsyncClient, replica: Replica, ledger: Ledger, method: str, path: str,
                body: dict[str, Any], stop: asyncio.Event) -> dict[str, Any] | None:
    """One write, retried while `unavailable`; its answer, or None when stopped first or on a fault."""
    while not stop.is_set():
        try:
            response = await http.request(method, path, json=body)
        except httpx2.HTTPError as exc:
            ledger.faults.append(f"{replica.name} {path}: {type(exc).__name__}: {exc}")
            return None
        if response.status_code in (200, 201):
            return dict(response.json())
        error = response.json().get("error", {}) if response.content else {}
        # A generic "internal error" is how an exception no one classified is answered: a fault here.
        if (response.status_code != 503 or error.get("code") != "unavailable" or "retry-after" not in response.headers
                or "internal error" in error.get("message", "")):
            ledger.faults.append(f"{replica.name} {path}: {response.status_code} {response.headers.get('retry-after')}"
                                 f" {response.text[:300]}")
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
            answer = await _send(http, replica, ledger, "POST", f"/v1/conversations/{conversation}/items",
                                 {"items": items, "idempotency_key": key}, stop)
            if answer is None:
                return
            ledger.appends[key] = (conversation, size, Ack(replica.name, time.monotonic(), answer))
            batch += 1


async def rememberer(replica: Replica, writer: int, ledger: Ledger, stop: asyncio.Event) -> None:
    async with httpx2.AsyncClient(base_url=replica.base, auth=replica.auth, timeout=REQUEST_TIMEOUT_S) as http:
        n = 0
        while not stop.is_set():
            # Retrying the same content is safe: an identical memory is answered with the existing one.
            content = f"Failover note {replica.name}-{writer}-{n}: the spare router of rack {n} is on shelf {writer}."
            answer = await _send(http, replica, ledger, "POST", "/v1/memories",
                                 {"content": content, "bucket": "failover"}, stop)
            if answer is None:
                return
            ledger.memories[str(answer["reference"])] = (content, Ack(replica.name, time.monotonic(), answer))
            n += 1


@dataclass
class Failover:
    """What one run measured (seconds are from the crash of the primary)."""

    crashed_at: float = 0.0  # time.monotonic() when the primary was crashed
    promoted_s: float = 0.0  # the standby accepts writes
    first_ack_s: dict[str, float] = field(default_factory=dict)  # per replica, first acknowledgement after promotion
    acknowledged_before_crash: int = 0


async def _until(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.02)


async def run_failover(replicas: list[Replica], crash: Callable[[], None], promote: Callable[[], None], *,
                       appenders: int = 3, rememberers: int = 1, warm_up: int = 20, promote_after_s: float = 0.0,
                       after_promotion: int = 20, within_s: float = 60.0) -> tuple[Ledger, Failover]:
    """Load, crash the primary (`crash()`), promote the standby (`promote()`) `promote_after_s` later, and load
    on until every replica acknowledged `after_promotion` writes after it; then stop every client."""
    ledger, stop, result = Ledger(), asyncio.Event(), Failover()
    tasks = [asyncio.create_task(appender(r, n, ledger, stop)) for r in replicas for n in range(appenders)]
    tasks += [asyncio.create_task(rememberer(r, n, ledger, stop)) for r in replicas for n in range(rememberers)]
    try:
        await _until(lambda: all(ledger.acked_after(r.name, 0) >= warm_up for r in replicas) or bool(ledger.faults),
                     within_s, "the warm-up")
        crashed = result.crashed_at = time.monotonic()
        await asyncio.to_thread(crash)
        result.acknowledged_before_crash = sum(1 for ack in ledger.acks() if ack.at <= crashed)
        await asyncio.sleep(max(0.0, promote_after_s - (time.monotonic() - crashed)))
        await asyncio.to_thread(promote)
        promoted = time.monotonic()
        result.promoted_s = promoted - crashed
        await _until(lambda: all(ledger.acked_after(r.name, promoted) >= after_promotion for r in replicas)
                     or bool(ledger.faults), within_s, "writes acknowledged on the new primary by every replica")
        result.first_ack_s = {name: seconds + result.promoted_s
                              for name, seconds in ledger.first_ack_after(promoted).items()}
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), REQUEST_TIMEOUT_S + 10)
    return ledger, result


@dataclass
class Survival:
    """Acknowledged writes found on the new primary, and those lost (with how long before the crash they
    were acknowledged)."""

    appends_kept: int = 0
    appends_lost: list[str] = field(default_factory=list)
    memories_kept: int = 0
    memories_lost: list[str] = field(default_factory=list)
    lost_acked_before_crash_s: list[float] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return len(self.appends_lost) + len(self.memories_lost)


async def read_log(http: httpx2.AsyncClient, conversation: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        response = await http.get(f"/v1/conversations/{conversation}/items",
                                  params={"offset": len(items), "limit": PAGE})
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


async def verify(replica: Replica, ledger: Ledger, crashed_at: float) -> Survival:
    """Read every conversation and every acknowledged memory back through `replica`: what was kept, what was
    lost. A kept batch must be where its acknowledgement said."""
    survival = Survival()
    async with httpx2.AsyncClient(base_url=replica.base, auth=replica.auth, timeout=REQUEST_TIMEOUT_S) as http:
        stored: dict[str, list[dict[str, Any]]] = {}
        for conversation in CONVERSATIONS:
            stored |= check_log(await read_log(http, conversation))
        for key, (_, size, ack) in ledger.appends.items():
            members = stored.get(key)
            if members is None:
                survival.appends_lost.append(key)
                survival.lost_acked_before_crash_s.append(crashed_at - ack.at)
                continue
            assert len(members) == size, key
            assert (members[0]["seq"], members[-1]["seq"]) == (ack.answer["first_seq"], ack.answer["last_seq"]), key
            assert members[0]["recorded_at"] == ack.answer["recorded_at"], key
            survival.appends_kept += 1
        for reference, (content, ack) in ledger.memories.items():
            response = await http.get(f"/v1/memories/{reference}")
            if response.status_code == 404:
                survival.memories_lost.append(reference)
                survival.lost_acked_before_crash_s.append(crashed_at - ack.at)
                continue
            assert response.status_code == 200, response.text
            assert response.json()["content"] == content, reference
            survival.memories_kept += 1
    return survival
