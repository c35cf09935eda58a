"""The process's long-lived parts, opened once and shared by the MCP tools, REST routes and the CLI."""

from __future__ import annotations

import logging
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from embeddings.base import Embedder
from server.auth import core as auth
from server.storage.sqlite.db import DatabaseDamaged, Readers, Writer, connect, damaged_message, error_code, migrate, quick_check
from server.errors import Unavailable
from server.storage.files import private_dir, private_file
from server.index.base import IndexUnavailable
from server.logging_setup import Throttle
from server.logs.store import LogLimits, LogStore
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
    integrity_unchecked: bool = False  # start-up's bounded quick_check ran out of time: maintenance runs it whole
    startup_sync_limit: int = STARTUP_SYNC_LIMIT
    metrics: Any = None  # server.api.metrics.Metrics while an app serves these services
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
        from server.memories.service import MemoryService
        from server.api.metrics import instrument_embedder, instrument_memory_service

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

    def _check_integrity(self) -> int:
        """The whole `PRAGMA quick_check` that start-up cut short; damage is reported by /readyz."""
        conn = connect(self.settings.db_path, readonly=True)
        try:
            findings = quick_check(conn)
        finally:
            conn.close()
        self.integrity_unchecked = False
        if findings != ["ok"]:
            self.writer.health.damage = damaged_message(self.settings.db_path, "; ".join((findings or [])[:3]))
            log.error("%s", self.writer.health.damage)
        return 0

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

        throttle = Throttle(log)

        def run() -> None:
            if self.integrity_unchecked:
                once(self._check_integrity, "", "the full integrity check of the database failed to run")
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
                except IndexUnavailable as exc:  # a full disk, an unreachable server: say so once a minute
                    throttle.log(logging.WARNING, "maintenance", "index maintenance waits: %s", exc)
                except Exception:
                    throttle.log(logging.WARNING, "maintenance", "index maintenance failed; retrying later",
                                 exc_info=True)

        threading.Thread(target=run, name="index-maintenance", daemon=True).start()


def open_configured_index(settings: Settings) -> Any:
    from server.index.factory import open_index

    return open_index(backend=settings.index_backend, path=settings.index_path, url=settings.qdrant_url,
                      api_key=settings.qdrant_api_key, collection=settings.qdrant_collection)


def open_database(settings: Settings, *, integrity_budget_s: float | None = None) -> bool:
    """Create the data directory (0700) and the database (0600), and bring the schema up to date.

    With `integrity_budget_s`, first check the file (PRAGMA quick_check) for at most that long; returns
    whether the check finished (False: it ran out of time, the file was not found damaged so far). A damaged
    file, or one that is not a database at all, raises DatabaseDamaged naming it, before anything is written.
    """
    private_dir(settings.data_dir)
    private_file(settings.db_path)
    try:
        conn = connect(settings.db_path)
    except sqlite3.DatabaseError as exc:
        raise DatabaseDamaged(damaged_message(settings.db_path, str(exc))) from exc
    try:
        finished = True
        if integrity_budget_s is not None:
            findings = quick_check(conn, budget_s=integrity_budget_s)
            finished = findings is not None
            if findings is not None and findings != ["ok"]:
                raise DatabaseDamaged(damaged_message(settings.db_path, "; ".join(findings[:3])))
        migrate(conn)
        return finished
    except sqlite3.DatabaseError as exc:
        if error_code(exc) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            raise DatabaseDamaged(damaged_message(settings.db_path, str(exc))) from exc
        raise
    finally:
        conn.close()


def open_services(settings: Settings, *, integrity_budget_s: float | None = None) -> Services:
    checked = open_database(settings, integrity_budget_s=integrity_budget_s)
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
    services.integrity_unchecked = not checked
    return services
