"""The embedded index's directory: its lock file, its info file, its shard directories.

index.lock        flock held by the one process that has the index open
index_info.json   {"model", "dimension", "shard", "payload"}: replaced atomically
shard-<hex>/      an Edge shard (segments + WAL)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from qdrant_edge import EdgeShard

from . import mapped_pages
from .base import IndexInfo, IndexLocked, IndexUnavailable

INFO_FILE = "index_info.json"
LOCK_FILE = "index.lock"
SHARD_PREFIX = "shard-"


class SharedLock:
    """Readers-writer lock: searches and writes share; reset, swap and close exclude them all."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._writer = True  # set before draining readers so a stream of searches cannot starve us
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


def disk_usage(directory: Path) -> int:
    return sum(entry.stat().st_blocks * 512 for entry in directory.rglob("*") if entry.is_file())


def layout_problem(path: Path) -> str | None:
    try:
        with os.scandir(path) as entries:
            names = {entry.name for entry in entries}
        if INFO_FILE not in names:
            return f"{path / INFO_FILE} is missing: run `memory-server reindex` to rebuild the index"
        shard = json.loads((path / INFO_FILE).read_text())["shard"]
        with os.scandir(path / str(shard)) as entries:
            if not any(True for _ in entries):
                return f"the live shard {path / str(shard)} is empty"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"cannot read the embedded index at {path}: {exc}"
    if not os.access(path, os.W_OK):
        return f"the embedded index directory {path} is not writable"
    return None


def acquire_lock(path: Path) -> int:
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise IndexLocked(locked_message(path, holder), holder=holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)  # only for the message a second process gets
    return fd


def locked_message(path: Path, holder: str) -> str:
    return (
        f"the embedded index at {path} is in use by another process (pid {holder}). "
        "Run one server process per data directory; for several processes use the server "
        "backend (a Qdrant server) instead of the embedded one. If it is the process serving local "
        "clients, `memory-server owner stop` frees the store (the next client starts it again)."
    )


def load_shard(shard_dir: Path) -> EdgeShard:
    try:
        shard = EdgeShard.load(str(shard_dir))
    except Exception as exc:
        if "WouldBlock" in str(exc):  # Edge's own WAL lock: someone bypassed index.lock
            raise IndexLocked(locked_message(shard_dir, "unknown")) from exc
        raise IndexUnavailable(
            f"cannot load the embedded index at {shard_dir}: {exc}. Run `reindex` to rebuild it from SQLite."
        ) from exc
    # The write-ahead log was replayed: the closed segment Edge keeps is not read again (mapped_pages.py).
    mapped_pages.release([path.resolve() for path in (shard_dir / "wal").glob("closed-*")])
    return shard


def read_info(path: Path) -> tuple[IndexInfo | None, str | None, int]:
    """(what the index was built with, its live shard directory, its payload version); (None, None, 0) for
    no index. A file without a payload version predates it: version 1."""
    try:
        raw = json.loads((path / INFO_FILE).read_text())
        info = IndexInfo(model=str(raw["model"]), dimension=int(raw["dimension"]))
        shard = str(raw["shard"])
        payload = int(raw.get("payload", 1))
    except FileNotFoundError:
        return None, None, 0
    except (ValueError, KeyError, TypeError) as exc:
        # Written atomically, so this is damage from outside: refuse rather than delete shards.
        raise IndexUnavailable(f"{path / INFO_FILE} is unreadable ({exc!r}): delete {path} and run `reindex`") from exc
    if not (path / shard).is_dir():
        return None, None, 0  # the shard was removed by hand: no index, the caller reindexes
    return info, shard, payload


def write_info(path: Path, info: IndexInfo, shard: str, payload: int) -> None:
    body = json.dumps({"model": info.model, "dimension": info.dimension, "shard": shard, "payload": payload})
    tmp = path / f"{INFO_FILE}.tmp"
    with open(tmp, "w") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path / INFO_FILE)
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def remove_stale_shards(path: Path, *, keep: str | None) -> None:
    """Drop shard copies a crash left behind (an interrupted reset or optimize)."""
    for child in path.iterdir():
        if child.name.startswith(SHARD_PREFIX) and child.name != keep and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
