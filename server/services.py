"""The process's long-lived parts, opened once and shared by the MCP tools, REST routes and the CLI."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from embeddings.base import Embedder
from server import auth
from server.db import Readers, Writer, connect, migrate
from server.errors import Unavailable
from server.logs import LogLimits, LogStore
from server.settings import Settings

log = logging.getLogger("memory_server")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MAINTENANCE_INTERVAL_S = 10.0
# A backlog up to this size (a crash's last writes) is indexed before the server reports ready, so
# search_memory is complete at once; a larger one (an offline import, a lost index) is indexed by the
# maintenance thread, so start-up time does not grow with it.
STARTUP_SYNC_LIMIT = 1000


@dataclass
class Services:
    settings: Settings
    writer: Writer
    readers: Readers
    logs: LogStore
    authenticator: auth.Authenticator
    memory_service: Any = None  # MemoryService once the model and index are loaded
    tokens: Any = None  # TokenCounter
    memory_error: str | None = None
    startup_sync_limit: int = STARTUP_SYNC_LIMIT
    metrics: Any = None  # server.metrics.Metrics while an app serves these services
    closers: list = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self._stop.set()
        for close in reversed(self.closers):
            try:
                close()
            except Exception:  # closing must go on for the rest
                log.exception("error while closing")
        self.closers.clear()

    def local_principal(self, site: str) -> auth.Principal:
        """The stdio principal: the configured site with full access (created on first use)."""
        site_id, _ = self.writer.run_sync(lambda conn: auth.ensure_site(conn, site))
        return auth.Principal(site_id=site_id, site=site, kind="local", scopes=frozenset(auth.SCOPES))

    # --- saved memories: model + index, loaded after the port opens ----------------------------------

    def memory(self) -> Any:
        if self.memory_service is None:
            if self.memory_error:
                raise Unavailable(f"saved memories are unavailable: {self.memory_error}")
            raise Unavailable("the embedding model is still loading; retry shortly")
        return self.memory_service

    def token_counter(self) -> Any:
        self.memory()
        return self.tokens

    def load_memory(self, *, embedder: Embedder | None = None, index: Any = None, repair: bool = True) -> None:
        """Load the model and open the index. With `repair`, refuse an index built with another model and
        index the backlog; `reindex` passes repair=False since it replaces the index anyway.
        Errors are kept for /readyz."""
        from embeddings.factory import load_embedder, resolve_model_dir
        from embeddings.tokens import TokenCounter
        from server.memory_service import MemoryService
        from server.metrics import instrument_embedder, instrument_memory_service

        settings = self.settings
        try:
            model_dir = resolve_model_dir(settings.embedding_model, project_root=PROJECT_ROOT)
            tokens = TokenCounter(model_dir)
            embedder = instrument_embedder(embedder or load_embedder(model_dir, threads=settings.embedding_threads,
                                                                     engine=settings.embedding_engine),
                                           self.metrics)
            if index is None:
                index = open_configured_index(settings)
                self.closers.append(index.close)
            service = MemoryService(writer=self.writer, readers=self.readers, embedder=embedder, index=index,
                                    max_content_bytes=settings.max_content_bytes,
                                    ranking=settings.recall_ranking)
            if repair:
                service.check_model()
                backlog = service.backlog()
                if backlog > self.startup_sync_limit:
                    log.info("%d memories are not in the vector index yet: indexing them in the background",
                             backlog)
                else:
                    repaired = service.sync_index()
                    if repaired:
                        log.info("indexed %d memories left unindexed by an earlier run", repaired)
        except Exception as exc:
            self.memory_error = str(exc)
            log.error("saved memories unavailable: %s", exc)
            raise
        self.tokens = tokens
        self.memory_service = instrument_memory_service(service, self.metrics)

    def start_maintenance(self) -> None:
        """Background upkeep: index the backlog start-up left (see STARTUP_SYNC_LIMIT), drop orphaned index
        points once, then retry any backlog and build HNSW when enough points are unoptimised."""
        def once(step: Callable[[], int], done: str, failed: str) -> None:
            try:
                count = step()
                if count:
                    log.info(done, count)
            except Exception:
                log.warning(failed, exc_info=True)

        def run() -> None:
            service = self.memory_service
            if service is None:
                return
            once(lambda: service.sync_index() if service.backlog() else 0,
                 "indexed %d memories in the background", "indexing the backlog failed; retrying later")
            once(service.reconcile, "removed %d index points with no SQLite row", "index reconciliation failed")
            once(service.backfill_words, "embedded %d words of earlier memories for query expansion",
                 "embedding the vocabulary of earlier memories failed")
            while not self._stop.wait(MAINTENANCE_INTERVAL_S):
                try:
                    if service.backlog():
                        service.sync_index()
                    # Builds HNSW in a child process once enough points are unoptimised; a no-op otherwise.
                    service.index.optimize()
                except Exception:
                    log.warning("index maintenance failed; retrying later", exc_info=True)

        threading.Thread(target=run, name="index-maintenance", daemon=True).start()


def open_configured_index(settings: Settings) -> Any:
    from server.index.factory import open_index

    return open_index(backend=settings.index_backend, path=settings.index_path, url=settings.qdrant_url,
                      api_key=settings.qdrant_api_key, collection=settings.qdrant_collection)


def open_database(settings: Settings) -> None:
    """Create the data directory and bring the schema up to date."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    conn = connect(settings.db_path)
    try:
        migrate(conn)
    finally:
        conn.close()


def open_services(settings: Settings) -> Services:
    open_database(settings)
    writer = Writer(settings.db_path)
    readers = Readers(settings.db_path)
    services = Services(
        settings=settings,
        writer=writer,
        readers=readers,
        logs=LogStore(writer, readers, LogLimits(settings.max_payload_bytes, settings.max_batch_bytes)),
        authenticator=auth.Authenticator(readers.get),
    )
    services.closers += [writer.close, readers.close]
    return services
