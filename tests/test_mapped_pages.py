"""Pages of a shared file map given back to the kernel: out of the process's RSS, the data still there."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest

from memory_server.index import mapped_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise through /proc/self/maps")

SIZE = 8 * 1024 * 1024


def resident_kb(path: Path) -> int:
    """The resident size of this process's maps of `path`, from /proc/self/smaps."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and ":" not in fields[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def test_shared_map_pages_are_released_and_read_back(tmp_path: Path) -> None:
    path = (tmp_path / "segment").resolve()
    path.write_bytes(bytes(range(256)) * (SIZE // 256))
    with path.open("r+b") as f, mmap.mmap(f.fileno(), SIZE, flags=mmap.MAP_SHARED) as mapped:
        checksum = sum(mapped[i] for i in range(0, SIZE, 4096))  # touch every page
        assert resident_kb(path) >= SIZE // 1024 * 9 // 10

        assert mapped_pages.release([path]) == SIZE

        assert resident_kb(path) < SIZE // 1024 // 10
        assert sum(mapped[i] for i in range(0, SIZE, 4096)) == checksum  # faulted back in from the file
        mapped[5] = 77  # and still the file's own map: a write reaches it
        mapped.flush()
    assert path.read_bytes()[5] == 77


def test_private_maps_and_other_files_are_left_alone(tmp_path: Path) -> None:
    path = (tmp_path / "private").resolve()
    path.write_bytes(b"\1" * SIZE)
    with path.open("r+b") as f, mmap.mmap(f.fileno(), SIZE, flags=mmap.MAP_PRIVATE) as mapped:
        mapped[0] = 9  # a change of this process's own, which MADV_DONTNEED would throw away
        assert mapped_pages.release([path]) == 0
        assert mapped_pages.release([tmp_path / "not-mapped"]) == 0
        assert mapped[0] == 9
