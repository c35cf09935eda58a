"""The recorder against real faults: a real server process SIGKILLed and stopped, a client process
SIGKILLed with a spool full of unacknowledged items, acknowledgements lost on the wire (a real TCP proxy
that closes the connection after the server committed), poison items, batches over the server's limit.

The invariant checked every time: the log holds every recorded item exactly once, in recording order,
except the ones dead-lettered. No assertion on timing: `flush(timeout)` returning True is the condition.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_support import FlakyProxy, Site, create_site

from memory_client import (
    AsyncClient,
    Client,
    InvalidParameters,
    MemoryServerError,
    PayloadTooLarge,
    SpoolInUse,
)
from memory_client.recorder import Recorder, split_bounds

from conftest import free_port
from procs import REPO_ROOT, ServerProcess, ServerProcesses, server_env, server_processes  # noqa: F401

FLUSH = 120.0  # generous: a shared 2-core machine


def logged(client: Client, conversation_id: str) -> list[dict[str, Any]]:
    items = list(client.iter_log(conversation_id))
    assert [item.seq for item in items] == list(range(len(items)))
    return [item.payload for item in items]


def wait_ready(client: Client) -> None:
    deadline = time.monotonic() + 60
    while not client.ready():
        assert time.monotonic() < deadline, "server never became ready"
        time.sleep(0.05)


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return create_site(tmp_path / "data")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Site]]:
    """One server for the tests that do not kill theirs; each uses conversations of its own."""
    site = create_site(tmp_path_factory.mktemp("recorder") / "data")
    process = ServerProcess(site.data_dir).start()
    try:
        with Client(process.base) as probe:
            wait_ready(probe)
        yield process, site
    finally:
        process.kill()


# --- the server dies, twice, and is unreachable for 10 s ----------------------------------------------


@pytest.mark.parametrize("buffer", ["memory", "spool"])
def test_server_killed_twice_and_unreachable(
    tmp_path: Path, site: Site, buffer: str, server_processes: ServerProcesses
) -> None:
    process = server_processes.start(site.data_dir)
    cid = f"recorder-chaos-{buffer}"
    total = 2000
    with Client(process.base, auth=site.auth, timeout=10) as client:
        wait_ready(client)
        recorder = client.recorder(
            cid, spool=tmp_path / "spool.db" if buffer == "spool" else None, max_batch_items=50, backoff_max=1.0
        )
        stopped_at = 0.0
        for i in range(total):
            recorder.record({"i": i, "text": f"turn {i} of the conversation"})
            if i % 10 == 0:
                time.sleep(0.003)  # keep batches in flight when the faults hit
            if i in (300, 900):
                process.kill()  # SIGKILL with batches in flight
            elif i in (450, 1000):
                process.start()  # same port, same data directory
            elif i == 1400:
                process.stop()
                stopped_at = time.monotonic()
            elif i == 1700:
                time.sleep(max(0.0, 10.0 - (time.monotonic() - stopped_at)))  # unreachable for 10 s
                process.start()
        assert recorder.flush(FLUSH), recorder.stats()
        stats = recorder.stats()
        assert (stats.pending, stats.acked, stats.dead, stats.dropped) == (0, total, 0, 0), stats
        assert stats.retries > 0  # the outages were felt
        assert logged(client, cid) == [{"i": i, "text": f"turn {i} of the conversation"} for i in range(total)]
        assert recorder.close()


def test_lost_acknowledgements_are_resent_with_the_same_key(shared: tuple[ServerProcess, Site]) -> None:
    process, site = shared
    proxy = FlakyProxy(process.port)
    cid = "recorder-lost-acks"
    try:
        with Client(proxy.base, auth=site.auth) as client:
            wait_ready(client)
            recorder = client.recorder(cid, max_batch_items=10, backoff_initial=0.05, backoff_max=0.2)
            for i in range(100):
                if i % 20 == 0:
                    proxy.drop_next()  # the server commits the next batch; its answer never arrives
                recorder.record({"i": i})
                time.sleep(0.002)
            assert recorder.flush(FLUSH)
            stats = recorder.stats()
            assert proxy.dropped >= 5 and stats.duplicates > 0 and stats.acked == 100, (proxy.dropped, stats)
            assert logged(client, cid) == [{"i": i} for i in range(100)]
            recorder.close()
    finally:
        proxy.close()


# --- the client dies with items spooled ----------------------------------------------------------------

CHILD = """
import sys, time
from memory_client import Client
url, user, secret, cid, spool, count, batch, backoff = sys.argv[1:9]
client = Client(url, auth=(user, secret))
recorder = client.recorder(cid, spool=spool, max_batch_items=int(batch), max_delay=30.0,
                           backoff_initial=float(backoff), backoff_max=float(backoff))
for i in range(int(count)):
    recorder.record({"i": i, "by": "child"})
print("recorded", flush=True)
time.sleep(600)
"""


def record_in_child(
    url: str, site: Site, cid: str, spool: Path, count: int, *, batch: int = 500, backoff: float = 0.2
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "client"), str(REPO_ROOT)])}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            url,
            site.name,
            site.secret,
            cid,
            str(spool),
            str(count),
            str(batch),
            str(backoff),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "recorded"
    return child


def sigkill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)


def spooled(spool: Path) -> int:
    with sqlite3.connect(spool) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM items").fetchone()[0])


def test_client_killed_with_500_items_spooled(tmp_path: Path, site: Site, server_processes: ServerProcesses) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool.db"
    cid = "recorder-client-killed"
    child = record_in_child(url, site, cid, spool, 500, batch=100)  # the server is not running
    sigkill(child)
    assert spooled(spool) == 500

    server_processes.start(site.data_dir, port=port)
    with Client(url, auth=site.auth) as client:
        wait_ready(client)
        recorder = client.recorder(cid, spool=spool)
        assert recorder.stats().recovered == 500
        assert recorder.flush(FLUSH), recorder.stats()
        assert logged(client, cid) == [{"i": i, "by": "child"} for i in range(500)]
        assert recorder.close()
    assert spooled(spool) == 0


def test_client_killed_after_the_server_acknowledged(
    tmp_path: Path, site: Site, server_processes: ServerProcesses
) -> None:
    """The batch is committed, its acknowledgement lost, the client dies before it can retry: the next
    recorder on the spool resends the batch with the key persisted before it was first sent."""
    process = server_processes.start(site.data_dir)
    proxy = FlakyProxy(process.port)
    spool = tmp_path / "spool.db"
    cid = "recorder-acked-then-killed"
    try:
        with Client(process.base, auth=site.auth) as client:
            wait_ready(client)
            proxy.drop_next()
            child = record_in_child(proxy.base, site, cid, spool, 200, batch=200, backoff=300.0)
            deadline = time.monotonic() + 60
            while len(client.tail(cid, 1000)) < 200 or proxy.dropped < 1:
                assert time.monotonic() < deadline, "the child's batch never reached the server"
                time.sleep(0.05)
            sigkill(child)  # committed on the server, still unacknowledged in the spool
            assert spooled(spool) == 200

            recorder = client.recorder(cid, spool=spool)
            assert recorder.flush(FLUSH)
            stats = recorder.stats()
            assert (stats.recovered, stats.acked, stats.duplicates) == (200, 200, 200), stats
            assert logged(client, cid) == [{"i": i, "by": "child"} for i in range(200)]
            recorder.close()
    finally:
        proxy.close()


# --- permanent errors: isolated, dead-lettered, never holding back the rest -----------------------------


def test_poison_items_are_dead_lettered(tmp_path: Path, site: Site, server_processes: ServerProcesses) -> None:
    process = server_processes.start(site.data_dir, env=server_env(MEMORY_MAX_PAYLOAD_BYTES="4096"))
    dead: list[tuple[dict[str, Any], MemoryServerError]] = []
    too_big = {"i": -1, "blob": "z" * 5000}
    too_deep: dict[str, Any] = {"i": -2}
    node = too_deep
    for _ in range(70):
        node["d"] = {}
        node = node["d"]
    poison = {150: too_big, 260: too_deep, 261: too_big}
    cid = "recorder-poison-01"
    with Client(process.base, auth=site.auth) as client:
        wait_ready(client)
        for spool in (None, tmp_path / "spool.db"):
            dead.clear()
            name = f"{cid}-{'spool' if spool else 'mem'}"
            recorder = client.recorder(name, spool=spool, on_dead_letter=lambda item, error: dead.append((item, error)))
            expected = []
            for i in range(400):
                item = poison.get(i, {"i": i})
                recorder.record(item)
                if i not in poison:
                    expected.append(item)
            assert recorder.flush(FLUSH)
            assert logged(client, name) == expected
            assert [item for item, _ in dead] == [too_big, too_deep, too_big]
            assert [type(error) for _, error in dead] == [PayloadTooLarge, InvalidParameters, PayloadTooLarge]
            stats = recorder.stats()
            assert (stats.dead, stats.acked, stats.pending) == (3, 397, 0)
            recorder.close()


def test_a_batch_over_the_server_limit_is_split(site: Site, server_processes: ServerProcesses) -> None:
    process = server_processes.start(site.data_dir, env=server_env(MEMORY_MAX_BATCH_BYTES="20000"))
    with Client(process.base, auth=site.auth) as client:
        wait_ready(client)
        recorder = client.recorder("recorder-split-01", max_batch_items=1000, max_delay=1.0)
        items = [{"i": i, "pad": "p" * 900} for i in range(300)]  # ~270 KB: well over 20 kB a batch
        for item in items:
            recorder.record(item)
        assert recorder.flush(FLUSH)
        stats = recorder.stats()
        assert (stats.dead, stats.acked) == (0, 300) and stats.batches > 10
        assert logged(client, "recorder-split-01") == items


def test_items_that_are_not_json_objects(shared: tuple[ServerProcess, Site]) -> None:
    process, site = shared
    dead: list[Any] = []
    with Client(process.base, auth=site.auth) as client:
        wait_ready(client)
        with client.recorder("recorder-unencodable", on_dead_letter=lambda item, e: dead.append(item)) as rec:
            rec.record({"i": 0})
            rec.record({"when": object()})  # type: ignore[dict-item]
            rec.record(["not", "an", "object"])  # type: ignore[arg-type]
            rec.record({"nan": float("nan")})
            rec.record({"i": 1})
            assert rec.flush(FLUSH)
            assert rec.dead == 3 and rec.acked == 2 and len(dead) == 3
        assert logged(client, "recorder-unencodable") == [{"i": 0}, {"i": 1}]


# --- the buffer, the spool, configuration errors --------------------------------------------------------


def test_full_buffer_drops_new_items_and_keeps_a_prefix(
    tmp_path: Path, site: Site, server_processes: ServerProcesses
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool.db"
    with Client(url, auth=site.auth) as client:  # nothing listens there yet
        recorder = client.recorder("recorder-full-01", spool=spool, max_buffer_items=10, backoff_max=0.5)
        for i in range(25):
            recorder.record({"i": i})
        assert (recorder.pending, recorder.dropped) == (10, 15)
        assert recorder.flush(0.3) is False
        assert recorder.close(timeout=0.0) is False
        recorder.record({"i": 99})  # after close: dropped, never raises
        assert recorder.dropped == 16
    server_processes.start(site.data_dir, port=port)
    with Client(url, auth=site.auth) as client:
        wait_ready(client)
        with client.recorder("recorder-full-01", spool=spool) as recorder:
            assert recorder.flush(FLUSH)
        assert logged(client, "recorder-full-01") == [{"i": i} for i in range(10)]

    with Client(url, auth=site.auth) as client:
        memory = client.recorder("recorder-full-02", max_buffer_bytes=100)
        memory.record({"pad": "x" * 200})  # alone larger than the whole buffer: dropped
        assert memory.dropped == 1 and memory.pending == 0
        memory.close()


def test_a_spool_belongs_to_one_recorder_and_one_conversation(tmp_path: Path) -> None:
    spool = tmp_path / "spool.db"
    with Client(f"http://127.0.0.1:{free_port()}", auth=("a", "b")) as client:
        first = client.recorder("recorder-spool-01", spool=spool)
        with pytest.raises(SpoolInUse):
            client.recorder("recorder-spool-01", spool=spool)
        first.close(timeout=0)
        with pytest.raises(ValueError):
            client.recorder("recorder-spool-02", spool=spool)
        with pytest.raises(InvalidParameters):
            client.recorder("bad id")
        with pytest.raises(ValueError):
            client.recorder("recorder-spool-03", max_batch_items=1001)


def test_configuration_errors_keep_the_items(tmp_path: Path, shared: tuple[ServerProcess, Site]) -> None:
    """Wrong credentials are not the items' fault: nothing is dead-lettered; the spool keeps them until a
    recorder with the right credentials sends them."""
    process, site = shared
    spool = tmp_path / "spool.db"
    with Client(process.base, auth=(site.name, "not-the-secret")) as wrong:
        wait_ready(wrong)
        recorder = wrong.recorder("recorder-config-01", spool=spool, backoff_max=0.2)
        for i in range(20):
            recorder.record({"i": i})
        deadline = time.monotonic() + 60
        while recorder.stats().retries < 2:  # refused at least twice
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert recorder.flush(0.2) is False
        stats = recorder.stats()
        assert stats.dead == 0 and stats.pending == 20 and "unauthorized" in (stats.last_error or "")
        recorder.close(timeout=0)
    with Client(process.base, auth=site.auth) as right:
        with right.recorder("recorder-config-01", spool=spool) as recorder:
            assert recorder.flush(FLUSH)
        assert logged(right, "recorder-config-01") == [{"i": i} for i in range(20)]


def test_client_close_delivers_what_its_recorders_hold(shared: tuple[ServerProcess, Site]) -> None:
    process, site = shared
    with Client(process.base, auth=site.auth) as client:
        wait_ready(client)
        recorder = client.recorder("recorder-close-01", max_delay=60.0)  # only close() sends early
        for i in range(7):
            recorder.record({"i": i})
    with Client(process.base, auth=site.auth) as reader:
        assert logged(reader, "recorder-close-01") == [{"i": i} for i in range(7)]
    assert recorder.acked == 7


async def test_async_recorder(tmp_path: Path, shared: tuple[ServerProcess, Site]) -> None:
    process, site = shared
    async with AsyncClient(process.base, auth=site.auth) as client:
        while not await client.ready():
            await asyncio.sleep(0.05)
        for spool in (None, tmp_path / "spool.db"):
            cid = f"recorder-async-{'spool' if spool else 'mem'}"
            async with client.recorder(cid, spool=spool) as recorder:
                for i in range(300):
                    recorder.record({"i": i})
                    if i % 50 == 0:
                        await asyncio.sleep(0)
                assert await recorder.flush(FLUSH)
                assert (recorder.acked, recorder.pending, recorder.dead, recorder.dropped) == (300, 0, 0, 0)
            assert [item.payload async for item in client.iter_log(cid)] == [{"i": i} for i in range(300)]
        leftover = client.recorder("recorder-async-left")
        leftover.record({"i": 0})
    # AsyncClient.close() closed (and so flushed) the recorder left open
    assert leftover.acked == 1 and leftover.stats().pending == 0


def test_concurrent_recording_threads(tmp_path: Path, shared: tuple[ServerProcess, Site]) -> None:
    import threading

    process, site = shared
    with Client(process.base, auth=site.auth) as client:
        for spool in (None, tmp_path / "spool.db"):
            cid = f"recorder-threads-{'spool' if spool else 'mem'}"
            recorder = client.recorder(cid, spool=spool, max_batch_items=37)

            def produce(writer: int, recorder: Recorder = recorder) -> None:
                for n in range(250):
                    recorder.record({"writer": writer, "n": n})

            threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert recorder.flush(FLUSH)
            payloads = logged(client, cid)
            assert len(payloads) == 1000
            for writer in range(4):  # each thread's items once, in its order
                assert [p["n"] for p in payloads if p["writer"] == writer] == list(range(250))
            recorder.close()


def test_a_spool_reused_after_it_emptied(tmp_path: Path, shared: tuple[ServerProcess, Site]) -> None:
    """Row ids restart once every item is gone; batches formed after that are found again after a crash."""
    process, site = shared
    spool = tmp_path / "spool.db"
    cid = "recorder-reuse-01"
    with Client(process.base, auth=site.auth) as client:
        with client.recorder(cid, spool=spool) as recorder:
            for round_ in range(3):
                for n in range(5):
                    recorder.record({"round": round_, "n": n})
                assert recorder.flush(FLUSH)
                assert spooled(spool) == 0
        with Client(f"http://127.0.0.1:{free_port()}", auth=site.auth) as down:
            stranded = down.recorder(cid, spool=spool, max_batch_items=2, backoff_max=0.2)
            for n in range(5):
                stranded.record({"round": 3, "n": n})
            assert stranded.flush(0.5) is False
            stranded.close(timeout=0)
        with client.recorder(cid, spool=spool) as recorder:
            assert recorder.stats().recovered == 5
            assert recorder.flush(FLUSH)
        assert logged(client, cid) == [{"round": r, "n": n} for r in range(4) for n in range(5)]


def test_split_bounds() -> None:
    named = PayloadTooLarge("items[3] is 5000 bytes serialized; the limit is 4096")
    assert split_bounds(10, named) == [(0, 3), (3, 4), (4, 10)]
    assert split_bounds(4, named) == [(0, 3), (3, 4)]
    assert split_bounds(4, PayloadTooLarge("items[0] is too big")) == [(0, 1), (1, 4)]
    assert split_bounds(10, InvalidParameters("body.items.7: Input should be a valid dictionary")) == [
        (0, 7),
        (7, 8),
        (8, 10),
    ]
    batch_level = PayloadTooLarge("the batch exceeds 4194304 bytes serialized")
    assert split_bounds(10, batch_level) == [(0, 5), (5, 10)]
    assert split_bounds(10, PayloadTooLarge("items[12] is out of this batch")) == [(0, 5), (5, 10)]


def test_a_failing_spool_drops_instead_of_raising(tmp_path: Path) -> None:
    with Client(f"http://127.0.0.1:{free_port()}", auth=("a", "b")) as client:
        recorder = client.recorder("recorder-disk-01", spool=tmp_path / "spool.db")
        recorder._buffer._db.close()  # type: ignore[union-attr]  # the spool's storage failing under it
        recorder.record({"i": 0})
        assert (recorder.dropped, recorder.pending) == (1, 0)
        recorder.close(timeout=0)
