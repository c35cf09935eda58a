"""`memory-server import --from FORMAT`: other memory tools' data (the MCP memory server's knowledge graph, a
mem0 export, a folder of basic-memory notes), imported by the real CLI from the sample files in
tests/data/import/ (written from each tool's documentation), then read back from a real server over REST."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memory_server.admin.foreign.markdown import pieces

from procs import REPO_ROOT, ServerProcess, parse_fields, run_cli, server_env

pytestmark = pytest.mark.backends

SAMPLES = REPO_ROOT / "tests" / "data" / "import"


def imported(fmt: str, source: Path, data_dir: Path, *extra: str, **env: str) -> tuple[dict[str, str], str, int]:
    done = run_cli(
        "import", "--from", fmt, str(source), *extra, data_dir=data_dir, env=server_env(**env) if env else None
    )
    return parse_fields(done.stdout), done.stderr, done.returncode


class Reader:
    """A server on the data directory, read as the site over REST."""

    def __init__(self, server: ServerProcess, secret: str) -> None:
        self.server, self.auth = server, httpx2.BasicAuth("default", secret)

    def memories(self, **params: Any) -> list[dict[str, Any]]:
        response = httpx2.get(
            f"{self.server.base}/v1/memories", params={"limit": 100, **params}, auth=self.auth, timeout=30
        )
        assert response.status_code == 200, response.text
        return list(response.json()["memories"])

    def recall(self, query: str, **body: Any) -> list[dict[str, Any]]:
        response = httpx2.post(
            f"{self.server.base}/v1/recall", json={"query": query, **body}, auth=self.auth, timeout=60
        )
        assert response.status_code == 200, response.text
        return list(response.json()["results"])


@pytest.fixture
def read(tmp_path: Path) -> Iterator[Any]:
    servers: list[ServerProcess] = []

    def start(data_dir: Path, secret: str) -> Reader:
        server = ServerProcess(data_dir).start().wait_ready()
        servers.append(server)
        return Reader(server, secret)

    yield start
    for server in servers:
        server.kill()


def by_content(memories: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["content"]: m for m in memories}


# --- the MCP memory server's knowledge graph ------------------------------------------------------------


def test_mcp_memory_graph_becomes_tagged_memories_and_a_second_import_adds_nothing(tmp_path: Path, read: Any) -> None:
    data = tmp_path / "data"
    report, errors, code = imported("mcp-memory", SAMPLES / "mcp-memory" / "memory.jsonl", data)
    assert code == 0, errors
    assert (report["memories created"], report["rejected records"]) == ("7", "0")
    assert "importing mcp-memory" in errors and "100%" in errors  # the progress bar, as our own import's

    again, errors, code = imported("mcp-memory", SAMPLES / "mcp-memory" / "memory.jsonl", data)
    assert code == 0 and (again["memories created"], again["memories duplicate"]) == ("0", "7")
    # One line for the lot, not one per record.
    assert "skipped 7 records holding a memory already here (the first, memory.jsonl:1: duplicate of mem_" in errors
    assert errors.count("duplicate of mem_") == 1

    site = read(data, report["secret"])
    john = by_content(site.memories(tag="entity:John_Smith"))
    assert set(john) == {
        "John_Smith (person): Speaks fluent Spanish",
        "John_Smith (person): Graduated in 2019",
        "John_Smith (person): Prefers morning meetings",
        "John_Smith works at Anthropic",
        "John_Smith is member of Spanish_Club",
    }
    spoken = john["John_Smith (person): Speaks fluent Spanish"]
    assert (spoken["type"], spoken["tags"]) == ("observation", ["entity:John_Smith", "type:person"])
    assert spoken["metadata"] == {"entity": "John_Smith", "entity_type": "person"}
    assert spoken["provenance"] == {"source": "mcp-memory"}
    relation = john["John_Smith works at Anthropic"]
    assert (relation["type"], relation["tags"]) == (
        "relation",
        ["entity:John_Smith", "entity:Anthropic", "relation:works_at"],
    )
    assert [m["content"] for m in site.memories(type="entity")] == ["Spanish_Club (organization)"]
    assert site.recall("Which language does John speak?", limit=1)[0]["content"] == spoken["content"]


def test_mcp_memory_bad_records_are_reported_with_their_line_and_skipped(tmp_path: Path, read: Any) -> None:
    data = tmp_path / "data"
    report, errors, code = imported("mcp-memory", SAMPLES / "mcp-memory" / "with-bad-records.jsonl", data)
    assert code == 1
    assert (report["memories created"], report["rejected records"]) == ("3", "5")
    for line, says in (
        (2, "needs an entityType"),
        (3, "not valid JSON"),
        (4, "observations[1] is not"),
        (5, "a relation needs to"),
        (6, "unknown type 'tag'"),
    ):
        assert f"with-bad-records.jsonl:{line}: " in errors and says in errors, (line, errors)
    contents = set(by_content(read(data, report["secret"]).memories()))
    assert contents == {
        "Ada_Lovelace (person): Wrote the first published program",
        "Ada_Lovelace_Notes (document): Translated Menabrea",
        "Ada_Lovelace worked with Charles_Babbage",
    }


# --- mem0 ------------------------------------------------------------------------------------------------


def test_mem0_export_fills_buckets_dates_tags_and_keeps_its_ids(tmp_path: Path, read: Any) -> None:
    data = tmp_path / "data"
    folder = tmp_path / "mem0"
    folder.mkdir()
    for name in ("get_all.json", "platform.json"):  # the library's get_all() and the platform's, together
        shutil.copy(SAMPLES / "mem0" / name, folder / name)
    report, errors, code = imported("mem0", folder, data)
    assert code == 0, errors
    assert (report["memories created"], report["rejected records"]) == ("6", "0")
    again, _, code = imported("mem0", folder, data)
    assert code == 0 and (again["memories created"], again["memories already present"]) == ("0", "6")

    site = read(data, report["secret"])
    alice = by_content(site.memories(bucket="alice"))
    assert set(alice) == {
        "Is a vegetarian and allergic to nuts",
        "Likes to play cricket on weekends",
        "Prefers concise answers with code examples",
    }
    nuts = alice["Is a vegetarian and allergic to nuts"]
    assert nuts["reference"] == "mem0_892db2ae-06d9-49e5-8b3e-585ef9b85b8e"
    assert nuts["occurred_at"] == "2024-07-26T17:29:36.630547Z"  # created_at, -07:00 in UTC
    assert nuts["tags"] == ["food"] and nuts["metadata"] == {"category": "food"}
    assert nuts["provenance"] == {"source": "mem0", "user_id": "alice", "id": "892db2ae-06d9-49e5-8b3e-585ef9b85b8e"}
    concise = alice["Prefers concise answers with code examples"]
    assert concise["tags"] == ["style", "answers", "agent:support-bot"]
    assert concise["provenance"]["agent"] == "support-bot" and concise["provenance"]["run_id"] == "run-7"

    bob = by_content(site.memories(bucket="bob"))
    assert bob["Planning a trip to Japan in April"]["tags"] == ["travel", "personal_details"]
    wifi = bob["Temporary access code for the hotel wifi is on the booking"]
    assert wifi["expires_at"] == "2030-05-01T00:00:00.000000Z"  # expiration_date, a date: its midnight UTC
    assert [m["content"] for m in site.memories(bucket="support-bot")] == [
        "Support agent keeps replies under 100 words"
    ]  # no user: the agent's bucket
    assert site.recall("what should I cook for her?", bucket="alice", limit=1)[0]["content"] == nuts["content"]


def test_mem0_graph_relations_become_relation_memories_and_expired_records_are_skipped(
    tmp_path: Path, read: Any
) -> None:
    data = tmp_path / "data"
    report, errors, code = imported("mem0", SAMPLES / "mem0" / "graph.json", data)
    assert code == 0, errors
    assert report["memories created"] == "4" and report["memories expired"] == "1", report
    assert "skipped 1 records whose expires_at has passed" in errors
    again, errors, code = imported("mem0", SAMPLES / "mem0" / "graph.json", data)
    assert code == 0 and again["memories created"] == "0", errors
    site = read(data, report["secret"])
    joseph = by_content(site.memories(tag="entity:Joseph"))
    assert set(joseph) == {"Joseph lives in Seattle", "Joseph works as Software_Engineer"}
    lives = joseph["Joseph lives in Seattle"]
    assert (lives["type"], lives["tags"]) == ("relation", ["entity:Joseph", "entity:Seattle", "relation:lives_in"])
    assert lives["metadata"] == {
        "from": "Joseph",
        "to": "Seattle",
        "relation_type": "lives_in",
        "source_type": "Person",
        "target_type": "City",
    }
    assert "The old door code is 4711" not in by_content(site.memories())  # expired before the import


def test_mem0_bad_records_are_reported_with_their_line_and_skipped(tmp_path: Path, read: Any) -> None:
    data = tmp_path / "data"
    report, errors, code = imported("mem0", SAMPLES / "mem0" / "with-bad-records.json", data)
    assert code == 1
    assert (report["memories created"], report["rejected records"]) == ("2", "3")
    assert 'with-bad-records.json:10: a memory needs its text in "memory"' in errors
    assert "with-bad-records.json:16: a memory must be a JSON object" in errors
    assert "with-bad-records.json:17: created_at 'yesterday evening' is not an ISO 8601" in errors
    contents = set(by_content(read(data, report["secret"]).memories(bucket="carol")))
    assert contents == {"Works as a nurse on night shifts", "Drinks tea, not coffee"}


def test_mem0_file_that_is_not_json_is_reported_whole(tmp_path: Path) -> None:
    broken = tmp_path / "export.json"
    broken.write_text('{"results": [\n  {"memory": "one"},\n  {"memory": }\n]}\n')
    report, errors, code = imported("mem0", broken, tmp_path / "data")
    assert code == 1 and report["rejected records"] == "1"
    assert "export.json:3: not valid JSON" in errors


# --- a folder of Markdown notes --------------------------------------------------------------------------


def test_markdown_notes_become_memories_of_their_text_observations_and_relations(tmp_path: Path, read: Any) -> None:
    notes = tmp_path / "notes"
    shutil.copytree(SAMPLES / "markdown", notes)
    os.utime(notes / "project-ideas.md", (1767225600, 1767225600))  # no front matter: the file's date
    data = tmp_path / "data"
    report, errors, code = imported("markdown", notes, data)
    assert code == 0, errors
    assert (report["memories created"], report["rejected records"]) == ("27", "0")
    assert "importing markdown" in errors and "100%" in errors

    site = read(data, report["secret"])
    auth = by_content(site.memories(location="authentication-design.md"))
    decision = auth["Authentication Design: Using JWT tokens for stateless authentication"]
    assert decision["type"] == "decision"
    assert decision["tags"] == ["auth", "security", "backend"]  # the note's, and #security once
    assert decision["occurred_at"] == "2026-03-02T09:15:00.000000Z"
    assert decision["metadata"] == {
        "title": "Authentication Design",
        "permalink": "authentication-design",
        "category": "decision",
    }
    assert decision["provenance"] == {"source": "markdown", "file": "authentication-design.md", "line": 13}
    assert auth["Authentication Design implements API Security Requirements"]["type"] == "relation"
    prose = auth[
        "Authentication Design\n\n## Open questions\n\nShould service accounts get longer-lived tokens? "
        "The platform team asked for a day.\n\n- [ ] Ask the platform team about service accounts"
    ]
    assert prose["type"] == "note"  # a checkbox is prose, not an observation

    paul = by_content(site.memories(location="people/paul-graham.md"))
    assert paul["Paul Graham\n\nEssayist and programmer, co-founder of Y Combinator."]["type"] == "Person"
    assert paul["Paul Graham: Lisp"]["tags"] == ["startups", "essays", "lisp"]  # a comma-separated string
    assert paul["Paul Graham: Lisp"]["metadata"]["status"] == "active"  # the front matter's own fields
    assert paul["Paul Graham: Lisp"]["occurred_at"].startswith("2024-01-15T00:00:00")  # `date`
    assert "Paul Graham works at Y Combinator (co-founder)" in paul
    assert "Paul Graham based on Customer Interview" in paul

    ideas = by_content(site.memories(location="project-ideas.md"))
    tooling = ideas["Project Ideas: Build a CLI tool for markdown linting"]  # the title is the # heading
    assert (tooling["type"], tooling["tags"]) == ("idea", ["tooling"])
    assert tooling["occurred_at"].startswith("2026-01-01T00:00:00")
    brewing = by_content(site.memories(tag="brewing"))
    assert "Coffee Brewing Methods: Water temperature at 205°F extracts optimal compounds" in brewing
    assert site.recall("how hot should the water be for coffee?", limit=1)[0]["content"] == (
        "Coffee Brewing Methods: Water temperature at 205°F extracts optimal compounds"
    )


def test_markdown_bad_notes_are_reported_with_their_file_and_skipped(tmp_path: Path, read: Any) -> None:
    data = tmp_path / "data"
    report, errors, code = imported("markdown", SAMPLES / "markdown-bad", data)
    assert code == 1
    assert (report["memories created"], report["rejected records"]) == ("2", "3")
    assert "bad-date.md:1: created 'the day after tomorrow' is not an ISO 8601" in errors
    assert "broken-front-matter.md:4: the front matter is not valid YAML" in errors
    assert "not-utf8.md: not valid UTF-8" in errors
    contents = set(by_content(read(data, report["secret"]).memories()))
    assert contents == {"Good note\n\nThis one imports.", "Good note: It has one observation"}


def test_a_note_longer_than_a_memory_becomes_one_memory_per_section(tmp_path: Path, read: Any) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    paragraph = "The quick brown fox jumps over the lazy dog near the river bank. " * 20
    (notes / "long.md").write_text(
        "---\ntitle: Long\n---\n\nIntro line.\n\n## Part one\n\n"
        + paragraph
        + "\n\n"
        + paragraph
        + "\n\n## Part two\n\n"
        + " ".join(f"w{n}" for n in range(900))
        + "\n"
    )
    data = tmp_path / "data"
    report, errors, code = imported("markdown", notes, data, MEMORY_MAX_CONTENT_BYTES="2000")
    assert code == 0, errors
    memories = read(data, report["secret"]).memories()
    assert len(memories) == int(report["memories created"]) >= 5
    assert all(len(m["content"].encode()) <= 2000 for m in memories)
    heads = [m["content"].split("\n\n", 1)[0] for m in memories]
    assert heads.count("Long") == 1 and heads.count("Long — Part one") == 2 and heads.count("Long — Part two") >= 2
    words = [w for m in memories for w in m["content"].split() if w.startswith("w") and w[1:].isdigit()]
    assert sorted(words, key=lambda w: int(w[1:])) == [f"w{n}" for n in range(900)]  # nothing lost, nothing twice


def test_pieces_cut_at_paragraphs_then_words_within_the_limit() -> None:
    text = "alpha beta\n\ngamma delta epsilon\n\n" + "x" * 25
    assert pieces(text, 100) == [text]
    cut = pieces(text, 12)
    assert cut == ["alpha beta", "gamma delta", "epsilon", "x" * 12, "x" * 12, "x"]
    assert all(len(p.encode()) <= 12 for p in pieces("é" * 30, 7))


def test_an_unknown_format_or_a_missing_file_is_one_line(tmp_path: Path) -> None:
    done = run_cli("import", "--from", "evernote", str(SAMPLES), data_dir=tmp_path / "data")
    assert done.returncode == 1 and done.stderr.strip() == (
        "error: unknown format 'evernote' for --from; one of: mcp-memory, mem0, markdown"
    )
    done = run_cli("import", "--from", "mem0", str(tmp_path / "nowhere.json"), data_dir=tmp_path / "data")
    assert done.returncode == 1 and done.stderr.strip().endswith("nowhere.json does not exist")
