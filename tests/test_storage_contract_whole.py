"""The storage as a whole on SQLite and PostgreSQL (a consistent snapshot, probe and integrity), then
PostgreSQL's own promises: appenders in several processes, replicas migrating one database at once, a
duplicate key raced by two servers, a restart or a stopped database under load, export through the factory.

Part of the storage seam's contract suite (tests/README.md lists the others); the fixtures and records
are in tests/storage_support.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from storage_support import (
    check_acks,
    remember,
    run_appenders,
    site,
    storage,  # noqa: F401
)

from memory_server.errors import NotFound, Unavailable
from memory_server.storage.factory import open_snapshot, open_storage
from memory_server.storage.postgres.schema import SCHEMA
from memory_server.storage.postgres.storage import PostgresStorage
from memory_server.storage.protocols import Storage

from conftest import make_settings
from tests.postgres import PostgresServer

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


async def test_snapshot_is_consistent_while_writes_go_on(storage: Storage, tmp_path: Path) -> None:
    sid, other = site(storage), site(storage, "other")
    await storage.logs.append(sid, "conv-0001", ['{"n":0}', '{"n":1}'], None)
    await storage.logs.append(other, "conv-0002", ['{"n":0}'], None)
    remember(storage, sid, "kept in the export", metadata={"b": 1, "a": 2})
    snapshot = storage.snapshot(None)
    try:
        await storage.logs.append(sid, "conv-0001", ['{"n":2}'], None)
        await storage.logs.append(sid, "conv-0003", ['{"n":0}'], None)
        remember(storage, sid, "written after the snapshot")
        assert snapshot.counts == {"memories": 1, "conversations": 2, "log_items": 3}
        exported = list(snapshot.memories())
        assert [(m["site"], m["content"]) for m in exported] == [("acme", "kept in the export")]
        assert list(exported[0]) == [
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
        assert list(exported[0]["metadata"]) == ["b", "a"]
        items = list(snapshot.log_items())
        assert [(s, c, item[0], item[2]) for s, c, item in items] == [
            ("acme", "conv-0001", 0, '{"n":0}'),
            ("acme", "conv-0001", 1, '{"n":1}'),
            ("other", "conv-0002", 0, '{"n":0}'),
        ]
    finally:
        snapshot.close()
    one = storage.snapshot("other")
    try:
        assert one.counts == {"memories": 0, "conversations": 1, "log_items": 1}
    finally:
        one.close()
    with pytest.raises(NotFound):
        storage.snapshot("nobody")


def test_probe_and_integrity(storage: Storage) -> None:
    assert storage.probe() == [] and storage.check_integrity() is None and not storage.integrity_unchecked
    assert storage.health.problems() == []


def test_appenders_in_several_processes_share_four_conversations(postgres_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", database_url=postgres_url)
    storage = open_storage(settings)
    try:
        sid = site(storage)
        acks = run_appenders(postgres_url, tmp_path / "data", sid, writers=4, batches=30)
        assert len(acks) == 4 * 30
        counts = check_acks(
            storage, sid, acks, lambda key, pos: json.dumps({"writer": key[0], "batch": key[1], "pos": pos})
        )
        assert sum(counts.values()) == sum(a["count"] for a in acks.values()) and len(counts) == 4
    finally:
        storage.close()


def test_replicas_migrating_one_empty_database_at_once(postgres_url: str, tmp_path: Path) -> None:
    start = threading.Barrier(3)
    opened: list[Storage] = []
    failures: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(open_storage(make_settings(tmp_path / "data", database_url=postgres_url)))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert failures == [] and len(opened) == 3
        with psycopg.connect(postgres_url) as conn:
            versions = [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == list(range(1, len(SCHEMA) + 1))
        opened[0].sites.create_site("acme", "h")
        assert opened[1].sites.site_id("acme") is not None
    finally:
        for storage in opened:
            storage.close()


async def test_a_duplicate_key_raced_by_two_servers_appends_once(postgres_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", database_url=postgres_url)
    first, second = open_storage(settings), open_storage(settings)
    try:
        sid = site(first)
        for n in range(15):
            acks = await asyncio.gather(
                *(s.logs.append(sid, "conv-raced-0001", [f'{{"n":{n}}}', '{"x":0}'], f"k{n}") for s in (first, second))
            )
            assert sorted(a["duplicate"] for a in acks) == [False, True]
            assert acks[0]["first_seq"] == acks[1]["first_seq"] == 2 * n
        items = first.logs.replay(sid, "conv-raced-0001", 0, 1000)
        assert [seq for seq, _, _ in items] == list(range(30))
    finally:
        first.close()
        second.close()


async def _append_until(
    storage: Storage, sid: int, writer: int, stop: threading.Event, results: list[tuple[Any, Any]]
) -> None:
    batch = 0
    while not stop.is_set():
        texts = [json.dumps({"writer": writer, "batch": batch, "pos": pos}) for pos in range(3)]
        try:
            results.append(
                ((writer, batch), await storage.logs.append(sid, f"conv-restart-{writer % 2:04d}", texts, None))
            )
        except Unavailable as exc:
            results.append(((writer, batch), exc))
        batch += 1
        await asyncio.sleep(0.005)


async def test_a_restart_under_load_answers_unavailable_and_recovers(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    """`pg_ctl restart -m fast` while six appenders run: each call is acknowledged or answered
    `unavailable` (never another error), nothing acknowledged is lost, and the pools reconnect by themselves."""
    storage = open_storage(make_settings(tmp_path / "data", database_url=postgres_url))
    try:
        sid = site(storage)
        stop, results = threading.Event(), []
        tasks = [asyncio.create_task(_append_until(storage, sid, w, stop, results)) for w in range(6)]
        await asyncio.sleep(0.5)
        await asyncio.to_thread(postgres_server.restart, "fast")
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*tasks)
        acks = {key: ack for key, ack in results if isinstance(ack, dict)}
        refused = [exc for _, exc in results if isinstance(exc, Unavailable)]
        assert len(acks) + len(refused) == len(results) and len(acks) > 20
        check_acks(storage, sid, acks, lambda key, pos: json.dumps({"writer": key[0], "batch": key[1], "pos": pos}))
        after = await storage.logs.append(sid, "conv-restart-0000", ['{"after":true}'], None)
        assert after["duplicate"] is False and storage.probe() == []
    finally:
        storage.close()


async def test_a_stopped_database_is_unavailable_until_it_is_back(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    storage = PostgresStorage(postgres_url, retry_budget_s=1.0)
    try:
        sid = site(storage)
        await storage.logs.append(sid, "conv-0001", ['{"n":0}'], None)
        postgres_server.stop()
        try:
            with pytest.raises(Unavailable, match="PostgreSQL"):
                await storage.logs.append(sid, "conv-0001", ['{"n":1}'], None)
            with pytest.raises(Unavailable):
                storage.logs.tail(sid, "conv-0001", 5)
            assert any(reason.startswith("postgres:") for reason in storage.probe())
        finally:
            postgres_server.start()
        deadline = time.monotonic() + 30
        while True:  # both pools reconnect in the background, with back-off
            try:
                ack = await storage.logs.append(sid, "conv-0001", ['{"n":1}'], "after-start")
                tail = storage.logs.tail(sid, "conv-0001", 5)
                break
            except Unavailable:
                assert time.monotonic() < deadline, "the storage did not recover"
        assert ack["first_seq"] == 1 and [text for _, _, text in tail] == ['{"n":0}', '{"n":1}']
    finally:
        storage.close()


def test_export_from_postgres_through_the_factory(postgres_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", database_url=postgres_url)
    with pytest.raises(NotFound):
        open_snapshot(settings, site=None)  # nothing was ever stored there
    storage = open_storage(settings)
    try:
        site(storage)
        snapshot = open_snapshot(settings, site="acme")
        assert snapshot.counts == {"memories": 0, "conversations": 0, "log_items": 0}
        snapshot.close()
    finally:
        storage.close()


def test_appends_from_many_event_loops_do_not_pile_up_connections(postgres_url: str, tmp_path: Path) -> None:
    """Each `asyncio.run` is a new loop with its own append pool: the pools of finished loops are closed."""
    storage = open_storage(make_settings(tmp_path / "data", database_url=postgres_url))
    try:
        sid = site(storage)
        for n in range(25):
            ack = asyncio.run(storage.logs.append(sid, "conv-0001", [f'{{"n":{n}}}'], None))
            assert ack["first_seq"] == n
        with psycopg.connect(postgres_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert row is not None and row[0] <= 4  # this loop's pool and the blocking pool, not one per loop
    finally:
        storage.close()
