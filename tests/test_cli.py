"""The `memory-server` administration CLI, run as a real subprocess against a data directory on tmp_path."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

from memory_server.auth.authenticator import Authenticator
from memory_server.auth.principal import Principal
from memory_server.errors import Unauthorized
from memory_server.storage.backends import backend_of
from memory_server.storage.factory import open_storage
from memory_server.storage.sqlite.connection import connect

from conftest import make_settings, query
from procs import parse_fields, run_cli, server_env

pytestmark = pytest.mark.backends


def ok(*args: str, data_dir: Path) -> str:
    done = run_cli(*args, data_dir=data_dir)
    assert done.returncode == 0, f"{args}: {done.stderr}"
    assert "Traceback" not in done.stderr
    return done.stdout


def fails(*args: str, data_dir: Path | None, says: str) -> str:
    done = run_cli(*args, data_dir=data_dir)
    assert done.returncode != 0, f"{args} unexpectedly succeeded: {done.stdout}"
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    message = done.stderr + done.stdout
    assert says in message, message
    return message


def authenticate(data_dir: Path, header: str) -> Principal:
    """The server's own credential check, against the CLI-written SQLite file."""
    storage = open_storage(make_settings(data_dir))
    try:
        return Authenticator(storage.sites).authenticate(header)
    finally:
        storage.close()


def basic(site: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def test_site_create_prints_username_and_a_working_secret(data_dir: Path) -> None:
    out = parse_fields(ok("site", "create", "acme", data_dir=data_dir))
    assert out["username"] == "acme"
    assert len(out["secret"]) >= 24
    principal = authenticate(data_dir, basic("acme", out["secret"]))
    assert principal.site == "acme" and principal.kind == "basic"


def test_console_script_is_installed_and_works(data_dir: Path) -> None:
    script = Path(sys.executable).parent / "memory-server"
    assert script.exists(), "the memory-server console script is not installed in the venv"
    done = run_cli("site", "create", "acme", data_dir=data_dir, executable=[str(script)])
    assert done.returncode == 0, done.stderr
    assert parse_fields(done.stdout)["username"] == "acme"
    assert "secret" in parse_fields(done.stdout)


def test_site_list_rotate_delete(data_dir: Path) -> None:
    secrets = {
        name: parse_fields(ok("site", "create", name, data_dir=data_dir))["secret"]
        for name in ("acme", "globex", "initech")
    }
    listed = ok("site", "list", data_dir=data_dir)
    assert [line.split()[0] for line in listed.splitlines()] == ["acme", "globex", "initech"]
    assert not any(secret in listed for secret in secrets.values())

    rotated = parse_fields(ok("site", "rotate", "globex", data_dir=data_dir))
    assert rotated["username"] == "globex" and rotated["secret"] != secrets["globex"]
    with pytest.raises(Unauthorized):
        authenticate(data_dir, basic("globex", secrets["globex"]))
    assert authenticate(data_dir, basic("globex", rotated["secret"])).site == "globex"
    assert authenticate(data_dir, basic("acme", secrets["acme"])).site == "acme"  # others untouched

    ok("site", "delete", "acme", data_dir=data_dir)
    assert [line.split()[0] for line in ok("site", "list", data_dir=data_dir).splitlines()] == ["globex", "initech"]
    with pytest.raises(Unauthorized):
        authenticate(data_dir, basic("acme", secrets["acme"]))


def test_site_errors_exit_non_zero_with_a_clear_message(data_dir: Path) -> None:
    ok("site", "create", "acme", data_dir=data_dir)
    fails("site", "create", "acme", data_dir=data_dir, says="already exists")
    fails("site", "delete", "nobody", data_dir=data_dir, says="no site named 'nobody'")
    fails("site", "rotate", "nobody", data_dir=data_dir, says="no site named 'nobody'")
    for bad in ("has space", "_leading-underscore", "x" * 65, "ünïcødé", "a/b", "trailing-newline\n", ""):
        fails("site", "create", bad, data_dir=data_dir, says="site name must be")
    assert [line.split()[0] for line in ok("site", "list", data_dir=data_dir).splitlines()] == ["acme"]


def test_tokens_create_list_revoke(data_dir: Path) -> None:
    ok("site", "create", "acme", data_dir=data_dir)
    ok("site", "create", "globex", data_dir=data_dir)
    read = parse_fields(ok("token", "create", "--site", "acme", "--scope", "memory:read", data_dir=data_dir))
    both = parse_fields(
        ok(
            "token",
            "create",
            "--site",
            "acme",
            "--scope",
            "memory:read",
            "--scope",
            "memory:write",
            "--team",
            "t1",
            "--team",
            "t2",
            "--project",
            "p1",
            "--bucket",
            "b1",
            data_dir=data_dir,
        )
    )
    for created in (read, both):
        assert created["id"] and created["token"].startswith("mst_") and len(created["token"]) > 40

    principal = authenticate(data_dir, f"Bearer {both['token']}")
    assert principal.kind == "bearer" and principal.site == "acme"
    assert principal.scopes == {"memory:read", "memory:write"}
    assert principal.teams == {"t1", "t2"} and principal.projects == {"p1"} and principal.buckets == {"b1"}
    assert authenticate(data_dir, f"Bearer {read['token']}").scopes == {"memory:read"}

    listed = ok("token", "list", "--site", "acme", data_dir=data_dir)
    lines = {line.split("\t")[0]: line for line in listed.splitlines()[1:]}  # after the header row
    assert set(lines) == {read["id"], both["id"]}
    assert "memory:read" in lines[read["id"]] and "unbounded" in lines[read["id"]] and "active" in lines[read["id"]]
    assert "teams=t1,t2" in lines[both["id"]] and "projects=p1" in lines[both["id"]]
    assert read["token"] not in listed and both["token"] not in listed  # never the secrets
    assert ok("token", "list", "--site", "globex", data_dir=data_dir).strip() == ""  # per site

    assert read["id"] in ok("token", "revoke", read["id"], data_dir=data_dir)
    with pytest.raises(Unauthorized):
        authenticate(data_dir, f"Bearer {read['token']}")
    assert authenticate(data_dir, f"Bearer {both['token']}").site == "acme"
    relisted = {
        line.split("\t")[0]: line for line in ok("token", "list", "--site", "acme", data_dir=data_dir).splitlines()[1:]
    }
    assert "revoked" in relisted[read["id"]] and "active" in relisted[both["id"]]
    fails("token", "revoke", read["id"], data_dir=data_dir, says="no active token")


def test_token_errors_exit_non_zero_with_a_clear_message(data_dir: Path) -> None:
    ok("site", "create", "acme", data_dir=data_dir)
    fails("token", "create", "--site", "acme", "--scope", "memory:admin", data_dir=data_dir, says="unknown scope")
    fails(
        "token",
        "create",
        "--site",
        "acme",
        "--scope",
        "memory:read",
        "--scope",
        "root",
        data_dir=data_dir,
        says="unknown scope",
    )
    fails(
        "token",
        "create",
        "--site",
        "nobody",
        "--scope",
        "memory:read",
        data_dir=data_dir,
        says="no site named 'nobody'",
    )
    fails("token", "create", "--site", "acme", data_dir=data_dir, says="--scope")  # a scope is required
    fails("token", "list", "--site", "nobody", data_dir=data_dir, says="no site named 'nobody'")
    fails("token", "revoke", "deadbeef0000", data_dir=data_dir, says="no active token")
    assert ok("token", "list", "--site", "acme", data_dir=data_dir).strip() == ""


def test_secrets_are_stored_only_as_hashes(data_dir: Path) -> None:
    secret = parse_fields(ok("site", "create", "acme", data_dir=data_dir))["secret"]
    rotated = parse_fields(ok("site", "rotate", "acme", data_dir=data_dir))["secret"]
    token = parse_fields(ok("token", "create", "--site", "acme", "--scope", "memory:read", data_dir=data_dir))["token"]
    settings = make_settings(data_dir)
    values = (secret, rotated, token, token.removeprefix("mst_"))
    if backend_of(settings).in_data_dir:
        files = [p for p in data_dir.rglob("*") if p.is_file()]
        assert any(p.name == "memory.db" for p in files)
        for value in values:
            for path in files:  # the database, its WAL and anything else in the data directory
                assert value.encode() not in path.read_bytes(), f"a secret is stored in clear in {path.name}"
    [(stored,)] = query(settings, "SELECT secret_hash FROM sites WHERE name = 'acme'")
    assert stored.startswith("scrypt$")
    for table, column in (("sites", "secret_hash"), ("tokens", "token_hash"), ("tokens", "id")):
        for (kept,) in query(settings, f"SELECT {column} FROM {table}"):
            assert all(value not in kept for value in values), f"a secret is stored in clear in {table}"


@pytest.mark.sqlite_only  # the data directory holds the authority only on SQLite
def test_unusable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("not a directory")
    fails("site", "create", "acme", data_dir=not_a_dir, says="cannot open the data directory")
    fails("site", "list", data_dir=not_a_dir, says="cannot open the data directory")


def test_data_dir_from_environment_and_flag_wins(tmp_path: Path) -> None:
    from_env, from_flag = tmp_path / "env-dir", tmp_path / "flag-dir"
    env = server_env(MEMORY_DATA_DIR=str(from_env))
    done = run_cli("site", "create", "envsite", env=env)
    assert done.returncode == 0, done.stderr
    done = run_cli("site", "create", "flagsite", data_dir=from_flag, env=env)
    assert done.returncode == 0, done.stderr
    assert run_cli("site", "list", env=env).stdout.split()[0] == "envsite"
    assert ok("site", "list", data_dir=from_flag).split()[0] == "flagsite"
    assert "envsite" not in ok("site", "list", data_dir=from_flag)


@pytest.mark.sqlite_only  # SQLite's own locking
def test_cli_changes_while_the_database_is_in_use(data_dir: Path) -> None:
    """Site and token commands touch only SQLite: they work while another connection holds the database."""
    settings = make_settings(data_dir)
    open_storage(settings).close()
    holder = connect(settings.db_path)
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT COUNT(*) FROM sites").fetchone()  # an open read transaction, as a server has
        out = parse_fields(ok("site", "create", "acme", data_dir=data_dir))
        holder.execute("COMMIT")
        assert authenticate(data_dir, basic("acme", out["secret"])).site == "acme"
    finally:
        holder.close()


def test_help_lists_the_stable_commands() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    for command in ("serve", "site", "token"):
        assert command in done.stdout


def test_help_leads_with_what_a_newcomer_runs() -> None:
    env = server_env(COLUMNS="200")  # one line per command
    listed = run_cli("--help", env=env).stdout
    commands = listed.split("Start here")[1].splitlines()
    names = [line.split()[1] for line in commands if line.startswith("│ ") and len(line.split()) > 2]
    assert names[:2] == ["serve", "client-config"], names
    assert {"import", "export", "backup", "doctor", "reindex", "site", "token"} <= set(names[2:])
    assert listed.index("Start here") < listed.index("Data") < listed.index("Access")
    importing = " ".join(run_cli("import", "--help", env=env).stdout.split())
    assert "--from mcp-memory|mem0|markdown" in importing.split("Memories keep")[0]  # in the summary
    serving = run_cli("serve", "--help", env=env).stdout
    for default in ("default: http", "default: 127.0.0.1", "default: 8765", "default: the per-user data directory"):
        assert default in serving, default
