"""An embedded index that follows a shared authority's change feed (memory_server/memories/follower.py).

Two "replicas" in one process: each has its own storage connection to one authority and its own Qdrant Edge
index, as two servers on one PostgreSQL would. Real storage (on every backend), real indexes, the real model.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memory_server.auth import admin as auth
from memory_server.auth.principal import Principal, site_principal
from memory_server.index.edge import EdgeIndex
from memory_server.memories.follower import FOLLOW_FILE, read_state
from memory_server.memories.system import Memories, build_memories, repair
from memory_server.memories.validation import Filters, read_scope
from memory_server.settings import Settings
from memory_server.storage.factory import open_storage
from memory_server.storage.protocols import Storage

from tests.conftest import make_settings

pytestmark = pytest.mark.backends


@dataclass
class Replica:
    settings: Settings
    storage: Storage
    index: EdgeIndex
    memories: Memories

    def close(self) -> None:
        self.index.close()
        self.storage.close()


class Deployment:
    """One authority, replicas opened on it on demand (each with an index directory of its own)."""

    def __init__(self, root: Path, embedder: Any, token_counter: Any) -> None:
        self.authority = make_settings(root / "authority")
        self.root, self.embedder, self.tokens = root, embedder, token_counter
        self.open: list[Replica] = []
        storage = open_storage(self.authority)
        try:
            site_id, _ = auth.ensure_site(storage.sites, "acme")
        finally:
            storage.close()
        self.principal: Principal = site_principal(site_id, "acme", kind="local")

    def replica(self, name: str) -> Replica:
        settings = self.authority.model_copy(update={"data_dir": self.root / name})
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        storage = open_storage(self.authority)
        index = EdgeIndex(settings.index_path)
        memories = build_memories(
            storage, settings, embedder=self.embedder, tokens=self.tokens, index=index, follow=True
        )
        repair(memories)
        replica = Replica(settings, storage, index, memories)
        self.open.append(replica)
        return replica

    def close(self, replica: Replica) -> None:
        self.open.remove(replica)
        replica.close()

    def remember(self, replica: Replica, content: str) -> str:
        writes = replica.memories.writes
        reference = writes.remember(self.principal, writes.validate(content=content)).reference
        assert reference is not None
        return reference

    def found(self, replica: Replica, query: str) -> list[str]:
        """search_memory's answer on this replica: straight from its own vector index."""
        scope = read_scope(self.principal, Filters())
        return [hit["content"] for hit in replica.memories.retrieval.search(scope, query, 5, 0.55)]


@pytest.fixture
def deployment(tmp_path: Path, embedder: Any, token_counter: Any) -> Iterator[Deployment]:
    deployment = Deployment(tmp_path, embedder, token_counter)
    try:
        yield deployment
    finally:
        for replica in list(deployment.open):
            deployment.close(replica)


ROUTERS = "The warehouse in Lisbon keeps spare routers on shelf 14."
BOILER = "The boiler is serviced every October."


def test_a_memory_remembered_on_one_replica_is_found_on_the_other(deployment: Deployment) -> None:
    a, b = deployment.replica("a"), deployment.replica("b")
    deployment.remember(a, ROUTERS)
    assert deployment.found(a, "where are the spare routers?") == [ROUTERS]  # its own write, at once
    assert deployment.found(b, "where are the spare routers?") == []  # b has not followed yet
    assert b.memories.follower is not None and b.memories.follower.lag() == 1
    assert b.memories.follower.catch_up() == 1
    assert deployment.found(b, "where are the spare routers?") == [ROUTERS]
    assert b.memories.follower.lag() == 0


def test_a_forgotten_memory_leaves_every_replica(deployment: Deployment) -> None:
    a, b = deployment.replica("a"), deployment.replica("b")
    reference = deployment.remember(a, ROUTERS)
    assert b.memories.follower is not None and a.memories.follower is not None
    b.memories.follower.catch_up()
    b.memories.writes.forget(deployment.principal, reference)
    assert deployment.found(b, "where are the spare routers?") == []
    a.memories.follower.catch_up()
    assert deployment.found(a, "where are the spare routers?") == []


def test_a_change_on_one_replica_reaches_the_other(deployment: Deployment) -> None:
    a, b = deployment.replica("a"), deployment.replica("b")
    reference = deployment.remember(a, ROUTERS)
    assert b.memories.follower is not None
    b.memories.follower.catch_up()
    a.memories.writes.update(deployment.principal, reference, {"content": BOILER})
    b.memories.follower.catch_up()
    assert deployment.found(b, "when is the boiler maintained?") == [BOILER]
    assert deployment.found(b, "where are the spare routers?") == []


def test_the_words_another_replica_stored_reach_this_ones_query_expansion(deployment: Deployment) -> None:
    a, b = deployment.replica("a"), deployment.replica("b")
    deployment.remember(a, "Our puppy chewed the sofa cushions.")
    assert "puppy" not in b.memories.words.vocabulary(deployment.principal.site_id)
    assert b.memories.follower is not None
    b.memories.follower.catch_up()
    assert {"puppy", "sofa", "cushions"} <= b.memories.words.vocabulary(deployment.principal.site_id)


def test_a_restarted_replica_resumes_where_its_index_stopped(deployment: Deployment) -> None:
    a, b = deployment.replica("a"), deployment.replica("b")
    deployment.remember(a, ROUTERS)
    assert b.memories.follower is not None
    b.memories.follower.catch_up()
    mark = b.memories.follower.mark
    deployment.close(b)
    deployment.remember(a, BOILER)  # while b is down
    b = deployment.replica("b")
    assert b.memories.follower is not None
    assert not b.memories.follower.needs_rebuild and b.memories.follower.mark == mark + 1  # caught up at start
    assert deployment.found(b, "when is the boiler maintained?") == [BOILER]
    assert (b.settings.index_path / FOLLOW_FILE).exists()


def test_a_replica_rebuilds_when_its_state_is_lost_or_the_feed_was_pruned(deployment: Deployment) -> None:
    a = deployment.replica("a")
    deployment.remember(a, ROUTERS)
    b = deployment.replica("b")  # a new index: built from the whole authority at start
    assert deployment.found(b, "where are the spare routers?") == [ROUTERS]
    deployment.close(b)
    (deployment.root / "b" / "index" / FOLLOW_FILE).write_text("{torn")
    b = deployment.replica("b")
    assert deployment.found(b, "where are the spare routers?") == [ROUTERS]

    deployment.close(b)
    deployment.remember(a, BOILER)
    assert a.storage.outbox.prune_changes(0.0) >= 2  # b's place in the feed is gone
    b = deployment.replica("b")
    assert b.memories.follower is not None and not b.memories.follower.needs_rebuild
    assert deployment.found(b, "when is the boiler maintained?") == [BOILER]
    assert deployment.found(b, "where are the spare routers?") == [ROUTERS]


def test_the_feed_lists_each_memory_once_with_its_last_change(deployment: Deployment) -> None:
    a = deployment.replica("a")
    outbox = a.storage.outbox
    site_id = deployment.principal.site_id
    start = outbox.change_mark(site_id)
    first = deployment.remember(a, ROUTERS)
    deployment.remember(a, BOILER)
    a.memories.writes.update(deployment.principal, first, {"tags": ["network"]})
    a.memories.writes.forget(deployment.principal, first)
    page = outbox.changes(site_id, start, 100)
    assert len(page.changed) == 1 and len(page.deleted) == 1 and page.mark == outbox.change_mark(site_id)
    assert not page.more and not page.truncated
    cut = outbox.changes(site_id, start, 1)
    assert cut.more and cut.mark == start + 1


def test_a_replica_follows_each_site_from_where_it_left_it(deployment: Deployment) -> None:
    a, b = deployment.replica("a"), deployment.replica("b")
    other_id, _ = auth.ensure_site(a.storage.sites, "other")
    other = site_principal(other_id, "other", kind="local")
    deployment.remember(a, ROUTERS)
    writes = a.memories.writes
    for content in (BOILER, "The other site's printer is on the second floor."):
        writes.remember(other, writes.validate(content=content))
    assert b.memories.follower is not None
    assert b.memories.follower.catch_up() == 3  # found by what changed lately, site by site
    site_id = deployment.principal.site_id
    assert b.memories.follower.marks == {site_id: 1, other_id: 2} and b.memories.follower.lag() == 0
    state = read_state(b.settings.index_path / FOLLOW_FILE)
    assert state is not None and state.marks == {site_id: 1, other_id: 2} and state.mark == 3
    # The other site's changes move nothing of this one's place in the feed.
    writes.forget(other, writes.remember(other, writes.validate(content="A note soon forgotten.")).reference)
    assert b.memories.follower.lag() == 2 and b.memories.follower.catch_up() == 1
    assert b.memories.follower.marks == {site_id: 1, other_id: 4}
