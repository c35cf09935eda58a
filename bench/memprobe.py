"""`python -m bench.memprobe serve ...`: the `memory-server` command with a memory probe, for bench/soak.py;
`python -m bench.memprobe diff OLD.snapshot NEW.snapshot`: where traced memory grew between two probes.

Off the server's own surface: nothing here is reachable over HTTP. With MEMPROBE_DIR set, each SIGUSR1 writes
`probe-N.json` there: RssAnon, glibc's heap (mallinfo2: bytes in use and free inside the arenas, so
fragmentation shows as free bytes the process still holds), the sizes of the server's long-lived structures
(found by type with the garbage collector) and, when MEMPROBE_FRAMES is set, tracemalloc's snapshot
(`probe-N.snapshot`, for `diff`). SIGUSR2 runs malloc_trim(0) and then writes a probe: what it
gives back is free heap, not live data.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import signal
import sys
import time
import tracemalloc
from pathlib import Path
from types import FrameType
from typing import Any

TOP = 30
# Long-lived structures by class name: their container attributes are counted (len), their arrays sized.
WATCHED = {
    "CandidateSource",
    "WordVectors",
    "_SiteWords",
    "QueryCache",
    "PerText",
    "TermIds",
    "CandidateSet",
    "Held",
    "BasicCache",
    "RateLimiter",
}


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def heap() -> dict[str, float]:
    """glibc's view of its heap, MB: arena (obtained with brk/mmap for small blocks), in use, free inside."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return {}
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    mb = 1024 * 1024
    return {
        "arena_mb": round(info.arena / mb, 1),
        "mmapped_mb": round(info.hblkhd / mb, 1),
        "in_use_mb": round((info.uordblks + info.hblkhd) / mb, 1),
        "free_inside_mb": round(info.fordblks / mb, 1),
    }


def sqlite_mb() -> dict[str, float]:
    """What SQLite holds (page caches, schemas, statements) in this process, and the threads alive (each
    reading thread has a connection of its own)."""
    try:
        import _sqlite3

        used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
        used.restype = ctypes.c_int64
        held = round(used() / 1e6, 1)
    except (ImportError, OSError, AttributeError):
        held = -1.0
    return {"sqlite_mb": held, "threads": float(len(os.listdir("/proc/self/task")))}


def status() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            out[name] = round(int(rest.split()[0]) / 1024, 1)
    return out


def _size(value: Any) -> dict[str, Any] | int | None:
    if hasattr(value, "nbytes") and hasattr(value, "shape"):
        return {"shape": list(value.shape), "mb": round(value.nbytes / 1e6, 2)}
    if isinstance(value, (dict, list, set, tuple, frozenset)) or hasattr(value, "__len__"):
        try:
            return len(value)
        except TypeError:
            return None
    return None


def structures() -> dict[str, Any]:
    """Per watched class: how many instances live, and for up to 3 of them the size of each attribute."""
    found: dict[str, list[Any]] = {}
    # The server freezes what start-up made (Services.load_memories), which hides it from get_objects: thawed
    # here for good (frozen again, whatever became garbage since would never be freed).
    gc.unfreeze()
    for obj in gc.get_objects():
        name = type(obj).__name__
        if name in WATCHED:
            found.setdefault(name, []).append(obj)
    out: dict[str, Any] = {}
    for name, objects in sorted(found.items()):
        shown = []
        for obj in objects[:3]:
            attrs = getattr(obj, "__dict__", None) or {s: getattr(obj, s, None) for s in getattr(obj, "__slots__", ())}
            shown.append({k: size for k, v in attrs.items() if (size := _size(v)) is not None})
        out[name] = {"instances": len(objects), "first": shown}
    return out


class Probe:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.n = 0

    def write(self, *, trimmed: dict[str, float] | None = None) -> None:
        """A probe; with tracemalloc on, its snapshot is dumped beside it (`diff` reads two of them later:
        grouping millions of traces in the server would stall its event loop for minutes)."""
        report: dict[str, Any] = {"t": time.time(), "status": status(), "heap": heap(), **sqlite_mb()}
        if trimmed is not None:
            report["before_trim"] = trimmed
        report["structures"] = structures()
        if tracemalloc.is_tracing():
            current, peak = tracemalloc.get_traced_memory()
            report["traced_mb"] = round(current / 1e6, 1)
            tracemalloc.take_snapshot().dump(str(self.out / f"probe-{self.n:03d}.snapshot"))
        (self.out / f"probe-{self.n:03d}.json").write_text(json.dumps(report, indent=1))
        self.n += 1

    def on_usr1(self, signum: int, frame: FrameType | None) -> None:
        self.write()

    def on_usr2(self, signum: int, frame: FrameType | None) -> None:
        before = {**status(), **heap()}
        libc = _libc()
        started = time.perf_counter()
        if libc is not None:
            libc.malloc_trim(0)
        before["trim_ms"] = round((time.perf_counter() - started) * 1000, 1)
        self.write(trimmed=before)


def diff(old: Path, new: Path, *, top: int = TOP, frames: int = 6) -> str:
    """What grew from one dumped snapshot to a later one, by allocation site (`frames` innermost frames)."""
    ignored = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib.*")]
    before = tracemalloc.Snapshot.load(str(old)).filter_traces(ignored)
    after = tracemalloc.Snapshot.load(str(new)).filter_traces(ignored)
    total = sum(s.size for s in after.statistics("filename"))
    lines = [f"traced: {total / 1e6:.1f} MB in {new.name}"]
    for stat in after.compare_to(before, "traceback")[:top]:
        lines.append(f"{stat.size_diff / 1e6:+.2f} MB ({stat.count_diff:+d} blocks), now {stat.size / 1e6:.2f} MB")
        lines += ["    " + line for line in stat.traceback.format(limit=frames, most_recent_first=True)]
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["diff"]:
        print(diff(Path(sys.argv[2]), Path(sys.argv[3])))
        return
    out = os.environ.get("MEMPROBE_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        frames = int(os.environ.get("MEMPROBE_FRAMES", "0"))
        if frames:
            tracemalloc.start(frames)
        probe = Probe(Path(out))
        signal.signal(signal.SIGUSR1, probe.on_usr1)
        signal.signal(signal.SIGUSR2, probe.on_usr2)
    from memory_server.launch import main as launch

    sys.argv[0] = "memory-server"
    launch()


if __name__ == "__main__":
    main()
