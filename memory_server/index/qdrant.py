"""The server vector index: qdrant-client against a Qdrant server (docker compose, or a cluster).

The model name and dimension live in the collection's own metadata (qdrant-client >= 1.16), so the
record travels with the collection and there is no reserved point to filter out of every query.
Tests run this class on `QdrantClient(":memory:")`, the same client code; local mode ignores payload
indexes, which only changes speed.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

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
    checked_conditions,
    plain_payload,
)
from .base import Range as Bounds

# Marks a collection as ours: a same-named collection without it is never dropped by reset().
METADATA_KEY = "memory_server_index"
SCROLL_PAGE = 1_000
UPSERT_BATCH = 512


class QdrantServerIndex:
    shared = True

    def __init__(self, client: QdrantClient, collection: str, *, url: str | None = None) -> None:
        self._client = client
        self._collection = collection
        self._where = f"the Qdrant server at {url}" if url else "the Qdrant server"  # for messages
        self._info: IndexInfo | None = None  # cached: read once, then kept up to date by reset()
        self._payload = PAYLOAD_VERSION

    def info(self) -> IndexInfo | None:
        with self._reachable():
            if not self._client.collection_exists(self._collection):
                return None
            metadata = self._client.get_collection(self._collection).config.metadata or {}
        record = metadata.get(METADATA_KEY)
        if not isinstance(record, dict):
            raise IndexUnavailable(
                f"Qdrant collection {self._collection!r} exists but was not created by memory-server: "
                "choose another collection name or delete that collection"
            )
        self._info = IndexInfo(model=str(record["model"]), dimension=int(record["dimension"]))
        self._payload = int(record.get("payload", 1))
        return self._info

    def reset(self, info: IndexInfo) -> None:
        if info.dimension <= 0:
            raise ValueError(f"index dimension must be positive, got {info.dimension}")
        with self._reachable():
            if self._client.collection_exists(self._collection):
                self.info()  # refuses to drop a collection that is not ours
                self._client.delete_collection(self._collection)
            self._client.create_collection(
                self._collection,
                vectors_config=models.VectorParams(size=info.dimension, distance=models.Distance.COSINE),
                metadata={METADATA_KEY: self._record(info)},
            )
            self._create_payload_indexes(FILTER_FIELDS, models.PayloadSchemaType.KEYWORD)
            self._create_payload_indexes(RANGE_FIELDS, models.PayloadSchemaType.INTEGER)
        self._info, self._payload = info, PAYLOAD_VERSION

    def payload_version(self) -> int:
        if self._info is None:
            self.info()
        return self._payload

    def upgrade_payload(self) -> None:
        info = self._info or self.info()
        if info is None:
            return
        with self._reachable():
            self._create_payload_indexes(RANGE_FIELDS, models.PayloadSchemaType.INTEGER)
            self._client.update_collection(self._collection, metadata={METADATA_KEY: self._record(info)})
        self._payload = PAYLOAD_VERSION

    @staticmethod
    def _record(info: IndexInfo) -> dict[str, object]:
        return {"model": info.model, "dimension": info.dimension, "payload": PAYLOAD_VERSION}

    def _create_payload_indexes(self, names: Sequence[str], schema: models.PayloadSchemaType) -> None:
        with warnings.catch_warnings():
            # Local mode warns that payload indexes do nothing there; on a server they matter.
            warnings.simplefilter("ignore", UserWarning)
            for name in names:  # creating an index that exists already changes nothing
                self._client.create_payload_index(self._collection, name, schema, wait=True)

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        dimension = self._dimension()
        for chunk in batched(points, UPSERT_BATCH):
            structs = [
                models.PointStruct(id=p.id, vector=as_vector(p.vector, dimension), payload=plain_payload(p.payload))
                for p in chunk
            ]
            with self._reachable():
                # wait=True: acknowledged only once the server applied it, so "indexed" in SQLite is true
                self._client.upsert(self._collection, points=structs, wait=True)

    def delete(self, ids: Sequence[int]) -> None:
        for chunk in batched(ids, UPSERT_BATCH):
            with self._reachable():
                self._client.delete(
                    self._collection,
                    points_selector=models.PointIdsList(points=[int(i) for i in chunk]),
                    wait=True,
                )

    def search(self, vector: np.ndarray, *, where: IndexFilter, limit: int) -> list[IndexHit]:
        query = as_vector(vector, self._dimension())
        conditions = checked_conditions(where)
        if conditions is None or limit <= 0:
            return []
        must: list[models.Condition] = [
            models.FieldCondition(key=c.field, match=models.MatchAny(any=list(c.values))) for c in conditions
        ]
        must += [_range(r) for r in where.ranges]
        must_not: list[models.Condition] = [_range(r) for r in where.excluded]
        with self._reachable():
            response = self._client.query_points(
                self._collection,
                query=query,
                query_filter=models.Filter(must=must, must_not=must_not or None) if must or must_not else None,
                limit=limit,
                with_payload=False,
                with_vectors=False,
            )
        return [IndexHit(id=int(p.id), score=float(p.score)) for p in response.points]

    def ids(self) -> Iterator[int]:
        offset: models.ExtendedPointId | None = None
        while True:
            with self._reachable():
                records, offset = self._client.scroll(
                    self._collection,
                    offset=offset,
                    limit=SCROLL_PAGE,
                    with_payload=False,
                    with_vectors=False,
                )
            for record in records:
                yield int(record.id)
            if offset is None:
                return

    def count(self) -> int:
        with self._reachable():
            return self._client.count(self._collection, exact=True).count

    def problems(self) -> list[str]:
        """Nothing beyond what count() shows: the server keeps its own storage."""
        return []

    def optimize(self) -> None:
        """Nothing to do: the server builds HNSW in the background on its own."""

    def flush(self) -> None:
        """Nothing to do: the server's WAL holds every write acknowledged with wait=True."""

    def close(self) -> None:
        self._client.close()

    def _dimension(self) -> int:
        info = self._info or self.info()
        if info is None:
            raise IndexUnavailable(f"Qdrant collection {self._collection!r} does not exist: run `reindex` to build it")
        return info.dimension

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        """Turns transport failures into IndexUnavailable; other errors are bugs and pass through."""
        try:
            yield
        except ResponseHandlingException as exc:  # connection refused, timeout, TLS, DNS
            raise IndexUnavailable(
                f"cannot reach {self._where}: {exc}. Check MEMORY_QDRANT_URL, and that the Qdrant server is "
                "running and reachable from this machine (e.g. curl $MEMORY_QDRANT_URL/readyz)"
            ) from exc
        except UnexpectedResponse as exc:
            status = exc.status_code
            if status in (401, 403):
                raise IndexUnavailable(f"{self._where} refused access (HTTP {status}): check the API key") from exc
            if status == 404:
                raise IndexUnavailable(
                    f"Qdrant collection {self._collection!r} is gone: run `reindex` to rebuild it"
                ) from exc
            if status is not None and status >= 500:
                raise IndexUnavailable(f"{self._where} failed (HTTP {status}): {exc}") from exc
            raise


def _range(bounds: Bounds) -> models.FieldCondition:
    return models.FieldCondition(key=bounds.field, range=models.Range(gte=bounds.gte, lte=bounds.lte))
