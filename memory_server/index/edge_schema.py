"""What the embedded index tells Qdrant Edge: a shard's configuration, its payload indexes, and a search request
with its filter (memory_server/index/edge.py holds the shard itself, its locks, writes and optimizer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qdrant_edge import (
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    IntegerIndexParams,
    KeywordIndexParams,
    MatchAny,
    Memory,
    Query,
    QueryRequest,
    RangeFloat,
    VectorStorageDatatype,
)

from .base import IndexFilter, Range, checked_conditions

if TYPE_CHECKING:
    from qdrant_edge import ConditionType  # declared by the stubs only

# The payload indexes, as they are held (measured on bench/perf.py's 100k corpus, a shard opened alone: 255 ->
# 231 MB of RSS, searches as fast within noise: whole store 1.3-1.7 ms, a bucket 0.6 ms, a day 0.2 ms):
# - the range fields are only ever asked for ranges, so they have no lookup map of exact values (-16 MB);
# - the fields a scope rarely restricts are read from their files on demand rather than held (-8 MB); the
#   site, in every filter, and the bucket, in most, stay in memory.
# Fixed when a shard is created: an older shard keeps its indexes until `reindex`.
RANGE_INDEX = IntegerIndexParams(lookup=False, range=True)
HELD_KEYWORD_FIELDS = ("site", "bucket")


def keyword_index(name: str) -> KeywordIndexParams:
    return KeywordIndexParams(memory=None if name in HELD_KEYWORD_FIELDS else Memory.Cold)


def shard_config(dimension: int, indexing_threshold_kb: int) -> EdgeConfig:
    # Vectors at half precision: Edge reads them all into memory at open, and at 100k memories that is
    # 73 MB rather than 146 of the server's RSS. Measured on bench/perf.py's 100k corpus (200 queries):
    # the same top 10 as exact float32 search, scores within 9e-5, a search 2.6 ms rather than 2.9.
    # Fixed when a shard is created: an older float32 shard keeps its vectors until `reindex`.
    return EdgeConfig(
        vectors=EdgeVectorParams(size=dimension, distance=Distance.Cosine, datatype=VectorStorageDatatype.Float16),
        optimizers=EdgeOptimizersConfig(indexing_threshold=indexing_threshold_kb),
    )


def search_request(query: list[float], where: IndexFilter, limit: int) -> QueryRequest | None:
    """The nearest `limit` points that pass `where`; None when nothing can (no request to make)."""
    conditions = checked_conditions(where)
    if conditions is None or limit <= 0:
        return None
    must: list[ConditionType] = [FieldCondition(c.field, match=MatchAny(list(c.values))) for c in conditions]
    must += [_range(r) for r in where.ranges]
    must_not: list[ConditionType] = [_range(r) for r in where.excluded]
    return QueryRequest(
        limit=limit,
        query=Query.Nearest(query),
        filter=Filter(must=must, must_not=must_not or None) if must or must_not else None,
        with_payload=False,
        with_vector=False,
    )


def _range(bounds: Range) -> FieldCondition:
    return FieldCondition(
        bounds.field,
        range=RangeFloat(
            gte=None if bounds.gte is None else float(bounds.gte), lte=None if bounds.lte is None else float(bounds.lte)
        ),
    )
