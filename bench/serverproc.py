"""A real `memory-server serve` process and a small REST client for the quality benchmarks.

The benchmarks built on this (bench/evolving.py, bench/profiles.py) talk to the server only over HTTP
(`/v1/...`), never by importing server code: each run creates a site with the CLI
(`python -m memory_server site create NAME --data-dir D`), starts `python -m memory_server serve --port P --data-dir D`
as a child process with the ranking chosen by `MEMORY_RECALL_RANKING`, waits for `/readyz` 200, and kills
the process at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 120.0
SITE = "bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def child_env(**extra: str) -> dict[str, str]:
    """The parent's environment without its MEMORY_* settings (the model and index ones excepted), offline."""
    keep = ("MEMORY_EMBEDDING_", "MEMORY_INDEX_BACKEND", "MEMORY_QDRANT_")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_") or k.startswith(keep)}
    env.update(
        FASTMCP_SHOW_SERVER_BANNER="false",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        MEMORY_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def parse_fields(output: str) -> dict[str, str]:
    """`key: value` lines (the CLI's stable output format) -> dict."""
    fields = {}
    for line in output.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class Server:
    """One server process on a fresh data directory; use as a context manager."""

    def __init__(
        self,
        data_dir: Path,
        *,
        ranking: str = "production",
        env: dict[str, str] | None = None,
        module: str = "memory_server",
    ) -> None:
        """`module`: what `python -m` runs for `serve` (bench/memprobe.py wraps the command in a memory probe)."""
        self.data_dir = data_dir
        self.module = module
        self.ranking = ranking
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = child_env(MEMORY_RECALL_RANKING=ranking, **(env or {}))
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.secret = ""
        self.startup_seconds = 0.0
        self.http: httpx.Client | None = None

    def start(self) -> Server:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        created = subprocess.run(
            [sys.executable, "-m", "memory_server", "site", "create", SITE, "--data-dir", str(self.data_dir)],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if created.returncode != 0:
            raise RuntimeError(f"site create failed:\n{created.stdout}{created.stderr}")
        self.secret = parse_fields(created.stdout)["secret"]
        started = time.perf_counter()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    self.module,
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(self.data_dir),
                ],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        self.http = httpx.Client(base_url=self.base, auth=(SITE, self.secret), timeout=60.0)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server not ready in {STARTUP_TIMEOUT:.0f} s:\n{self.log()}")
            time.sleep(0.1)
        self.startup_seconds = time.perf_counter() - started
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- REST ---------------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *, retries: int = 5) -> Any:
        """One call; `unavailable` (503) is retried with a short back-off, any other error raises ApiError."""
        assert self.http is not None, "server not started"
        for attempt in range(retries + 1):
            response = self.http.request(method, path, json=body)
            if response.status_code == 503 and attempt < retries:
                time.sleep(0.2 * (attempt + 1))
                continue
            data = response.json() if response.content else None
            if response.status_code >= 400:
                raise ApiError(response.status_code, data)
            return data
        raise AssertionError("unreachable")

    def remember(self, memory: dict[str, Any]) -> str:
        reference: str = self.request("POST", "/v1/memories", memory)["reference"]
        return reference

    def recall(self, query: str, *, limit: int = 10, **filters: Any) -> list[dict[str, Any]]:
        body = {"query": query, "limit": limit, **{k: v for k, v in filters.items() if v is not None}}
        results: list[dict[str, Any]] = self.request("POST", "/v1/recall", body)["results"]
        return results

    def forget(self, reference: str) -> None:
        self.request("DELETE", f"/v1/memories/{reference}")
