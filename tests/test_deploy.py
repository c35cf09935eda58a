"""The Docker deployment: docker-compose.yml, Dockerfile, .dockerignore, and the pre-set credential.

No Docker engine is needed (nor reachable) here. The compose file is checked by `docker compose config`
when a Compose CLI is installed, and always against the Compose Specification's JSON schema as vendored by
the `check-jsonschema` package (a test dependency: nothing is downloaded at test time), plus the properties
this deployment relies on. Every service's healthcheck command is run for real against a local stand-in
(the PostgreSQL one against the test suite's PostgreSQL server). deploy/nginx.conf, the balancer's, is
always checked against docker-compose.yml and the server's defaults; where nginx is installed it is also
run, with only its addresses and paths changed, in front of two stand-in replicas.
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
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from memory_server.auth import admin as auth
from memory_server.auth.bootstrap import (
    BootstrapError,
    BootstrapSettings,
    apply_bootstrap,
)
from memory_server.errors import Unauthorized
from memory_server.services import open_services

from tests.conftest import LiveServer, free_port, make_settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
NGINX_CONF = ROOT / "deploy" / "nginx.conf"


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
        result = subprocess.run(
            [*cli, "-f", str(COMPOSE), "config", "-q"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "MEMORY_BOOTSTRAP_SECRET": ""},
        )
        assert result.returncode == 0, f"{' '.join(cli)} config: {result.stderr}"


def test_compose_file_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


REPLICAS = ("memory-server-1", "memory-server-2")
_INTERPOLATION = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's `${VAR}` / `${VAR:-default}`, as `docker compose` resolves them with VAR unset or empty."""
    env = env or {}
    return _INTERPOLATION.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def test_compose_services_and_pinned_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "qdrant", *REPLICAS, "balancer"}
    assert re.fullmatch(r"postgres:\d+\.\d+(-alpine)?", services["postgres"]["image"]), "pin PostgreSQL's release"
    assert re.fullmatch(r"qdrant/qdrant:v\d+\.\d+\.\d+", services["qdrant"]["image"]), "pin the Qdrant image"
    assert re.fullmatch(r"nginx:\d+\.\d+\.\d+(-alpine)?", services["balancer"]["image"]), "pin the nginx image"
    for name in REPLICAS:
        assert services[name]["build"] in (".", {"context": "."})
        assert services[name]["image"] == "memory-server:latest"
    for name, service in services.items():
        assert service.get("restart") == "unless-stopped", name
        assert "network_mode" not in service, name


def test_only_the_balancer_is_published_on_loopback(compose: dict[str, Any]) -> None:
    published = {name: s["ports"] for name, s in compose["services"].items() if "ports" in s}
    assert published == {"balancer": ["127.0.0.1:8765:8765"]}, "one port, on loopback only"


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        check = service["healthcheck"]
        assert check["test"][0] == "CMD", f"{name}: exec form, no shell needed"
        for key in ("interval", "timeout", "retries", "start_period"):
            assert key in check, f"{name}: healthcheck {key}"
    postgres = compose["services"]["postgres"]["healthcheck"]["test"]
    assert postgres[1] == "pg_isready" and "--host=127.0.0.1" in postgres, (
        "over TCP: the image's temporary init server listens on the Unix socket only"
    )
    replica = compose["services"]["memory-server-1"]["healthcheck"]["test"]
    assert "/readyz" in replica[-1], "replicas are healthy when ready (model, PostgreSQL, Qdrant), not just up"


def test_start_order_waits_for_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in REPLICAS:
        assert services[name]["depends_on"] == {
            "postgres": {"condition": "service_healthy"},
            "qdrant": {"condition": "service_healthy"},
        }
    assert services["balancer"]["depends_on"] == {
        name: {"condition": "service_healthy", "restart": True} for name in REPLICAS
    }
    assert "depends_on" not in services["postgres"] and "depends_on" not in services["qdrant"]


def test_replicas_use_postgres_and_the_qdrant_server(compose: dict[str, Any]) -> None:
    import psycopg.conninfo

    services = compose["services"]
    env = services["memory-server-1"]["environment"]
    assert services["memory-server-2"]["environment"] == env, "the replicas are configured alike"
    assert env["MEMORY_INDEX_BACKEND"] == "server"
    assert env["MEMORY_QDRANT_URL"] == "http://qdrant:6333"
    assert not {"MEMORY_DATA_DIR", "MEMORY_HOST", "MEMORY_PORT"} & set(env), "the image's defaults apply"

    pg_env = services["postgres"]["environment"]
    for overrides in ({}, {"MEMORY_POSTGRES_PASSWORD": "s3cret-from-env"}):
        url = interpolate(env["MEMORY_DATABASE_URL"], overrides)
        assert url.startswith("postgresql://")
        params = psycopg.conninfo.conninfo_to_dict(url)
        assert params == {
            "user": pg_env["POSTGRES_USER"],
            "password": interpolate(pg_env["POSTGRES_PASSWORD"], overrides),
            "host": "postgres",
            "port": "5432",
            "dbname": pg_env["POSTGRES_DB"],
        }
    assert interpolate(pg_env["POSTGRES_PASSWORD"]), "a documented default password"


def test_volumes_are_named_and_the_replicas_keep_no_state(compose: dict[str, Any]) -> None:
    services = compose["services"]
    mounts = {v.split(":")[0]: v.split(":")[1] for s in services.values() for v in s.get("volumes", [])}
    assert mounts == {"postgres-data": "/var/lib/postgresql/data", "qdrant-storage": "/qdrant/storage"}
    assert set(mounts) == set(compose["volumes"]), "every volume is a declared named volume (no host paths)"
    for name in REPLICAS:
        assert "volumes" not in services[name], "PostgreSQL and Qdrant hold everything; a replica holds nothing"


def test_the_balancer_gets_deploy_nginx_conf(compose: dict[str, Any]) -> None:
    [config] = compose["services"]["balancer"]["configs"]
    assert config["target"] == "/etc/nginx/nginx.conf"
    assert (ROOT / compose["configs"][config["source"]]["file"]).resolve() == NGINX_CONF


class _Readyz(http.server.BaseHTTPRequestHandler):
    status = 200
    probed = "/readyz"

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(self.status if self.path == self.probed else 404)
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


def test_replica_healthcheck_probe_really_checks_readyz(
    compose: dict[str, Any], fake_qdrant: tuple[int, type[_Readyz]]
) -> None:
    """The replicas' probe (python, as the slim image has no curl): 200 passes; 503 or nothing listening fails."""
    port, handler = fake_qdrant
    test = compose["services"]["memory-server-1"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"] and "http://127.0.0.1:8765/readyz" in test[3]

    def probe(target: int) -> int:
        code = test[3].replace("127.0.0.1:8765", f"127.0.0.1:{target}")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode

    assert probe(port) == 0
    handler.status = 503
    assert probe(port) != 0
    assert probe(free_port()) != 0


def test_balancer_healthcheck_probe_really_checks_healthz(
    compose: dict[str, Any], fake_qdrant: tuple[int, type[_Readyz]]
) -> None:
    """nginx's alpine image has busybox wget; GNU wget takes the same options."""
    if not shutil.which("wget"):
        pytest.skip("wget is not installed")
    port, handler = fake_qdrant
    handler.probed = "/healthz"
    test = compose["services"]["balancer"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "wget"] and test[-1] == "http://127.0.0.1:8765/healthz"

    def probe(target: int) -> int:
        argv = [a.replace("127.0.0.1:8765", f"127.0.0.1:{target}") for a in test[1:]]
        return subprocess.run(argv, capture_output=True, timeout=60).returncode

    assert probe(port) == 0
    handler.status = 502
    assert probe(port) != 0
    assert probe(free_port()) != 0


def test_postgres_healthcheck_probe_with_pg_isready(compose: dict[str, Any], postgres_server: Any) -> None:
    """The probe's options, run by the local pg_isready against the test server (its socket, not TCP)."""
    test = compose["services"]["postgres"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "pg_isready"]
    argv = [str(postgres_server.bindir / "pg_isready")]
    for arg in test[2:]:
        if arg.startswith("--host="):
            arg = f"--host={postgres_server.socket_dir}"
        elif arg.startswith("--port="):
            arg = f"--port={postgres_server.port}"
        argv.append(arg)

    def probe() -> int:
        return subprocess.run(argv, capture_output=True, timeout=60).returncode

    assert probe() == 0
    postgres_server.stop()
    try:
        assert probe() != 0
    finally:
        postgres_server.start()


# --- deploy/nginx.conf -----------------------------------------------------------------------------------


def _nginx_text() -> str:
    return "\n".join(line.split("#", 1)[0] for line in NGINX_CONF.read_text().splitlines())


def _directive(text: str, name: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(rf"(?m)^\s*{name}\s+([^;]*);", text)]


def _size(value: str) -> int:
    units = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    number, unit = re.fullmatch(r"(\d+)([kmg]?)", value.lower()).groups()  # type: ignore[union-attr]
    return int(number) * units[unit]


def test_nginx_conf_balances_over_the_compose_replicas(compose: dict[str, Any]) -> None:
    """Always runs, nginx installed or not: the config agrees with docker-compose.yml and the server."""
    from memory_server.settings import Settings

    text = _nginx_text()
    [(upstream, body)] = re.findall(r"upstream\s+(\w+)\s*\{([^}]*)\}", text)
    servers = [entry.split()[0] for entry in _directive(body, "server")]
    assert servers == [f"{name}:8765" for name in REPLICAS], "one upstream entry per replica, on its port"
    assert set(REPLICAS) <= set(compose["services"])
    assert _directive(text, "proxy_pass") == [f"http://{upstream}"]

    published = compose["services"]["balancer"]["ports"][0].rsplit(":", 1)[1]
    assert _directive(text, "listen") == [published], "nginx listens on the port compose publishes"

    headers = dict(value.split(None, 1) for value in _directive(text, "proxy_set_header"))
    assert headers["Host"] == "$http_host"
    assert headers["X-Forwarded-For"] == "$remote_addr", "set, not appended: the replicas trust it"
    assert "X-Request-ID" in headers
    assert _directive(text, "proxy_buffering") == ["off"], "streaming responses pass unbuffered"
    for timeout in ("proxy_connect_timeout", "proxy_read_timeout", "proxy_send_timeout", "client_body_timeout"):
        assert len(_directive(text, timeout)) == 1, timeout

    defaults = Settings()
    [body_limit] = _directive(text, "client_max_body_size")
    assert _size(body_limit) > defaults.max_request_bytes, "the replicas, not nginx, refuse oversized requests"
    [idle] = _directive(body, "keepalive_timeout")
    assert float(idle.rstrip("s")) < defaults.keep_alive_s, "nginx closes idle upstream connections first"
    assert compose["services"][REPLICAS[0]]["environment"]["MEMORY_TRUSTED_PROXIES"] == "*"


def _local_nginx_conf(tmp_path: Path, replica_ports: list[int], port: int) -> Path:
    """deploy/nginx.conf with only addresses and paths changed: the replicas and the listener on 127.0.0.1
    ports, temporary files and the access log in tmp_path."""
    text = NGINX_CONF.read_text()
    for name, replica_port in zip(REPLICAS, replica_ports, strict=True):
        assert f"server {name}:8765 " in text
        text = text.replace(f"server {name}:8765 ", f"server 127.0.0.1:{replica_port} ")
    assert "listen 8765;" in text and "access_log /dev/stdout balancer;" in text
    text = text.replace("listen 8765;", f"listen 127.0.0.1:{port};")
    text = text.replace("access_log /dev/stdout balancer;", f"access_log {tmp_path}/access.log balancer;")
    temp = "".join(
        f"    {kind}_temp_path {tmp_path}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = text.replace("http {\n", "http {\n" + temp, 1)
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    return conf


def _nginx_argv(conf: Path, tmp_path: Path, *, test: bool = False) -> list[str]:
    # One -g only (nginx keeps the last); root's workers stay root so they can use tmp_path (mode 0700).
    globals_ = f"pid {tmp_path}/nginx.pid; daemon off;" + (" user root;" if os.geteuid() == 0 else "")
    return [
        shutil.which("nginx") or "nginx",
        "-p",
        f"{tmp_path}/",
        "-e",
        "stderr",
        "-c",
        str(conf),
        "-g",
        globals_,
        *(["-t"] if test else []),
    ]


needs_nginx = pytest.mark.skipif(
    not shutil.which("nginx"),
    reason="nginx is not installed (the config is still checked against docker-compose.yml by parsing it)",
)


@needs_nginx
def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    conf = _local_nginx_conf(tmp_path, [free_port(), free_port()], free_port())
    result = subprocess.run(_nginx_argv(conf, tmp_path, test=True), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


class _Replica(http.server.BaseHTTPRequestHandler):
    """A stand-in replica: says who it is and what it received; /stream sends two events, the second only
    once the test has seen the first (or after 10 s)."""

    protocol_version = "HTTP/1.1"
    name = ""
    release: threading.Event

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _seen(self) -> dict[str, Any]:
        return {
            "replica": self.name,
            "version": self.request_version,
            "path": self.path,
            **{h: self.headers.get(h) for h in ("Host", "X-Forwarded-For", "X-Request-ID", "Connection")},
        }

    def _gone(self) -> bool:
        """A stopped replica also drops the connections nginx keeps alive to it, as a dead process would."""
        if getattr(self.server, "down", False):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802
        if self._gone():
            return
        if self.path != "/stream":
            self._reply(self._seen())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        chunk(b"data: one\n\n")
        chunk(b"data: two\n\n" if self.release.wait(10) else b"data: held back\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def do_POST(self) -> None:  # noqa: N802
        if self._gone():
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._reply({**self._seen(), "bytes": len(body)})

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class _Balancer:
    base: str
    replicas: list[http.server.ThreadingHTTPServer]
    release: threading.Event
    access_log: Path

    def stop_replica(self, index: int) -> None:
        self.replicas[index].down = True  # type: ignore[attr-defined]
        self.replicas[index].shutdown()
        self.replicas[index].server_close()


@pytest.fixture
def balancer(tmp_path: Path) -> Iterator[_Balancer]:
    """nginx with deploy/nginx.conf in front of two stand-in replicas, all on 127.0.0.1."""
    if not shutil.which("nginx"):
        pytest.skip("nginx is not installed (the config is still checked against docker-compose.yml)")
    release = threading.Event()
    replicas = []
    for name in REPLICAS:
        handler = type("Handler", (_Replica,), {"name": name, "release": release})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        replicas.append(server)
    port = free_port()
    conf = _local_nginx_conf(tmp_path, [s.server_address[1] for s in replicas], port)
    with open(tmp_path / "error.log", "wb") as errors:
        proc = subprocess.Popen(_nginx_argv(conf, tmp_path), stdout=subprocess.DEVNULL, stderr=errors)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "error.log").read_text()
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)
        yield _Balancer(f"http://127.0.0.1:{port}", replicas, release, tmp_path / "access.log")
    finally:
        release.set()
        proc.terminate()
        proc.wait(timeout=30)
        for server in replicas:
            server.shutdown()
            server.server_close()


@needs_nginx
def test_balancer_spreads_requests_and_passes_the_client_headers(balancer: _Balancer) -> None:
    import httpx2

    with httpx2.Client(base_url=balancer.base, timeout=30) as client:
        answers = [client.get("/v1/memories", headers={"X-Forwarded-For": "203.0.113.9"}).json() for _ in range(6)]
        given = client.get("/healthz", headers={"X-Request-ID": "req-0123456789"}).json()
        made = client.post("/mcp", content=b"x" * 100_000).json()
    assert {a["replica"] for a in answers} == set(REPLICAS), "both replicas take requests"
    port = balancer.base.rsplit(":", 1)[1]
    for answer in answers:
        assert answer["Host"] == f"127.0.0.1:{port}", "the client's Host, port included"
        assert answer["X-Forwarded-For"] == "127.0.0.1", "the real peer, never the client's claim"
        assert answer["version"] == "HTTP/1.1" and answer["Connection"] is None, "keep-alive upstream"
        assert re.fullmatch(r"[0-9a-f]{32}", answer["X-Request-ID"]), "nginx makes a request ID"
    assert given["X-Request-ID"] == "req-0123456789"
    assert made["bytes"] == 100_000


@needs_nginx
def test_balancer_streams_without_buffering(balancer: _Balancer) -> None:
    import httpx2

    with httpx2.Client(base_url=balancer.base, timeout=30) as client, client.stream("GET", "/stream") as response:
        chunks = response.iter_raw()
        first = next(chunks)
        balancer.release.set()  # the replica sends its second event only now
        rest = b"".join(chunks)
    assert first == b"data: one\n\n", "the first event arrived while the replica was still sending"
    assert rest == b"data: two\n\n"
    assert response.headers["content-type"] == "text/event-stream"


@needs_nginx
def test_balancer_fails_over_and_answers_in_the_error_shape(balancer: _Balancer) -> None:
    import httpx2

    with httpx2.Client(base_url=balancer.base, timeout=30) as client:
        balancer.stop_replica(0)
        answers = [client.get("/v1/memories").json()["replica"] for _ in range(4)]
        answers.append(client.post("/mcp", content=b"{}").json()["replica"])  # refused: never sent, so retried
        assert answers == ["memory-server-2"] * 5

        balancer.stop_replica(1)
        down = client.get("/v1/memories")
        assert down.status_code == 503 and down.headers["retry-after"] == "5"
        assert down.json()["error"] == {
            "code": "unavailable",
            "retryable": True,
            "message": down.json()["error"]["message"],
        }
        assert down.json()["error"]["message"].startswith("unavailable: ")

    with socket.create_connection(("127.0.0.1", int(balancer.base.rsplit(":", 1)[1])), timeout=30) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 20000000\r\n\r\n")
        reply = sock.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413 ")
    assert json.loads(reply.split("\r\n\r\n", 1)[1])["error"]["code"] == "payload_too_large"


@needs_nginx
def test_balancer_log_lines_are_json_without_query_or_credentials(balancer: _Balancer) -> None:
    import httpx2

    with httpx2.Client(base_url=balancer.base, timeout=30) as client:
        client.get("/v1/memories?query=private-words", headers={"Authorization": "Bearer tok-secret-123"})
    deadline = time.monotonic() + 10
    while not balancer.access_log.exists() or not balancer.access_log.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    text = balancer.access_log.read_text()
    [line] = [json.loads(raw) for raw in text.splitlines()]
    assert line["path"] == "/v1/memories" and line["status"] == 200 and line["method"] == "GET"
    assert line["upstream"].startswith("127.0.0.1:") and re.fullmatch(r"[0-9a-f]{32}", line["request_id"])
    assert "private-words" not in text and "tok-secret-123" not in text


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
    assert not any("torch" in r for r in runs), "the image serves without torch"
    project = max(i for i, r in enumerate(runs) if re.search(r"pip install (--no-deps )?\.(\s|$)", r))
    model = next(i for i, r in enumerate(runs) if "load_embedder" in r)
    assert project < model, "the installed project proves it embeds offline"


def test_dockerfile_runtime_stage(stages: list[list[tuple[str, str]]]) -> None:
    final = stages[-1]
    env = env_of(final)
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert "MEMORY_EMBEDDING_MODEL" not in env, "the default (bundled) model"
    assert env["MEMORY_DATA_DIR"] == "/data" and env["MEMORY_HOST"] == "0.0.0.0"
    copies = [args for keyword, args in final if keyword == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"], "the model comes inside the installed packages"

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
    up = subprocess.run(
        [sys.executable, *argv[1:]], env={**os.environ, "MEMORY_PORT": port}, capture_output=True, timeout=60
    )
    assert up.returncode == 0, up.stderr
    down = subprocess.run(
        [sys.executable, *argv[1:]],
        env={**os.environ, "MEMORY_PORT": str(free_port())},
        capture_output=True,
        timeout=60,
    )
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
        if any(fnmatch.fnmatch(c, pattern) or fnmatch.fnmatch(c, pattern.removeprefix("**/")) for c in candidates):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_local_state_out_and_the_sources_in(stages: list[list[tuple[str, str]]]) -> None:
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    for unwanted in (
        ".venv/bin/python",
        "data/memory.db",
        "models/all-MiniLM-L6-v2/model.safetensors",
        "memory_server/__pycache__/app.cpython-311.pyc",
        ".pytest_cache/v",
        ".hypothesis/examples",
        ".git/HEAD",
        "memory_server.egg-info/PKG-INFO",
    ):
        assert _ignored(unwanted, patterns), unwanted
    sources = [
        args.split()[:-1]
        for stage in stages
        for keyword, args in stage
        if keyword == "COPY" and not args.startswith("--from")
    ]
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


@pytest.mark.parametrize(
    "config, message",
    [
        (dict(secret="short"), "16-1024 characters"),
        (dict(secret="has:a:colon-in-it-0123456"), "no ':'"),
        (dict(secret="x" * 20, secret_file=Path("/nonexistent")), "only one of"),
        (dict(secret_file=Path("/nonexistent/secret")), "cannot read"),
        (dict(site="bad site!", secret="y" * 20), "MEMORY_BOOTSTRAP_SITE"),
    ],
)
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
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "list_conversations", "arguments": {}},
            }
        )
        response = httpx2.post(
            server.url,
            content=body,
            timeout=30,
            headers={
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "Authorization": basic("default", secret),
            },
        )
        assert response.status_code == 200, response.text
        log = server.log()
    assert "first start" not in log and secret not in log


def test_serve_refuses_a_bad_preset_secret(tmp_path: Path) -> None:
    from procs import server_env

    env = server_env(MEMORY_BOOTSTRAP_SECRET="too-short")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "memory_server",
            "serve",
            "--port",
            str(free_port()),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "error: the bootstrap secret must be" in result.stderr and "too-short" not in result.stderr
