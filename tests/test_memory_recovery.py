"""The index is derived from SQLite: a crash between commit and index write is repaired at start-up, and
`reindex` rebuilds it from SQLite alone (a model change: tests/test_model_change.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from memory_server.index.edge import EdgeIndex
from memory_server.memories.validation import Filters, read_scope
from memory_server.services import open_services
from memory_server.storage.factory import open_storage

from tests.conftest import make_settings, serve

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "FASTMCP_SHOW_SERVER_BANNER": "false"}

CRASH_AFTER_COMMIT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from memory_server.services import open_configured_index, open_services
    from memory_server.settings import Settings

    class DiesOnWrite:
        \"\"\"The configured index, but the process is killed when remember writes to it (after the commit).\"\"\"

        def __init__(self, inner):
            self.inner = inner

        def upsert(self, points):
            print("committed", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    settings = Settings(data_dir=Path(sys.argv[1]))
    services = open_services(settings)
    memories = services.load_memories(index=DiesOnWrite(open_configured_index(settings)))
    principal = services.local_principal("acme")
    memories.writes.remember(principal, memories.writes.validate(content=sys.argv[2], bucket="crash"))
    """
)


def backlog(data: Path) -> int:
    storage = open_storage(make_settings(data))
    try:
        return storage.outbox.backlog()
    finally:
        storage.close()


def strict_search(services: Any, query: str, limit: int) -> list[str]:
    memories = services.loaded_memories()
    scope = read_scope(services.local_principal("acme"), Filters())
    return [h["content"] for h in memories.retrieval.search(scope, query, limit, 0.3)]


def test_crash_between_commit_and_index_write_is_repaired(tmp_path: Path, embedder: Any) -> None:
    data = tmp_path / "data"
    content = "The warehouse in Lisbon keeps spare routers on shelf 14."
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_AFTER_COMMIT, str(data), content],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr
    assert "committed" in proc.stdout

    assert backlog(data) == 1  # committed, never indexed
    index = EdgeIndex(make_settings(data).index_path)
    assert index.count() == 0
    index.close()

    with serve(make_settings(data), embedder, site="acme-2"):
        pass
    assert backlog(data) == 0
    # search_memory reads the vector index: the repaired point is there.
    services = open_services(make_settings(data))
    try:
        services.load_memories(embedder=embedder)
        assert strict_search(services, "where are the spare routers?", 5) == [content]
    finally:
        services.close()


async def test_reindex_rebuilds_the_index_from_sqlite_alone(tmp_path: Path, embedder: Any) -> None:
    import shutil

    data = tmp_path / "data"
    with serve(make_settings(data), embedder) as server:
        async with server.client() as client:
            for text in ("The boiler is serviced every October.", "Invoices go out on the first Monday."):
                await client.call_tool("remember", {"content": text})
    shutil.rmtree(make_settings(data).index_path)  # the index is gone; SQLite alone remains
    fixed = subprocess.run(
        [sys.executable, "-m", "memory_server", "reindex", "--data-dir", str(data)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fixed.returncode == 0, fixed.stderr
    assert "reindexed 2 memories" in fixed.stdout
    services = open_services(make_settings(data))
    try:
        memories = services.load_memories(embedder=embedder)
        assert memories.index.count() == 2 and memories.outbox.backlog() == 0
        assert strict_search(services, "when is the boiler maintained?", 1) == ["The boiler is serviced every October."]
    finally:
        services.close()


def test_lexical_terms_of_an_older_version_are_written_again_at_start_up(tmp_path: Path, embedder: Any) -> None:
    from memory_server.memories.system import rewrite_terms
    from memory_server.memories.writes import TERMS_VERSION
    from memory_server.ranking.fusion import document_text
    from memory_server.ranking.lexical import analyzed_text
    from memory_server.storage.scope import Scope

    settings = make_settings(tmp_path / "data")
    services = open_services(settings)
    try:
        memories = services.load_memories(embedder=embedder)
        principal = services.local_principal("acme")
        writes = memories.writes
        for content in ("Went to the climbing gym yesterday.", "The boiler is serviced every October."):
            writes.remember(principal, writes.validate(content=content, occurred_at="2024-05-09T10:00:00Z"))
        # What a store written before the date terms holds: the analysed document text alone, no version.
        storage = services.storage
        assert storage.memories.rewrite_terms(lambda c, at: analyzed_text(document_text(c, at)), 1) == 1
        assert storage.memories.terms_version() == 1
        site_id = principal.site_id
    finally:
        services.close()

    services = open_services(settings)
    try:
        services.load_memories(embedder=embedder)  # start-up brings the terms up to this version's
        storage = services.storage
        assert storage.memories.terms_version() == TERMS_VERSION
        _, loaded = storage.candidates.load(Scope(site_id), None, embedder.name, lambda i, v: False)
        gym = next(row for row in loaded if "gym" in row.terms)
        assert gym.terms[-2:] == ["day20240508", "week2024w19"]
        assert storage.candidates.best_by_terms(Scope(site_id), ["day20240508"], 5) == [gym.id]
        assert rewrite_terms(storage) == 0 and rewrite_terms(storage, force=True) == 0  # current: nothing to do
    finally:
        services.close()
