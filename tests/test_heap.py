"""Returning the heap's free memory (memory_server/heap.py): what recall frees between long-lived objects goes
back to the system, and a server does it every MEMORY_HEAP_TRIM_INTERVAL_S (0: never)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_server import heap
from memory_server.services import Services, open_services

from tests.conftest import make_settings

pytestmark = pytest.mark.skipif(not heap.supported(), reason="malloc is not glibc's here")

BLOCK = 64 * 1024  # below glibc's mmap threshold: taken from an arena, as recall's arrays of a few hundred rows
BLOCKS = 1600  # 100 MB


def resident_anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_trim_gives_back_the_free_memory_between_live_blocks() -> None:
    blocks = [b"x" * BLOCK for _ in range(BLOCKS)]  # written, so resident
    # One block in eight stays: the freed ones are holes between live blocks, which free() alone keeps.
    kept = blocks[7::8]
    del blocks
    freed_mb = (BLOCKS - len(kept)) * BLOCK / 2**20
    before = resident_anon_mb()
    heap.trim()
    after = resident_anon_mb()
    assert before - after > freed_mb / 2, (before, after, freed_mb)
    assert len(kept) == BLOCKS // 8


@pytest.fixture
def services_of(tmp_path: Path) -> Iterator[list[Services]]:
    opened: list[Services] = []
    yield opened
    for services in opened:
        services.close()


def test_a_server_trims_its_heap_every_interval(tmp_path: Path, services_of: list[Services]) -> None:
    services = open_services(make_settings(tmp_path / "data", heap_trim_interval_s=0.05))
    services_of.append(services)
    services.start_heap_trim()
    trimmer = services.heap_trimmer
    assert trimmer is not None
    deadline = time.monotonic() + 30
    while trimmer.rounds < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert trimmer.rounds >= 2
    services.close()
    trimmer.thread.join(timeout=30)
    assert not trimmer.thread.is_alive()  # closing the services ends it


def test_an_interval_of_0_never_trims(tmp_path: Path, services_of: list[Services]) -> None:
    services = open_services(make_settings(tmp_path / "data", heap_trim_interval_s=0))
    services_of.append(services)
    services.start_heap_trim()
    assert services.heap_trimmer is None
