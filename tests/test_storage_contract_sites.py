"""The site store's contract on SQLite and PostgreSQL: sites, tokens with their bounds, labels and last use,
console sessions, and deleting a site with all of it.

Part of the storage seam's contract suite (tests/README.md lists the others); the fixtures and records
are in tests/storage_support.py.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from storage_support import (
    remember,
    site,
    storage,  # noqa: F401
    vector,
)

from memory_server.errors import InvalidParameters
from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    SessionRecord,
    TokenRecord,
    Words,
    WouldBlock,
)
from memory_server.storage.scope import Scope

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def token_record(token_id: str, site_id: int, **bounds: Any) -> TokenRecord:
    return TokenRecord(
        id=token_id,
        site_id=site_id,
        site="acme",
        scopes=("memory:read",),
        teams=bounds.get("teams"),
        projects=bounds.get("projects"),
        buckets=bounds.get("buckets"),
        created_at=f"2024-01-01T00:00:0{token_id[-1]}.000000Z",
        revoked_at=None,
    )


def test_sites_and_tokens(storage: Storage) -> None:
    sites = storage.sites
    sid = site(storage)
    with pytest.raises(InvalidParameters):
        site(storage)
    assert sites.site_id("acme") == sid and sites.site_id("nobody") is None
    site(storage, "Beta")
    assert [s.name for s in sites.sites()] == ["Beta", "acme"]  # byte order, as SQLite compares
    assert sites.set_secret("acme", "new-hash") and not sites.set_secret("nobody", "x")
    for nowait in (False, True):
        try:
            credential = sites.credential("acme", nowait=nowait)
        except WouldBlock:
            assert nowait
            continue
        assert credential is not None and (credential.site_id, credential.secret_hash) == (sid, "new-hash")
    assert sites.credential("nobody") is None
    sites.add_token(token_record("tok-2", sid, teams=("b", "a")), "hash-2")
    sites.add_token(token_record("tok-1", sid), "hash-1")
    assert [t.id for t in sites.tokens(sid)] == ["tok-1", "tok-2"]
    assert sites.tokens(sid)[1].teams == ("a", "b") and sites.tokens(sid)[1].site == "acme"
    assert sites.revoke_token("tok-2") and not sites.revoke_token("tok-2") and not sites.revoke_token("nope")
    revoked = sites.token("hash-2")
    assert revoked is not None and revoked.revoked_at is not None and revoked.scopes == ("memory:read",)
    assert sites.token("hash-unknown") is None


def test_token_labels_and_last_use(storage: Storage) -> None:
    sites = storage.sites
    sid = site(storage)
    sites.add_token(replace(token_record("tok-1", sid), label="ci: nightly import"), "hash-1")
    sites.add_token(token_record("tok-2", sid), "hash-2")
    assert [(t.label, t.last_used_at) for t in sites.tokens(sid)] == [("ci: nightly import", None), (None, None)]
    sites.mark_token_used("tok-1", "2026-05-01T10:00:00.000000Z")
    sites.mark_token_used("tok-1", "2026-05-01T09:00:00.000000Z")  # an earlier use (another server): kept later
    sites.mark_token_used("tok-none", "2026-05-01T10:00:00.000000Z")  # no such token: nothing happens
    used = sites.token("hash-1")
    assert used is not None and (used.label, used.last_used_at) == ("ci: nightly import", "2026-05-01T10:00:00.000000Z")
    sites.mark_token_used("tok-1", "2026-05-01T10:01:00.000000Z")
    assert [t.last_used_at for t in sites.tokens(sid)] == ["2026-05-01T10:01:00.000000Z", None]


def session_record(id_hash: str, site_id: int, *, created_at: float, seen_at: float) -> SessionRecord:
    return SessionRecord(
        id_hash=id_hash,
        site_id=site_id,
        site="acme",
        kind="basic",
        credential=f"digest-{id_hash}",
        created_at=created_at,
        seen_at=seen_at,
    )


def test_console_sessions(storage: Storage) -> None:
    sites = storage.sites
    sid = site(storage)
    now = time.time()
    first = session_record("a" * 64, sid, created_at=now - 0.25, seen_at=now)
    sites.add_session(first)
    sites.add_session(
        SessionRecord(
            id_hash="b" * 64,
            site_id=sid,
            site="acme",
            kind="bearer",
            credential="tok-hash",
            created_at=now,
            seen_at=now,
        )
    )
    assert sites.session("a" * 64) == first  # unix seconds come back exactly (double precision)
    bearer = sites.session("b" * 64)
    assert bearer is not None and (bearer.kind, bearer.credential) == ("bearer", "tok-hash")
    assert sites.session("c" * 64) is None
    sites.touch_session("a" * 64, now + 60)
    sites.touch_session("a" * 64, now + 30)  # activity never goes back (two replicas touching at once)
    touched = sites.session("a" * 64)
    assert touched is not None and touched.seen_at == now + 60 and touched.created_at == first.created_at
    sites.touch_session("c" * 64, now)  # no such session: nothing happens
    assert sites.session("c" * 64) is None
    sites.delete_session("b" * 64)
    sites.delete_session("b" * 64)
    assert sites.session("b" * 64) is None and sites.session("a" * 64) is not None
    for name, created, seen in (("idle", now - 10, now - 100), ("old", now - 1000, now), ("live", now - 10, now)):
        sites.add_session(session_record(name, sid, created_at=created, seen_at=seen))
    assert sites.prune_sessions(seen_before=now - 50, created_before=now - 500) == 2  # idle, old
    assert [n for n in ("idle", "old", "live") if sites.session(n) is not None] == ["live"]
    assert sites.prune_sessions(seen_before=now - 50, created_before=now - 500) == 0
    assert sites.prune_sessions(seen_before=now + 3600, created_before=0.0) == 2  # every one of them: idle
    assert sites.session("live") is None and sites.session("a" * 64) is None


async def test_deleting_a_site_deletes_all_of_it(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    for owner in (sid, other):
        await storage.logs.append(owner, "conv-0001", ['{"n":1}'], "key")
        words = Words(("apple",), np.stack([vector(1)]))
        remember(storage, owner, "apple pie", words=words)
    storage.sites.add_token(token_record("tok-1", sid), "hash-1")
    for owner in (sid, other):
        storage.sites.add_session(session_record(f"session-{owner}", owner, created_at=1.0, seen_at=2.0))
    gone = storage.memories.page(Scope(sid), location=None, provenance={}, limit=10, after=None)[0][0].id
    assert storage.sites.delete_site("acme") and not storage.sites.delete_site("acme")
    assert storage.sites.site_id("acme") is None and storage.sites.token("hash-1") is None
    assert storage.sites.session(f"session-{sid}") is None and storage.sites.session(f"session-{other}") is not None
    assert storage.logs.tail(sid, "conv-0001", 5) == [] and storage.logs.conversations(sid, 5, None).conversations == []
    assert storage.memories.page(Scope(sid), location=None, provenance={}, limit=10, after=None)[0] == []
    assert gone in storage.outbox.deletions()
    assert [w[0] for w in storage.words.all_words("model-a")] == [other]
    assert len(storage.logs.tail(other, "conv-0001", 5)) == 1 and storage.memories.count() == 1
    recreated = site(storage)
    assert recreated != sid  # a new tenant, never the old one's id
    ack = await storage.logs.append(recreated, "conv-0001", ['{"n":1}'], "key")
    assert (ack["first_seq"], ack["duplicate"]) == (0, False)  # its keys went with it
