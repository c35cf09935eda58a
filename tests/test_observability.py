"""Metrics, request logs and readiness, over real HTTP against the real app (real model, SQLite, Qdrant Edge)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from memory_server.api.app import create_app
from memory_server.api.metrics import InstrumentedEmbedder
from memory_server.api.observability import route_template
from memory_server.api.readiness import readiness
from memory_server.auth import admin as auth
from memory_server.logging_setup import JsonFormatter
from memory_server.services import open_services
from memory_server.settings import Settings
from memory_server.storage.factory import open_storage

from procs import ServerProcess, parse_fields, run_cli, server_env
from tests.conftest import LiveServer, ThreadedServer, admin, free_port, make_settings, wait_ready
from tests.postgres import PostgresDatabases, PostgresServer

ACCESS_LOGGER = "memory_server.access"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
Samples = dict[tuple[str, frozenset], float]


def rpc(name: str, arguments: dict[str, Any], id: int = 1) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    ).encode()


def parse(text: str) -> Samples:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def value(metrics: Samples, name: str, **labels: str) -> float:
    return metrics.get((name, frozenset(labels.items())), 0.0)


def scrape(base: str) -> tuple[str, Samples]:
    response = httpx2.get(f"{base}/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return response.text, parse(response.text)


@contextlib.contextmanager
def serve_app(settings: Settings, embedder: Any, site: str = "acme") -> Iterator[tuple[LiveServer, Starlette]]:
    """Like conftest.serve, but also hands out the app (for its services)."""
    secret = admin(settings, lambda sites: auth.create_site(sites, site))
    port = free_port()
    app = create_app(settings, embedder=embedder)
    with ThreadedServer(app, port):
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        yield LiveServer(settings, f"{base}/mcp", base, site, secret), app


def readyz(base: str) -> httpx2.Response:
    return httpx2.get(f"{base}/readyz", timeout=30)


# --- metrics ------------------------------------------------------------------------------------------


async def test_metrics_count_real_tool_calls_and_requests(live: LiveServer) -> None:
    async with live.client() as client:
        args = {"conversation_id": "conv-metrics-1", "items": [{"n": 1}, {"n": 2}, {"n": 3}], "idempotency_key": "k1"}
        first = await client.call_tool("append_memory", args)
        again = await client.call_tool("append_memory", args)
        assert not first.structured_content["duplicate"] and again.structured_content["duplicate"]
        fact = {"content": "The metrics test remembers that the staging backup runs at 02:00 UTC."}
        assert (await client.call_tool("remember", fact)).structured_content["created"] is True
        assert (await client.call_tool("remember", fact)).structured_content["created"] is False
        await client.call_tool("recall", {"query": "when does the staging backup run?"})
        bad = await client.call_tool("recall_memory", {"conversation_id": "bad id!"}, raise_on_error=False)
        assert bad.is_error
    headers = {**MCP_HEADERS, "Authorization": live.basic_header()}
    unknown = httpx2.post(live.url, content=rpc("no_such_tool_x9", {}), headers=headers, timeout=30)
    assert unknown.status_code == 200 and unknown.json()["result"]["isError"]
    assert httpx2.post(live.url, content=rpc("list_conversations", {}), headers=MCP_HEADERS).status_code == 401
    rest = httpx2.post(
        f"{live.base}/v1/conversations/conv-metrics-2/items",
        json={"items": [{"via": "rest"}]},
        headers={"Authorization": live.basic_header()},
        timeout=30,
    )
    assert rest.status_code == 201, rest.text
    missing = httpx2.get(f"{live.base}/v1/memories/mem_doesnotexist", headers={"Authorization": live.basic_header()})
    assert missing.status_code == 404

    text, m = scrape(live.base)
    assert value(m, "memory_server_tool_calls_total", tool="append_memory", outcome="ok") == 2
    assert value(m, "memory_server_tool_calls_total", tool="remember", outcome="ok") == 2
    assert value(m, "memory_server_tool_calls_total", tool="recall", outcome="ok") == 1
    assert value(m, "memory_server_tool_calls_total", tool="recall_memory", outcome="invalid_parameters") == 1
    assert value(m, "memory_server_tool_calls_total", tool="unknown", outcome="invalid_parameters") == 1
    assert "no_such_tool_x9" not in text  # a caller's text never becomes a label value
    assert value(m, "memory_server_tool_call_duration_seconds_count", tool="append_memory", outcome="ok") == 2
    assert value(m, "memory_server_log_items_appended_total") == 3 + 1  # the MCP batch once, plus REST
    assert value(m, "memory_server_log_appends_total", result="appended") == 2
    assert value(m, "memory_server_log_appends_total", result="duplicate") == 1
    assert value(m, "memory_server_memories_remembered_total", result="created") == 1
    assert value(m, "memory_server_memories_remembered_total", result="duplicate") == 1
    assert value(m, "memory_server_embedding_duration_seconds_count", kind="document") >= 1
    assert value(m, "memory_server_embedding_duration_seconds_count", kind="query") >= 1
    assert value(m, "memory_server_embedded_texts_total", kind="query") >= 1
    assert value(m, "memory_server_model_loaded") == 1
    assert ("memory_server_index_backlog", frozenset()) in m
    assert value(m, "memory_server_http_requests_total", method="POST", route="/mcp", status="200") >= 6
    assert value(m, "memory_server_http_requests_total", method="POST", route="/mcp", status="401") == 1
    assert (
        value(
            m,
            "memory_server_http_requests_total",
            method="POST",
            route="/v1/conversations/{conversation_id}/items",
            status="201",
        )
        == 1
    )
    assert (
        value(m, "memory_server_http_requests_total", method="GET", route="/v1/memories/{reference}", status="404") == 1
    )
    assert (
        value(m, "memory_server_http_request_duration_seconds_count", method="GET", route="/readyz", status="200") >= 1
    )
    assert "mem_doesnotexist" not in text and "conv-metrics" not in text  # templates, never raw paths
    assert live.secret not in text and live.site not in text


def test_metrics_need_no_credentials_and_start_at_zero(tmp_path: Path) -> None:
    """Before the model loads (no lifespan here): the scrape works, model_loaded is 0, no backlog yet."""
    settings = make_settings(tmp_path / "data")
    app = create_app(settings)
    try:
        metrics = app.state.metrics
        m = parse(metrics.exposition().decode())
        assert value(m, "memory_server_model_loaded") == 0
        assert ("memory_server_index_backlog", frozenset()) not in m
        assert value(m, "memory_server_log_items_appended_total") == 0
        assert value(m, "memory_server_memories_remembered_total", result="created") == 0
    finally:
        app.state.services.close()


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    apps = [create_app(make_settings(tmp_path / name)) for name in ("a", "b")]
    try:
        first, second = (app.state.metrics for app in apps)
        assert first.registry is not second.registry
        first.observe_tool("recall", "ok", 0.01)
        assert (
            value(parse(first.exposition().decode()), "memory_server_tool_calls_total", tool="recall", outcome="ok")
            == 1
        )
        assert (
            value(parse(second.exposition().decode()), "memory_server_tool_calls_total", tool="recall", outcome="ok")
            == 0
        )
    finally:
        for app in apps:
            app.state.services.close()


def test_instrumented_embedder_delegates_and_times(embedder: Any, tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path / "data"))
    try:
        metrics = app.state.metrics
        wrapped = InstrumentedEmbedder(embedder, metrics)
        assert (wrapped.name, wrapped.dimension) == (embedder.name, embedder.dimension)
        assert (wrapped.embed_query("hello") == embedder.embed_query("hello")).all()
        assert wrapped.embed_documents(["a", "b"]).shape == (2, embedder.dimension)
        assert wrapped.max_seq_length == embedder.max_seq_length  # anything else: the wrapped embedder's
        m = parse(metrics.exposition().decode())
        assert value(m, "memory_server_embedded_texts_total", kind="document") == 2
        assert value(m, "memory_server_embedding_duration_seconds_count", kind="query") == 1
    finally:
        app.state.services.close()


ROUTES = [
    ("POST", "/mcp", "/mcp"),
    ("GET", "/readyz", "/readyz"),
    ("GET", "/metrics", "/metrics"),
    ("GET", "/openapi.json", "/openapi.json"),
    ("POST", "/v1/memories", "/v1/memories"),
    ("GET", "/v1/memories/mem_0123abcd", "/v1/memories/{reference}"),
    ("PUT", "/v1/memories/mem_0123abcd", "/v1/memories/{reference}"),  # a 405: still its route
    ("GET", "/v1/conversations/conv-0001/items", "/v1/conversations/{conversation_id}/items"),
    ("GET", "/v1/no/such/route", "unmatched"),
    ("GET", "/favicon.ico", "unmatched"),
]


def test_route_templates_bound_the_label_values(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path / "data"))
    try:
        for method, path, template in ROUTES:
            scope = {
                "type": "http",
                "method": method,
                "path": path,
                "root_path": "",
                "app": app,
                "headers": [],
                "query_string": b"",
            }
            assert route_template(scope) == template, (method, path)
    finally:
        app.state.services.close()


# --- request logs -------------------------------------------------------------------------------------


def access_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ACCESS_LOGGER]


def everything_logged(records: list[logging.LogRecord]) -> str:
    """Each record as text and as the JSON line MEMORY_LOG_FORMAT=json would write."""
    formatter = JsonFormatter()
    return "\n".join(f"{r.getMessage()}\n{formatter.format(r)}\n{r.__dict__!r}" for r in records)


def test_request_log_line_has_the_fields_and_never_the_secret_or_payload(
    live: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=ACCESS_LOGGER)
    payload_marker = "PAYLOAD-MARKER-7f3a"
    headers = {**MCP_HEADERS, "Authorization": live.basic_header(), "X-Request-ID": "req-abc.123:XYZ"}
    body = rpc("append_memory", {"conversation_id": "conv-logline-1", "items": [{"note": payload_marker}]})
    response = httpx2.post(live.url, content=body, headers=headers, timeout=30)
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "req-abc.123:XYZ"

    wrong = httpx2.post(
        live.url,
        content=body,
        headers={
            **MCP_HEADERS,
            "X-Request-ID": "bad id with spaces",
            "Authorization": live.basic_header(secret="WRONG-SECRET-1"),
        },
    )
    assert wrong.status_code == 401
    generated = wrong.headers["x-request-id"]
    assert generated != "bad id with spaces" and len(generated) == 32

    token_id, token = live.create_token(scopes=["memory:read"])
    bearer = httpx2.post(
        live.url,
        content=rpc("recall", {"query": "anything"}),
        headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert bearer.status_code == 200
    probe = httpx2.get(f"{live.base}/healthz?token=QUERY-SECRET-42&x=1")
    assert probe.status_code == 200

    deadline = time.monotonic() + 5  # the line is written after the response is sent
    while time.monotonic() < deadline and len(access_records(caplog)) < 4:
        time.sleep(0.02)
    records = access_records(caplog)
    by_id = {r.request_id: r for r in records}

    ok = by_id["req-abc.123:XYZ"]
    assert (ok.method, ok.path, ok.status, ok.site, ok.auth) == ("POST", "/mcp", 200, live.site, "basic")
    assert ok.levelno == logging.INFO and ok.duration_ms >= 0 and ok.client == "127.0.0.1"
    line = json.loads(JsonFormatter().format(ok))  # MEMORY_LOG_FORMAT=json: one object, fields as keys
    for key in ("request_id", "method", "path", "status", "duration_ms", "site", "auth"):
        assert key in line
    assert line["request_id"] == "req-abc.123:XYZ" and line["status"] == 200

    rejected = by_id[generated]
    assert (rejected.status, rejected.site, rejected.auth) == (401, None, "basic-rejected")
    assert [r for r in records if r.auth == "bearer" and r.site == live.site and r.status == 200]
    health = [r for r in records if r.path == "/healthz"]
    assert health and health[0].levelno == logging.DEBUG  # probes stay out of the INFO log

    logged = everything_logged(records)
    for secret in (live.secret, "WRONG-SECRET-1", token, live.basic_header(), payload_marker, "QUERY-SECRET-42"):
        assert secret not in logged


def test_log_path_cannot_forge_lines(live: LiveServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    response = httpx2.get(f"{live.base}/nowhere%0Aforged%20INFO%20line", timeout=30)
    assert response.status_code == 404
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not access_records(caplog):
        time.sleep(0.02)
    [record] = access_records(caplog)
    assert "\n" not in record.getMessage() and "\\n" in record.path


# --- readiness ------------------------------------------------------------------------------------------


def test_readyz_503_when_the_index_directory_is_unreadable(settings: Settings, embedder: Any) -> None:
    """Tests run as root, for whom chmod 000 changes nothing: the index directory is replaced by a file
    (what an unreadable or vanished directory looks like to the process), then put back."""
    with serve_app(settings, embedder) as (server, _):
        assert readyz(server.base).status_code == 200
        index_dir = settings.index_path
        moved = index_dir.with_name("index.moved")
        os.rename(index_dir, moved)
        index_dir.write_text("not a directory")
        try:
            response = readyz(server.base)
            assert response.status_code == 503
            body = response.json()
            assert body["status"] == "unavailable"
            assert any(r.startswith("index:") and str(index_dir) in r for r in body["reasons"]), body
        finally:
            index_dir.unlink()
            os.rename(moved, index_dir)
        assert readyz(server.base).status_code == 200


def test_readyz_503_when_the_index_files_are_removed(settings: Settings, embedder: Any) -> None:
    with serve_app(settings, embedder) as (server, _):
        info = settings.index_path / "index_info.json"
        saved = info.read_bytes()
        info.unlink()
        try:
            response = readyz(server.base)
            assert response.status_code == 503
            assert any("index_info.json" in r and "reindex" in r for r in response.json()["reasons"])
        finally:
            info.write_bytes(saved)
        shard = json.loads(saved)["shard"]
        shard_dir = settings.index_path / shard
        aside = settings.data_dir / "shard-aside"
        shutil.move(shard_dir, aside)
        try:
            response = readyz(server.base)
            assert response.status_code == 503
            assert any(r.startswith("index:") and shard in r for r in response.json()["reasons"])
        finally:
            shutil.move(aside, shard_dir)
        assert readyz(server.base).status_code == 200


def test_readyz_503_when_the_index_is_closed_under_the_service(settings: Settings, embedder: Any) -> None:
    with serve_app(settings, embedder) as (server, app):
        app.state.services.loaded_memories().index.close()
        response = readyz(server.base)
        assert response.status_code == 503
        assert any(r.startswith("index:") and "closed" in r for r in response.json()["reasons"])


def test_readiness_reports_a_writer_that_cannot_write(tmp_path: Path) -> None:
    services = open_services(make_settings(tmp_path / "data"))
    try:
        services.storage.close()
        reasons = readiness(services)
        assert any(r.startswith("sqlite:") and "shutting down" in r for r in reasons), reasons
        assert any(r.startswith("model/index:") for r in reasons)
    finally:
        services.close()


def test_storage_probe_notices_the_database_file_replaced_or_gone(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    storage = open_storage(settings)
    try:
        assert storage.probe() == []
        os.rename(settings.db_path, tmp_path / "elsewhere.db")
        assert any("is gone" in reason for reason in storage.probe())
        settings.db_path.write_bytes(b"x")  # a new file at the path: the open connections still write the old one
        assert any("replaced" in reason for reason in storage.probe())
    finally:
        storage.close()


def test_a_503_while_postgresql_is_down_is_logged_as_unavailable_not_as_a_rejected_credential(
    tmp_path: Path, postgres_server: PostgresServer, postgres_databases: PostgresDatabases
) -> None:
    """A credential the store could not check was refused by no one: its line says `basic-unavailable`."""
    data = tmp_path / "data"
    env = server_env(MEMORY_DATABASE_URL=postgres_databases.create(), MEMORY_LOG_LEVEL="INFO")
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data, env=env).stdout)["secret"]
    with ServerProcess(data, env=env) as server:
        postgres_server.stop("fast")
        try:
            down = httpx2.get(
                f"{server.base}/v1/memories", auth=("acme", secret), headers={"X-Request-ID": "down-1"}, timeout=60
            )
        finally:
            postgres_server.start()
        assert down.status_code == 503 and "retry-after" in down.headers, down.text
        wrong = httpx2.get(
            f"{server.base}/v1/memories", auth=("acme", "not-it"), headers={"X-Request-ID": "wrong-1"}, timeout=60
        )
        assert wrong.status_code == 401
        deadline = time.monotonic() + 10  # the line is written after the response is sent
        while "id=wrong-1" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = {line.split(" id=")[1].split()[0]: line for line in server.log().splitlines() if " id=" in line}
    assert lines["down-1"].endswith("auth=basic-unavailable"), lines["down-1"]
    assert lines["wrong-1"].endswith("auth=basic-rejected"), lines["wrong-1"]
