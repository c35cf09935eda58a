"""An import goes through the same bulk write path as `remember`: the same embeddings, the same words for
query expansion (stored at once, not left to a background backfill), so imported memories rank exactly
as remembered ones."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from conftest import make_settings, query, wait_ready
from procs import ServerProcess, parse_fields, run_cli

pytestmark = pytest.mark.backends

MEMORIES = [
    "Maria started a new job at the bakery on Elm Street last spring.",
    "The deploy freeze lasts from December 20 until January 3.",
    "Our puppy chewed the sofa cushions while we were at the cinema.",
    "Tom prefers green tea without sugar in the afternoon.",
    "The staging database moved to the new cluster in March.",
    "Ana's kids love the science museum downtown.",
    "We decided to authenticate MCP clients with per-site Basic credentials.",
    "The quarterly report is due on the first Monday of each quarter.",
    "Leo is learning to play the violin with a teacher from Lisbon.",
    "Rotate the API keys every ninety days.",
]
QUERIES = [
    "career change",
    "when is the code freeze",
    "what did the dog destroy",
    "children's outing",
    "how do clients sign in",
    "music lessons",
    "credential rotation policy",
]


def recall_all(server: ServerProcess, auth: tuple[str, str]) -> list[list[tuple[str, float]]]:
    with httpx2.Client(base_url=server.base, auth=auth, timeout=60) as http:
        return [
            [
                (hit["reference"], hit["score"])
                for hit in http.post("/v1/recall", json={"query": query, "limit": 10}).json()["results"]
            ]
            for query in QUERIES
        ]


def words(data_dir: Path) -> set[str]:
    return {row[0] for row in query(make_settings(data_dir), "SELECT word FROM memory_words")}


def test_imported_memories_rank_exactly_as_remembered_ones(tmp_path: Path) -> None:
    first, second = tmp_path / "remembered", tmp_path / "imported"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=first).stdout)["secret"]
    with ServerProcess(first) as server:
        wait_ready(server.base)
        with httpx2.Client(base_url=server.base, auth=("acme", secret), timeout=60) as http:
            for n, content in enumerate(MEMORIES):
                created = http.post(
                    "/v1/memories", json={"content": content, "occurred_at": f"2024-05-{n + 1:02d}T10:00:00Z"}
                )
                assert created.status_code == 201, created.text
        remembered = recall_all(server, ("acme", secret))
    export = tmp_path / "export.jsonl"
    assert run_cli("export", str(export), data_dir=first).returncode == 0
    secret2 = parse_fields(run_cli("site", "create", "acme", data_dir=second).stdout)["secret"]
    imported_run = run_cli("import", str(export), data_dir=second)
    assert imported_run.returncode == 0, imported_run.stderr
    assert parse_fields(imported_run.stdout)["memories created"] == str(len(MEMORIES))
    # The words were stored by the import itself, before any server ran a backfill.
    assert words(second) == words(first)
    with ServerProcess(second) as server:
        wait_ready(server.base)
        imported = recall_all(server, ("acme", secret2))
    assert imported == remembered
