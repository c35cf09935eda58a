"""What the CLI says when something is in the way, run as real processes: a port in use (before anything is
created, naming the process holding it), bad flags and settings (one line, no traceback), reindex while a
server runs, an unreachable Qdrant server; a malformed MEMORY_DATABASE_URL (never printed with its password), a
PostgreSQL password it refuses, an emptied database file; and the version."""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx2
import psycopg
import pytest

from memory_server.version import __version__

from procs import ServerProcess, parse_fields, run_cli, server_env
from tests.postgres import PostgresServer, _make_directory, _server_user, find_bindir


def one_line_error(done: object, *, says: str) -> str:
    stderr = done.stderr  # type: ignore[attr-defined]
    assert done.returncode == 1, stderr  # type: ignore[attr-defined]
    assert "Traceback" not in stderr and "╭" not in stderr, stderr  # no Rich traceback either
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert says in lines[0], stderr
    return lines[0]


def test_serve_on_a_port_in_use_fails_first_and_names_the_holder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        done = run_cli("serve", "--port", str(port), data_dir=data)
    line = one_line_error(done, says=f"port {port} on 127.0.0.1 is in use by pid {os.getpid()}")
    assert "secret" not in done.stdout + done.stderr
    assert not data.exists(), "nothing may be created before the port is known to be free"
    assert "--port" in line


def test_bad_flags_and_settings_are_one_line_errors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    one_line_error(run_cli("serve", "--transport", "foo", data_dir=data), says="--transport")
    one_line_error(run_cli("serve", "--port", "99999", data_dir=data), says="--port")
    one_line_error(
        run_cli("site", "list", data_dir=data, env=server_env(MEMORY_MAX_CONNECTIONS="many")),
        says="MEMORY_MAX_CONNECTIONS",
    )
    one_line_error(run_cli("serve", data_dir=data, env=server_env(MEMORY_PORT="-1")), says="MEMORY_PORT")
    assert not data.exists()


def test_reindex_while_a_server_runs_says_to_stop_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run_cli("site", "create", "acme", data_dir=data)
    with ServerProcess(data) as server:
        assert server.proc is not None
        one_line_error(
            run_cli("reindex", data_dir=data), says=f"stop the server (pid {server.proc.pid}), then run reindex again"
        )


def test_an_unreachable_qdrant_server_says_what_to_check(tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nothing listens there once the socket is closed
    env = server_env(MEMORY_INDEX_BACKEND="server", MEMORY_QDRANT_URL=f"http://127.0.0.1:{port}")
    line = one_line_error(
        run_cli("serve", "--port", "0", data_dir=tmp_path / "data", env=env), says="Check MEMORY_QDRANT_URL"
    )
    assert f"127.0.0.1:{port}" in line


def test_version_is_the_projects() -> None:
    with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as file:
        declared = tomllib.load(file)["project"]["version"]
    assert __version__ == declared
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"memory-server {declared}"


# --- the database: a malformed URL, a refused password, an emptied file ---------------------------------

PASSWORD = "s3cret-Pa55"
MALFORMED_URLS = [
    f"postgresql://memory:{PASSWORD}%zz@db.example/memory",  # a bad percent escape in the password
    f"postgresql://memory:{PASSWORD}@[db.example/memory",  # an unclosed IPv6 bracket: all of it quoted
    f"postgresql://memory@db.example/memory?password={PASSWORD}%zz",
]


def test_a_malformed_database_url_is_named_never_printed_with_its_password(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for url in MALFORMED_URLS:
        env = server_env(MEMORY_DATABASE_URL=url)
        for command in (
            ("site", "list"),
            ("serve", "--port", "0"),
            ("export", "-"),
            ("doctor",),
            ("token", "list", "--site", "acme"),
        ):
            done = run_cli(*command, data_dir=data, env=env)
            line = one_line_error(done, says="MEMORY_DATABASE_URL is not a PostgreSQL URL")
            assert PASSWORD not in done.stdout + done.stderr, (command, line)
            assert "retry" not in line, line
    assert not data.exists()


@pytest.fixture(scope="module")
def password_postgres() -> Iterator[tuple[str, str]]:
    """A private PostgreSQL server that checks passwords (scram-sha-256): the right URL and one with a wrong
    password."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found")
    user = _server_user()
    server = PostgresServer(bindir, _make_directory(user), user=user)
    server.arm_watchdog()
    try:
        password_file = server.socket_dir / "password"
        password_file.write_text(f"{PASSWORD}\n")
        password_file.chmod(0o644)
        server._run(
            "initdb",
            "-D",
            str(server.data_dir),
            "-A",
            "scram-sha-256",
            "--pwfile",
            str(password_file),
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        )
        password_file.unlink()
        server.start()
        right = server.url().replace("postgres@", f"postgres:{PASSWORD}@")
        yield right, server.url().replace("postgres@", "postgres:not-the-password@")
    finally:
        server.destroy()


def test_a_wrong_postgresql_password_says_authentication_failed_not_retry(
    tmp_path: Path, password_postgres: tuple[str, str]
) -> None:
    _, wrong = password_postgres
    env = server_env(MEMORY_DATABASE_URL=wrong)
    for command in (("site", "list"), ("serve", "--port", "0"), ("export", "-"), ("site", "create", "acme")):
        line = one_line_error(run_cli(*command, data_dir=tmp_path / "data", env=env), says="authentication failed")
        assert "retrying will not help" in line and "retry shortly" not in line and "unreachable" not in line, line
        assert "not-the-password" not in line


def test_readyz_says_authentication_failed_once_the_password_is_changed_under_a_running_server(
    tmp_path: Path, password_postgres: tuple[str, str]
) -> None:
    right, _ = password_postgres
    data = tmp_path / "data"
    with ServerProcess(data, env=server_env(MEMORY_DATABASE_URL=right)) as server:
        server.wait_ready()
        with psycopg.connect(right, autocommit=True) as admin:
            admin.execute("ALTER ROLE postgres PASSWORD 'changed-by-the-dba'")
            try:  # the server's connections were authenticated already: close them, so it must connect again
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"
                )
                ready = httpx2.get(f"{server.base}/readyz", timeout=60)
            finally:
                with psycopg.connect(right.replace(PASSWORD, "changed-by-the-dba"), autocommit=True) as again:
                    again.execute(f"ALTER ROLE postgres PASSWORD '{PASSWORD}'")
        assert ready.status_code == 503, ready.text
        reasons = ready.json()["reasons"]
        assert any("authentication failed" in reason and "retrying will not help" in reason for reason in reasons), (
            reasons
        )
        assert PASSWORD not in ready.text and "Traceback" not in server.log()


def test_an_emptied_database_in_a_used_data_directory_is_damage_not_a_first_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    facts = [f"The spare router number {n} sits on shelf {n} of the Lisbon warehouse." for n in range(6)]
    with ServerProcess(data) as server:
        server.wait_ready()
        for fact in facts:
            assert (
                httpx2.post(
                    f"{server.base}/v1/memories", json={"content": fact}, auth=("acme", secret), timeout=60
                ).status_code
                == 201
            )
        server.stop()
    kept = tmp_path / "memory.db.kept"
    assert run_cli("backup", str(kept), data_dir=data).returncode == 0
    (data / "memory.db").write_bytes(b"")  # truncated: what a botched copy or a full disk in a restore leaves

    damaged = f"error: the database {data / 'memory.db'} is damaged (the file is empty (0 bytes)"
    for command in (("serve", "--port", "0"), ("site", "list"), ("export", "-"), ("backup", str(tmp_path / "b.db"))):
        line = one_line_error(run_cli(*command, data_dir=data), says="restore the latest `memory-server backup`")
        assert line.startswith(damaged) and "memory-server doctor" in line, line
    report = run_cli("doctor", data_dir=data)
    assert report.returncode == 1 and "FAIL  sqlite: " in report.stdout and "empty (0 bytes)" in report.stdout
    assert (data / "memory.db").stat().st_size == 0  # nothing made a new database of it

    # Restored, everything is there, and the index kept its points through the refused starts.
    (data / "memory.db").write_bytes(kept.read_bytes())
    report = run_cli("doctor", data_dir=data)
    assert f"ok    index points: {len(facts)} points, one per indexed memory" in report.stdout, report.stdout
    assert [line for line in run_cli("site", "list", data_dir=data).stdout.splitlines() if "default" in line] == []


def test_a_new_data_directory_with_only_an_empty_database_file_is_a_first_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "memory.db").write_bytes(b"")
    created = run_cli("site", "create", "acme", data_dir=data)
    assert created.returncode == 0, created.stderr
    assert "acme" in run_cli("site", "list", data_dir=data).stdout
