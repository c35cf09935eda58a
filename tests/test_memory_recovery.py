"""The index is derived from SQLite: a crash between commit and index write is repaired at start-up,
an index built with another model is refused, and `reindex` rebuilds it from SQLite alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from server.index.base import IndexInfo
from server.index.edge import EdgeIndex
from server.memories.service import IndexMismatch
from server.services import open_services
from tests.conftest import make_settings, serve

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "FASTMCP_SHOW_SERVER_BANNER": "false"}

CRASH_AFTER_COMMIT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from server.memories import rows
    from server.ranking.fusion import document_text
    from server.services import open_services
    from server.settings import Settings

    services = open_services(Settings(data_dir=Path(sys.argv[1])))
    services.load_memory()
    principal = services.local_principal("acme")
    service = services.memory_service
    memory = service.validate(content=sys.argv[2], bucket="crash")
    document = document_text(memory.content, memory.occurred_at)
    vector = service.embedder.embed_documents([document])[0]
    # The first half of remember: the SQLite commit. The process dies before the index write.
    services.writer.run_sync(lambda conn: rows.insert_memory(
        conn, principal.site_id, memory, document=document, vector=vector, model=service.embedder.name))
    print("committed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_crash_between_commit_and_index_write_is_repaired(tmp_path: Path, embedder: Any) -> None:
    data = tmp_path / "data"
    content = "The warehouse in Lisbon keeps spare routers on shelf 14."
    proc = subprocess.run([sys.executable, "-c", CRASH_AFTER_COMMIT, str(data), content], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    assert "committed" in proc.stdout

    services = open_services(make_settings(data))
    try:
        row = services.readers.get().execute("SELECT indexed FROM memories").fetchone()
        assert row["indexed"] == 0  # committed, never indexed
        index = EdgeIndex(make_settings(data).index_path)
        assert index.count() == 0
        index.close()
    finally:
        services.close()

    with serve(make_settings(data), embedder, site="acme-2") as server:
        services = open_services(server.settings)
        try:
            assert services.readers.get().execute("SELECT indexed FROM memories").fetchone()["indexed"] == 1
        finally:
            services.close()
    # search_memory reads the vector index: the repaired point is there.
    services = open_services(make_settings(data))
    try:
        services.load_memory(embedder=embedder)
        hits = services.memory_service._strict_hits(
            services.memory_service.read_scope(services.local_principal("acme"), _no_filters()),
            embedder.embed_query("where are the spare routers?"), 5, 0.3)
        assert [h["content"] for h in hits] == [content]
    finally:
        services.close()


def _no_filters() -> Any:
    from server.memories.service import Filters

    return Filters()


@pytest.mark.parametrize("recorded", [IndexInfo("some-other-model", 384), IndexInfo("all-MiniLM-L6-v2", 768)])
def test_index_built_with_another_model_is_refused(tmp_path: Path, embedder: Any, recorded: IndexInfo) -> None:
    settings = make_settings(tmp_path / "data")
    index = EdgeIndex(settings.index_path)
    index.reset(recorded)
    index.close()
    services = open_services(settings)
    try:
        with pytest.raises(IndexMismatch, match="memory-server reindex"):
            services.load_memory(embedder=embedder)
    finally:
        services.close()


def test_serve_refuses_a_mismatched_index_and_reindex_fixes_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = make_settings(data)
    services = open_services(settings)
    services.close()
    index = EdgeIndex(settings.index_path)
    index.reset(IndexInfo("some-other-model", 384))
    index.close()
    cli = [sys.executable, "-m", "server"]
    refused = subprocess.run([*cli, "serve", "--data-dir", str(data), "--port", "0"], cwd=REPO, env=ENV,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "reindex" in refused.stderr and "some-other-model" in refused.stderr
    fixed = subprocess.run([*cli, "reindex", "--data-dir", str(data)], cwd=REPO, env=ENV, capture_output=True,
                           text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stderr
    index = EdgeIndex(settings.index_path)
    try:
        assert index.info() == IndexInfo("all-MiniLM-L6-v2", 384)
    finally:
        index.close()


async def test_reindex_rebuilds_the_index_from_sqlite_alone(tmp_path: Path, embedder: Any) -> None:
    import shutil

    data = tmp_path / "data"
    with serve(make_settings(data), embedder) as server:
        async with server.client() as client:
            for text in ("The boiler is serviced every October.", "Invoices go out on the first Monday."):
                await client.call_tool("remember", {"content": text})
    shutil.rmtree(make_settings(data).index_path)  # the index is gone; SQLite alone remains
    fixed = subprocess.run([sys.executable, "-m", "server", "reindex", "--data-dir", str(data)], cwd=REPO, env=ENV,
                           capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stderr
    assert "reindexed 2 memories" in fixed.stdout
    services = open_services(make_settings(data))
    try:
        services.load_memory(embedder=embedder)
        service = services.memory_service
        assert service.index.count() == 2 and service.backlog() == 0
        hits = service._strict_hits(service.read_scope(services.local_principal("acme"), _no_filters()),
                                    embedder.embed_query("when is the boiler maintained?"), 1, 0.3)
        assert [h["content"] for h in hits] == ["The boiler is serviced every October."]
    finally:
        services.close()
