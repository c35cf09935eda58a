"""Changing the embedding model of a deployment: every memory is embedded again in the background, recall and
search_memory keep answering meanwhile and say so, nothing is lost, on SQLite and PostgreSQL, with an index of
the authority's own (the outbox) and with a replica's own index (the follower)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest

from memory_server.embeddings.base import Embedder
from memory_server.index.base import IndexInfo
from memory_server.index.edge_files import read_info
from memory_server.memories.reembedding import MARKER_FILE, read_marker
from memory_server.memories.validation import Filters, read_scope
from memory_server.ranking.fusion import document_text
from memory_server.services import Services, open_services

from procs import REPO_ROOT, ServerProcess, parse_fields, run_cli, server_env
from tests.conftest import make_settings

pytestmark = pytest.mark.backends

FACTS = [
    f"Fact {n}: the {colour} crate holds {thing}."
    for n, (colour, thing) in enumerate(
        [
            (c, t)
            for c in ("red", "blue", "green", "grey", "white")
            for t in ("spare routers", "winter tyres", "old invoices", "camping gear")
        ]
    )
]


def services_with(data: Path, embedder: Embedder) -> tuple[Services, Any]:
    """The services with the model loaded: on SQLite the index is the authority's own (the outbox keeps it),
    on PostgreSQL this replica's own (it follows the authority's change feed)."""
    services = open_services(make_settings(data))
    services.startup_sync_limit = 0  # everything re-embedded in the background, as for a large store
    return services, services.load_memories(embedder=embedder)


def catch_up(memories: Any) -> None:
    (memories.follower.catch_up if memories.follower is not None else memories.outbox.sync)()


def save_facts(data: Path, embedder: Embedder, *, facts: list[str] = FACTS) -> None:
    services, memories = services_with(data, embedder)
    try:
        principal = services.local_principal("acme")
        memories.writes.remember_many(principal.site_id, [memories.writes.validate(content=f) for f in facts])
        catch_up(memories)
        assert memories.index.info() == IndexInfo(embedder.name, embedder.dimension)
    finally:
        services.close()


def recall(services: Services, query: str) -> tuple[list[str], str | None]:
    memories = services.loaded_memories()
    scope = read_scope(services.local_principal("acme"), Filters())
    return [h["content"] for h in memories.retrieval.recall(scope, query, 5)], memories.retrieval.notice()


def test_words_alone_find_memories_whose_every_word_is_common(
    tmp_path: Path, embedder: Embedder, minilm_embedder: Embedder, storage_backend: str
) -> None:
    """While the memories are embedded again recall has the lexical index alone, whose bounded prefetch skips
    terms held by more memories than it reads; a question made only of such words still finds memories."""
    data = tmp_path / "data"
    things = ("spare routers", "winter tyres", "old invoices", "camping gear")
    save_facts(data, minilm_embedder, facts=[f"Crate number {n} holds {things[n % 4]}." for n in range(600)])
    services, memories = services_with(data, embedder)
    try:
        assert memories.reembedding.active
        found, notice = recall(services, "What do the crates hold?")
        assert notice is not None and len(found) == 5
        assert all(fact.startswith("Crate number") for fact in found)
    finally:
        services.close()


def test_a_new_model_embeds_every_memory_again_while_recall_answers(
    tmp_path: Path, embedder: Embedder, minilm_embedder: Embedder, storage_backend: str
) -> None:
    data = tmp_path / "data"
    save_facts(data, minilm_embedder)

    services, memories = services_with(data, embedder)
    assert (memories.follower is not None) == (storage_backend == "postgres")
    try:
        marker = read_marker(services.settings.index_path / MARKER_FILE)
        assert marker is not None and (marker.source, marker.target) == ("all-MiniLM-L6-v2", embedder.name)
        assert marker.total == len(FACTS)
        assert memories.index.info() == IndexInfo(embedder.name, embedder.dimension)
        # Meanwhile: recall ranks by words alone over every memory, and says so.
        found, notice = recall(services, "Which crate holds the winter tyres?")
        assert found and "winter tyres" in found[0]
        assert notice is not None and "embedded again" in notice and "0 of 20" in notice
        # A memory saved meanwhile is embedded with the new model at once.
        principal = services.local_principal("acme")
        memories.writes.remember(principal, memories.writes.validate(content="The kayak hangs in the garage."))
        catch_up(memories)
        assert memories.reembedding.check_done()
        assert not (services.settings.index_path / MARKER_FILE).exists()
        found, notice = recall(services, "Where is the kayak kept?")
        assert notice is None and found[0] == "The kayak hangs in the garage."
        assert memories.index.count() == len(FACTS) + 1
        rows = services.storage.outbox.index_rows(services.storage.outbox.ids_after(0, 100))
        assert {row.vector_model for row in rows} == {embedder.name}
        row = next(row for row in rows if row.content == FACTS[3])
        expected = embedder.embed_documents([document_text(row.content, row.occurred_at)])[0]
        assert row.vector is not None and float(np.dot(row.vector, expected)) > 0.999
    finally:
        services.close()


def test_a_restart_in_between_carries_on(tmp_path: Path, embedder: Embedder, minilm_embedder: Embedder) -> None:
    data = tmp_path / "data"
    save_facts(data, minilm_embedder)
    services, memories = services_with(data, embedder)
    services.close()  # stopped before anything was embedded again
    services, memories = services_with(data, embedder)
    try:
        assert memories.reembedding.active and recall(services, "winter tyres")[1] is not None
        catch_up(memories)
        assert memories.reembedding.check_done() and recall(services, "winter tyres")[1] is None
    finally:
        services.close()


def test_through_a_server_process(tmp_path: Path, minilm_embedder: Embedder) -> None:
    """`serve` with another model starts, answers recall with the notice through REST while it works, shows
    its progress in /readyz, then answers as usual."""
    data = tmp_path / "data"
    # More than start-up indexes before it reports ready, so the work happens in the background.
    save_facts(
        data, minilm_embedder, facts=[f"Note {n}: parcel {n} went to locker {n % 97}." for n in range(1200)] + FACTS
    )
    rotated = run_cli("site", "rotate", "acme", data_dir=data)
    assert rotated.returncode == 0, rotated.stderr
    secret = parse_fields(rotated.stdout)["secret"]
    new = ServerProcess(data).start()
    try:
        seen_notice = seen_progress = False
        while True:
            response = httpx2.post(
                f"{new.base}/v1/recall",
                auth=("acme", secret),
                timeout=60,
                json={"query": "Which crate holds the winter tyres?"},
            )
            # Read after the recall: the server may still have been loading when the loop began.
            ready = httpx2.get(f"{new.base}/readyz", timeout=10).json()
            seen_progress = seen_progress or "reembedding" in ready
            assert response.status_code in (200, 503), response.text
            if response.status_code == 200:
                body = response.json()
                assert body["results"], body
                if "notice" in body:
                    seen_notice = True
                elif ready.get("status") == "ready" and "reembedding" not in ready:
                    assert "winter tyres" in body["results"][0]["content"]
                    break
            time.sleep(0.2)
        assert seen_notice, "recall answered during the re-embedding, saying so"
        assert seen_progress, "/readyz showed the re-embedding's progress"
    finally:
        new.stop()


def test_an_admin_command_keeps_the_model_the_index_records(tmp_path: Path, minilm_embedder: Embedder) -> None:
    """`import` and `reindex` run without the server's MEMORY_EMBEDDING_MODEL use the model the index records
    instead of embedding every memory again with the default; given another model, import refuses and says how
    to change it."""
    data = tmp_path / "data"
    save_facts(data, minilm_embedder)
    index_path = make_settings(data).index_path
    unset = {k: v for k, v in server_env().items() if k != "MEMORY_EMBEDDING_MODEL"}
    graph = REPO_ROOT / "tests" / "data" / "import" / "mcp-memory" / "memory.jsonl"

    done = run_cli("import", "--from", "mcp-memory", str(graph), data_dir=data, env=unset)
    assert done.returncode == 0, done.stderr
    assert parse_fields(done.stdout)["memories created"] == "7"
    assert "using all-MiniLM-L6-v2, the model the vector index was built with" in done.stderr
    assert read_info(index_path)[0] == IndexInfo("all-MiniLM-L6-v2", minilm_embedder.dimension)
    assert not (index_path / MARKER_FILE).exists()  # nothing to embed again

    other = {**unset, "MEMORY_EMBEDDING_MODEL": "multilingual-e5-small"}
    refused = run_cli("import", "--from", "mcp-memory", str(graph), data_dir=data, env=other)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    line = refused.stderr.strip()
    assert line.startswith("error: the vector index was built with all-MiniLM-L6-v2") and "\n" not in line, line
    assert "set MEMORY_EMBEDDING_MODEL on the server and restart it" in line
    assert read_info(index_path)[0] == IndexInfo("all-MiniLM-L6-v2", minilm_embedder.dimension)

    rebuilt = run_cli("reindex", data_dir=data, env=unset)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"reindexed {len(FACTS) + 7} memories with all-MiniLM-L6-v2" in rebuilt.stdout
