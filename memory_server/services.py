"""The composition root: the process's long-lived parts, built once from Settings and shared by the MCP
tools, the REST routes, the console and the CLI.

The authority (storage) opens at once; the model and the vector index load after the port opens
(`load_memories`), so saved-memory operations answer `unavailable` until they are ready.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memory_server import heap
from memory_server.auth.admin import ensure_site
from memory_server.auth.authenticator import Authenticator
from memory_server.auth.principal import Principal, site_principal
from memory_server.auth.usage import UsageLog
from memory_server.embeddings.base import Embedder
from memory_server.index.base import VectorIndex
from memory_server.index.lost_database import refuse_lost_database
from memory_server.logs.deletion import LogRetention
from memory_server.logs.indexing import LogIndexer
from memory_server.logs.validation import LogLimits
from memory_server.memories.maintenance import start_maintenance
from memory_server.memories.system import STARTUP_SYNC_LIMIT, Memories, build_memories, repair
from memory_server.operations.logs import LogOperations
from memory_server.operations.memories import MemoryOperations, unavailable_until_loaded
from memory_server.settings import Settings
from memory_server.storage.factory import open_storage
from memory_server.storage.protocols import Storage

log = logging.getLogger("memory_server")

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Services:
    settings: Settings
    storage: Storage
    authenticator: Authenticator
    logs: LogOperations
    memory_ops: MemoryOperations = field(init=False)
    memories: Memories | None = None
    memory_error: str | None = None
    log_indexer: LogIndexer | None = None
    heap_trimmer: heap.HeapTrimmer | None = None
    startup_sync_limit: int = STARTUP_SYNC_LIMIT
    closers: list[Callable[[], None]] = field(default_factory=list)
    observe_embedder: Callable[[Embedder], Embedder] | None = None  # metrics, when an app serves these
    _stop: threading.Event = field(default_factory=threading.Event)
    memories_settled: threading.Event = field(default_factory=threading.Event)  # loaded, or failed to

    def __post_init__(self) -> None:
        self.memory_ops = MemoryOperations(self.loaded_memories, self.settings)

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        for close in reversed(self.closers):
            try:
                close()
            except Exception:  # closing must go on for the rest
                log.exception("error while closing")
        self.closers.clear()

    def local_principal(self, site: str) -> Principal:
        """The stdio principal: the configured site with full access (created on first use)."""
        site_id, _ = ensure_site(self.storage.sites, site)
        return site_principal(site_id, site, kind="local")

    # --- saved memories: model + index, loaded after the port opens ----------------------------------

    def loaded_memories(self) -> Memories:
        if self.memories is None:
            raise unavailable_until_loaded(self.memory_error)
        return self.memories

    def load_memories(
        self, *, embedder: Embedder | None = None, index: VectorIndex | None = None, repair_index: bool = True
    ) -> Memories:
        """Load the model and open the index. With `repair_index`, refuse an index built with another model
        and index the backlog; `reindex` passes False since it replaces the index anyway. Errors are kept
        for /readyz and the tools."""
        from memory_server.embeddings.factory import load_embedder, resolve_model
        from memory_server.embeddings.tokens import TokenCounter

        settings = self.settings
        try:
            tokens = TokenCounter()
            choice = resolve_model(settings.embedding_model, project_root=PROJECT_ROOT)
            embedder = embedder or load_embedder(
                choice, threads=settings.embedding_threads, engine=settings.embedding_engine
            )
            if self.observe_embedder is not None:
                embedder = self.observe_embedder(embedder)
            if index is None:
                index = open_configured_index(settings)
                self.closers.append(index.close)
            memories = build_memories(self.storage, settings, embedder=embedder, tokens=tokens, index=index)
            if repair_index:
                repair(memories, startup_sync_limit=self.startup_sync_limit)
        except Exception as exc:
            self.memory_error = str(exc)
            log.error("saved memories unavailable: %s", exc)
            self.memories_settled.set()
            raise
        # Ready: every answer from here is right. The warm-up after it only spares the first recalls their first
        # touches (the held sets, the newest memories, the index's pages), and recalls may run beside it.
        self.memories = memories
        self.memories_settled.set()
        log.info("saved memories ready")
        if repair_index:
            memories.retrieval.warm_up()
        # What start-up made (the model, the index, the words) lives as long as the process: kept out of the
        # collector's full passes, which otherwise walk it every few hundred recalls (a 30 ms pause at 100k).
        gc.freeze()
        return memories

    def start_maintenance(self) -> None:
        start_maintenance(self.storage, self.memories, self._stop)
        self.start_log_indexing()
        self.start_heap_trim()

    def start_heap_trim(self) -> None:
        """Give the heap's free memory back every heap_trim_interval_s (memory_server/heap.py)."""
        if self.heap_trimmer is None and self.settings.heap_trim_interval_s > 0 and heap.supported():
            self.heap_trimmer = heap.HeapTrimmer(self.settings.heap_trim_interval_s, self._stop).start()

    def start_log_indexing(self) -> None:
        """Index the log items of the sites and conversations that ask for it, in the background (memory_server/logs/
        indexing.py): first what an earlier run left waiting, then what each append brings."""
        if self.memories is None or self.log_indexer is not None:
            return
        indexer = self.log_indexer = LogIndexer(self.storage.logs, self.storage.sites, self.memories.writes)
        thread = indexer.start(self._stop)
        self.logs.appended = indexer.wake

        def stop() -> None:  # before the storage closes under a running round (closers run last first)
            self._stop.set()
            thread.join(timeout=30)

        self.closers.append(stop)

    def start_log_retention(self) -> None:
        """Delete conversations past their site's log retention, and finish cut-short deletions, in the
        background (logs need neither the model nor the index: this starts at once)."""
        thread = LogRetention(self.storage.logs, interval_s=self.settings.log_retention_interval_s).start(self._stop)

        def stop() -> None:  # before the storage closes under a running purge (closers run last first)
            self._stop.set()
            thread.join(timeout=10)

        self.closers.append(stop)


def open_configured_index(settings: Settings) -> VectorIndex:
    from memory_server.index.factory import open_index

    return open_index(
        backend=settings.index_backend,
        path=settings.index_path,
        url=settings.qdrant_url,
        api_key=settings.qdrant_api_key,
        collection=settings.qdrant_collection,
    )


def open_services(
    settings: Settings,
    *,
    integrity_budget_s: float | None = None,
    nowait_sign_in: bool = False,
    storage: Storage | None = None,
) -> Services:
    """The storage and everything that needs only it. `nowait_sign_in`: a server settles known credentials
    on its event loop (see memory_server.auth.authenticator). `storage`: an already open store to serve (it is
    closed with the services), instead of the one the settings name."""
    if storage is None:
        refuse_lost_database(settings)
        storage = open_storage(settings, integrity_budget_s=integrity_budget_s)
    usage = UsageLog(storage.sites, storage.oauth)
    services = Services(
        settings=settings,
        storage=storage,
        authenticator=Authenticator(
            storage.sites, nowait=nowait_sign_in, oauth=storage.oauth, resource=settings.mcp_resource, usage=usage
        ),
        logs=LogOperations(storage.logs, LogLimits(settings.max_payload_bytes, settings.max_batch_bytes)),
    )
    services.closers.append(storage.close)
    services.closers.append(usage.close)  # closers run last first: its pending writes go before the store closes
    return services
