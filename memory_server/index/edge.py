"""The embedded vector index: Qdrant Edge in-process, on local disk.

The index directory (memory_server/index/edge_files.py) holds a lock file, the live shard, and index_info.json
naming what the index was built with and which shard directory is live; that file is replaced atomically,
so a crash during reset() or optimize() leaves the previous complete shard in charge. What the shard is told
(its configuration, payload indexes and search filters) is memory_server/index/edge_schema.py.

Engine facts this module is built around (qdrant-edge-py 0.9.0, measured):
- An upsert is in the WAL (an mmap) when update() returns: it survives a process crash, not power loss;
  flush() msyncs WAL and segments.
- Edge flocks `<shard>/wal`; a second opener fails at once with "Can't init WAL: Kind(WouldBlock)".
  Our own lock file fails earlier with a clearer message and also covers the moments when no shard is
  open (reset, the optimizer swap).
- optimize() holds the GIL for the whole HNSW build (minutes at 100k points), freezing every Python
  thread. So the build runs in a child process on a copy of the shard; writes made meanwhile are
  journaled and replayed into the copy before it replaces the live shard.
- A shard copied without its WAL loads fine but silently ignores later updates to existing points
  (operation numbers restart below the stored versions): copies always include the WAL.
- Edge writes its WAL and segments through memory maps of files it sizes up front: on a full disk the
  write lands on a page the filesystem cannot back, and the kernel kills the whole process with SIGBUS.
  So every write first checks that the disk has MIN_FREE_BYTES left, and refuses (IndexUnavailable:
  the memory stays in the SQLite outbox, indexed once there is space) rather than crash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from qdrant_edge import CountRequest, EdgeShard, Point, ScrollRequest, UpdateOperation

from .base import (
    FILTER_FIELDS,
    PAYLOAD_VERSION,
    RANGE_FIELDS,
    IndexFilter,
    IndexHit,
    IndexInfo,
    IndexPoint,
    IndexUnavailable,
    as_vector,
    batched,
    plain_payload,
)
from .edge_files import (
    SHARD_PREFIX,
    SharedLock,
    acquire_lock,
    disk_usage,
    layout_problem,
    load_shard,
    read_info,
    remove_stale_shards,
    write_info,
)
from .edge_schema import HELD_KEYWORD_FIELDS, RANGE_INDEX, keyword_index, search_request, shard_config

__all__ = [
    "HELD_KEYWORD_FIELDS",
    "INDEXING_THRESHOLD_KB",
    "MIN_FREE_BYTES",
    "RANGE_INDEX",
    "SCROLL_PAGE",
    "SHARD_PREFIX",
    "UPSERT_BATCH",
    "EdgeIndex",
]

SCROLL_PAGE = 1_000
# Points per engine call: each call holds the GIL, so huge batches would stall other threads.
UPSERT_BATCH = 512
# Edge's own default, set explicitly so optimize() can tell when the engine would have nothing to build.
INDEXING_THRESHOLD_KB = 10_000
# Free space an index write needs: a WAL segment Edge may map and fill (32 MiB) with room to spare.
MIN_FREE_BYTES = 64 * 1024 * 1024

# Runs in the child process; `nice` so the server's request threads keep the CPU first. The fsync
# walk makes the whole copy durable (copytree does not sync) before index_info.json may point at it.
_OPTIMIZER = """
import os, sys
os.nice(10)
from qdrant_edge import EdgeShard
shard = EdgeShard.load(sys.argv[1])
shard.optimize()
shard.flush()
shard.close()
for root, _, files in os.walk(sys.argv[1]):
    for name in files + ["."]:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
"""


class EdgeIndex:
    shared = False  # in this server's data directory

    def __init__(
        self,
        path: Path,
        *,
        indexing_threshold_kb: int = INDEXING_THRESHOLD_KB,
        optimizer: Sequence[str] = (sys.executable, "-c", _OPTIMIZER),
    ) -> None:
        """`optimizer`: the command that builds HNSW over a copy of the shard (its directory is appended)."""
        self._path = Path(path)
        self._threshold_kb = indexing_threshold_kb
        self._path.mkdir(parents=True, exist_ok=True)
        self._lock_fd = acquire_lock(self._path)
        self._rw = SharedLock()
        self._write_mutex = threading.Lock()  # keeps engine order == journal order
        self._optimize_mutex = threading.Lock()
        self._journal: list[UpdateOperation] | None = None  # writes made while a copy is optimized
        self._generation = 0  # bumped by reset(): an optimize started before it must not swap in
        self._optimizer: subprocess.Popen[bytes] | None = None
        self._optimizer_command = list(optimizer)
        self.optimizing = threading.Event()  # set while a build runs in its child process
        self._closed = False
        self._shard: EdgeShard | None = None
        self._shard_dir: Path | None = None
        try:
            self._info, shard_name, self._payload = read_info(self._path)
            remove_stale_shards(self._path, keep=shard_name)
            if self._info is not None and shard_name is not None:
                self._shard_dir = self._path / shard_name
                self._shard = load_shard(self._shard_dir)
        except BaseException:
            os.close(self._lock_fd)
            raise

    # -- VectorIndex -------------------------------------------------------------------------------

    def info(self) -> IndexInfo | None:
        return self._info

    def reset(self, info: IndexInfo) -> None:
        if info.dimension <= 0:
            raise ValueError(f"index dimension must be positive, got {info.dimension}")
        new_dir = self._path / f"{SHARD_PREFIX}{uuid.uuid4().hex}"
        self._check_space()
        with self._rw.exclusive():
            self._check_open()
            self._generation += 1
            self._journal = None
            try:
                shard = EdgeShard.create(str(new_dir), shard_config(info.dimension, self._threshold_kb))
                for name in FILTER_FIELDS:
                    shard.update(UpdateOperation.create_field_index(name, keyword_index(name)))
                for name in RANGE_FIELDS:
                    shard.update(UpdateOperation.create_field_index(name, RANGE_INDEX))
                shard.flush()
                write_info(self._path, info, new_dir.name, PAYLOAD_VERSION)  # the switch-over point
            except BaseException:
                shutil.rmtree(new_dir, ignore_errors=True)
                raise
            old, old_dir = self._shard, self._shard_dir
            self._shard, self._shard_dir, self._info, self._payload = shard, new_dir, info, PAYLOAD_VERSION
            if old is not None:
                old.close()
        if old_dir is not None:
            shutil.rmtree(old_dir, ignore_errors=True)

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        dimension = self._dimension()
        for chunk in batched(points, UPSERT_BATCH):
            edge_points = [Point(p.id, as_vector(p.vector, dimension), plain_payload(p.payload)) for p in chunk]
            self._apply(UpdateOperation.upsert_points(edge_points))

    def delete(self, ids: Sequence[int]) -> None:
        for chunk in batched(ids, UPSERT_BATCH):
            self._apply(UpdateOperation.delete_points([int(i) for i in chunk]))

    def search(self, vector: np.ndarray, *, where: IndexFilter, limit: int) -> list[IndexHit]:
        request = search_request(as_vector(vector, self._dimension()), where, limit)
        if request is None:
            return []
        with self._rw.shared():
            hits = self._live().query(request)
        return [IndexHit(id=int(h.id), score=float(h.score)) for h in hits]

    def ids(self) -> Iterator[int]:
        offset: int | str | uuid.UUID | None = None
        while True:
            # The lock is taken per page, never across a yield: a caller that stops iterating
            # must not keep reset/close waiting.
            with self._rw.shared():
                records, offset = self._live().scroll(
                    ScrollRequest(offset=offset, limit=SCROLL_PAGE, with_payload=False, with_vector=False)
                )
            for record in records:
                yield int(record.id)
            if offset is None:
                return

    def count(self) -> int:
        with self._rw.shared():
            return self._live().count(CountRequest(exact=True))

    def problems(self) -> list[str]:
        """Read the directory layout on disk: the directory, the info file naming the live shard, and that
        shard's directory (Edge serves counts from memory, so a count alone would not notice the directory
        being removed or made unreadable). An optimize() swap between reading the info file and the shard
        can remove the shard just read about, so a failure is retried once."""
        problem = layout_problem(self._path)
        if problem is not None:
            problem = layout_problem(self._path)
        return [] if problem is None else [f"index: {problem}"]

    def stats(self) -> dict[str, int]:
        """Points, points under the HNSW graph, and segments of the live shard (for benchmarks and checks:
        search is exact and grows with the corpus until optimize() has built the graph)."""
        with self._rw.shared():
            info = self._live().info()
        return {
            "points": info.points_count,
            "indexed_vectors": info.indexed_vectors_count,
            "segments": info.segments_count,
        }

    def optimize(self) -> None:
        with self._optimize_mutex:
            with self._rw.shared():
                stats = self._live().info()
                dimension = self._dimension()
            # Below the engine's indexing threshold optimize() builds nothing; skip the copy.
            if stats.points_count - stats.indexed_vectors_count < self._threshold_kb * 1024 // (4 * dimension):
                return
            # The copy, the graph built over it, and room for writes meanwhile.
            self._check_space(2 * disk_usage(self._live_dir()) + MIN_FREE_BYTES)
            build_dir = self._path / f"{SHARD_PREFIX}{uuid.uuid4().hex}"
            # Writers wait while the shard is copied (a consistent copy, and the journal starts
            # exactly where it ends); searches go on.
            with self._write_mutex, self._rw.shared():
                self._live().flush()
                shutil.copytree(self._live_dir(), build_dir)  # with the WAL: see the module docstring
                self._journal = []
                generation = self._generation
            try:
                self._run_optimizer(build_dir)
                built = load_shard(build_dir)
                # Catch up while the copy is still private: the swap then holds writers back only
                # for the last few writes, not minutes' worth.
                replayed = self._replay_into(built, 0)
            except BaseException:
                with self._write_mutex:
                    if self._generation == generation:
                        self._journal = None
                shutil.rmtree(build_dir, ignore_errors=True)
                raise
            self._swap_in(built, build_dir, generation, replayed)

    def payload_version(self) -> int:
        return self._payload or PAYLOAD_VERSION

    def upgrade_payload(self) -> None:
        with self._rw.shared():
            shard_dir, info = self._live_dir(), self._info
            existing = self._live().info().payload_schema
        for name in RANGE_FIELDS:
            if name not in existing:
                self._apply(UpdateOperation.create_field_index(name, RANGE_INDEX))
        self.flush()
        if info is not None:
            with self._write_mutex:
                if self._shard_dir == shard_dir:  # else a reset or an optimize swap recorded it meanwhile
                    write_info(self._path, info, shard_dir.name, PAYLOAD_VERSION)
                self._payload = PAYLOAD_VERSION

    def flush(self) -> None:
        with self._rw.shared():
            self._live().flush()

    def close(self) -> None:
        proc = self._optimizer
        if proc is not None:
            proc.kill()  # its copy is discarded by optimize(): nothing to save
        with self._rw.exclusive():
            if self._closed:
                return
            self._closed = True
            if self._shard is not None:
                self._shard.flush()
                self._shard.close()
                self._shard = None
            os.close(self._lock_fd)

    # -- internals ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IndexUnavailable(f"the embedded index at {self._path} is closed")

    def _live(self) -> EdgeShard:
        self._check_open()
        if self._shard is None:
            raise IndexUnavailable(f"the embedded index at {self._path} is not initialised: run `reindex` to build it")
        return self._shard

    def _dimension(self) -> int:
        self._live()
        if self._info is None:  # never with a live shard; keeps the type checker informed
            raise IndexUnavailable(f"the embedded index at {self._path} has no recorded info")
        return self._info.dimension

    def _live_dir(self) -> Path:
        self._live()
        if self._shard_dir is None:
            raise IndexUnavailable(f"the embedded index at {self._path} has no shard directory")
        return self._shard_dir

    def _check_space(self, needed: int = MIN_FREE_BYTES) -> None:
        stats = os.statvfs(self._path)
        if stats.f_bavail * stats.f_frsize < needed:
            raise IndexUnavailable(
                f"the disk holding the embedded index at {self._path} has less than {needed // 2**20} MiB free; "
                "index writes wait until there is space (the memories are safe in SQLite meanwhile)"
            )

    def _apply(self, operation: UpdateOperation) -> None:
        self._check_space()
        # Lock order everywhere: _write_mutex before _rw, or a swap waiting for readers to drain
        # could wait on a writer that waits on the swap.
        with self._write_mutex, self._rw.shared():
            self._live().update(operation)
            if self._journal is not None:
                self._journal.append(operation)

    def _run_optimizer(self, build_dir: Path) -> None:
        proc = subprocess.Popen(
            [*self._optimizer_command, str(build_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._optimizer = proc
        self.optimizing.set()
        try:
            _, stderr = proc.communicate()  # waits without the GIL: searches go on meanwhile
        finally:
            self._optimizer = None
            self.optimizing.clear()
        if self._closed:
            raise IndexUnavailable(f"the embedded index at {self._path} was closed during optimize()")
        if proc.returncode != 0:
            tail = stderr.decode(errors="replace").strip()[-2000:]
            raise IndexUnavailable(f"building the HNSW index failed (exit {proc.returncode}): {tail}")

    def _replay_into(self, built: EdgeShard, start: int) -> int:
        """Apply journaled writes from `start` on to the copy; returns how many are applied."""
        journal = self._journal or []  # a reset() meanwhile drops it: the copy is discarded anyway
        pending = journal[start:]  # a slice is taken atomically while writers append
        for operation in pending:
            built.update(operation)
        return start + len(pending)

    def _swap_in(self, built: EdgeShard, build_dir: Path, generation: int, replayed: int) -> None:
        old: EdgeShard | None = None
        old_dir: Path | None = build_dir  # deleted at the end unless the build becomes the live shard
        with self._write_mutex:  # held to the end: no write may land on the old shard after the tail
            with self._rw.shared():  # searches still run on the old shard meanwhile
                self._replay_into(built, replayed)
                built.flush()
            with self._rw.exclusive():  # only the switch itself stops searches
                if not self._closed and self._generation == generation and self._info is not None:
                    write_info(self._path, self._info, build_dir.name, self._payload)  # the switch-over point
                    old, old_dir = self._shard, self._shard_dir
                    self._shard, self._shard_dir, self._journal = built, build_dir, None
        if old_dir == build_dir:
            built.close()  # reset() or close() ran during the build: the copy is stale
        elif old is not None:
            old.close()  # no search can hold it: the exclusive section drained them all
        if old_dir is not None:
            shutil.rmtree(old_dir, ignore_errors=True)
