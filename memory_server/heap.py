"""Giving the heap's free memory back to the system, every MEMORY_HEAP_TRIM_INTERVAL_S.

glibc's malloc keeps what a thread frees inside that thread's arena and returns to the system only a free
block at the very top of an arena. Recall builds and drops arrays of a few MB (a scope's candidate set is
built anew after each write to it) among small long-lived objects, so the freed space sits between them,
is seldom the right size for the next array, and the resident heap grows with every write while the data
in use does not. `malloc_trim(0)` releases the free pages inside every arena (madvise): the addresses stay
reserved, the memory goes back. Where malloc is not glibc's (macOS, musl) there is nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("memory_server.heap")


def _glibc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _glibc_trim()


def trim() -> bool:
    """Return the free pages of every malloc arena to the system; whether any were (False without glibc)."""
    return _TRIM is not None and bool(_TRIM(0))


def supported() -> bool:
    return _TRIM is not None


class HeapTrimmer:
    """A daemon thread that trims the heap every `interval_s` until `stop` is set."""

    def __init__(self, interval_s: float, stop: threading.Event) -> None:
        self.interval_s = interval_s
        self.stop = stop
        self.rounds = 0  # trims done, for tests
        self.thread = threading.Thread(target=self._run, name="heap-trim", daemon=True)

    def start(self) -> HeapTrimmer:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(self.interval_s):
            try:
                trim()
            except Exception:  # never expected: a failed trim only leaves the memory where it was
                log.warning("trimming the heap failed", exc_info=True)
                return
            self.rounds += 1
