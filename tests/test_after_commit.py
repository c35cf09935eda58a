"""A write committed to the authority is answered as done, whatever fails after the commit, through a real
server process: the index step (writing the vector index, marking the row indexed) is repaired by the outbox
in the background. Before this held, a failure marking the row indexed answered 503 for a memory that was
stored, and the client's retry got `created: false`.

The failure is real: a trigger in the SQLite file refuses to mark any memory indexed, as a storage error at
that step would (the soak met SQLITE_MISUSE there).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from conftest import execute, index_backlog, make_settings
from procs import ServerProcess, parse_fields, run_cli

REFUSE = (
    "CREATE TRIGGER refuse_marking_indexed BEFORE UPDATE OF indexed ON memories WHEN NEW.indexed = 1"
    " BEGIN SELECT RAISE(ABORT, 'marking memories indexed is refused'); END"
)
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ServerProcess, tuple[str, str]]]:
    data = tmp_path / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    with ServerProcess(data) as process:
        process.wait_ready()
        yield process, ("acme", secret)


def remember_over_mcp(process: ServerProcess, auth: tuple[str, str], content: str) -> dict[str, Any]:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "remember", "arguments": {"content": content}},
        }
    )
    reply = httpx2.post(process.url, content=body, headers=MCP_HEADERS, auth=auth, timeout=60).json()
    assert not reply["result"].get("isError"), reply
    return dict(reply["result"]["structuredContent"])


def test_a_failure_after_the_commit_answers_the_write_as_done_and_the_outbox_repairs_it(
    server: tuple[ServerProcess, tuple[str, str]],
) -> None:
    process, auth = server
    settings = make_settings(process.data_dir)
    execute(settings, REFUSE)
    content = "The Lisbon warehouse keeps spare routers on shelf 14."
    with httpx2.Client(base_url=process.base, auth=auth, timeout=60) as http:
        created = http.post("/v1/memories", json={"content": content})
        assert created.status_code == 201, created.text
        reference = created.json()["reference"]
        assert created.json()["created"] is True
        assert http.get(f"/v1/memories/{reference}").json()["content"] == content
        again = http.post("/v1/memories", json={"content": content})  # a client's retry: the same memory
        assert (again.status_code, again.json()) == (200, {"reference": reference, "created": False, "similar": []})
        assert remember_over_mcp(process, auth, "Another fact, saved over MCP.")["created"] is True
        changed = http.patch(f"/v1/memories/{reference}", json={"tags": ["warehouse"]})
        assert changed.status_code == 200, changed.text
        assert index_backlog(settings) == 2  # committed, not indexed: the outbox holds them

        execute(settings, "DROP TRIGGER refuse_marking_indexed")
        deadline = time.monotonic() + 120  # the background round runs every few seconds
        while index_backlog(settings) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert index_backlog(settings) == 0
        hits = http.post("/v1/search", json={"query": "where are the spare routers?", "tags": ["warehouse"]}).json()
        assert [hit["reference"] for hit in hits["results"]][:1] == [reference]
    assert "marking memories indexed is refused" in process.log()  # said in the log, once
