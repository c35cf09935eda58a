"""Conversations recalled by topic: log items of sites (or conversations) that index their logs become entries
of kind `turn` that recall, search_memory and recall_context find, against a real server on SQLite and on
PostgreSQL: the site setting and the append's own choice, the text rule, the `kinds` filter, bounded tokens,
deletion and retention, export and import, reindex, and the acknowledgement never waiting for the model.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from memory_server.logs.indexing import occurred_at, turn_text

from conftest import LiveServer, make_settings, query, serve
from procs import parse_fields, run_cli

pytestmark = pytest.mark.backends

WAIT_S = 180.0


@pytest.fixture(scope="module")
def srv(storage_backend: str, tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[LiveServer]:
    settings = make_settings(tmp_path_factory.mktemp("logindex") / "data", log_retention_interval_s=0.2)
    with serve(settings, embedder) as server:
        yield server


def new_site(srv: LiveServer, *, index_logs: bool = False) -> tuple[str, str]:
    name = f"site-{uuid.uuid4().hex[:12]}"
    secret = srv.create_site(name)
    if index_logs:
        ok(srv, "site", "set", name, "--index-logs")
    return name, secret


def cid() -> str:
    return f"conv-{uuid.uuid4().hex}"


def ok(srv: LiveServer, *args: str) -> str:
    done = run_cli(*args, data_dir=srv.settings.data_dir)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def http(srv: LiveServer, site: str, secret: str, authorization: str | None = None) -> httpx2.Client:
    header = authorization or srv.basic_header(site=site, secret=secret)
    return httpx2.Client(base_url=srv.base, headers={"Authorization": header}, timeout=120)


def append(client: httpx2.Client, conversation: str, items: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    response = client.post(f"/v1/conversations/{conversation}/items", json={"items": items, **fields})
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def waiting(srv: LiveServer) -> int:
    [(count,)] = query(
        srv.settings, "SELECT count(*) FROM conversations WHERE indexing = ? AND indexed_seq < item_count", True
    )
    return int(count)


def wait_indexed(srv: LiveServer) -> None:
    """Until no conversation of the store has items waiting to be indexed."""
    deadline = time.monotonic() + WAIT_S
    while waiting(srv):
        assert time.monotonic() < deadline, "log items still waiting to be indexed"
        time.sleep(0.05)


def turns_of(srv: LiveServer, conversation: str) -> list[tuple[int, str]]:
    rows = query(
        srv.settings,
        "SELECT conversation_seq, content FROM memories WHERE kind = 'turn'"
        " AND conversation_id = ? ORDER BY conversation_seq",
        conversation,
    )
    return [(int(seq), str(content)) for seq, content in rows]


def recall(client: httpx2.Client, question: str, **fields: Any) -> list[dict[str, Any]]:
    response = client.post("/v1/recall", json={"query": question, "limit": 10, **fields})
    assert response.status_code == 200, response.text
    return list(response.json()["results"])


# --- the text rule ---------------------------------------------------------------------------------------


def test_the_text_of_an_item_is_its_text_or_content_with_its_speaker() -> None:
    assert turn_text({"role": "user", "content": "Ship it Friday."}, 100) == "user: Ship it Friday."
    assert turn_text({"speaker": "Ann", "text": " Hi ", "content": "ignored"}, 100) == "Ann: Hi"
    assert turn_text({"text": "", "content": "from content"}, 100) == "from content"
    parts = {
        "role": "assistant",
        "content": [{"type": "text", "text": "one"}, {"type": "image"}, {"type": "text", "text": "two"}],
    }
    assert turn_text(parts, 100) == "assistant: one\ntwo"
    for skipped in (
        {"tool": "grep", "args": {"q": "x"}},
        {"text": "   "},
        {"content": 42},
        {"content": [{"a": 1}]},
        {"text": ["not", "a", "string"]},
    ):
        assert turn_text(skipped, 100) is None
    assert turn_text({"text": "é" * 10}, 5) == "éé"  # cut at a character
    assert (
        occurred_at({"occurred_at": "2023-05-08T13:56:00+02:00"}, "2026-01-01T00:00:00.000000Z")
        == "2023-05-08T11:56:00.000000Z"
    )
    assert occurred_at({"occurred_at": "last week"}, "2026-01-01T00:00:00.000000Z") == "2026-01-01T00:00:00.000000Z"


# --- recall finds turns beside memories -------------------------------------------------------------------


def test_an_indexing_site_recalls_its_turns_beside_memories_and_kinds_filters(srv: LiveServer) -> None:
    site, secret = new_site(srv, index_logs=True)
    conversation = cid()
    with http(srv, site, secret) as client:
        ack = append(
            client,
            conversation,
            [
                {"role": "user", "content": "Should we roll out the billing service to Europe next month?"},
                {"tool": "deploy", "status": 0},  # no text: skipped
                {"role": "assistant", "content": "Yes: the rollout of billing to Europe is planned for June."},
            ],
        )
        assert (ack["first_seq"], ack["last_seq"], ack["duplicate"]) == (0, 2, False)
        client.post("/v1/memories", json={"content": "The cafeteria opens at eight."}).raise_for_status()
        wait_indexed(srv)
        assert turns_of(srv, conversation) == [
            (0, "user: Should we roll out the billing service to Europe next month?"),
            (2, "assistant: Yes: the rollout of billing to Europe is planned for June."),
        ]
        [(recorded_at,)] = query(
            srv.settings, "SELECT recorded_at FROM log_items WHERE conversation_id = ? AND seq = 0", conversation
        )

        hits = recall(client, "what did we decide about the billing rollout")
        turn = next(h for h in hits if h["kind"] == "turn")
        assert turn["provenance"] == {"conversation_id": conversation, "seq": 2} or turn["provenance"] == {
            "conversation_id": conversation,
            "seq": 0,
        }
        assert turn["type"] == "turn" and turn["bucket"] == "default"
        first = next(h for h in hits if h["kind"] == "turn" and h["provenance"]["seq"] == 0)
        assert first["occurred_at"] == recorded_at
        assert {h["kind"] for h in hits} == {"turn", "memory"}

        assert {h["kind"] for h in recall(client, "billing rollout", kinds=["memory"])} == {"memory"}
        assert {h["kind"] for h in recall(client, "billing rollout", kinds=["turn"])} == {"turn"}
        assert len(recall(client, "billing rollout", kinds=["turn", "memory"])) == 3
        search = client.post(
            "/v1/search", json={"query": "billing rollout to Europe", "kinds": ["turn"], "min_score": 0.0}
        ).json()["results"]
        assert search and {h["kind"] for h in search} == {"turn"}
        search = client.post(
            "/v1/search", json={"query": "billing rollout to Europe", "kinds": ["memory"], "min_score": 0.0}
        ).json()["results"]
        assert {h["kind"] for h in search} == {"memory"}
        context = client.post("/v1/context", json={"query": "billing rollout", "kinds": ["turn"]})
        assert context.status_code == 200, context.text
        assert "billing" in json.dumps(context.json())
        listed = client.get("/v1/memories", params={"kinds": "turn"}).json()["memories"]
        assert [(m["kind"], m["provenance"]["seq"]) for m in listed] == [("turn", 2), ("turn", 0)]
        listed = client.get("/v1/memories", params={"kinds": "memory"}).json()["memories"]
        assert [m["content"] for m in listed] == ["The cafeteria opens at eight."]
        bad = client.post("/v1/recall", json={"query": "x", "kinds": ["note"]})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_parameters"
        bad = client.post("/v1/recall", json={"query": "x", "kinds": []})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_parameters"

        # A turn follows its log item: it cannot be changed or superseded (forgetting it is allowed).
        reference = first["reference"]
        changed = client.patch(f"/v1/memories/{reference}", json={"content": "rewritten"})
        assert changed.status_code == 422 and "indexed turn" in changed.json()["error"]["message"]
        superseding = client.post("/v1/memories", json={"content": "new", "supersedes": reference})
        assert superseding.status_code == 422 and "indexed turn" in superseding.json()["error"]["message"]

        shown = parse_fields(ok(srv, "site", "show", site))
        assert shown["log indexing"] == "on"
        assert shown["log items indexed"].startswith("0 items waiting, 3 done (1 without text")


def test_a_conversation_chooses_for_itself_and_names_its_bucket(srv: LiveServer) -> None:
    site, secret = new_site(srv)  # the site does not index
    chosen, plain, refused = cid(), cid(), cid()
    with http(srv, site, secret) as client:
        append(client, plain, [{"text": "The orchard harvest starts in September."}])
        append(client, chosen, [{"text": "The lighthouse keeper retires in spring."}], index=True, bucket="coast")
        append(client, chosen, [{"text": "His successor trains on the island."}])  # the choice holds
        bad = client.post(f"/v1/conversations/{chosen}/items", json={"items": [{"text": "x"}], "bucket": "no spaces"})
        assert bad.status_code == 422 and "bucket" in bad.json()["error"]["message"]
        wait_indexed(srv)
        assert [seq for seq, _ in turns_of(srv, chosen)] == [0, 1]
        assert turns_of(srv, plain) == []
        hits = recall(client, "lighthouse keeper")
        assert {h["bucket"] for h in hits if h["kind"] == "turn"} == {"coast"}

        # Turned on for the site later: the conversations that follow it are backfilled; one that chose not
        # to be indexed stays out.
        append(client, refused, [{"text": "The orchard ladder is broken."}], index=False)
        out = ok(srv, "site", "set", site, "--index-logs")
        assert "logs indexed" in out and "items waiting" in out
        wait_indexed(srv)
        assert [seq for seq, _ in turns_of(srv, plain)] == [0]
        assert turns_of(srv, refused) == []
        # Off again: new items of the conversations that follow the site are not indexed.
        ok(srv, "site", "set", site, "--no-index-logs")
        append(client, plain, [{"text": "Apples go to the press in October."}])
        append(client, chosen, [{"text": "The new keeper arrives in May."}])
        wait_indexed(srv)
        assert [seq for seq, _ in turns_of(srv, plain)] == [0]
        assert [seq for seq, _ in turns_of(srv, chosen)] == [0, 1, 2]


# --- bounded tokens ----------------------------------------------------------------------------------------


def test_a_bounded_token_recalls_the_turns_within_its_bounds_and_no_others(srv: LiveServer) -> None:
    site, secret = new_site(srv, index_logs=True)
    inside, outside = cid(), cid()
    with http(srv, site, secret) as client:
        append(client, inside, [{"text": "The greenhouse heating fails below minus five degrees."}], bucket="garden")
        append(client, outside, [{"text": "The greenhouse budget is secret."}])  # bucket default
        wait_indexed(srv)
    _, by_bucket = srv.create_token(scopes=["memory:read"], site=site, buckets=["garden"])
    with http(srv, site, secret, authorization=f"Bearer {by_bucket}") as bounded:
        hits = recall(bounded, "greenhouse")
        assert [(h["kind"], h["provenance"]["conversation_id"]) for h in hits] == [("turn", inside)]
        search = bounded.post("/v1/search", json={"query": "greenhouse", "min_score": 0.0}).json()["results"]
        assert [h["provenance"]["conversation_id"] for h in search] == [inside]
        # The log itself stays Basic-only: the token reads the turn, not the conversation around it.
        refused = bounded.get(f"/v1/conversations/{inside}/items", params={"count": 5})
        assert refused.status_code == 422 and "Basic" in refused.json()["error"]["message"]
    _, by_team = srv.create_token(scopes=["memory:read"], site=site, teams=["ops"])
    with http(srv, site, secret, authorization=f"Bearer {by_team}") as bounded:
        assert recall(bounded, "greenhouse") == []  # a turn has no team: outside any bound on teams


# --- deletion and retention --------------------------------------------------------------------------------


def test_deleting_a_conversation_deletes_its_turns(srv: LiveServer) -> None:
    site, secret = new_site(srv, index_logs=True)
    gone, kept = cid(), cid()
    with http(srv, site, secret) as client:
        append(client, gone, [{"text": f"The submarine cable repair, step {n}."} for n in range(5)])
        append(client, kept, [{"text": "The submarine cable is insured."}])
        linked = client.post(
            "/v1/memories",
            json={"content": "Cable repairs need a permit.", "provenance": {"conversation_id": gone, "seq": 1}},
        ).json()
        wait_indexed(srv)
        assert len(turns_of(srv, gone)) == 5
        response = client.delete(f"/v1/conversations/{gone}")
        assert response.status_code == 200, response.text
        assert response.json() == {
            "conversation_id": gone,
            "deleted": True,
            "item_count": 5,
            "memories_unlinked": 1,
            "turns_deleted": 5,
        }
        assert turns_of(srv, gone) == []
        hits = recall(client, "submarine cable repair")
        assert {h["provenance"].get("conversation_id") for h in hits if h["kind"] == "turn"} == {kept}
        assert client.get(f"/v1/memories/{linked['reference']}").json()["provenance"] == {}
        search = client.post("/v1/search", json={"query": "submarine cable repair", "min_score": 0.0}).json()
        assert gone not in json.dumps(search)
        # The id used again: a new log, indexed from seq 0.
        append(client, gone, [{"text": "A new log about the submarine cable."}])
        wait_indexed(srv)
        assert turns_of(srv, gone) == [(0, "A new log about the submarine cable.")]
        # From the CLI too (the counts of what it purged: the retention task may purge beside it).
        out = ok(srv, "conversation", "delete", "--site", site, gone)
        assert out.startswith(f"deleted conversation {gone}: 1 items") and turns_of(srv, gone) == []


def test_log_retention_deletes_the_turns_of_expired_conversations(srv: LiveServer) -> None:
    site, secret = new_site(srv, index_logs=True)
    old = cid()
    with http(srv, site, secret) as client:
        append(client, old, [{"text": "The archive move happened long ago."}])
        wait_indexed(srv)
        assert len(turns_of(srv, old)) == 1
        from conftest import execute

        execute(srv.settings, "UPDATE conversations SET last_activity_us = 0 WHERE conversation_id = ?", old)
        ok(srv, "site", "set", site, "--log-retention-days", "1")
        deadline = time.monotonic() + WAIT_S
        while turns_of(srv, old) or query(srv.settings, "SELECT 1 FROM conversations WHERE conversation_id = ?", old):
            assert time.monotonic() < deadline, "the retention did not delete the conversation"
            time.sleep(0.1)
        assert not any(h["kind"] == "turn" for h in recall(client, "archive move"))


# --- progress --------------------------------------------------------------------------------------------


def test_readyz_shows_the_items_waiting_and_the_acknowledgement_does_not_wait(srv: LiveServer) -> None:
    site, secret = new_site(srv, index_logs=True)
    conversation = cid()
    with http(srv, site, secret) as client:
        # Enough text that embedding it takes seconds: the acknowledgement comes first, and /readyz (still
        # ready: recall answers meanwhile) says how many items wait.
        ack = append(
            client,
            conversation,
            [{"text": f"Entry {n} of the night shift report: pump {n % 7} ran hot."} for n in range(1000)],
        )
        assert ack["count"] == 1000
        ready = httpx2.get(f"{srv.base}/readyz", timeout=30)
        assert ready.status_code == 200
        assert 0 < ready.json()["log_indexing"]["waiting"] <= 1000, ready.json()
        assert client.post("/v1/recall", json={"query": "pump ran hot"}).status_code == 200
        wait_indexed(srv)
        assert "log_indexing" not in httpx2.get(f"{srv.base}/readyz", timeout=30).json()
        assert len(turns_of(srv, conversation)) == 1000
