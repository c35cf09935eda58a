"""An acknowledged append survives SIGKILL of the server; a batch is never partially visible.

The real server runs as a subprocess (`python -m memory_server serve`). Several client tasks append batches over
HTTP and record every acknowledgement; the process is SIGKILLed while they are mid-stream, restarted on the
same data directory, and the logs are checked: every acknowledged item is there with its seq, in order,
with no gaps, and every batch (acknowledged or not) is all there or not there at all. Batches whose
acknowledgement was lost are then retried with their idempotency key, as a client buffering them would.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from memory_server.auth import admin as auth

from conftest import admin, make_settings
from procs import ServerProcess, ServerProcesses, batch_payloads, check_log, read_all, server_processes  # noqa: F401

pytestmark = pytest.mark.backends

SITE = "acme"
WRITERS = 6
ROUNDS = 3  # kill/restart cycles
ACKS_BEFORE_KILL = 40  # per round: the kill comes while the writers are still going
SHARED = "conv-durable-shared"


def own_conversation(writer: int) -> str:
    return f"conv-durable-{writer:02d}"


class Ledger:
    """What the clients know: batches sent, and the acknowledgements received."""

    def __init__(self) -> None:
        self.sent: dict[tuple[int, int], tuple[str, int]] = {}  # (writer, batch) -> (conversation, size)
        self.acks: dict[tuple[int, int], dict[str, Any]] = {}
        self.next_batch = [0] * WRITERS
        self.acked_this_round = 0
        self.enough = asyncio.Event()

    def unacknowledged(self) -> list[tuple[int, int]]:
        return [key for key in self.sent if key not in self.acks]


def key_of(writer: int, batch: int) -> str:
    return f"w{writer}-b{batch}"


async def append(client: Client, conversation: str, writer: int, batch: int, size: int) -> dict[str, Any]:
    result = await client.call_tool(
        "append_memory",
        {
            "conversation_id": conversation,
            "items": batch_payloads(writer, batch, size, conv=conversation),
            "idempotency_key": key_of(writer, batch),
        },
        raise_on_error=False,
    )
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def writer_task(server: ServerProcess, secret: str, writer: int, ledger: Ledger, rng: random.Random) -> None:
    """Append batches until the server dies under us."""
    try:
        async with server.client(SITE, secret, timeout=30) as client:
            while True:
                batch = ledger.next_batch[writer]
                ledger.next_batch[writer] += 1
                conversation = SHARED if batch % 2 else own_conversation(writer)
                size = rng.choice([1, 2, 5, 20, 100, 300])
                ledger.sent[(writer, batch)] = (conversation, size)
                ack = await append(client, conversation, writer, batch, size)
                ledger.acks[(writer, batch)] = ack
                ledger.acked_this_round += 1
                if ledger.acked_this_round >= ACKS_BEFORE_KILL:
                    ledger.enough.set()
    except AssertionError:
        raise
    except Exception:  # connection refused/reset once the process is gone: that batch stays unacknowledged
        return


async def retry_unacknowledged(server: ServerProcess, secret: str, ledger: Ledger) -> int:
    """Resend every batch whose acknowledgement was lost; return how many had in fact been committed."""
    committed = 0
    async with server.client(SITE, secret, timeout=30) as client:
        for writer, batch in ledger.unacknowledged():
            conversation, size = ledger.sent[(writer, batch)]
            ack = await append(client, conversation, writer, batch, size)
            committed += ack["duplicate"]
            ledger.acks[(writer, batch)] = ack
    return committed


async def check_everything(server: ServerProcess, secret: str, ledger: Ledger, *, complete: bool) -> None:
    async with server.client(SITE, secret, timeout=30) as client:
        conversations = [SHARED] + [own_conversation(w) for w in range(WRITERS)]
        found: set[tuple[int, int]] = set()
        for conversation in conversations:
            acks = {k: a for k, a in ledger.acks.items() if ledger.sent[k][0] == conversation}
            batches = check_log(await read_all(client, conversation), acks)
            assert all(ledger.sent[key] == (conversation, len(members)) for key, members in batches.items())
            found |= set(batches)
            # One writer's batches to one conversation keep the writer's order.
            for writer in range(WRITERS):
                mine = sorted((b, members[0]["seq"]) for (w, b), members in batches.items() if w == writer)
                assert [seq for _, seq in mine] == sorted(seq for _, seq in mine)
        assert set(ledger.acks) <= found
        if complete:
            assert found == set(ledger.sent)


async def test_acknowledged_appends_survive_sigkill(tmp_path: Path, server_processes: ServerProcesses) -> None:
    data_dir = tmp_path / "data"
    secret = admin(make_settings(data_dir), lambda sites: auth.create_site(sites, SITE))
    ledger = Ledger()
    rng = random.Random(20240611)
    lost_acks = committed_without_ack = 0

    for round_ in range(ROUNDS):
        server = server_processes.start(data_dir)
        if round_:
            await check_everything(server, secret, ledger, complete=False)  # what the last kill left behind
            committed_without_ack += await retry_unacknowledged(server, secret, ledger)
            await check_everything(server, secret, ledger, complete=True)
        ledger.acked_this_round = 0
        ledger.enough.clear()
        writers = [
            asyncio.create_task(writer_task(server, secret, w, ledger, random.Random(rng.random())))
            for w in range(WRITERS)
        ]
        await asyncio.wait_for(ledger.enough.wait(), timeout=120)
        server.kill()  # SIGKILL, with the writers mid-stream
        await asyncio.wait_for(asyncio.gather(*writers), timeout=120)
        lost_acks += len(ledger.unacknowledged())

    server = server_processes.start(data_dir)
    await check_everything(server, secret, ledger, complete=False)
    committed_without_ack += await retry_unacknowledged(server, secret, ledger)
    await check_everything(server, secret, ledger, complete=True)
    print(
        f"{len(ledger.acks)} batches, {lost_acks} acknowledgements lost to kills, "
        f"{committed_without_ack} of those had been committed"
    )
    assert lost_acks > 0  # the kills did land mid-stream
