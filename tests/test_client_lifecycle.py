"""memory_client's `supersedes` and `expires_at` (remember and update, sync and async) against a real
`memory-server serve` process: the links and the expiry land on the server and come back typed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from client_support import Site, create_site

from memory_client import AsyncClient, Client

from procs import ServerProcess


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return create_site(tmp_path_factory.mktemp("client-lifecycle") / "data")


@pytest.fixture(scope="module")
def live(site: Site) -> Iterator[ServerProcess]:
    process = ServerProcess(site.data_dir).start()
    try:
        with Client(process.base) as probe:
            while not probe.ready():
                time.sleep(0.05)
        yield process
    finally:
        process.kill()


def test_remember_and_update_carry_supersedes_and_expires_at(live: ServerProcess, site: Site) -> None:
    with Client(live.base, auth=site.auth) as memory:
        old = memory.remember(
            "Deploys go out on Tuesdays.", type="decision", bucket="lifecycle", occurred_at="2026-01-05T09:00:00Z"
        )
        new = memory.remember(
            "Deploys go out on Thursdays.",
            type="decision",
            bucket="lifecycle",
            occurred_at="2026-02-02T09:00:00Z",
            supersedes=old.reference,
            expires_at=datetime(2099, 1, 1, tzinfo=UTC),
        )
        replaced, replacing = memory.get(old.reference), memory.get(new.reference)
        assert (replaced.superseded_by, replacing.supersedes) == (new.reference, old.reference)
        assert replaced.valid_to == datetime(2026, 2, 2, 9, tzinfo=UTC)  # the new one's occurred_at
        assert replacing.expires_at == datetime(2099, 1, 1, tzinfo=UTC)
        hits = memory.search("when do deploys go out?", bucket="lifecycle", min_score=0.0)
        assert [hit.reference for hit in hits] == [new.reference]  # a superseded memory is left out

        assert memory.update(new.reference, expires_at="2098-06-01T00:00:00+02:00").expires_at == datetime(
            2098, 5, 31, 22, tzinfo=UTC
        )
        assert memory.update(new.reference, expires_at=None).expires_at is None  # cleared
        unlinked = memory.update(new.reference, supersedes=None)
        assert unlinked.supersedes is None and memory.get(old.reference).superseded_by is None


async def test_the_async_client_carries_them_too(live: ServerProcess, site: Site) -> None:
    async with AsyncClient(live.base, auth=site.auth) as memory:
        old = await memory.remember("The office closes at six.", bucket="lifecycle-async")
        new = await memory.remember(
            "The office closes at seven.",
            bucket="lifecycle-async",
            supersedes=old.reference,
            expires_at="2099-03-01T00:00:00Z",
        )
        assert (await memory.get(old.reference)).superseded_by == new.reference
        assert (await memory.get(new.reference)).expires_at == datetime(2099, 3, 1, tzinfo=UTC)
        changed = await memory.update(new.reference, expires_at=None, supersedes=None)
        assert (changed.expires_at, changed.supersedes) == (None, None)
