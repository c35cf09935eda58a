"""With MEMORY_LOG_FORMAT=json every line a server process writes is one JSON object, also where HOME is not
writable (a container's non-root user), where onnxruntime's telemetry used to print an ANSI-coloured
warning into the log."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2

from conftest import wait_ready
from procs import ServerProcess, run_cli, server_env


def test_every_line_is_json_without_a_writable_home(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # /dev/null is not a directory: nothing can be created under it, whoever runs the test.
    env = server_env(
        HOME="/dev/null", XDG_CACHE_HOME="/dev/null/cache", MEMORY_LOG_FORMAT="json", MEMORY_LOG_LEVEL="INFO"
    )
    env.pop("ORT_DISABLE_TELEMETRY", None)  # the server itself must turn it off
    server = ServerProcess(data, env=env, log_path=tmp_path / "server.log")
    server.start()
    try:
        wait_ready(server.base)
        created = run_cli("site", "create", "acme", data_dir=data)
        secret = created.stdout.split("secret: ")[1].strip()
        with httpx2.Client(base_url=server.base, timeout=60) as http:
            http.get("/v1/memories")  # a 401
            http.post("/v1/memories", auth=("acme", secret), json={"content": "Logs are JSON lines."})
            http.post("/v1/recall", auth=("acme", secret), json={"query": "what are logs"})
            http.post("/v1/memories", auth=("acme", secret), json={"content": ""})  # a 422
    finally:
        server.stop()
    lines = [line for line in server.log().splitlines() if line.strip()]
    assert len(lines) >= 5
    for line in lines:
        assert "\x1b" not in line, line
        entry = json.loads(line)
        assert isinstance(entry, dict) and {"time", "level", "logger", "message"} <= entry.keys(), line
    assert any(entry.get("secret") for entry in map(json.loads, lines))  # the first-start credential, as JSON
