"""Both vector index backends against one suite: Qdrant Edge on tmp_path, qdrant-client on ":memory:".

Vectors are small and hand-made so the expected order is obvious; no model is loaded here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from memory_server.index.base import (
    PAYLOAD_VERSION,
    Condition,
    IndexDimensionError,
    IndexFilter,
    IndexInfo,
    IndexLocked,
    IndexPoint,
    IndexUnavailable,
    Range,
    VectorIndex,
)
from memory_server.index.edge import SHARD_PREFIX, EdgeIndex
from memory_server.index.factory import open_index
from memory_server.index.qdrant import QdrantServerIndex

REPO_ROOT = Path(__file__).resolve().parent.parent
INFO = IndexInfo(model="test-model", dimension=4)
SUBPROCESS_TIMEOUT_S = 60  # generous: it only turns a hang into a failure, nothing is timed
# The embedded index stores vectors at half precision: a cosine comes back within ~1e-4 of the exact one.
SCORE_TOLERANCE = 1e-3


def vec(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float32)


def where(**fields: tuple[str, ...] | str) -> IndexFilter:
    return IndexFilter(tuple(Condition(k, (v,) if isinstance(v, str) else tuple(v)) for k, v in fields.items()))


def payload(site: str, team: str, project: str, bucket: str, type_: str, tags: list[str]) -> dict[str, object]:
    return {"site": site, "team": team, "project": project, "bucket": bucket, "type": type_, "tags": tags}


# id -> (vector, payload). Point 4 repeats point 1's vector on another site: isolation must hide it.
CORPUS: dict[int, tuple[np.ndarray, dict[str, object]]] = {
    1: (vec(1, 0, 0, 0), payload("a", "t1", "p1", "b1", "note", ["x", "y"])),
    2: (vec(0.9, 0.1, 0, 0), payload("a", "t2", "p1", "b2", "fact", ["y"])),
    3: (vec(0, 1, 0, 0), payload("a", "t1", "p2", "b1", "fact", [])),
    4: (vec(1, 0, 0, 0), payload("b", "t1", "p1", "b1", "note", ["x"])),
    5: (vec(0.5, 0, 0.5, 0), payload("a", "t2", "p2", "b2", "note", ["z"])),
}


def corpus_points() -> list[IndexPoint]:
    return [IndexPoint(id=i, vector=v, payload=p) for i, (v, p) in CORPUS.items()]


def open_edge(path: Path) -> EdgeIndex:
    # A 1 KB indexing threshold makes optimize() really build HNSW on a handful of 4-dim points.
    return EdgeIndex(path, indexing_threshold_kb=1)


@pytest.fixture(params=["embedded", "server"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def index(backend: str, tmp_path: Path) -> Iterator[VectorIndex]:
    ix: VectorIndex
    if backend == "embedded":
        ix = open_edge(tmp_path / "index")
    else:
        ix = QdrantServerIndex(QdrantClient(":memory:"), "memories")
    yield ix
    ix.close()


@pytest.fixture
def ready(index: VectorIndex) -> VectorIndex:
    index.reset(INFO)
    index.upsert(corpus_points())
    return index


def ids_of(index: VectorIndex, query: np.ndarray, flt: IndexFilter, limit: int = 10) -> list[int]:
    return [hit.id for hit in index.search(query, where=flt, limit=limit)]


# -- both backends -------------------------------------------------------------------------------


def test_info_is_none_until_reset_then_roundtrips(index: VectorIndex) -> None:
    assert index.info() is None
    index.reset(INFO)
    assert index.info() == INFO
    assert index.count() == 0
    assert list(index.ids()) == []
    assert index.search(vec(1, 0, 0, 0), where=where(site="a"), limit=5) == []


def test_use_before_reset_is_unavailable(index: VectorIndex) -> None:
    with pytest.raises(IndexUnavailable, match="reindex"):
        index.upsert(corpus_points())
    with pytest.raises(IndexUnavailable):
        index.search(vec(1, 0, 0, 0), where=where(site="a"), limit=5)


def test_search_orders_by_cosine(ready: VectorIndex) -> None:
    hits = ready.search(vec(2, 0, 0, 0), where=where(site="a"), limit=10)  # length must not matter
    assert [h.id for h in hits] == [1, 2, 5, 3]
    assert hits[0].score == pytest.approx(1.0, abs=SCORE_TOLERANCE)
    assert hits[1].score == pytest.approx(0.9 / np.hypot(0.9, 0.1), abs=SCORE_TOLERANCE)
    assert hits[-1].score == pytest.approx(0.0, abs=SCORE_TOLERANCE)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_limit(ready: VectorIndex) -> None:
    assert ids_of(ready, vec(1, 0, 0, 0), where(site="a"), limit=2) == [1, 2]
    assert ready.search(vec(1, 0, 0, 0), where=where(site="a"), limit=0) == []


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (where(site="a", team="t1"), [1, 3]),
        (where(site="a", project="p2"), [5, 3]),
        (where(site="a", bucket="b2"), [2, 5]),
        (where(site="a", type="fact"), [2, 3]),
        (where(site="a", type=("fact", "note")), [1, 2, 5, 3]),
        (where(site="a", tags="y"), [1, 2]),
        (where(site="a", tags=("x", "z")), [1, 5]),  # any element of the list field matches
        (where(site="a", tags="nope"), []),
        (where(site="a", team="t1", type="fact"), [3]),  # conditions are a conjunction
        (where(site="a", team="t2", bucket="b2", tags="z"), [5]),
        (where(site="a", team="t1", bucket="b2"), []),
    ],
)
def test_filters(ready: VectorIndex, flt: IndexFilter, expected: list[int]) -> None:
    assert ids_of(ready, vec(1, 0, 0, 0), flt) == expected


def test_site_isolation(ready: VectorIndex) -> None:
    assert 4 not in ids_of(ready, vec(1, 0, 0, 0), where(site="a"))
    assert ids_of(ready, vec(1, 0, 0, 0), where(site="b")) == [4]
    assert ids_of(ready, vec(1, 0, 0, 0), where(site="c")) == []
    assert ids_of(ready, vec(1, 0, 0, 0), where(site=("a", "b")))[:2] in ([1, 4], [4, 1])


def test_empty_values_match_nothing_and_unknown_fields_are_refused(ready: VectorIndex) -> None:
    assert ids_of(ready, vec(1, 0, 0, 0), IndexFilter((Condition("site", ("a",)), Condition("tags", ())))) == []
    with pytest.raises(ValueError, match="cannot filter"):
        ready.search(vec(1, 0, 0, 0), where=where(site="a", text="x"), limit=5)


def test_no_conditions_searches_everything(ready: VectorIndex) -> None:
    assert sorted(ids_of(ready, vec(1, 0, 0, 0), IndexFilter())) == [1, 2, 3, 4, 5]


def test_ranges_on_integer_payloads_and_exclusions(index: VectorIndex) -> None:
    index.reset(INFO)
    assert index.payload_version() == PAYLOAD_VERSION
    times = {1: 100, 2: 200, 3: 300, 4: None}  # 4: a point written before the payload had the field
    index.upsert(
        [
            IndexPoint(
                id=i, vector=vec(1, 0.1 * i, 0, 0), payload={"site": "a"} | ({"occurred": t} if t is not None else {})
            )
            for i, t in times.items()
        ]
    )
    site = (Condition("site", ("a",)),)

    def found(ranges: tuple[Range, ...] = (), excluded: tuple[Range, ...] = ()) -> list[int]:
        return sorted(ids_of(index, vec(1, 0, 0, 0), IndexFilter(site, ranges=ranges, excluded=excluded)))

    assert found((Range("occurred", gte=200),)) == [2, 3]  # a point without the field is in no range
    assert found((Range("occurred", lte=200),)) == [1, 2]  # both ends inclusive
    assert found((Range("occurred", gte=150, lte=250),)) == [2]
    assert found((Range("occurred"),)) == [1, 2, 3]
    assert found(excluded=(Range("occurred", lte=100),)) == [2, 3, 4]  # kept: not excluded, or no field
    assert found((Range("occurred", gte=100),), (Range("occurred", gte=300),)) == [1, 2]
    with pytest.raises(ValueError, match="by range"):
        found((Range("bucket", gte=1),))


def test_a_range_holds_a_point_when_it_holds_any_value_of_its_list(index: VectorIndex) -> None:
    """`days` is a list (the days a memory is about): a range holds the point when it holds any of them."""
    index.reset(INFO)
    days = {1: [19790, 19795], 2: [19800], 3: None}  # 3: a point written before the payload had the field
    index.upsert(
        [
            IndexPoint(
                id=i, vector=vec(1, 0.1 * i, 0, 0), payload={"site": "a"} | ({"days": d} if d is not None else {})
            )
            for i, d in days.items()
        ]
    )

    def found(gte: int | None, lte: int | None) -> list[int]:
        return sorted(
            ids_of(
                index,
                vec(1, 0, 0, 0),
                IndexFilter((Condition("site", ("a",)),), ranges=(Range("days", gte=gte, lte=lte),)),
            )
        )

    assert found(19795, 19795) == [1]  # its second value alone
    assert found(19790, 19790) == [1]
    assert found(19791, 19794) == []  # between its values: none of them inside
    assert found(19795, 19800) == [1, 2]
    assert found(19801, None) == []
    assert found(None, None) == [1, 2]


def test_delete(ready: VectorIndex) -> None:
    ready.delete([1, 999])  # an unknown id is not an error: deletes are retried by the outbox
    assert ids_of(ready, vec(1, 0, 0, 0), where(site="a")) == [2, 5, 3]
    assert ready.count() == 4
    assert sorted(ready.ids()) == [2, 3, 4, 5]
    ready.delete([])


def test_ids_and_count_page_through_everything(ready: VectorIndex) -> None:
    rng = np.random.default_rng(7)
    many = [IndexPoint(id=100 + i, vector=rng.standard_normal(4), payload={"site": "bulk"}) for i in range(2_500)]
    ready.upsert(many)
    ready.flush()
    assert ready.count() == 2_505
    ids = list(ready.ids())
    assert len(ids) == 2_505
    assert set(ids) == set(CORPUS) | {p.id for p in many}


def test_upsert_overwrites_the_same_id(ready: VectorIndex) -> None:
    ready.upsert([IndexPoint(id=3, vector=vec(1, 0, 0, 0), payload=payload("a", "t9", "p1", "b1", "note", ["w"]))])
    assert ready.count() == len(CORPUS)
    assert ids_of(ready, vec(1, 0, 0, 0), where(site="a", team="t9")) == [3]
    assert ids_of(ready, vec(1, 0, 0, 0), where(site="a", team="t1")) == [1]  # the old payload is gone
    [best] = ready.search(vec(1, 0, 0, 0), where=where(site="a", team="t9"), limit=1)
    assert best.score == pytest.approx(1.0, abs=SCORE_TOLERANCE)


def test_tuple_tags_are_accepted(ready: VectorIndex) -> None:
    ready.upsert([IndexPoint(id=6, vector=vec(0, 0, 0, 1), payload={"site": "a", "tags": ("q", "r")})])
    assert ids_of(ready, vec(0, 0, 0, 1), where(site="a", tags="r")) == [6]


def test_dimension_mismatch_is_a_clear_error(ready: VectorIndex) -> None:
    with pytest.raises(IndexDimensionError, match="4 dimensions"):
        ready.upsert([IndexPoint(id=7, vector=vec(1, 0, 0), payload={"site": "a"})])
    with pytest.raises(IndexDimensionError, match="reindex"):
        ready.search(vec(1, 0, 0, 0, 0), where=where(site="a"), limit=3)
    assert ready.count() == len(CORPUS)


def test_reset_drops_points_and_can_change_dimension(ready: VectorIndex) -> None:
    other = IndexInfo(model="bigger", dimension=8)
    ready.reset(other)
    assert ready.info() == other
    assert ready.count() == 0
    ready.upsert([IndexPoint(id=1, vector=np.eye(8, dtype=np.float32)[2], payload={"site": "a"})])
    assert ids_of(ready, np.eye(8, dtype=np.float32)[2], where(site="a")) == [1]


def test_optimize_keeps_points_and_writes_made_meanwhile(ready: VectorIndex) -> None:
    rng = np.random.default_rng(3)
    ready.upsert(
        [IndexPoint(id=100 + i, vector=rng.standard_normal(4), payload={"site": "bulk"}) for i in range(3_000)]
    )
    errors: list[BaseException] = []

    def build() -> None:
        try:
            ready.optimize()
        except BaseException as exc:  # surfaced below: a thread's exception is otherwise lost
            errors.append(exc)

    builder = threading.Thread(target=build)
    builder.start()
    written: list[int] = []
    deleted: list[int] = []
    while builder.is_alive() or len(written) < 5:
        point_id = 10_000 + len(written)
        ready.upsert([IndexPoint(id=point_id, vector=rng.standard_normal(4), payload={"site": "late"})])
        written.append(point_id)
        if len(written) % 3 == 0:
            ready.delete([100 + len(deleted)])
            deleted.append(100 + len(deleted))
        ready.search(vec(1, 0, 0, 0), where=where(site="a"), limit=3)  # searches go on during the build
        time.sleep(0.002)
    builder.join()
    assert errors == []
    expected = (set(CORPUS) | set(range(100, 3_100)) | set(written)) - set(deleted)
    assert set(ready.ids()) == expected
    assert ready.count() == len(expected)
    assert ids_of(ready, vec(1, 0, 0, 0), where(site="a")) == [1, 2, 5, 3]
    ready.upsert([IndexPoint(id=2, vector=vec(0, 0, 0, 1), payload={"site": "a"})])  # updates still land
    assert ids_of(ready, vec(0, 0, 0, 1), where(site="a"), limit=1) == [2]


# -- embedded only -------------------------------------------------------------------------------


def run_child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )


def test_edge_info_and_points_persist_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "index"
    ix = open_edge(path)
    ix.reset(INFO)
    ix.upsert(corpus_points())
    ix.optimize()
    ix.close()
    ix = open_edge(path)
    try:
        assert ix.info() == INFO
        assert ix.count() == len(CORPUS)
        assert ids_of(ix, vec(1, 0, 0, 0), where(site="a")) == [1, 2, 5, 3]
    finally:
        ix.close()


def test_edge_optimize_builds_hnsw(tmp_path: Path) -> None:
    ix = open_edge(tmp_path / "index")
    try:
        ix.reset(INFO)
        rng = np.random.default_rng(5)
        ix.upsert([IndexPoint(id=i, vector=rng.standard_normal(4), payload={"site": "a"}) for i in range(1, 2_001)])
        ix.optimize()
        shard = ix._live()  # engine statistics are not part of the interface
        assert shard.info().indexed_vectors_count > 0
        shards = [p.name for p in (tmp_path / "index").iterdir() if p.name.startswith(SHARD_PREFIX)]
        assert len(shards) == 1  # the pre-optimize shard was removed after the swap
    finally:
        ix.close()


KILL_CHILD = """
import os, signal, sys
from pathlib import Path
import numpy as np
from memory_server.index.base import IndexInfo, IndexPoint
from memory_server.index.edge import EdgeIndex
ix = EdgeIndex(Path(sys.argv[1]))
ix.reset(IndexInfo(model="test-model", dimension=4))
rng = np.random.default_rng(1)
ix.upsert([IndexPoint(id=i, vector=rng.standard_normal(4), payload={"site": "a"}) for i in range(1, 301)])
ix.upsert([IndexPoint(id=1000, vector=np.array([0, 0, 1, 0], dtype=np.float32),
                      payload={"site": "a", "tags": ["last"]})])
if sys.argv[2] == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
os._exit(0)  # no close(), no flush(), no atexit
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_edge_writes_survive_a_killed_process(tmp_path: Path, how: str) -> None:
    path = tmp_path / "index"
    child = run_child(KILL_CHILD, str(path), how)
    assert child.returncode in (0, -9), child.stderr
    ix = EdgeIndex(path)  # the dead process's locks went with it
    try:
        assert ix.info() == INFO
        assert ix.count() == 301
        assert ids_of(ix, vec(0, 0, 1, 0), where(site="a", tags="last"), limit=1) == [1000]
    finally:
        ix.close()


LOCKED_CHILD = """
import sys, time
from pathlib import Path
from memory_server.index.base import IndexLocked
from memory_server.index.edge import EdgeIndex
started = time.perf_counter()
try:
    EdgeIndex(Path(sys.argv[1]))
except IndexLocked as exc:
    print(f"locked after {time.perf_counter() - started:.3f}s: {exc}")
    sys.exit(3)
sys.exit(0)
"""


def test_edge_second_process_gets_index_locked(tmp_path: Path) -> None:
    path = tmp_path / "index"
    ix = open_edge(path)
    try:
        ix.reset(INFO)
        ix.upsert(corpus_points())
        child = run_child(LOCKED_CHILD, str(path))
        assert child.returncode == 3, child.stdout + child.stderr
        assert "one server process per data directory" in child.stdout
        assert "server backend" in child.stdout
        assert f"pid {os.getpid()}" in child.stdout
        assert ix.count() == len(CORPUS)  # the failed opener disturbed nothing
    finally:
        ix.close()
    with pytest.raises(IndexLocked):  # in-process too: one open per directory
        with_lock = open_edge(path)
        try:
            open_edge(path)
        finally:
            with_lock.close()


def test_edge_open_removes_shards_left_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "index"
    ix = open_edge(path)
    ix.reset(INFO)
    ix.upsert(corpus_points())
    ix.close()
    stray = path / f"{SHARD_PREFIX}deadbeef"
    stray.mkdir()
    (stray / "junk").write_text("an interrupted optimize leaves a copy like this")
    ix = open_edge(path)
    try:
        assert not stray.exists()
        assert ix.count() == len(CORPUS)
    finally:
        ix.close()


# A build that runs until it is killed: close() always lands while the optimizer child is at work.
ENDLESS_BUILD = (sys.executable, "-c", "import time; time.sleep(600)")


def test_edge_close_during_optimize_discards_the_build(tmp_path: Path) -> None:
    path = tmp_path / "index"
    ix = EdgeIndex(path, indexing_threshold_kb=1, optimizer=ENDLESS_BUILD)
    ix.reset(INFO)
    rng = np.random.default_rng(9)
    ix.upsert([IndexPoint(id=i, vector=rng.standard_normal(4), payload={"site": "a"}) for i in range(1, 20_001)])
    errors: list[BaseException] = []

    def build() -> None:
        try:
            ix.optimize()
        except BaseException as exc:
            errors.append(exc)

    builder = threading.Thread(target=build)
    builder.start()
    assert ix.optimizing.wait(timeout=60)  # the child build is running
    ix.close()
    builder.join(timeout=60)
    assert len(errors) == 1 and isinstance(errors[0], IndexUnavailable)
    assert "closed during optimize" in str(errors[0])
    ix = open_edge(path)
    try:
        assert ix.count() == 20_000
        assert len([p for p in path.iterdir() if p.name.startswith(SHARD_PREFIX)]) == 1
    finally:
        ix.close()


def test_edge_refuses_a_damaged_info_file(tmp_path: Path) -> None:
    path = tmp_path / "index"
    ix = open_edge(path)
    ix.reset(INFO)
    ix.close()
    (path / "index_info.json").write_text("{not json")
    for _ in range(2):  # twice: the failed open must release its lock (else IndexLocked)
        with pytest.raises(IndexUnavailable, match="reindex") as failure:
            open_edge(path)
        assert not isinstance(failure.value, IndexLocked)
    assert any(p.name.startswith(SHARD_PREFIX) for p in path.iterdir())  # nothing was deleted


def test_edge_closed_index_is_unavailable(tmp_path: Path) -> None:
    ix = open_edge(tmp_path / "index")
    ix.reset(INFO)
    ix.close()
    ix.close()  # idempotent
    with pytest.raises(IndexUnavailable, match="closed"):
        ix.count()


# -- server only / factory -----------------------------------------------------------------------


def test_server_refuses_a_collection_it_did_not_create() -> None:
    client = QdrantClient(":memory:")
    client.create_collection("memories", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    ix = QdrantServerIndex(client, "memories")
    with pytest.raises(IndexUnavailable, match="not created by memory-server"):
        ix.info()
    with pytest.raises(IndexUnavailable):
        ix.reset(INFO)
    assert client.collection_exists("memories")
    ix.close()


def test_server_info_lives_in_the_collection() -> None:
    client = QdrantClient(":memory:")
    first = QdrantServerIndex(client, "memories")
    first.reset(INFO)
    first.upsert(corpus_points())
    second = QdrantServerIndex(client, "memories")  # another process, as far as the data goes
    assert second.info() == INFO
    assert second.count() == len(CORPUS)
    assert ids_of(second, vec(1, 0, 0, 0), where(site="b")) == [4]
    client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_factory_opens_each_backend(tmp_path: Path) -> None:
    embedded = open_index(backend="embedded", path=tmp_path / "index", url=None, api_key=None, collection="m")
    assert isinstance(embedded, EdgeIndex)
    embedded.close()
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    server = open_index(backend="server", path=None, url=url, api_key=None, collection="m")
    assert isinstance(server, QdrantServerIndex)
    with pytest.raises(IndexUnavailable, match=f"cannot reach the Qdrant server at {url}"):
        server.info()
    server.close()
    with pytest.raises(ValueError, match="unknown index backend"):
        open_index(backend="faiss", path=None, url=None, api_key=None, collection="m")
    with pytest.raises(ValueError):
        open_index(backend="server", path=None, url=None, api_key=None, collection="m")
