"""SQLite reads the memories a request names by id through their rowid. With a long list of ids and a site
condition, its planner would rather walk an index of the whole site (a millisecond a read at 10,000
memories), so recall would slow down as a site grows. Real SQLite files, the real model; each statement a
recall and a search_memory issued is explained by SQLite itself."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_server.memories.validation import Filters, read_scope
from memory_server.retrieval.candidates import CandidateSource
from memory_server.retrieval.recall import Retrieval
from memory_server.services import Services, open_services

from tests.conftest import make_settings

# Eight ids or more, or three references or more, as the trace shows them bound.
LISTED = re.compile(r"\b(id IN \((-?\d+, ?){7,}-?\d+\)|reference IN \(('[^']*', ?){2,}'[^']*'\))")
# A walk of a table, or of a listed table (memories, m, c) by an index of the site rather than by its keys.
SITE_WALK = re.compile(
    r"SCAN (memories|m|n)\b|SEARCH (memories|m|c) USING (COVERING )?INDEX \w+ \(site_id=\?(?! AND id=)"
)


@pytest.fixture
def traced(tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Services, list[str]]]:
    statements: list[str] = []
    connect = sqlite3.connect

    def tracing(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", tracing)
    services = open_services(make_settings(tmp_path / "data"))
    services.load_memories(embedder=embedder)
    try:
        yield services, statements
    finally:
        services.close()


def test_recall_and_search_read_listed_memories_by_rowid(traced: tuple[Services, list[str]]) -> None:
    services, statements = traced
    writes = services.loaded_memories().writes
    principal = services.local_principal("acme")
    topics = ["the deploy window", "the staging database", "the release train", "the on-call rota"]
    older = writes.remember_many(
        principal.site_id,
        [
            writes.validate(
                content=f"Note {n}: {topics[n % 4]} moved to slot {n}.",
                provenance={"conversation_id": f"c{n % 3}", "seq": n},
            )
            for n in range(120)
        ],
    )
    for n in range(0, 24, 4):  # deploy windows replaced: recall places them by their chains
        writes.remember(
            principal,
            writes.validate(
                content=f"Update: the deploy window of note {n} is slot {n + 1} now.", supersedes=older[n].reference
            ),
        )
    memories = services.loaded_memories()
    # A site past the full-scan limit takes the prefetch path (candidates by id, their neighbours): the limits
    # are lowered so that these memories are such a site.
    large = CandidateSource(
        services.storage.candidates, memories.index, model=memories.embedder.name, full_scan_limit=20, prefetch=10
    )
    large_site = Retrieval(services.storage.memories, large, memories.index, memories.embedder, memories.words)
    scope = read_scope(principal, Filters())
    statements.clear()
    for asked in ["when is the deploy window?", "staging database slot", "who is on call?"]:
        for retrieval in (memories.retrieval, large_site):
            assert retrieval.recall(scope, asked, 10)
        memories.retrieval.search(scope.only_current(True), asked, 10, 0.0)
    listed = [s for s in statements if LISTED.search(s) and s.lstrip().upper().startswith(("SELECT", "WITH"))]
    shapes = {re.sub(r"\d+", "?", s).split(" WHERE ")[0] for s in listed}
    assert len(shapes) >= 5  # the candidates, which were replaced, their successors, their neighbours, the hits
    conn = sqlite3.connect(services.settings.db_path)
    try:
        walks = {
            s[:160]: plan
            for s in listed
            for plan in [" / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {s}"))]
            if SITE_WALK.search(plan)
        }
    finally:
        conn.close()
    assert not walks
