"""Concurrent appenders to ONE conversation never produce a gap, a repeated seq or an interleaved batch.

Three shapes: many client tasks over HTTP against one server; two server processes on one data directory;
several OS processes appending straight through SQLite (`append_batch` in a write transaction).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from memory_server.auth import admin as auth
from memory_server.storage.factory import open_storage

from conftest import LiveServer, admin, make_settings
from procs import (  # noqa: F401
    REPO_ROOT,
    ServerProcesses,
    batch_payloads,
    check_log,
    read_all,
    server_env,
    server_processes,
)
from tests import backends

pytestmark = pytest.mark.backends

CONVERSATION = "conv-contended-0001"


async def appender(client: Client, writer: int, batches: int, rng: random.Random) -> dict[tuple[int, int], dict]:
    acks = {}
    for batch in range(batches):
        size = rng.randint(1, 12)
        result = await client.call_tool(
            "append_memory",
            {"conversation_id": CONVERSATION, "items": batch_payloads(writer, batch, size)},
            raise_on_error=False,
        )
        assert not result.is_error, result.content[0].text
        acks[(writer, batch)] = result.structured_content
    return acks


def assert_exactly_once(items: list[dict[str, Any]], acks: dict[tuple[int, int], dict[str, Any]]) -> None:
    batches = check_log(items, acks)
    assert set(batches) == set(acks)  # nothing unacknowledged, nothing lost
    ranges = sorted((a["first_seq"], a["last_seq"]) for a in acks.values())
    assert ranges[0][0] == 0 and ranges[-1][1] == len(items) - 1
    assert all(prev[1] + 1 == nxt[0] for prev, nxt in zip(ranges, ranges[1:], strict=False))  # acks tile 0..N-1


async def test_many_http_clients_one_conversation(live: LiveServer) -> None:
    writers, batches = 16, 6
    rng = random.Random(7)

    async def one(writer: int) -> dict:
        async with live.client() as client:
            return await appender(client, writer, batches, random.Random(rng.random()))

    results = await asyncio.gather(*(one(w) for w in range(writers)))
    acks = {k: v for result in results for k, v in result.items()}
    assert len(acks) == writers * batches
    async with live.client() as client:
        items = await read_all(client, CONVERSATION)
    assert_exactly_once(items, acks)


async def test_two_server_processes_one_database(tmp_path: Path, server_processes: ServerProcesses) -> None:
    """Two servers append to one authority. The embedded vector index admits one process per data
    directory, so the second server gets a data directory of its own; on SQLite its memory.db is a symlink
    to the first's (SQLite resolves the link, so both share one database, one WAL and one lock)."""
    data_dir, second_dir = tmp_path / "data", tmp_path / "data-2"
    secret = admin(make_settings(data_dir), lambda sites: auth.create_site(sites, "acme"))
    second_dir.mkdir()
    (second_dir / "memory.db").symlink_to(data_dir / "memory.db")
    first = server_processes.start(data_dir)
    # On PostgreSQL the second server is given the first one's database, as SQLite is given its file.
    second = server_processes.start(second_dir, env=server_env(**backends.current.env(data_dir)))
    writers, batches = 8, 8
    rng = random.Random(11)

    async def one(writer: int) -> dict:
        server = (first, second)[writer % 2]
        async with server.client("acme", secret) as client:
            return await appender(client, writer, batches, random.Random(rng.random()))

    results = await asyncio.gather(*(one(w) for w in range(writers)))
    acks = {k: v for result in results for k, v in result.items()}
    views = []
    for server in (first, second):
        async with server.client("acme", secret) as client:
            views.append(await read_all(client, CONVERSATION))
    assert views[0] == views[1]  # both processes read the same log
    assert_exactly_once(views[0], acks)
    # Both really served appends, through the one WAL beside the real file.
    assert {w % 2 for (w, _) in acks} == {0, 1}
    if backends.current.name == "sqlite":
        assert (data_dir / "memory.db-wal").exists() and not (second_dir / "memory.db-wal").exists()


# A child process: its own storage (its own writer on the same SQLite file); prints the acknowledgements as
# JSON. Plain subprocesses keep start-up cheap (no test-module imports in the child).
APPENDER = """
import asyncio, json, random, sys
from pathlib import Path
from memory_server.settings import Settings
from memory_server.storage.factory import open_storage

data_dir, site_id, writer, batches, conversation = sys.argv[1:]
site_id, writer, batches = int(site_id), int(writer), int(batches)
rng = random.Random(writer)
storage = open_storage(Settings(data_dir=Path(data_dir)))

async def main():
    acks = []
    for batch in range(batches):
        size = rng.randint(1, 20)
        texts = [json.dumps({"writer": writer, "batch": batch, "pos": pos, "size": size}) for pos in range(size)]
        acks.append([batch, dict(await storage.logs.append(site_id, conversation, texts, None))])
    return acks

acks = asyncio.run(main())
storage.close()
print(json.dumps(acks))
"""


async def test_processes_appending_through_sqlite(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    admin(settings, lambda sites: auth.create_site(sites, "acme"))
    site_id = admin(settings, lambda sites: sites.site_id("acme"))
    writers, batches = 6, 25
    children = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(settings.data_dir), str(site_id), str(w), str(batches), CONVERSATION],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **backends.current.env(settings.data_dir)},
        )
        for w in range(writers)
    ]
    acks = {}
    try:
        for writer, child in enumerate(children):
            out, err = await asyncio.to_thread(child.communicate, timeout=120)
            assert child.returncode == 0, err
            acks.update({(writer, batch): ack for batch, ack in json.loads(out)})
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert len(acks) == writers * batches

    storage = open_storage(settings)  # read back straight from storage: HTTP is not the point here
    try:
        rows = storage.logs.replay(site_id, CONVERSATION, 0, 10_000)
    finally:
        storage.close()
    items = [{"seq": seq, "recorded_at": at, "payload": json.loads(payload)} for seq, at, payload in rows]
    assert_exactly_once(items, acks)
