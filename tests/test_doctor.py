"""`memory-server doctor`: real data directories, the real model; the CLI runs as a subprocess where its exit
code and output are what is tested, and `run_checks` in-process (with the session's model) for the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory_server.admin.doctor import FAIL, OK, SKIP, WARN, Check, run_checks
from memory_server.index.base import IndexInfo
from memory_server.index.edge import EdgeIndex
from memory_server.storage.factory import open_storage
from memory_server.storage.sqlite.connection import connect
from memory_server.storage.sqlite.writer import transaction

from conftest import LiveServer, make_settings, serve
from procs import REPO_ROOT, run_cli, server_env


def doctor(data_dir: Path) -> tuple[int, dict[str, str], str]:
    """Run the CLI; return (exit code, {check name: its line}, all output)."""
    done = run_cli("doctor", data_dir=data_dir)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    lines = {}
    for line in done.stdout.splitlines():
        status, _, rest = line.partition("  ")
        if status.strip() in (OK, FAIL, SKIP, WARN):
            lines[rest.split(":")[0].strip()] = line
    return done.returncode, lines, done.stdout + done.stderr


def checks(data_dir: Path, embedder: Any) -> dict[str, Check]:
    return {
        c.name: c
        for c in run_checks(make_settings(data_dir), project_root=REPO_ROOT, load_embedder=lambda path: embedder)
    }


def failed(found: dict[str, Check]) -> set[str]:
    return {name for name, c in found.items() if c.status == FAIL}


async def remember(server: LiveServer, *contents: str) -> None:
    async with server.client() as client:
        for content in contents:
            result = await client.call_tool("remember", {"content": content}, raise_on_error=False)
            assert not result.is_error, result


@pytest.fixture
async def healthy(tmp_path: Path, embedder: Any) -> Path:
    """A data directory a server has run on: SQLite, an index built with the bundled model, 3 memories."""
    settings = make_settings(tmp_path / "data")
    with serve(settings, embedder) as server:
        await remember(
            server,
            "The office plants are watered on Mondays.",
            "Backups run at 02:00 UTC.",
            "The VPN needs a hardware key.",
        )
    return settings.data_dir


def test_healthy_directory_passes_every_check(healthy: Path) -> None:
    code, lines, output = doctor(healthy)
    assert code == 0, output
    assert set(lines) >= {
        "model",
        "sqlite",
        "sqlite journal",
        "sqlite writable",
        "schema",
        "sqlite integrity",
        "index",
        "index model",
        "index points",
        "index backlog",
        "index deletions",
    }
    assert all(line.startswith("ok") for line in lines.values()), output
    assert "multilingual-e5-small (384 dimensions)" in lines["model"]
    assert "3 points" in lines["index points"]
    assert "all checks passed" in output


def test_index_built_for_another_model_says_what_the_next_start_does(healthy: Path) -> None:
    index = EdgeIndex(make_settings(healthy).index_path)
    index.reset(IndexInfo("other", 384))
    index.close()
    code, lines, output = doctor(healthy)
    assert lines["index model"].startswith("WARN"), output
    assert "built with other (384 dimensions)" in lines["index model"]
    assert "embeds every memory again" in lines["index model"] and "memory-server reindex" in output
    # Reindexing is the fix indeed, told the model to change to (without it, reindex keeps the index's model).
    fixed = run_cli("reindex", data_dir=healthy, env=server_env(MEMORY_EMBEDDING_MODEL="multilingual-e5-small"))
    assert fixed.returncode == 0, fixed.stderr
    code, lines, output = doctor(healthy)
    assert code == 0, output


def test_backlog_and_queued_deletions_are_reported_with_the_fix(healthy: Path, embedder: Any) -> None:
    settings = make_settings(healthy)
    conn = connect(settings.db_path)
    try:
        transaction(
            conn, lambda c: c.execute("UPDATE memories SET indexed = 0 WHERE id = (SELECT min(id) FROM memories)")
        )
        transaction(conn, lambda c: c.execute("INSERT INTO index_deletions (id) VALUES (987654)"))
    finally:
        conn.close()
    found = checks(healthy, embedder)
    assert failed(found) == {"index backlog", "index deletions", "index points"}
    assert "1 memories are in SQLite but not in the vector index" in found["index backlog"].detail
    assert "start the server" in (found["index backlog"].fix or "")
    assert "memory-server reindex" in (found["index backlog"].fix or "")
    assert "1 forgotten memories" in found["index deletions"].detail
    assert "3 points" in found["index points"].detail and "2 memories indexed" in found["index points"].detail
    rendered = found["index backlog"].render()
    assert rendered.startswith("FAIL  index backlog: ") and " -- fix: " in rendered

    code, lines, output = doctor(healthy)  # and through the CLI: exit code 1
    assert code == 1 and lines["index backlog"].startswith("FAIL"), output


async def test_while_a_server_runs_index_checks_are_skipped_not_failed(live: LiveServer, embedder: Any) -> None:
    await remember(live, "Doctor may run while the server serves.")
    code, lines, output = doctor(live.settings.data_dir)
    assert code == 0, output
    assert lines["index"].startswith("skip") and "a server is running" in lines["index"]
    assert "skipped" in lines["index"]
    assert "index model" not in lines and "index points" not in lines
    assert lines["sqlite writable"].startswith("ok") and lines["index backlog"].startswith("ok")


def test_missing_directory_and_broken_database_fail(tmp_path: Path, embedder: Any) -> None:
    found = checks(tmp_path / "nowhere", embedder)
    assert found["model"].status == OK
    assert failed(found) == {"data directory"} and "does not exist" in found["data directory"].detail
    assert not (tmp_path / "nowhere").exists()  # doctor creates nothing

    empty = tmp_path / "empty"
    empty.mkdir()
    found = checks(empty, embedder)
    assert failed(found) == {"sqlite"} and "no database" in found["sqlite"].detail
    assert not (empty / "memory.db").exists()

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "memory.db").write_bytes(b"this is not a database" * 300)
    found = checks(broken, embedder)
    assert failed(found) == {"sqlite"} and "backup" in (found["sqlite"].fix or "")


def test_old_schema_and_non_wal_database_fail_with_the_fix(tmp_path: Path, embedder: Any) -> None:
    data = tmp_path / "data"
    open_storage(make_settings(data)).close()
    conn = connect(make_settings(data).db_path)
    try:
        conn.execute("PRAGMA user_version = 1")
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()
    found = checks(data, embedder)
    assert {"schema", "sqlite journal"} <= failed(found)
    assert "version 1" in found["schema"].detail and "site list" in (found["schema"].fix or "")
    assert "not WAL" in found["sqlite journal"].detail


# --- on PostgreSQL ------------------------------------------------------------------------------------------


def test_doctor_on_postgresql_checks_the_database_and_the_followed_index(
    tmp_path: Path, embedder: Any, postgres_url: str
) -> None:
    data = tmp_path / "data"
    env = {"MEMORY_DATABASE_URL": postgres_url}
    settings = make_settings(data, database_url=postgres_url)
    with serve(settings, embedder) as server:
        import asyncio

        asyncio.run(remember(server, "The office plants are watered on Mondays."))
    done = run_cli("doctor", data_dir=data, env={**server_env(), **env})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr and postgres_url not in done.stdout + done.stderr
    for name in ("postgres durability", "postgres writable"):
        assert any(line.startswith("ok") and name in line for line in done.stdout.splitlines()), done.stdout
    rebuilt = run_cli("reindex", data_dir=data, env={**server_env(), **env})
    assert rebuilt.returncode == 0 and "1" in rebuilt.stdout, rebuilt.stdout + rebuilt.stderr

    gone = "postgresql://memory:secret-pw@127.0.0.1:1/nothing"
    refused = run_cli("doctor", data_dir=tmp_path / "other", env={**server_env(), "MEMORY_DATABASE_URL": gone})
    assert refused.returncode == 1 and "Traceback" not in refused.stdout + refused.stderr
    assert "secret-pw" not in refused.stdout + refused.stderr
    assert any(line.startswith("FAIL") and "postgres" in line for line in refused.stdout.splitlines()), refused.stdout
