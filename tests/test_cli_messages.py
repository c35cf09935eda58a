"""What the CLI says when something is in the way, run as real processes: a port in use (before anything is
created, naming the process holding it), bad flags and settings (one line, no traceback), reindex while a
server runs, an unreachable Qdrant server; and the version."""

from __future__ import annotations

import os
import socket
import tomllib
from pathlib import Path

from server.version import __version__

from procs import ServerProcess, run_cli, server_env


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
    one_line_error(run_cli("site", "list", data_dir=data, env=server_env(MEMORY_MAX_CONNECTIONS="many")),
                   says="MEMORY_MAX_CONNECTIONS")
    one_line_error(run_cli("serve", data_dir=data, env=server_env(MEMORY_PORT="-1")), says="MEMORY_PORT")
    assert not data.exists()


def test_reindex_while_a_server_runs_says_to_stop_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run_cli("site", "create", "acme", data_dir=data)
    with ServerProcess(data) as server:
        assert server.proc is not None
        one_line_error(run_cli("reindex", data_dir=data),
                       says=f"stop the server (pid {server.proc.pid}), then run reindex again")


def test_an_unreachable_qdrant_server_says_what_to_check(tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nothing listens there once the socket is closed
    env = server_env(MEMORY_INDEX_BACKEND="server", MEMORY_QDRANT_URL=f"http://127.0.0.1:{port}")
    line = one_line_error(run_cli("serve", "--port", "0", data_dir=tmp_path / "data", env=env),
                          says="Check MEMORY_QDRANT_URL")
    assert f"127.0.0.1:{port}" in line


def test_version_is_the_projects() -> None:
    with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as file:
        declared = tomllib.load(file)["project"]["version"]
    assert __version__ == declared
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"memory-server {declared}"
