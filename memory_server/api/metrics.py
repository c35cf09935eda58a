"""Prometheus metrics, one registry per app (several apps in one test process never collide).

What is measured, and where:

- MCP tool calls: count and latency per tool and outcome (`ok` or the error code), by
  `ToolMetricsMiddleware`, a fastmcp middleware placed outside `ErrorMiddleware` so it sees the final result.
- HTTP requests: count and latency per method, route template and status, by the request middleware in
  `memory_server.api.observability` (route templates, never raw paths: ids in paths would explode the series count).
- Appended log items and remembered memories (created vs duplicate), observed by the operations (so MCP,
  REST and the fast path all count).
- Embedding time per call, by `InstrumentedEmbedder` (the Embedder protocol, by delegation).
- Model loaded and index backlog, computed when scraped.

Nothing here carries a secret, a site name or a payload: labels are bounded, fixed vocabularies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

import mcp_types as mt
import numpy as np
from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from memory_server.embeddings.base import Embedder
from memory_server.embeddings.similarity import Similarity
from memory_server.errors import AppError

if TYPE_CHECKING:
    from memory_server.services import Services  # the services import this module's users

PREFIX = "memory_server"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
EMBED_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ERROR_CODES = frozenset(cls.code for cls in AppError.__subclasses__())
OTHER_TOOL = "unknown"  # a tool name this server does not offer: the caller's text, never a label value
CONTENT_TYPE = CONTENT_TYPE_LATEST


def _version() -> str:
    try:
        return metadata.version("memory-server")
    except metadata.PackageNotFoundError:
        return "unknown"


class Metrics:
    """Every metric of one app, on its own CollectorRegistry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.tool_calls = Counter(
            f"{PREFIX}_tool_calls",
            "MCP tool calls by tool and outcome (ok or the error code).",
            ["tool", "outcome"],
            registry=r,
        )
        self.tool_seconds = Histogram(
            f"{PREFIX}_tool_call_duration_seconds",
            "MCP tool call latency by tool and outcome.",
            ["tool", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.http_requests = Counter(
            f"{PREFIX}_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_seconds = Histogram(
            f"{PREFIX}_http_request_duration_seconds",
            "HTTP request latency by method, route template and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.log_items = Counter(
            f"{PREFIX}_log_items_appended",
            "Conversation log items appended (an idempotent retry appends none).",
            registry=r,
        )
        self.log_appends = Counter(
            f"{PREFIX}_log_appends",
            "Append batches by result: appended, or duplicate (an idempotent retry).",
            ["result"],
            registry=r,
        )
        self.memories = Counter(
            f"{PREFIX}_memories_remembered",
            "remember calls by result: created, or duplicate (existing reference).",
            ["result"],
            registry=r,
        )
        self.embed_seconds = Histogram(
            f"{PREFIX}_embedding_duration_seconds",
            "Time to embed one call's texts, by kind (document or query).",
            ["kind"],
            buckets=EMBED_BUCKETS,
            registry=r,
        )
        self.embedded_texts = Counter(
            f"{PREFIX}_embedded_texts", "Texts embedded, by kind (document or query).", ["kind"], registry=r
        )
        for kind in ("document", "query"):  # export zeros from the start: rate() needs a first sample
            self.embed_seconds.labels(kind)
            self.embedded_texts.labels(kind)
        for result in ("appended", "duplicate"):
            self.log_appends.labels(result)
        for result in ("created", "duplicate"):
            self.memories.labels(result)

    # --- wiring -------------------------------------------------------------------------------------

    def attach(self, services: Services) -> None:
        """Count what this app's services do: the scrape-time gauges, the operations' appends and remembers,
        and (through `services.observe_embedder`) the embedding time. Services handed to a second app count
        for that app from then on, never for both."""
        services.logs.observe = self.observe_append
        services.memory_ops.observe = self.observe_remember
        services.observe_embedder = lambda embedder: instrument_embedder(embedder, self)
        self.registry.register(_ServicesCollector(services))

    def exposition(self) -> bytes:
        """The Prometheus text format (blocking: the collectors read SQLite)."""
        return generate_latest(self.registry)

    # --- recording ----------------------------------------------------------------------------------

    def observe_tool(self, tool: str, outcome: str, seconds: float) -> None:
        self.tool_calls.labels(tool, outcome).inc()
        self.tool_seconds.labels(tool, outcome).observe(seconds)

    def observe_http(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_requests.labels(method, route, str(status)).inc()
        self.http_seconds.labels(method, route, str(status)).observe(seconds)

    def observe_append(self, result: Mapping[str, Any]) -> None:
        if result.get("duplicate"):
            self.log_appends.labels("duplicate").inc()
            return
        self.log_appends.labels("appended").inc()
        self.log_items.inc(int(result.get("count") or 0))

    def observe_remember(self, created: bool) -> None:
        self.memories.labels("created" if created else "duplicate").inc()

    def observe_embedding(self, kind: str, texts: int, seconds: float) -> None:
        self.embed_seconds.labels(kind).observe(seconds)
        self.embedded_texts.labels(kind).inc(texts)


class _ServicesCollector(Collector):
    """Gauges read when scraped, so they are never stale: model loaded, index backlog, build info."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._version = _version()

    def describe(self) -> list[GaugeMetricFamily]:  # no probing of services at registration time
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        services = self._services
        memories = services.memories
        info = GaugeMetricFamily(
            f"{PREFIX}_build_info",
            "Version and configuration; the value is always 1.",
            labels=["version", "index_backend"],
        )
        info.add_metric([self._version, str(services.settings.index_backend)], 1)
        yield info
        yield GaugeMetricFamily(
            f"{PREFIX}_model_loaded",
            "1 once the embedding model and the vector index are loaded, else 0.",
            value=0 if memories is None else 1,
        )
        if memories is None:
            return
        try:
            follower = memories.follower
            backlog = follower.lag() if follower is not None else memories.outbox.backlog()
        except Exception:  # storage trouble shows on /readyz; a scrape must still succeed
            return
        yield GaugeMetricFamily(
            f"{PREFIX}_index_backlog",
            "Memories waiting to be written to or deleted from the vector index (an index "
            "following a shared authority: changes of it not applied yet).",
            value=backlog,
        )


# --- MCP --------------------------------------------------------------------------------------------


class ToolMetricsMiddleware(Middleware):
    """Counts and times every tool call. Registered before (outside) ErrorMiddleware, so every failure has
    already become an error result carrying its code."""

    def __init__(self, metrics: Metrics, mcp: FastMCP) -> None:
        self._metrics = metrics
        self._mcp = mcp  # the FastMCP server, asked once for its tool names
        self._names: frozenset[str] | None = None

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        tool = await self._label(context.message.name)
        start = time.perf_counter()
        outcome = "unavailable"  # what the client gets for anything that escapes
        try:
            result = await call_next(context)
            outcome = tool_outcome(result)
            return result
        finally:
            self._metrics.observe_tool(tool, outcome, time.perf_counter() - start)

    async def _label(self, name: object) -> str:
        if self._names is None:
            try:
                self._names = frozenset(t.name for t in await self._mcp.list_tools(run_middleware=False))
            except Exception:  # never fail a call over a label; ask again next time
                return OTHER_TOOL
        return name if isinstance(name, str) and name in self._names else OTHER_TOOL


def tool_outcome(result: ToolResult) -> str:
    """`ok`, or the code an error result starts its text with (`code: message`; error results carry no
    structured content, see memory_server.api.mcp.results)."""
    if not getattr(result, "is_error", False):
        return "ok"
    content = getattr(result, "content", None) or []
    text = getattr(content[0], "text", None) if content else None
    code = text.split(":", 1)[0] if isinstance(text, str) else None
    return code if code in ERROR_CODES else "error"


# --- wrappers, by delegation --------------------------------------------------------------------------


class InstrumentedEmbedder:
    """The Embedder protocol by delegation, timing every call."""

    def __init__(self, inner: Embedder, metrics: Metrics) -> None:
        self._inner = inner
        self._metrics = metrics

    @property
    def name(self) -> str:
        return str(self._inner.name)

    @property
    def dimension(self) -> int:
        return int(self._inner.dimension)

    @property
    def similarity(self) -> Similarity:
        return self._inner.similarity

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        start = time.perf_counter()
        vectors: np.ndarray = self._inner.embed_documents(texts)
        self._metrics.observe_embedding("document", len(texts), time.perf_counter() - start)
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        start = time.perf_counter()
        vector: np.ndarray = self._inner.embed_query(text)
        self._metrics.observe_embedding("query", 1, time.perf_counter() - start)
        return vector

    def __getattr__(self, name: str) -> Any:  # clear_cache, max_seq_length, … of the concrete embedder
        return getattr(self._inner, name)


def instrument_embedder(embedder: Embedder, metrics: Metrics | None) -> Embedder:
    """The embedder, timed when an app's metrics are attached (never wrapped twice)."""
    if metrics is None or isinstance(embedder, InstrumentedEmbedder):
        return embedder
    return InstrumentedEmbedder(embedder, metrics)
