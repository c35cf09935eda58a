"""Log indexing through real server processes, on SQLite and on PostgreSQL: a server killed (SIGKILL) after
acknowledging appends and before indexing them indexes every acknowledged item exactly once when it starts
again; turning indexing on for a site with a 100k-item log backfills it in the background with progress while
recall answers; an export carries the setting and an import indexes the items again; `reindex` covers the
turns.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx2
import pytest

from memory_server.auth import admin
from memory_server.storage.factory import open_storage
from memory_server.timestamps import now_rfc3339

from conftest import make_settings, query
from procs import ServerProcess, parse_fields, run_cli

pytestmark = pytest.mark.backends

WAIT_S = 600.0


def create_site(data_dir: Path, name: str, *, index_logs: bool) -> str:
    created = run_cli("site", "create", name, data_dir=data_dir)
    assert created.returncode == 0, created.stderr
    if index_logs:
        done = run_cli("site", "set", name, "--index-logs", data_dir=data_dir)
        assert done.returncode == 0, done.stderr
    return parse_fields(created.stdout)["secret"]


def started(data_dir: Path) -> ServerProcess:
    """A server process on the data directory, ready (waiting out a slow /readyz on a loaded machine); killed
    if it never gets there."""
    server = ServerProcess(data_dir).start()
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                if httpx2.get(f"{server.base}/readyz", timeout=30).status_code == 200:
                    return server
            except httpx2.TimeoutException:
                pass
            assert time.monotonic() < deadline, f"server not ready:\n{server.log()}"
            time.sleep(0.1)
    except BaseException:
        server.kill()
        raise


def client(server: ServerProcess, site: str, secret: str) -> httpx2.Client:
    return httpx2.Client(base_url=server.base, auth=httpx2.BasicAuth(site, secret), timeout=120)


def waiting(data_dir: Path) -> int:
    [(count,)] = query(
        make_settings(data_dir),
        "SELECT coalesce(sum(item_count - indexed_seq), 0) FROM conversations"
        " WHERE indexing = ? AND indexed_seq < item_count",
        True,
    )
    return int(count)


def wait_indexed(data_dir: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while waiting(data_dir):
        assert time.monotonic() < deadline, "log items still waiting to be indexed"
        time.sleep(0.2)


def turn_counts(data_dir: Path) -> dict[tuple[str, int], int]:
    rows = query(
        make_settings(data_dir),
        "SELECT conversation_id, conversation_seq, count(*) FROM memories"
        " WHERE kind = 'turn' GROUP BY conversation_id, conversation_seq",
    )
    return {(str(c), int(s)): int(n) for c, s, n in rows}


def test_a_server_killed_before_indexing_indexes_every_acknowledged_item_once_on_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    secret = create_site(data_dir, "acme", index_logs=True)
    conversations = [f"conv-{uuid.uuid4().hex}" for _ in range(3)]
    acknowledged: set[tuple[str, int]] = set()
    server = started(data_dir)
    try:
        with client(server, "acme", secret) as http:
            for n, conversation in enumerate(conversations):
                items: list[dict[str, object]] = [
                    {"role": "user", "content": f"Incident {n}-{i}: the valve {i % 9} leaked."} for i in range(600)
                ]
                items[::50] = [{"tool": "probe", "reading": i} for i in range(len(items[::50]))]  # no text
                response = http.post(
                    f"/v1/conversations/{conversation}/items", json={"items": items, "idempotency_key": f"batch-{n}"}
                )
                assert response.status_code == 201, response.text
                ack = response.json()
                acknowledged |= {
                    (conversation, seq)
                    for seq in range(ack["first_seq"], ack["last_seq"] + 1)
                    if "content" in items[seq - ack["first_seq"]]
                }
    finally:
        server.kill()  # SIGKILL: whatever the indexer had not committed is lost with the process
    # The precondition of this test: items were acknowledged and not indexed when the process died (1,800
    # items take the model tens of seconds; the appends took well under one).
    assert waiting(data_dir) > 0

    server = started(data_dir)
    try:
        wait_indexed(data_dir)
        counts = turn_counts(data_dir)
        assert set(counts) == acknowledged and set(counts.values()) == {1}
        with client(server, "acme", secret) as http:
            # A retry of an acknowledged batch appends nothing and indexes nothing more.
            again = http.post(
                f"/v1/conversations/{conversations[0]}/items",
                json={"items": [{"text": "retry"}], "idempotency_key": "batch-0"},
            )
            assert again.status_code == 200 and again.json()["duplicate"]
            hits = http.post("/v1/recall", json={"query": "which valve leaked in incident 1-7", "kinds": ["turn"]})
            assert hits.status_code == 200
            assert {h["provenance"]["conversation_id"] for h in hits.json()["results"]} <= set(conversations)
        assert turn_counts(data_dir) == counts
        progress = parse_fields(run_cli("site", "show", "acme", data_dir=data_dir).stdout)["log items indexed"]
        assert progress == "0 items waiting, 1800 done (36 without text, skipped)"
    finally:
        server.stop()


def test_turning_indexing_on_backfills_a_100k_item_log_while_recall_answers(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    storage = open_storage(make_settings(data_dir))
    try:
        secret = admin.create_site(storage.sites, "acme")
        site_id = storage.sites.site_id("acme")
        assert site_id is not None
        # 100 conversations of 1,000 items, built through the storage layer. One item in 50 has text (2,000 to
        # embed: tens of seconds of model time on 2 cores); the rest are tool calls, skipped and counted.
        at = now_rfc3339()
        for c in range(100):
            items = [
                (
                    seq,
                    at,
                    json.dumps(
                        {"role": "assistant", "content": f"Shipment {c}-{seq} left dock {seq % 13}."}
                        if seq % 50 == 7
                        else {"tool": "scan", "c": c, "seq": seq}
                    ),
                )
                for seq in range(1000)
            ]
            assert set(storage.logs.import_items(site_id, f"conv-{c:04d}-backfill", items)) == {"appended"}
    finally:
        storage.close()

    server = started(data_dir)
    try:
        done = run_cli("site", "set", "acme", "--index-logs", data_dir=data_dir)
        assert done.returncode == 0, done.stderr
        assert "log items indexed: 100000 items waiting, 0 done (0 without text, skipped)" in done.stdout
        with client(server, "acme", secret) as http:
            # Recall answers while the backfill runs; /readyz stays ready and says how far it is.
            assert http.post("/v1/recall", json={"query": "shipment left dock"}).status_code == 200
            ready = httpx2.get(f"{server.base}/readyz", timeout=30)
            assert ready.status_code == 200
            wait_indexed(data_dir)
            assert "log_indexing" not in httpx2.get(f"{server.base}/readyz", timeout=30).json()
            hits = http.post(
                "/v1/recall", json={"query": "Shipment 42-507 left dock", "kinds": ["turn"], "limit": 3}
            ).json()["results"]
            assert hits[0]["provenance"] == {"conversation_id": "conv-0042-backfill", "seq": 507}
            assert hits[0]["content"] == "assistant: Shipment 42-507 left dock 0."
        shown = parse_fields(run_cli("site", "show", "acme", data_dir=data_dir).stdout)
        assert shown["log items indexed"] == "0 items waiting, 100000 done (98000 without text, skipped)"
        assert len(turn_counts(data_dir)) == 2000
    finally:
        server.stop()


def test_an_export_carries_the_setting_an_import_indexes_again_and_reindex_covers_turns(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    secret = create_site(source, "acme", index_logs=True)
    conversation = f"conv-{uuid.uuid4().hex}"
    server = started(source)
    try:
        with client(server, "acme", secret) as http:
            http.post(
                f"/v1/conversations/{conversation}/items",
                json={
                    "items": [
                        {"speaker": "Ann", "text": "The telescope mirror arrives in March."},
                        {"speaker": "Bo", "text": "Then we recoat it in April."},
                    ],
                    "bucket": "lab",
                },
            ).raise_for_status()
            http.post("/v1/memories", json={"content": "The observatory opens at dusk."}).raise_for_status()
        wait_indexed(source)
    finally:
        server.stop()
    exported = run_cli("export", str(tmp_path / "acme.jsonl"), "--site", "acme", data_dir=source)
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in (tmp_path / "acme.jsonl").read_text().splitlines()]
    assert {"kind": "site", "site": "acme", "index_logs": True} in records
    assert {
        "kind": "conversation",
        "site": "acme",
        "conversation_id": conversation,
        "index": None,
        "bucket": "lab",
    } in records
    assert [r["content"] for r in records if r["kind"] == "memory"] == ["The observatory opens at dusk."]
    assert len([r for r in records if r["kind"] == "log_item"]) == 2

    imported = run_cli("import", str(tmp_path / "acme.jsonl"), data_dir=target)
    assert imported.returncode == 0, imported.stderr
    fields = parse_fields(imported.stdout)
    assert fields["log items appended"] == "2" and fields["log items to index"].startswith("2 ")
    target_secret = fields["secret"]
    assert parse_fields(run_cli("site", "show", "acme", data_dir=target).stdout)["log indexing"] == "on"
    server = started(target)
    try:
        wait_indexed(target)
        with client(server, "acme", target_secret) as http:
            hits = http.post("/v1/recall", json={"query": "when is the mirror recoated", "kinds": ["turn"]}).json()
            assert {(h["content"], h["bucket"]) for h in hits["results"]} == {
                ("Ann: The telescope mirror arrives in March.", "lab"),
                ("Bo: Then we recoat it in April.", "lab"),
            }
    finally:
        server.stop()
    assert set(turn_counts(target)) == {(conversation, 0), (conversation, 1)}

    reindexed = run_cli("reindex", data_dir=target)
    assert reindexed.returncode == 0, reindexed.stderr
    assert "reindexed 3 memories" in reindexed.stdout
    server = started(target)
    try:
        with client(server, "acme", target_secret) as http:
            found = http.post(
                "/v1/search", json={"query": "telescope mirror arrives", "kinds": ["turn"], "min_score": 0.0}
            ).json()["results"]
            assert found and found[0]["provenance"] == {"conversation_id": conversation, "seq": 0}
    finally:
        server.stop()
