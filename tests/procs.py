"""Real server and CLI processes for tests: `python -m memory_server ...` as subprocesses.

`ServerProcess` starts `python -m memory_server serve --port P --data-dir D`, waits for /healthz, and is always
killed by its owner (`server_processes` fixture in the test modules, or a `with` block). `run_cli` runs one
CLI command to completion.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client

from conftest import free_port
from tests import backends  # one module object whichever way a test imports procs

REPO_ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 60.0


# MEMORY_* settings a test run may choose for every server (model, index backend); the rest (data dir, port,
# transport, site, limits) each test decides for itself.
INHERITED_SETTINGS = ("MEMORY_EMBEDDING_", "MEMORY_INDEX_BACKEND", "MEMORY_QDRANT_")


def server_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: no banner, quiet logs, offline, plus `extra` (MEMORY_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_") or k.startswith(INHERITED_SETTINGS)}
    env.update(
        FASTMCP_SHOW_SERVER_BANNER="false",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        MEMORY_LOG_LEVEL="WARNING",
        MEMORY_OWNER_IDLE_S="3",  # the owner a stdio client starts leaves soon after the test's last client
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run_cli(
    *args: str, data_dir: Path | None = None, env: dict[str, str] | None = None, executable: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `memory-server ARGS [--data-dir D]` to completion and return the finished process."""
    command = (executable or [sys.executable, "-m", "memory_server"]) + list(args)
    if data_dir is not None:
        command += ["--data-dir", str(data_dir)]
    env = {**backends.current.env(data_dir), **(env or server_env())}  # the data dir's authority
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)


def parse_fields(output: str) -> dict[str, str]:
    """`key: value` lines -> dict (the CLI's stable output format)."""
    fields = {}
    for line in output.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


class ServerProcess:
    """One `memory-server serve` child process on 127.0.0.1:<port>."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
        preexec: Any = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.host = host
        self.base = f"http://{host}:{self.port}"
        self.url = f"{self.base}/mcp"
        self.log_path = log_path or data_dir.parent / f"server-{self.port}.log"
        self._env = {**backends.current.env(data_dir), **(env or server_env())}
        self._preexec = preexec  # e.g. resource limits, applied in the child before exec
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "memory_server",
                    "serve",
                    "--port",
                    str(self.port),
                    "--host",
                    self.host,
                    "--data-dir",
                    str(self.data_dir),
                ],
                cwd=REPO_ROOT,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=self._preexec,
            )
        finally:
            log.close()
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx2.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"server did not become healthy in {STARTUP_TIMEOUT}s:\n{self.log()}")
            time.sleep(0.05)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> ServerProcess:
        """Until /readyz says ready: the model loaded, the index opened and caught up."""
        deadline = time.monotonic() + timeout
        while True:
            response = httpx2.get(f"{self.base}/readyz", timeout=5)
            if response.status_code == 200:
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready in {timeout}s: {response.text}\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no flushing; what survives is what SQLite made durable."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit promptly."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def client(self, site: str, secret: str, **kwargs: Any) -> Client:
        return Client(self.url, auth=httpx2.BasicAuth(site, secret), **kwargs)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


class ServerProcesses:
    """Starts servers on demand and kills every one of them at teardown (see the fixtures)."""

    def __init__(self) -> None:
        self._all: list[ServerProcess] = []

    def start(self, data_dir: Path, **kwargs: Any) -> ServerProcess:
        server = ServerProcess(data_dir, **kwargs)
        self._all.append(server)
        return server.start()

    def kill_all(self) -> None:
        for server in self._all:
            try:
                server.kill()
            except Exception:  # keep killing the rest
                pass


@pytest.fixture
def server_processes() -> Iterator[ServerProcesses]:
    """Import into a test module to use: every server started through it is SIGKILLed at teardown."""
    servers = ServerProcesses()
    try:
        yield servers
    finally:
        servers.kill_all()


# --- checking logs written by concurrent or killed writers ------------------------------------------------


def batch_payloads(writer: int, batch: int, size: int, **extra: Any) -> list[dict[str, Any]]:
    """Payloads that say which writer's which batch they belong to, and where in it."""
    return [{"writer": writer, "batch": batch, "pos": pos, "size": size, **extra} for pos in range(size)]


def check_log(items: list[dict[str, Any]], acks: dict[tuple[int, int], dict[str, Any]]) -> dict[tuple[int, int], list]:
    """Assert the invariants of one conversation's log and return its batches by (writer, batch).

    - seq is 0..n-1, each exactly once, in order;
    - every batch is whole (positions 0..size-1, once each), contiguous in seq, with one recorded_at;
    - every acknowledged batch is there, at the seqs and with the recorded_at its acknowledgement gave.
    """
    assert [item["seq"] for item in items] == list(range(len(items))), "seqs are not 0..n-1 in order"
    batches: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for item in items:
        payload = item["payload"]
        batches.setdefault((payload["writer"], payload["batch"]), []).append(item)
    for key, members in batches.items():
        size = members[0]["payload"]["size"]
        assert [m["payload"]["pos"] for m in members] == list(range(size)), f"batch {key} is partial or repeated"
        first = members[0]["seq"]
        assert [m["seq"] for m in members] == list(range(first, first + size)), f"batch {key} is not contiguous"
        assert len({m["recorded_at"] for m in members}) == 1, f"batch {key} has several recorded_at"
    for key, ack in acks.items():
        assert key in batches, f"acknowledged batch {key} is missing"
        members = batches[key]
        assert (members[0]["seq"], members[-1]["seq"]) == (ack["first_seq"], ack["last_seq"]), key
        assert members[0]["recorded_at"] == ack["recorded_at"], key
    return batches


async def read_all(client: Client, conversation: str) -> list[dict[str, Any]]:
    """Every item of a conversation, paging with replay_memory until a short page."""
    items: list[dict[str, Any]] = []
    while True:
        result = await client.call_tool(
            "replay_memory", {"conversation_id": conversation, "limit": 1000, "offset": len(items)}
        )
        page = result.structured_content["items"]
        items += page
        if len(page) < 1000:
            return items
