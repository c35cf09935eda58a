"""Deleting conversation logs, against a real server on SQLite and on PostgreSQL: `DELETE
/v1/conversations/{id}`, `memory-server conversation delete`, a site's log retention purging in the
background while appends to other conversations go on, and an append racing a deletion.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from conftest import LiveServer, execute, make_settings, query, serve
from procs import parse_fields, run_cli

pytestmark = pytest.mark.backends

DAY_US = 86_400 * 1_000_000


@pytest.fixture(scope="module")
def srv(storage_backend: str, tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[LiveServer]:
    settings = make_settings(tmp_path_factory.mktemp("deletion") / "data", log_retention_interval_s=0.2)
    with serve(settings, embedder) as server:
        yield server


def new_site(srv: LiveServer) -> tuple[str, str]:
    name = f"site-{uuid.uuid4().hex[:12]}"
    return name, srv.create_site(name)


def http(srv: LiveServer, site: str, secret: str, authorization: str | None = None) -> httpx2.AsyncClient:
    header = authorization or srv.basic_header(site=site, secret=secret)
    return httpx2.AsyncClient(base_url=srv.base, headers={"Authorization": header}, timeout=120)


def cid() -> str:
    return f"conv-{uuid.uuid4().hex}"


def error_of(response: httpx2.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert body["code"] == code and body["retryable"] is (code == "unavailable"), body
    return str(body["message"])


def cli(srv: LiveServer, *args: str) -> Any:
    return run_cli(*args, data_dir=srv.settings.data_dir)


def ok(srv: LiveServer, *args: str) -> str:
    done = cli(srv, *args)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def exported(srv: LiveServer, site: str) -> list[dict[str, Any]]:
    done = cli(srv, "export", "-", "--site", site)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


async def append(
    client: httpx2.AsyncClient, conversation: str, items: list[dict[str, Any]], key: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"items": items}
    if key is not None:
        body["idempotency_key"] = key
    response = await client.post(f"/v1/conversations/{conversation}/items", json=body)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


async def items_of(client: httpx2.AsyncClient, conversation: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while True:
        page = (
            await client.get(f"/v1/conversations/{conversation}/items", params={"offset": len(found), "limit": 1000})
        ).json()["items"]
        found += page
        if len(page) < 1000:
            return found


async def listed(client: httpx2.AsyncClient) -> set[str]:
    page = (await client.get("/v1/conversations", params={"limit": 1000})).json()
    return {c["conversation_id"] for c in page["conversations"]}


# --- DELETE /v1/conversations/{id} ----------------------------------------------------------------------


async def test_delete_removes_the_log_its_keys_and_memory_links_and_exports_lose_it(srv: LiveServer) -> None:
    site, secret = new_site(srv)
    gone, kept = cid(), cid()
    async with http(srv, site, secret) as client:
        await append(client, gone, [{"turn": 0, "text": "the secret plan"}, {"turn": 1}], key="batch-1")
        await append(client, gone, [{"turn": 2}], key="batch-2")
        await append(client, kept, [{"turn": 0}], key="batch-1")
        linked = (
            await client.post(
                "/v1/memories",
                json={
                    "content": "We ship on Fridays.",
                    "provenance": {"source": "chat", "conversation_id": gone, "seq": 1},
                },
            )
        ).json()["reference"]
        other = (
            await client.post(
                "/v1/memories",
                json={"content": "Deploys need a review.", "provenance": {"conversation_id": kept, "seq": 0}},
            )
        ).json()["reference"]
        assert any(gone in json.dumps(record) for record in exported(srv, site))

        response = await client.delete(f"/v1/conversations/{gone}")
        assert response.status_code == 200, response.text
        assert response.json() == {
            "conversation_id": gone,
            "deleted": True,
            "item_count": 3,
            "memories_unlinked": 1,
            "turns_deleted": 0,
        }

        assert await items_of(client, gone) == []
        assert (await client.get(f"/v1/conversations/{gone}/items", params={"count": 5})).json() == {"items": []}
        assert await listed(client) == {kept}
        error_of(await client.delete(f"/v1/conversations/{gone}"), 404, "not_found")
        memory = (await client.get(f"/v1/memories/{linked}")).json()
        assert memory["content"] == "We ship on Fridays." and memory["provenance"] == {"source": "chat"}
        assert (await client.get("/v1/memories", params={"provenance_conversation_id": gone})).json()["memories"] == []
        assert (await client.get(f"/v1/memories/{other}")).json()["provenance"] == {"conversation_id": kept, "seq": 0}
        hits = (await client.post("/v1/recall", json={"query": "when do we ship", "limit": 5})).json()["results"]
        assert linked in {hit["reference"] for hit in hits}  # still found, without the link

        records = exported(srv, site)
        assert not any(gone in json.dumps(record) or "the secret plan" in json.dumps(record) for record in records)
        assert any(kept in json.dumps(record) for record in records)
        [(rows,)] = query(srv.settings, "SELECT count(*) FROM log_items WHERE conversation_id = ?", gone)
        [(keys,)] = query(srv.settings, "SELECT count(*) FROM append_keys WHERE conversation_id = ?", gone)
        [(conversations,)] = query(srv.settings, "SELECT count(*) FROM conversations WHERE conversation_id = ?", gone)
        assert (rows, keys, conversations) == (0, 0, 0)

        # The id may be used again: a new log from seq 0, and the deleted log's keys are forgotten.
        again = await append(client, gone, [{"turn": "new"}], key="batch-1")
        assert (again["first_seq"], again["duplicate"]) == (0, False)
        assert [i["payload"] for i in await items_of(client, gone)] == [{"turn": "new"}]
        assert (await append(client, kept, [{"turn": 9}], key="batch-1"))["duplicate"]  # the other log kept its own


async def test_delete_is_basic_only_per_site_and_validates_the_id(srv: LiveServer) -> None:
    site, secret = new_site(srv)
    stranger, stranger_secret = new_site(srv)
    conversation = cid()
    async with http(srv, site, secret) as owner:
        await append(owner, conversation, [{"n": 0}])
        _, token = srv.create_token(scopes=["memory:read", "memory:write"], site=site)
        async with http(srv, site, secret, authorization=f"Bearer {token}") as bearer:
            message = error_of(
                await bearer.delete(f"/v1/conversations/{conversation}"), 422, "unprocessable_parameters"
            )
            assert "Basic" in message
            error_of(await bearer.delete("/v1/conversations/bad"), 422, "unprocessable_parameters")
        async with http(srv, stranger, stranger_secret) as other:
            error_of(await other.delete(f"/v1/conversations/{conversation}"), 404, "not_found")
            error_of(await other.delete(f"/v1/conversations/{cid()}"), 404, "not_found")
            for bad in ("short", "bad.chars.here", "c" * 65, "with%20space", "conv-0001%0A"):
                message = error_of(await other.delete(f"/v1/conversations/{bad}"), 422, "invalid_parameters")
                assert "conversation_id" in message
        async with httpx2.AsyncClient(base_url=srv.base, timeout=30) as anonymous:
            response = await anonymous.delete(f"/v1/conversations/{conversation}")
            error_of(response, 401, "unauthorized")
            assert "Basic" in response.headers["www-authenticate"]
        async with http(srv, site, "wrong-secret") as wrong:
            error_of(await wrong.delete(f"/v1/conversations/{conversation}"), 401, "unauthorized")
        assert len(await items_of(owner, conversation)) == 1  # nothing above deleted anything


# --- memory-server conversation delete ----------------------------------------------------------------


async def test_cli_deletes_a_conversation_while_the_server_runs(srv: LiveServer) -> None:
    site, secret = new_site(srv)
    gone, kept = cid(), cid()
    async with http(srv, site, secret) as client:
        for n in range(3):
            await append(client, gone, [{"n": n, "i": i} for i in range(400)], key=f"k{n}")
        await append(client, kept, [{"n": 0}])
        await client.post(
            "/v1/memories",
            json={"content": "Noted during the call.", "provenance": {"conversation_id": gone, "seq": 7}},
        )

        out = ok(srv, "conversation", "delete", "--site", site, gone)
        # The server's retention task (every 0.2 s here) finishes any deletion under way, this one too: the
        # memory's link is then removed by whichever purge step came first, and counted by that purger.
        assert re.fullmatch(rf"deleted conversation {gone}: 1200 items, [01] memories unlinked", out.strip())
        assert await items_of(client, gone) == [] and await listed(client) == {kept}
        assert not any(gone in json.dumps(record) for record in exported(srv, site))  # the memory's link too

        for args, says in [
            ((gone,), "not_found"),
            ((cid(),), "not_found"),
            (("bad id",), "invalid_parameters"),
            (("short",), "conversation_id must be"),
        ]:
            done = cli(srv, "conversation", "delete", "--site", site, *args)
            assert done.returncode == 1 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
        done = cli(srv, "conversation", "delete", "--site", "no-such-site", kept)
        assert done.returncode == 1 and "no site named 'no-such-site'" in done.stderr
        assert len(await items_of(client, kept)) == 1
        assert (await append(client, gone, [{"n": "new"}], key="k0"))["first_seq"] == 0


# --- an append racing a deletion ----------------------------------------------------------------------


async def test_an_append_racing_a_delete_lands_before_it_or_starts_a_new_log(srv: LiveServer) -> None:
    """Either the append commits before the deletion marks the conversation (and is deleted with it), or it
    waits for the purge and starts a new log at seq 0. Never anything in between."""
    site, secret = new_site(srv)
    outcomes = set()
    async with http(srv, site, secret) as client:
        for round_ in range(6):
            conversation = cid()
            for n in range(3):
                await append(client, conversation, [{"old": n, "i": i} for i in range(1000)])

            async def late_append(delay: float, conversation: str = conversation) -> dict[str, Any]:
                await asyncio.sleep(delay)
                return await append(client, conversation, [{"racing": True}])

            deletion, ack = await asyncio.gather(
                client.delete(f"/v1/conversations/{conversation}"), late_append(0.002 * round_)
            )
            assert deletion.status_code == 200, deletion.text
            remaining = [i["payload"] for i in await items_of(client, conversation)]
            if ack["first_seq"] == 0:
                assert remaining == [{"racing": True}]
                outcomes.add("after")
            else:
                assert ack["first_seq"] == 3000 and deletion.json()["item_count"] == 3001
                assert remaining == []
                outcomes.add("before")
    assert outcomes  # which of the two each round saw depends on timing; both are correct


# --- log retention ------------------------------------------------------------------------------------


def test_site_set_show_and_list_the_log_retention(srv: LiveServer) -> None:
    site, _ = new_site(srv)
    shown = parse_fields(ok(srv, "site", "show", site))
    assert set(shown) == {"name", "created", "log retention", "log indexing", "log items indexed"}
    assert (shown["name"], shown["log retention"]) == (site, "none")
    assert (
        ok(srv, "site", "set", site, "--log-retention-days", "30").strip()
        == f"site {site}: logs deleted 30 days after their last activity"
    )
    assert parse_fields(ok(srv, "site", "show", site))["log retention"] == "30 days"
    line = next(line for line in ok(srv, "site", "list").splitlines() if line.split()[0] == site)
    assert line.endswith("logs deleted 30 days after their last activity")
    for args, says in [
        (("--log-retention-days", "0"), "1-36500 days"),
        (("--log-retention-days", "x"), "--log-retention-days"),
        ((), "give --log-retention-days N, --no-log-retention, --index-logs or --no-index-logs"),
        (("--log-retention-days", "3", "--no-log-retention"), "either"),
    ]:
        done = cli(srv, "site", "set", site, *args)
        assert done.returncode != 0 and says in done.stderr + done.stdout and "Traceback" not in done.stderr
    done = cli(srv, "site", "set", "no-such-site", "--log-retention-days", "3")
    assert done.returncode == 1 and "no site named" in done.stderr
    assert "no site named" in cli(srv, "site", "show", "no-such-site").stderr
    assert ok(srv, "site", "set", site, "--no-log-retention").strip() == f"site {site}: logs kept until deleted"
    assert parse_fields(ok(srv, "site", "show", site))["log retention"] == "none"


class Appender:
    """Appends one item at a time to a few conversations of its own, timing each acknowledgement."""

    def __init__(self, client: httpx2.AsyncClient, conversations: list[str]) -> None:
        self.client = client
        self.conversations = conversations
        self.latencies: list[tuple[float, float]] = []  # (start, seconds)
        self.acks: dict[str, list[int]] = {c: [] for c in conversations}
        self.stop = asyncio.Event()

    async def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            conversation = self.conversations[n % len(self.conversations)]
            started = time.monotonic()
            ack = await append(self.client, conversation, [{"n": n}])
            self.latencies.append((started, time.monotonic() - started))
            self.acks[conversation].append(ack["first_seq"])
            n += 1


def watch_purge(srv: LiveServer, conversation: str, stop: threading.Event, seen: dict[str, float]) -> None:
    """When the conversation was marked (deleting) and when its last row went, as the database tells."""
    while not stop.is_set():
        rows = query(srv.settings, "SELECT deleting FROM conversations WHERE conversation_id = ?", conversation)
        now = time.monotonic()
        if rows and rows[0][0]:
            seen.setdefault("marked", now)
        if not rows:
            seen.setdefault("marked", now)
            seen["gone"] = now
            return
        time.sleep(0.01)


async def test_retention_purges_a_20k_item_log_while_other_conversations_append(srv: LiveServer) -> None:
    site, secret = new_site(srv)
    old, recent = cid(), cid()
    async with http(srv, site, secret) as client:
        for batch in range(20):
            await append(
                client, old, [{"batch": batch, "i": i, "text": "x" * 100} for i in range(1000)], key=f"key-{batch}"
            )
        await append(client, recent, [{"n": 0}])
        for seq in (0, 5000, 19999):
            await client.post(
                "/v1/memories",
                json={
                    "content": f"A fact from turn {seq} of the old call.",
                    "provenance": {"conversation_id": old, "seq": seq},
                },
            )
        ok(srv, "site", "set", site, "--log-retention-days", "7")
        appenders = [Appender(client, [cid() for _ in range(3)]) for _ in range(2)]
        tasks = [asyncio.create_task(a.run()) for a in appenders]
        await asyncio.sleep(0.5)  # appends under way before the purge starts
        seen: dict[str, float] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_purge, args=(srv, old, stop, seen), daemon=True)
        watcher.start()
        execute(
            srv.settings,
            "UPDATE conversations SET last_activity_us = last_activity_us - ? WHERE conversation_id = ?",
            8 * DAY_US,
            old,
        )  # its last activity: 8 days ago
        deadline = time.monotonic() + 120
        while "gone" not in seen and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # and appends after it
        for a in appenders:
            a.stop.set()
        await asyncio.gather(*tasks)
        stop.set()
        watcher.join(5)
        assert "gone" in seen, "the retention task did not purge the old conversation within 120 s"

        assert await items_of(client, old) == [] and old not in await listed(client)
        assert len(await items_of(client, recent)) == 1  # within the retention: kept
        for a in appenders:  # every append acknowledged, in order, gapless, and all of it readable
            for conversation, seqs in a.acks.items():
                assert seqs == list(range(len(seqs)))
                assert [i["seq"] for i in await items_of(client, conversation)] == seqs
        memories = (await client.get("/v1/memories", params={"limit": 10})).json()["memories"]
        assert len(memories) == 3 and all(m["provenance"] == {} for m in memories)

    during = [
        seconds
        for a in appenders
        for started, seconds in a.latencies
        if seen["marked"] <= started and started + seconds <= seen["gone"]
    ]
    everything = [seconds for a in appenders for _, seconds in a.latencies]
    purge_s = seen["gone"] - seen["marked"]
    print(
        f"\npurge of 20,000 items: {purge_s:.2f} s; {len(during)} appends acknowledged during it, "
        f"p50 {statistics.median(during) * 1000:.1f} ms, max {max(during) * 1000:.1f} ms "
        f"(all appends: p50 {statistics.median(everything) * 1000:.1f} ms, max {max(everything) * 1000:.1f} ms)"
    )
    assert len(during) >= 10  # appends went on while the purge ran: it never held the others up for long
    assert max(during) < 2.0  # a generous bound: a stall would last about as long as the whole purge


async def test_a_deletion_cut_short_is_finished_by_the_retention_task(srv: LiveServer) -> None:
    """A conversation left marked (a crash between purge steps) is hidden, and purged in the background
    even when its site has no retention."""
    site, secret = new_site(srv)
    conversation = cid()
    async with http(srv, site, secret) as client:
        await append(client, conversation, [{"n": i} for i in range(700)], key="k")
        execute(
            srv.settings,
            "UPDATE conversations SET deleting = ? WHERE conversation_id = ?",
            True if srv.settings.database_url else 1,
            conversation,
        )
        assert await items_of(client, conversation) == []
        deadline = time.monotonic() + 30
        while query(srv.settings, "SELECT 1 FROM conversations WHERE conversation_id = ?", conversation):
            assert time.monotonic() < deadline, "the retention task did not finish the deletion"
            await asyncio.sleep(0.05)
        [(rows,)] = query(srv.settings, "SELECT count(*) FROM log_items WHERE conversation_id = ?", conversation)
        assert rows == 0
        assert (await append(client, conversation, [{"n": "new"}], key="k"))["first_seq"] == 0


def test_the_python_client_deletes_a_conversation(srv: LiveServer) -> None:
    from memory_client import Client, ConversationDeleted, NotFound

    site, secret = new_site(srv)
    conversation = cid()
    with Client(srv.base, auth=(site, secret)) as memory:
        memory.append(conversation, [{"n": 0}, {"n": 1}])
        deleted = memory.delete_conversation(conversation)
        assert isinstance(deleted, ConversationDeleted)
        assert (deleted.conversation_id, deleted.deleted, deleted.item_count) == (conversation, True, 2)
        assert memory.tail(conversation) == []
        with pytest.raises(NotFound):
            memory.delete_conversation(conversation)
