"""`memory-server export`, `import` and `backup`, run as real subprocesses against real data directories.

Servers are the real app on a real port (conftest `serve`/`live`), in this process; the CLI runs as a child
process, so the embedded index lock and SQLite's cross-process locking are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client

from memory_server.auth import admin as auth
from memory_server.storage.factory import open_storage
from memory_server.storage.records import APPENDED, PRESENT

from conftest import LiveServer, execute, index_backlog, make_settings, query, serve
from procs import REPO_ROOT, batch_payloads, check_log, parse_fields, run_cli, server_env
from tests import backends

pytestmark = pytest.mark.backends

SITE = "acme"

FACTS = [
    dict(
        content="We decided to authenticate MCP clients with Basic credentials per site and scoped bearer tokens.",
        type="decision",
        project="memory-os",
        team="platform",
        bucket="eng",
        tags=["auth", "mcp"],
        metadata={"zeta": 1, "alpha": {"b": [1, 2], "a": None}},
        location="projects/memory-os/decisions",
    ),
    dict(
        content="The staging database is backed up every night at 02:00 UTC to object storage.",
        type="fact",
        project="infra",
        team="ops",
        bucket="eng",
        tags=["backup"],
        occurred_at="2024-05-08T13:56:00Z",
    ),
    dict(
        content="Alice prefers dark roast coffee and dislikes early meetings.",
        type="preference",
        bucket="personal",
        tags=["alice"],
        provenance={"source": "chat", "conversation_id": "conv-transfer-a", "seq": 1},
    ),
    dict(
        content="Our team dinner is booked at the Italian restaurant on Friday evening.",
        type="event",
        bucket="personal",
    ),
    dict(content="The Lisbon warehouse keeps spare routers on shelf 14, next to the label printer.", type="fact"),
]
QUERIES = [
    "how do clients log in?",
    "when are backups taken?",
    "what coffee does Alice like?",
    "where are the spare routers?",
    "dinner plans",
]


# --- helpers ---------------------------------------------------------------------------------------------


def cli(*args: str, data_dir: Path | None = None, input: str | None = None) -> subprocess.CompletedProcess[str]:
    if input is None:
        return run_cli(*args, data_dir=data_dir)
    command = [sys.executable, "-m", "memory_server", *args] + (["--data-dir", str(data_dir)] if data_dir else [])
    env = {**backends.current.env(data_dir), **server_env()}
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, input=input)


def ok(*args: str, data_dir: Path | None = None, input: str | None = None) -> subprocess.CompletedProcess[str]:
    done = cli(*args, data_dir=data_dir, input=input)
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr
    return done


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records),
        encoding="utf-8",
    )
    return path


def db_counts(data_dir: Path) -> dict[str, int]:
    settings = make_settings(data_dir)
    return {
        name: int(query(settings, f"SELECT count(*) FROM {name}")[0][0])
        for name in ("sites", "memories", "conversations", "log_items")
    }


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def replay_all(client: Client, conversation_id: str, page: int = 7) -> list[list[dict[str, Any]]]:
    """Every replay_memory page of a conversation (a short page is the end)."""
    pages = []
    offset = 0
    while True:
        items = (await call(client, "replay_memory", conversation_id=conversation_id, limit=page, offset=offset))[
            "items"
        ]
        pages.append(items)
        offset += len(items)
        if len(items) < page:
            return pages


async def observe(client: Client, conversations: list[str]) -> dict[str, Any]:
    """What a client sees: replay pages, list_conversations, and recall answers."""
    recalls, scores = {}, {}
    for question in QUERIES:
        hits = (await call(client, "recall", query=question, limit=4))["results"]
        recalls[question] = [
            (
                h["reference"],
                h["content"],
                h["type"],
                h["location"],
                h["project"],
                h["team"],
                h["bucket"],
                h["tags"],
                h["metadata"],
                h["provenance"],
                h["occurred_at"],
                h["created_at"],
            )
            for h in hits
        ]
        scores[question] = [h["score"] for h in hits]
    listed = (await call(client, "list_conversations", limit=100))["conversations"]
    return {
        "replay": {cid: await replay_all(client, cid) for cid in conversations},
        "list": listed,
        "recall": recalls,
        "scores": scores,
    }


def log_line(
    conversation_id: str, seq: int, payload: Any, *, site: str = SITE, recorded_at: str = "2024-05-08T13:56:00.000000Z"
) -> dict[str, Any]:
    return {
        "kind": "log_item",
        "site": site,
        "conversation_id": conversation_id,
        "seq": seq,
        "recorded_at": recorded_at,
        "payload": payload,
    }


# --- the import rule for log items, on its own ---------------------------------------------------------


def test_import_log_items_continues_gaplessly_and_keeps_recorded_at(tmp_path: Path) -> None:
    storage = open_storage(make_settings(tmp_path / "data"))
    try:
        logs, site_id = storage.logs, storage.sites.create_site("acme", "x")
        cid = "conv-rules-0001"
        t1, t2 = "2024-01-01T00:00:00.000001Z", "2024-01-02T00:00:00.000002Z"
        items = [(0, t1, '{"n":0}'), (1, t1, '{"n":1}'), (2, t2, '{"n":2}')]
        assert logs.import_items(site_id, cid, items) == [APPENDED] * 3
        assert logs.replay(site_id, cid, 0, 10) == items
        [conversation] = logs.conversations(site_id, 10, None).conversations
        assert (conversation["item_count"], conversation["first_recorded_at"], conversation["last_recorded_at"]) == (
            3,
            t1,
            t2,
        )

        again = [
            (1, t1, '{"n":1}'),
            (2, t2, '{"n":2}'),
            (3, t2, '{"n":3}'),
            (3, t2, '{"n":3}'),
            (3, t2, '{"n":"3b"}'),
            (5, t2, '{"n":5}'),
            (0, t1, '{"n":"other"}'),
            (1, t1, '{"n": 1}'),
        ]
        outcomes = logs.import_items(site_id, cid, again)
        assert outcomes[:4] == [PRESENT, PRESENT, APPENDED, PRESENT]  # a repeated line is harmless
        assert outcomes[4].startswith("conflict:") and "twice" in outcomes[4]
        assert outcomes[5].startswith("gap:") and "must be 4, not 5" in outcomes[5]
        assert outcomes[6].startswith("conflict:") and "seq 0" in outcomes[6]
        assert outcomes[7].startswith("conflict:")  # the same values in another spacing is another payload
        stored = logs.replay(site_id, cid, 0, 10)
        assert len(stored) == 4 and stored[0][2] == '{"n":0}'
    finally:
        storage.close()


# --- export -> import reproduces what clients see --------------------------------------------------------


async def test_export_import_round_trip_reproduces_replay_and_recall(tmp_path: Path, embedder: Any) -> None:
    """From SQLite to the backend under test: on PostgreSQL this is how a deployment moves there."""
    backends.current.keep_on_sqlite(tmp_path / "source")
    source = make_settings(tmp_path / "source")
    conversations = ["conv-transfer-a", "conv-transfer-b", "conv-transfer-c"]
    rng = random.Random(7)
    with serve(source, embedder, site=SITE) as server:
        async with server.client() as client:
            references = [(await call(client, "remember", **fact))["reference"] for fact in FACTS]
            for round_ in range(4):
                for cid in conversations if round_ % 2 == 0 else conversations[::-1]:
                    items = [
                        {
                            "zeta": round_,
                            "alpha": 'é ✓ \u2028 "quoted"',
                            "nested": {"b": [1, 2.5], "a": None},
                            "n": rng.randint(0, 10**18),
                        }
                        for _ in range(rng.randint(1, 5))
                    ]
                    await call(client, "append_memory", conversation_id=cid, items=items)
            before = await observe(client, conversations)
    assert [hit[0] for hit in before["recall"]["where are the spare routers?"]][0] == references[4]

    export_file = tmp_path / "export.jsonl"
    ok("export", str(export_file), data_dir=source.data_dir)
    records = read_jsonl(export_file)
    header, body = records[0], records[1:]
    assert header["kind"] == "header" and header["version"] == 1 and header["model"] == embedder.name
    assert header["counts"]["memories"] == len(FACTS)
    assert sum(1 for r in body if r["kind"] == "memory") == len(FACTS)
    assert sum(1 for r in body if r["kind"] == "log_item") == header["counts"]["log_items"]
    text = export_file.read_text()
    assert "secret" not in text and "scrypt" not in text and "token_hash" not in text
    memory = next(r for r in body if r["kind"] == "memory")
    assert list(memory) == [
        "kind",
        "site",
        "reference",
        "content",
        "type",
        "location",
        "project",
        "team",
        "bucket",
        "tags",
        "metadata",
        "provenance",
        "occurred_at",
        "created_at",
        "updated_at",
    ]
    assert list(memory["metadata"]) == ["zeta", "alpha"]  # key order kept

    target = tmp_path / "target"
    first = ok("import", str(export_file), data_dir=target)
    fields = parse_fields(first.stdout)
    assert fields["created site"] == SITE and fields["username"] == SITE
    assert fields["memories created"] == str(len(FACTS))
    assert fields["log items appended"] == str(header["counts"]["log_items"])
    assert fields["rejected lines"] == "0"
    counts = db_counts(target)

    # Idempotent: a second run adds nothing, creates no site and prints no secret.
    second = parse_fields(ok("import", str(export_file), data_dir=target).stdout)
    assert "secret" not in second
    assert second["memories created"] == "0" and second["memories already present"] == str(len(FACTS))
    assert second["log items appended"] == "0"
    assert second["log items already present"] == str(header["counts"]["log_items"])
    assert db_counts(target) == counts

    with serve(make_settings(target), embedder, site="someone-else") as server:
        async with server.client(auth=httpx2.BasicAuth(SITE, fields["secret"])) as client:
            after = await observe(client, conversations)
    assert after["replay"] == before["replay"]  # seq, recorded_at and payload (key order too) identical
    assert [json.dumps(p, ensure_ascii=False) for p in after["replay"]["conv-transfer-a"][0]] == [
        json.dumps(p, ensure_ascii=False) for p in before["replay"]["conv-transfer-a"][0]
    ]
    assert after["list"] == before["list"]  # counts, first/last recorded_at, newest activity first
    assert after["recall"] == before["recall"]  # same references in the same order, same attributes
    for question, scores in before["scores"].items():  # re-embedded in batches: equal up to float noise
        assert after["scores"][question] == pytest.approx(scores, abs=1e-4)

    # And a re-export of the imported directory is the same file, line for line (but the header).
    again = tmp_path / "again.jsonl"
    ok("export", str(again), data_dir=target)
    assert again.read_text().splitlines()[1:] == text.splitlines()[1:]


async def test_a_sqlite_store_holding_nul_moves_with_every_other_record_and_the_bad_ones_reported(
    tmp_path: Path, embedder: Any
) -> None:
    """SQLite stores NUL; PostgreSQL's text cannot. A store written before the API refused it (the NULs are
    put into the SQLite file directly) moves to the backend under test: every other record is imported, each
    memory holding a NUL is reported with its line and skipped, on both backends alike; a log payload is JSON
    text, where NUL is an escape every backend holds, so it moves as it was."""
    backends.current.keep_on_sqlite(tmp_path / "source")
    source = make_settings(tmp_path / "source")
    texts = [f"Fact number {n} about the warehouse in Lisbon, shelf {n * 3}." for n in range(12)]
    payloads = [{"text": f"tool output {n} \x00 ends", f"key\x00{n}": [n]} for n in range(3)]
    with serve(source, embedder, site=SITE) as server:
        async with server.client() as client:
            references = [(await call(client, "remember", content=text))["reference"] for text in texts]
            await call(client, "append_memory", conversation_id="conv-nul-moves", items=payloads)
    execute(source, "UPDATE memories SET content = ? WHERE reference = ?", "Fact with a \x00 inside.", references[2])
    execute(
        source, "UPDATE memories SET provenance = ? WHERE reference = ?", '{"source": "chat\\u0000"}', references[5]
    )
    execute(source, "UPDATE memories SET metadata = ? WHERE reference = ?", '{"k\\u0000": 1}', references[9])

    export_file = tmp_path / "export.jsonl"
    ok("export", str(export_file), data_dir=source.data_dir)
    lines = {record.get("reference"): number for number, record in enumerate(read_jsonl(export_file), start=1)}
    target = tmp_path / "target"
    done = cli("import", str(export_file), data_dir=target)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    fields = parse_fields(done.stdout)
    assert fields["memories created"] == str(len(texts) - 3)
    assert fields["log items appended"] == str(len(payloads))
    assert fields["rejected lines"] == "3"
    for reference, field in ((references[2], "content"), (references[5], "provenance"), (references[9], "metadata")):
        assert (
            f"line {lines[reference]}: invalid_parameters: {field} holds the NUL character (U+0000)" in done.stderr
        ), done.stderr
    settings = make_settings(target)
    stored = {row[0] for row in query(settings, "SELECT reference FROM memories")}
    assert stored == set(references) - {references[2], references[5], references[9]}
    items = query(settings, "SELECT payload FROM log_items ORDER BY seq")
    assert [json.loads(row[0]) for row in items] == payloads
    assert index_backlog(settings) == 0

    # Run again: nothing more, the same three reported.
    again = cli("import", str(export_file), data_dir=target)
    assert parse_fields(again.stdout)["memories already present"] == str(len(texts) - 3)
    assert parse_fields(again.stdout)["rejected lines"] == "3"


def test_export_to_stdout_one_site_and_import_from_stdin_into_another(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = make_settings(data)
    storage = open_storage(settings)
    try:
        for name in ("acme", "globex"):
            site_id, _ = auth.ensure_site(storage.sites, name)
            for batch in range(3):
                asyncio.run(
                    storage.logs.append(
                        site_id,
                        f"conv-{name}-0001",
                        [json.dumps({"site": name, "batch": batch, "pos": p}, separators=(",", ":")) for p in range(2)],
                        None,
                    )
                )
    finally:
        storage.close()
    done = ok("export", "-", "--site", "acme", data_dir=data)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["site"] == "acme"
    assert {r["site"] for r in lines[1:]} == {"acme"} and len(lines) == 1 + 6
    assert "exported 0 memories and 6 log items" in done.stderr

    # `-` reads stdin; --site maps everything into one site (created, secret printed once).
    target = tmp_path / "target"
    imported = parse_fields(ok("import", "-", "--site", "initech", data_dir=target, input=done.stdout).stdout)
    assert imported["created site"] == "initech" and imported["secret"]
    assert imported["log items appended"] == "6"
    exported = ok("export", "-", data_dir=target).stdout.splitlines()[1:]
    originals = [line for line in done.stdout.splitlines()[1:]]
    assert [l.replace('"site":"initech"', '"site":"acme"') for l in exported] == originals  # noqa: E741

    refused = cli("export", "-", "--site", "nobody", data_dir=data)
    assert refused.returncode == 1 and "no site named 'nobody'" in refused.stderr
    existing = tmp_path / "exists.jsonl"
    existing.write_text("keep me\n")
    refused = cli("export", str(existing), data_dir=data)
    assert refused.returncode == 1 and "--force" in refused.stderr and existing.read_text() == "keep me\n"
    ok("export", str(existing), "--force", data_dir=data)
    assert read_jsonl(existing)[0]["kind"] == "header"


# --- bad input -------------------------------------------------------------------------------------------


def test_bad_lines_are_reported_by_number_and_the_rest_is_imported(tmp_path: Path) -> None:
    conv = "conv-malformed-01"
    good_memory = {
        "kind": "memory",
        "site": SITE,
        "reference": "mem_import_good",
        "content": "A valid memory.",
        "type": "fact",
        "created_at": "2024-01-01T00:00:00.000000Z",
        "updated_at": "2024-02-01T00:00:00.000000Z",
    }
    file = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"kind": "header", "version": 1},  # 1
            log_line(conv, 0, {"n": 0}),  # 2 ok
            '{"kind": "log_item", "site": "acme", ',  # 3 bad JSON
            {"kind": "mystery", "site": SITE},  # 4 unknown kind
            log_line("bad id!", 0, {"n": 0}),  # 5 invalid conversation id
            log_line(conv, 1, {"n": 1}),  # 6 ok
            {**good_memory, "reference": "mem_bad_type", "type": "not a word!"},  # 7 invalid memory field
            {**good_memory, "reference": "mem_empty", "content": "   "},  # 8 empty content
            "[1, 2, 3]",  # 9 not an object
            {**good_memory, "reference": "mem_extra", "colour": "red"},  # 10 unknown field
            "",  # 11 blank: ignored
            good_memory,  # 12 ok
            log_line(conv, 2, ["not", "an", "object"]),  # 13 payload not an object
            log_line(conv, 5, {"n": 5}),  # 14 gap
            log_line(conv, 0, {"n": "different"}),  # 15 conflict
            {**log_line(conv, 2, {"n": 2}), "recorded_at": "yesterday"},  # 16 bad timestamp
            log_line(conv, 2, {"n": 2}),  # 17 ok
            {**good_memory, "reference": "mem_dup", "created_at": None},  # 18 duplicate content: skipped
        ],
    )
    data = tmp_path / "data"
    done = cli("import", str(file), data_dir=data)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    fields = parse_fields(done.stdout)
    assert fields["log items appended"] == "3" and fields["memories created"] == "1"
    assert fields["memories duplicate"] == "1" and fields["rejected lines"] == "11"
    rejected = {
        int(line.split(":")[0].split()[1]): line
        for line in done.stderr.splitlines()
        if line.startswith("line ") and "skipped" not in line
    }
    assert sorted(rejected) == [3, 4, 5, 7, 8, 9, 10, 13, 14, 15, 16]
    assert "not valid JSON" in rejected[3]
    assert "unknown kind 'mystery'" in rejected[4]
    assert "conversation_id" in rejected[5]
    assert "type" in rejected[7] and "content" in rejected[8] and "colour" in rejected[10]
    assert "payload must be a JSON object" in rejected[13]
    assert "gap" in rejected[14] and "conflict" in rejected[15] and "recorded_at" in rejected[16]
    assert "skipped 1 lines holding a memory already here (the first, line 18: duplicate of mem_import_good" in (
        done.stderr
    )

    settings = make_settings(data)
    items = query(settings, "SELECT seq, payload FROM log_items ORDER BY seq")
    assert items == [(0, '{"n":0}'), (1, '{"n":1}'), (2, '{"n":2}')]
    memory = query(settings, "SELECT reference, created_at, updated_at FROM memories")
    assert memory == [("mem_import_good", "2024-01-01T00:00:00.000000Z", "2024-02-01T00:00:00.000000Z")]
    assert index_backlog(settings) == 0

    unsupported = write_jsonl(tmp_path / "v2.jsonl", [{"kind": "header", "version": 2}, log_line(conv, 3, {})])
    done = cli("import", str(unsupported), data_dir=data)
    assert done.returncode == 1 and "version 2 is not supported" in done.stderr
    assert db_counts(data)["log_items"] == 3


# --- while a server runs ---------------------------------------------------------------------------------


async def test_import_while_the_server_runs_logs_work_memories_refused(tmp_path: Path, live: LiveServer) -> None:
    data = live.settings.data_dir
    conv = "conv-live-import-1"
    recorded = ["2024-05-08T13:56:00.000001Z", "2024-05-08T13:57:00.000002Z"]
    logs = write_jsonl(
        tmp_path / "logs.jsonl",
        [
            log_line(conv, seq, {"seq": seq, "text": f"item {seq}"}, site=live.site, recorded_at=recorded[seq // 3])
            for seq in range(6)
        ],
    )
    memory = {"kind": "memory", "site": live.site, "content": "Imported while serving?", "reference": "mem_live"}
    memories = write_jsonl(tmp_path / "memories.jsonl", [memory])
    mixed = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            log_line("conv-live-import-2", 0, {"x": 1}, site="brand-new-site"),
            {**memory, "site": "brand-new-site"},
        ],
    )

    async with live.client() as client:
        done = ok("import", str(logs), data_dir=data)
        assert parse_fields(done.stdout)["log items appended"] == "6"
        # The running server sees the items at once, with their seq and recorded_at.
        items = (await call(client, "replay_memory", conversation_id=conv, limit=100))["items"]
        assert [(i["seq"], i["recorded_at"], i["payload"]) for i in items] == [
            (seq, recorded[seq // 3], {"seq": seq, "text": f"item {seq}"}) for seq in range(6)
        ]
        # Appending through the server continues the imported conversation.
        ack = await call(client, "append_memory", conversation_id=conv, items=[{"after": "import"}])
        assert ack["first_seq"] == 6

        before = db_counts(data)
        for file in (memories, mixed):
            refused = cli("import", str(file), data_dir=data)
            assert refused.returncode == 1
            assert "stop the server first, or use the REST/MCP API" in refused.stderr
            assert "Traceback" not in refused.stderr
            assert db_counts(data) == before  # nothing written: no site, no log item, no memory
        # The server is unharmed and still owns its index.
        result = await call(client, "remember", content="Written through the API while the CLI was refused.")
        assert result["created"] is True


class Acks(dict[tuple[int, int], dict[str, Any]]):
    """Acknowledgements by (writer, batch) as they arrive; `reached(n)` waits until there are n."""

    def __init__(self) -> None:
        super().__init__()
        self._grew = asyncio.Condition()

    async def add(self, key: tuple[int, int], ack: dict[str, Any]) -> None:
        async with self._grew:
            self[key] = ack
            self._grew.notify_all()

    async def reached(self, count: int) -> None:
        async with self._grew:
            await asyncio.wait_for(self._grew.wait_for(lambda: len(self) >= count), timeout=120)


async def test_export_while_appending_is_a_consistent_snapshot(tmp_path: Path, live: LiveServer) -> None:
    conversations = [f"conv-snapshot-{n:03d}" for n in range(3)]
    acks = Acks()
    conv_of: dict[tuple[int, int], str] = {}
    stop = asyncio.Event()

    async def appender(writer: int) -> None:
        rng = random.Random(writer)
        async with live.client() as client:
            batch = 0
            while not stop.is_set():
                cid = conversations[rng.randrange(len(conversations))]
                size = rng.randint(1, 8)
                ack = await call(
                    client, "append_memory", conversation_id=cid, items=batch_payloads(writer, batch, size)
                )
                conv_of[(writer, batch)] = cid
                await acks.add((writer, batch), ack)
                batch += 1

    tasks = [asyncio.create_task(appender(w)) for w in range(3)]
    try:
        await acks.reached(30)
        acked_before = dict(acks)
        export_file = tmp_path / "snapshot.jsonl"
        done = await asyncio.to_thread(cli, "export", str(export_file), data_dir=live.settings.data_dir)
        acked_during = len(acks) - len(acked_before)
        await acks.reached(len(acks) + 10)  # appends go on after the snapshot
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert done.returncode == 0, done.stderr
    assert acked_during > 0  # the server kept appending while the export ran

    records = read_jsonl(export_file)
    header, items = records[0], records[1:]
    assert header["counts"]["log_items"] == len(items)
    assert header["counts"]["conversations"] == len({r["conversation_id"] for r in items})
    for cid in conversations:
        exported = [
            {"seq": r["seq"], "recorded_at": r["recorded_at"], "payload": r["payload"]}
            for r in items
            if r["conversation_id"] == cid
        ]
        expected = {key: ack for key, ack in acked_before.items() if conv_of[key] == cid}
        check_log(exported, expected)  # gapless, whole batches, every batch acknowledged before it there
    total = db_counts(live.settings.data_dir)["log_items"]
    assert total > len(items)  # appends went on after the snapshot; none of them leaked into it


# --- backup ----------------------------------------------------------------------------------------------


@pytest.mark.sqlite_only
async def test_backup_while_appending_holds_everything_acknowledged_before_it(tmp_path: Path, live: LiveServer) -> None:
    conv = "conv-backup-000001"
    acks = Acks()
    stop = asyncio.Event()

    async def appender(writer: int) -> None:
        rng = random.Random(writer)
        async with live.client() as client:
            batch = 0
            while not stop.is_set():
                size = rng.randint(1, 10)
                await acks.add(
                    (writer, batch),
                    await call(
                        client, "append_memory", conversation_id=conv, items=batch_payloads(writer, batch, size)
                    ),
                )
                batch += 1

    async with live.client() as client:
        await call(client, "remember", content="The backup should carry this saved memory too.")
    tasks = [asyncio.create_task(appender(w)) for w in range(3)]
    target = tmp_path / "backups" / "memory-backup.db"
    try:
        await acks.reached(30)
        acked_before = dict(acks)
        done = await asyncio.to_thread(cli, "backup", str(target), data_dir=live.settings.data_dir)
        await acks.reached(len(acks) + 10)  # appends go on after the backup
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert done.returncode == 0, done.stderr
    out = parse_fields(done.stdout)
    assert out["backup"] == str(target) and out["quick_check"] == "ok"
    assert int(out["size"].split()[0]) == target.stat().st_size
    assert out["memories"] == "1" and "memory-server reindex" in done.stdout

    # A single self-contained, sound file, holding whole batches and everything acknowledged before it began.
    assert not Path(f"{target}-wal").exists()
    conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        rows = conn.execute(
            "SELECT seq, recorded_at, payload FROM log_items WHERE conversation_id = ? ORDER BY seq", (conv,)
        ).fetchall()
        assert int(out["log_items"]) == len(rows)
        count = conn.execute("SELECT item_count FROM conversations WHERE conversation_id = ?", (conv,)).fetchone()
        assert count[0] == len(rows)
    finally:
        conn.close()
    check_log([{"seq": s, "recorded_at": r, "payload": json.loads(p)} for s, r, p in rows], acked_before)

    # The backup is a usable data directory: export reads it.
    restored = tmp_path / "restored"
    restored.mkdir()
    target.rename(restored / "memory.db")
    exported = ok("export", "-", data_dir=restored).stdout.splitlines()
    assert json.loads(exported[0])["counts"]["log_items"] == len(rows)


@pytest.mark.sqlite_only
def test_backup_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    data = tmp_path / "data"
    open_storage(make_settings(data)).close()
    target = tmp_path / "b.db"
    target.write_text("precious")
    refused = cli("backup", str(target), data_dir=data)
    assert refused.returncode == 1 and "--force" in refused.stderr
    assert target.read_text() == "precious"
    ok("backup", str(target), "--force", data_dir=data)
    conn = sqlite3.connect(target)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    # A directory gets a timestamped file inside it; the live database itself is never a target.
    into_dir = parse_fields(ok("backup", str(tmp_path), data_dir=data).stdout)["backup"]
    assert Path(into_dir).parent == tmp_path and Path(into_dir).name.startswith("memory-")
    same = cli("backup", str(make_settings(data).db_path), "--force", data_dir=data)
    assert same.returncode == 1 and "live database" in same.stderr
    missing = cli("backup", str(tmp_path / "x.db"), data_dir=tmp_path / "nowhere")
    assert missing.returncode == 1 and "no database" in missing.stderr


def test_backup_on_postgresql_points_to_pg_dump_and_export(tmp_path: Path, storage_backend: str) -> None:
    if storage_backend != "postgres":
        pytest.skip("SQLite's backup is tested above")
    data = tmp_path / "data"
    ok("site", "create", SITE, data_dir=data)
    target = tmp_path / "b.db"
    refused = cli("backup", str(target), data_dir=data)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "pg_dump" in refused.stderr and "memory-server export" in refused.stderr
    assert not target.exists()
    assert "postgresql://" not in refused.stderr  # the URL (and any password in it) is never echoed
