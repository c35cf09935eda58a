"""Console sessions and CSRF, and the store reads the console added, on a real store (SQLite, then
PostgreSQL where its backend exists): a session is found by its hash only, ends on sign-out, idleness, age,
a rotated secret, a deleted site or a revoked token; CSRF tokens belong to one session; the listing's
occurred_after/occurred_before range and the per-day counts (by occurred day) are scoped like every read."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memory_server.api.console import sessions as console_sessions
from memory_server.api.console.forms import day_start
from memory_server.api.console.sessions import ConsoleSessions, csrf_ok, csrf_token, id_hash
from memory_server.auth import admin
from memory_server.auth.authenticator import Authenticator
from memory_server.auth.principal import READ
from memory_server.storage.factory import open_storage
from memory_server.storage.protocols import Storage
from memory_server.storage.records import SessionRecord

from tests.conftest import LiveServer, make_settings, query, serve

pytestmark = pytest.mark.backends


@pytest.fixture
def storage(storage_backend: str, tmp_path: Path) -> Iterator[Storage]:
    store = open_storage(make_settings(tmp_path / "data"))
    try:
        yield store
    finally:
        store.close()


def basic(site: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()


async def signed_in(storage: Storage, header: str) -> tuple[ConsoleSessions, str]:
    authenticator = Authenticator(storage.sites)
    principal = authenticator.authenticate(header)
    binding = authenticator.binding(header)
    assert binding is not None
    sessions = ConsoleSessions(storage.sites, authenticator)
    return sessions, await sessions.start(principal, binding)


async def test_a_session_is_stored_as_a_hash_and_ends_on_sign_out(storage: Storage) -> None:
    secret = admin.create_site(storage.sites, "acme")
    sessions, cookie = await signed_in(storage, basic("acme", secret))
    session = await sessions.resume(cookie)
    assert session is not None and session.principal.site == "acme" and session.principal.kind == "basic"
    record = storage.sites.session(id_hash(cookie))
    assert record is not None and record.id_hash != cookie and cookie not in record.credential
    assert await sessions.resume(cookie + "x") is None and await sessions.resume(None) is None
    assert await sessions.resume("a" * 1000) is None
    await sessions.end(cookie)
    assert await sessions.resume(cookie) is None


async def test_rotating_the_secret_or_deleting_the_site_ends_its_sessions(storage: Storage) -> None:
    secret = admin.create_site(storage.sites, "acme")
    sessions, first = await signed_in(storage, basic("acme", secret))
    admin.rotate_site(storage.sites, "acme")
    assert await sessions.resume(first) is None
    assert storage.sites.session(id_hash(first)) is None  # an ended session is deleted
    new_secret = admin.rotate_site(storage.sites, "acme")
    sessions, second = await signed_in(storage, basic("acme", new_secret))
    assert await sessions.resume(second) is not None
    admin.delete_site(storage.sites, "acme")
    admin.create_site(storage.sites, "acme")  # the same name again is another tenant
    assert await sessions.resume(second) is None


async def test_revoking_a_token_ends_its_sessions_and_its_bounds_apply(storage: Storage) -> None:
    admin.create_site(storage.sites, "acme")
    token_id, token = admin.create_token(storage.sites, "acme", scopes=[READ], buckets=["personal"])
    sessions, cookie = await signed_in(storage, f"Bearer {token}")
    session = await sessions.resume(cookie)
    assert session is not None
    assert session.principal.kind == "bearer" and session.principal.scopes == {READ}
    assert session.principal.buckets == {"personal"}
    admin.revoke_token(storage.sites, token_id)
    assert await sessions.resume(cookie) is None


async def test_sessions_expire_when_idle_and_when_old(storage: Storage) -> None:
    secret = admin.create_site(storage.sites, "acme")
    sessions, cookie = await signed_in(storage, basic("acme", secret))
    record = storage.sites.session(id_hash(cookie))
    assert record is not None
    now = time.time()
    idle = SessionRecord(
        **{**_fields(record), "id_hash": id_hash("idle"), "seen_at": now - console_sessions.IDLE_S - 5}
    )
    old = SessionRecord(
        **{
            **_fields(record),
            "id_hash": id_hash("old"),
            "created_at": now - console_sessions.ABSOLUTE_S - 5,
            "seen_at": now,
        }
    )
    stale = SessionRecord(**{**_fields(record), "id_hash": id_hash("stale"), "seen_at": now - 120})
    for made in (idle, old, stale):
        storage.sites.add_session(made)
    assert await sessions.resume("idle") is None and await sessions.resume("old") is None
    assert await sessions.resume("stale") is not None  # activity is recorded...
    touched = storage.sites.session(id_hash("stale"))
    assert touched is not None and touched.seen_at >= now  # ...at most once a minute
    storage.sites.add_session(SessionRecord(**{**_fields(record), "id_hash": id_hash("gone"), "seen_at": 0.0}))
    assert storage.sites.prune_sessions(seen_before=now - console_sessions.IDLE_S, created_before=0.0) == 1
    assert storage.sites.session(id_hash("gone")) is None and storage.sites.session(id_hash(cookie)) is not None


def _fields(record: SessionRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in SessionRecord.__slots__}


def test_a_csrf_token_belongs_to_one_session() -> None:
    assert csrf_ok("secret-one", csrf_token("secret-one"))
    assert not csrf_ok("secret-two", csrf_token("secret-one"))
    assert not csrf_ok("secret-one", None) and not csrf_ok(None, csrf_token("secret-one"))
    assert not csrf_ok("secret-one", "") and not csrf_ok("x" * 500, csrf_token("x" * 500))
    assert csrf_token("secret-one") != id_hash("secret-one")  # the stored hash never gives the token


def test_date_inputs_become_a_half_open_range() -> None:
    assert day_start("2026-05-01") == "2026-05-01T00:00:00Z"
    assert day_start("2026-05-31", next_day=True) == "2026-06-01T00:00:00Z"
    assert day_start("9999-12-31", next_day=True) is None
    assert day_start("2026-02-30") == "2026-02-30"  # left for the model to refuse, with its message
    assert day_start(None) is None


@pytest.fixture(scope="module")
def shared(storage_backend: str, tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[LiveServer]:
    with serve(make_settings(tmp_path_factory.mktemp("console-store") / "data"), embedder) as server:
        yield server


def test_the_listing_filters_on_an_occurred_range(shared: LiveServer) -> None:
    with httpx2.Client(base_url=shared.base, auth=shared.basic, timeout=60) as http:
        for n, day in enumerate(
            ("2026-04-30T23:59:59Z", "2026-05-01T00:00:00Z", "2026-05-31T23:00:00+02:00", "2026-06-01T00:00:00Z")
        ):
            created = http.post(
                "/v1/memories", json={"content": f"range note {n}", "occurred_at": day, "bucket": "ranges"}
            )
            assert created.status_code == 201, created.text
        page = http.get(
            "/v1/memories",
            params={
                "bucket": "ranges",
                "occurred_after": "2026-05-01T00:00:00Z",
                "occurred_before": "2026-06-01T00:00:00Z",
            },
        ).json()
        assert sorted(m["content"] for m in page["memories"]) == ["range note 1", "range note 2"]
        page = http.get("/v1/memories", params={"bucket": "ranges", "occurred_after": "2026-05-01T02:00:00+02:00"})
        assert (
            sorted(m["content"] for m in page.json()["memories"])
            == ["range note 0", "range note 1", "range note 2", "range note 3"][1:]
        )
        for bad in ("yesterday", "2026-05-01", "2026-13-01T00:00:00Z"):
            refused = http.get("/v1/memories", params={"occurred_before": bad})
            assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_parameters"
            assert "occurred_before" in refused.json()["error"]["message"]


def test_per_day_counts_and_conversation_counts_are_scoped(shared: LiveServer) -> None:
    storage = open_storage(shared.settings)
    try:
        site_id = storage.sites.site_id(shared.site)
        assert site_id is not None
        other = admin.create_site(storage.sites, "per-day-other") and storage.sites.site_id("per-day-other")
        assert other is not None
        with httpx2.Client(base_url=shared.base, auth=shared.basic, timeout=60) as http:
            for n in range(3):
                assert (
                    http.post("/v1/memories", json={"content": f"daily {n}", "bucket": f"daily{n % 2}"}).status_code
                    == 201
                )
            assert http.post("/v1/conversations/per-day-conv-1/items", json={"items": [{}]}).status_code == 201
        from memory_server.storage.scope import Scope

        today = time.strftime("%Y-%m-%d", time.gmtime())
        tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 86400))
        since, before = f"{today}T00:00:00.000000Z", f"{tomorrow}T00:00:00.000000Z"
        counts = dict(storage.memories.occurred_per_day(Scope(site_id=site_id), since, before))
        stored = query(
            shared.settings,
            "SELECT count(*) FROM memories WHERE site_id = ? AND occurred_at >= ? AND occurred_at < ?",
            site_id,
            since,
            before,
        )[0][0]
        assert counts == {today: stored}
        bounded = dict(
            storage.memories.occurred_per_day(
                Scope(site_id=site_id, buckets=frozenset({"daily1"})),
                "2000-01-01T00:00:00.000000Z",
                "9999-01-01T00:00:00.000000Z",
            )
        )
        assert bounded == {today: 1}
        assert (
            storage.memories.occurred_per_day(
                Scope(site_id=other), "2000-01-01T00:00:00.000000Z", "9999-01-01T00:00:00.000000Z"
            )
            == []
        )
        assert storage.logs.count_conversations(site_id) >= 1 and storage.logs.count_conversations(other) == 0
    finally:
        storage.close()
