"""`client-config` against the real clients' command lines: Claude Code (`@anthropic-ai/claude-code`) runs the
printed `claude mcp add` lines and reads the written `.mcp.json`, Codex (`@openai/codex`) reads the written
`config.toml`. Both are installed from the npm registry into a cache (`~/.cache/memory-server-tests/npm`, or
MEMORY_TEST_NPM_CACHE); where npm or the registry is missing the tests skip, saying which. Every client runs
with HOME in the test's own directory."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from procs import ServerProcess, run_cli, server_env

PACKAGES = ("@anthropic-ai/claude-code", "@openai/codex")
INSTALL_TIMEOUT = 600


def _cache() -> Path:
    return Path(os.environ.get("MEMORY_TEST_NPM_CACHE") or Path.home() / ".cache" / "memory-server-tests" / "npm")


@pytest.fixture(scope="module")
def clis() -> Path:
    """The directory holding `claude` and `codex`, installed once into the cache."""
    cache = _cache()
    bin_dir = cache / "node_modules" / ".bin"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be installing
        if all((bin_dir / name).exists() for name in ("claude", "codex")):
            return bin_dir
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed (make ts-clients): the real Claude Code and Codex CLIs come from npm")
        try:
            probe = subprocess.run(
                [npm, "view", PACKAGES[0], "version"], capture_output=True, text=True, timeout=30, check=False
            )
        except subprocess.TimeoutExpired:
            pytest.skip("the npm registry did not answer within 30 s: cannot install Claude Code and Codex")
        if probe.returncode != 0:
            pytest.skip(f"the npm registry is not reachable: {probe.stderr.strip().splitlines()[-1:]}")
        done = subprocess.run(
            [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", *PACKAGES],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    return bin_dir


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "project").mkdir(parents=True)
    return tmp_path / "home"


def client_env(bin_dir: Path, home: Path, **extra: str) -> dict[str, str]:
    env = server_env(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), CODEX_HOME="", **extra)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env.pop("CODEX_HOME")
    return {k: v for k, v in env.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "OPENAI_"))}


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


def memory_config(*args: str, home: Path, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(
        "client-config",
        *args,
        data_dir=data_dir,
        env=server_env(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), CODEX_HOME="", **env),
    )
    assert done.returncode == 0, done.stderr
    return done


def exported(stderr: str) -> tuple[str, str]:
    """`export VAR='value'` as client-config prints it on stderr."""
    line = next(line.strip() for line in stderr.splitlines() if line.strip().startswith("export "))
    variable, _, value = line.removeprefix("export ").partition("=")
    return variable, value.strip("'")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "served").start().wait_ready()
    try:
        yield process
    finally:
        process.kill()


def test_claude_code_runs_the_printed_stdio_line_and_connects(clis: Path, home: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    line = memory_config("claude-code", home=home, data_dir=data).stdout
    env = client_env(clis, home)
    added = run(["bash", "-c", line], env, home / "project")
    assert added.returncode == 0, added.stdout + added.stderr  # the name before --env: not taken as a value
    got = run(["claude", "mcp", "get", "memory"], env, home / "project")
    assert got.returncode == 0, got.stderr
    assert "Type: stdio" in got.stdout and "MEMORY_TRANSPORT=stdio" in got.stdout
    assert f"--data-dir {data.resolve()}" in got.stdout
    listed = run(["claude", "mcp", "list"], env, home / "project")  # the health check starts the server
    assert "memory: " in listed.stdout and "✔ Connected" in listed.stdout, listed.stdout + listed.stderr


def test_claude_code_runs_the_printed_http_line_reading_the_header_from_the_environment(
    clis: Path, home: Path, server: ServerProcess
) -> None:
    done = memory_config(
        "claude-code",
        "--transport",
        "http",
        "--token",
        home=home,
        data_dir=server.data_dir,
        MEMORY_PORT=str(server.port),
    )
    variable, value = exported(done.stderr)
    assert value.startswith("Bearer mst_") and value not in done.stdout
    env = client_env(clis, home)
    added = run(["bash", "-c", done.stdout], env, home / "project")
    assert added.returncode == 0, added.stdout + added.stderr
    assert "mst_" not in (home / ".claude.json").read_text()  # Claude Code keeps the reference only

    unset = run(["claude", "mcp", "list"], env, home / "project")
    assert "✔ Connected" not in unset.stdout and f"Missing environment variables: {variable}" in unset.stdout
    set_ = run(["claude", "mcp", "list"], {**env, variable: value}, home / "project")
    assert "memory: " in set_.stdout and "✔ Connected" in set_.stdout, set_.stdout + set_.stderr


def test_claude_code_reads_the_written_project_file_and_asks_for_approval(
    clis: Path, home: Path, server: ServerProcess
) -> None:
    project = home / "project"
    done = memory_config(
        "claude-code",
        "--transport",
        "http",
        "--token",
        "--write",
        "--config-file",
        str(project / ".mcp.json"),
        home=home,
        data_dir=server.data_dir,
        MEMORY_PORT=str(server.port),
    )
    assert "Claude Code asks you to approve" in done.stderr
    variable, value = exported(done.stderr)
    got = run(["claude", "mcp", "get", "memory"], {**client_env(clis, home), variable: value}, project)
    assert got.returncode == 0, got.stderr
    assert "Project config" in got.stdout and "Pending approval" in got.stdout
    assert f"URL: {server.url}" in got.stdout and f"Authorization: ${{{variable}}}" in got.stdout


def test_codex_reads_the_written_tables(clis: Path, home: Path, tmp_path: Path, server: ServerProcess) -> None:
    data = tmp_path / "data"
    memory_config("codex", "--write", home=home, data_dir=data, MEMORY_QDRANT_API_KEY="key-not-in-the-file")
    http = memory_config(
        "codex",
        "--transport",
        "http",
        "--token",
        "--name",
        "memory-http",
        "--write",
        home=home,
        data_dir=server.data_dir,
        MEMORY_PORT=str(server.port),
    )
    text = (home / ".codex" / "config.toml").read_text()
    assert "mst_" not in text and "key-not-in-the-file" not in text
    env = client_env(clis, home)
    stdio = run(["codex", "mcp", "get", "memory", "--json"], env, home / "project")
    assert stdio.returncode == 0, stdio.stderr
    transport = json.loads(stdio.stdout)["transport"]
    assert transport["type"] == "stdio" and transport["env"]["MEMORY_TRANSPORT"] == "stdio"
    assert transport["args"][-2:] == ["--data-dir", str(data.resolve())]
    assert transport["env_vars"] == ["MEMORY_QDRANT_API_KEY"]  # passed on from Codex's environment
    remote = run(["codex", "mcp", "get", "memory-http", "--json"], env, home / "project")
    assert remote.returncode == 0, remote.stderr
    transport = json.loads(remote.stdout)["transport"]
    variable, _ = exported(http.stderr)
    assert transport["type"] == "streamable_http" and transport["url"] == server.url
    assert transport["env_http_headers"] == {"Authorization": variable} and not transport["http_headers"]
    listed = run(["codex", "mcp", "list", "--json"], env, home / "project")
    assert {server["name"] for server in json.loads(listed.stdout)} == {"memory", "memory-http"}


def test_two_claude_code_servers_on_the_per_user_store_both_connect(clis: Path, home: Path, tmp_path: Path) -> None:
    """Two entries made without --data-dir, as a user adds one per project: both start a server on the per-user
    store at once (Claude Code checks them side by side) and both connect, sharing its one owner."""
    data_home = tmp_path / "xdg-data"
    env = client_env(clis, home, XDG_DATA_HOME=str(data_home))
    for name in ("memory", "memory-too"):
        printed = run_cli("client-config", "claude-code", "--name", name, env=env)
        assert printed.returncode == 0, printed.stderr
        assert "--data-dir" not in printed.stdout  # the per-user default, not pinned
        added = run(
            ["bash", "-c", printed.stdout.replace("claude mcp add ", "claude mcp add --scope user ")], env, home
        )
        assert added.returncode == 0, added.stdout + added.stderr
    listed = run(["claude", "mcp", "list"], env, home)
    assert "memory: " in listed.stdout and "memory-too: " in listed.stdout, listed.stdout + listed.stderr
    assert listed.stdout.count("✔ Connected") == 2, listed.stdout + listed.stderr
    store = data_home / "memory-server"
    assert (store / "memory.db").is_file()
    run_cli("owner", "stop", "--data-dir", str(store), env=env)
