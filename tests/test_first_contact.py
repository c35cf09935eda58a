"""The first minutes with a server, through real processes: what start-up says (the MCP URL, the console URL,
how to sign in, also on a data directory a stdio client used first), `/` leading to the console, the hint when a
stdio launch ends up on HTTP, one log format, tool-argument errors in MCP's words, and the CLI's help and
listings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from conftest import free_port
from procs import REPO_ROOT, ServerProcess, parse_fields, run_cli, server_env

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+: ")  # the text log format


async def use_over_stdio(data_dir: Path, seq: int = 0, **env: str) -> None:
    """What Claude Desktop does with a new data directory: start a stdio server there and write to it."""
    transport = StdioTransport(
        command=sys.executable,
        args=["-m", "memory_server", "serve", "--data-dir", str(data_dir)],
        env=server_env(MEMORY_TRANSPORT="stdio", **env),
        cwd=str(REPO_ROOT),
        keep_alive=False,
    )
    async with Client(transport, timeout=60) as client:
        ack = await client.call_tool(
            "append_memory", {"conversation_id": "conv-desktop-0001", "items": [{"role": "user", "text": "first"}]}
        )
        assert ack.structured_content["first_seq"] == seq


def console_sign_in(base: str, site: str, secret: str) -> httpx2.Response:
    """The console's sign-in form, filled in as a browser would."""
    with httpx2.Client(base_url=base, timeout=30) as http:
        page = http.get("/ui/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None, page.text
        return http.post(
            "/ui/sign-in",
            data={"csrf": csrf.group(1), "method": "basic", "site": site, "secret": secret, "next": "/ui/memories"},
        )


def wait_healthy(process: subprocess.Popen[bytes], base: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx2.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the server did not start (exit code {process.poll()})")


def test_start_up_names_the_console_and_the_root_leads_there(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data") as server:
        log = server.log()
        assert f"memory-server: MCP over streamable HTTP at {server.base}/mcp\n  console: {server.base}/ui/\n" in log
        assert "MEMORY_TRANSPORT=stdio" not in log  # stdin is /dev/null here: no stdio launch to warn about
        root = httpx2.get(f"{server.base}/", timeout=10)
        assert root.status_code == 307 and root.headers["location"] == "/ui/"
        assert httpx2.head(f"{server.base}/", timeout=10).status_code == 307
        landed = httpx2.get(f"{server.base}/", follow_redirects=True, timeout=10)
        assert landed.status_code == 200 and "/ui/sign-in" in str(landed.url)
        assert httpx2.post(f"{server.base}/", timeout=10).status_code in (404, 405)  # only a look is redirected

    with ServerProcess(tmp_path / "data", env=server_env(MEMORY_LOG_FORMAT="json")) as server:
        lines = [json.loads(line) for line in server.log().splitlines() if line.strip()]
        started = [entry for entry in lines if entry.get("console")]
        assert started and started[-1]["console"] == f"{server.base}/ui/"


async def test_a_data_directory_first_used_over_stdio_gets_its_credential_on_the_first_http_start(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    await use_over_stdio(data)
    with ServerProcess(data) as server:
        log = server.log()
        assert "first HTTP start: site 'default' was created by a stdio server and had no secret" in log
        secret = parse_fields(log.split("first HTTP start")[1])["secret"]
        listed = httpx2.get(f"{server.base}/v1/conversations", auth=("default", secret), timeout=30)
        assert listed.status_code == 200
        assert [c["conversation_id"] for c in listed.json()["conversations"]] == ["conv-desktop-0001"]
        signed_in = console_sign_in(server.base, "default", secret)
        assert signed_in.status_code == 303 and signed_in.headers["location"] == "/ui/memories"
    with ServerProcess(data) as server:  # shown once
        assert "first HTTP start" not in server.log() and secret not in server.log()
    await use_over_stdio(data, seq=1)  # stdio goes on working there, and leaves the secret as it is
    with ServerProcess(data) as server:
        assert httpx2.get(f"{server.base}/v1/conversations", auth=("default", secret), timeout=30).status_code == 200


async def test_a_configured_bootstrap_secret_is_the_one_a_stdio_created_site_gets(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await use_over_stdio(data)
    preset = "bootstrap-secret-0123456789"
    with ServerProcess(data, env=server_env(MEMORY_BOOTSTRAP_SECRET=preset, MEMORY_LOG_LEVEL="INFO")) as server:
        log = server.log()
        assert "first HTTP start" not in log and "different secret" not in log
        assert httpx2.get(f"{server.base}/v1/conversations", auth=("default", preset), timeout=30).status_code == 200


async def test_a_stdio_site_of_another_name_gets_its_credential_too(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await use_over_stdio(data, MEMORY_STDIO_SITE="team-local")
    with ServerProcess(data) as server:
        log = server.log()
        issued = parse_fields(log.split("first HTTP start")[1])
        assert issued["username"] == "team-local"
        assert "first start: created site 'default'" not in log  # the directory has a site already
        answer = httpx2.get(f"{server.base}/v1/conversations", auth=("team-local", issued["secret"]), timeout=30)
        assert answer.status_code == 200 and len(answer.json()["conversations"]) == 1


def test_a_stdio_launch_that_runs_http_says_how_to_get_stdio(tmp_path: Path) -> None:
    """As when the MCP Inspector took `--transport stdio` for itself: stdin and stdout are pipes, the server
    starts on HTTP, and says so with the fix."""
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "memory_server", "serve", "--port", str(port), "--data-dir", str(tmp_path / "data")],
            cwd=REPO_ROOT,
            env=server_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        wait_healthy(process, f"http://127.0.0.1:{port}")
        hints = [line for line in log.read_text().splitlines() if "MEMORY_TRANSPORT=stdio" in line]
        assert len(hints) == 1 and LINE.match(hints[0]) and " WARNING memory_server.serve: stdin is a pipe" in hints[0]
    finally:
        process.kill()
        process.wait(timeout=30)


# --- one log format ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_fastmcp_warnings_are_log_lines_of_the_chosen_format(tmp_path: Path, log_format: str) -> None:
    env = server_env(MEMORY_LOG_FORMAT=log_format, MEMORY_LOG_LEVEL="INFO")
    with ServerProcess(tmp_path / "data", env=env) as server:
        secret = (
            next(json.loads(line)["secret"] for line in server.log().splitlines() if '"secret"' in line)
            if log_format == "json"
            else parse_fields(server.log())["secret"]
        )
        async with server.client("default", secret) as client:
            await client.call_tool("recall", {}, raise_on_error=False)  # fastmcp warns about the arguments
        server.stop()
        lines = [line for line in server.log().splitlines() if line.strip()]
    warned = [line for line in lines if "Invalid arguments for tool 'recall'" in line]
    assert len(warned) == 1
    if log_format == "json":
        entry = json.loads(warned[0])
        assert (entry["level"], entry["logger"]) == ("WARNING", "fastmcp.server.server")
        for line in lines:
            json.loads(line)
    else:
        assert LINE.match(warned[0]) and " WARNING fastmcp.server.server: " in warned[0]
        start = next(i for i, line in enumerate(lines) if LINE.match(line))
        for line in lines[start:]:  # after the start-up lines, every line is a log entry of one line
            assert LINE.match(line), line


# --- MCP argument errors -----------------------------------------------------------------------------------


async def test_missing_and_unknown_arguments_are_named_in_mcp_terms(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data") as server:
        secret = parse_fields(server.log())["secret"]
        async with server.client("default", secret) as client:

            async def error(tool: str, arguments: dict[str, object]) -> str:
                result = await client.call_tool(tool, arguments, raise_on_error=False)
                assert result.is_error and result.structured_content is None
                return str(result.content[0].text)

            assert await error("recall", {}) == "invalid_parameters: missing required argument 'query'"
            assert await error("recall_memory", {}) == (
                "invalid_parameters: missing required argument 'conversation_id'"
            )
            assert await error("append_memory", {"conversation_id": "conv-args-0001"}) == (
                "invalid_parameters: missing required argument 'items'"
            )
            assert await error("recall", {"query": "x", "bogus": 1}) == "invalid_parameters: unknown argument 'bogus'"
            assert await error("search_memory", {"limit": 3}) == "invalid_parameters: missing required argument 'query'"
            typed = await error("recall", {"query": "x", "limit": "2"})
            assert typed.startswith("invalid_parameters: limit: ")  # other problems keep naming the parameter


# --- the CLI -----------------------------------------------------------------------------------------------


def test_token_list_has_a_header_row(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("site", "create", "acme", data_dir=data).returncode == 0
    assert run_cli("token", "list", "--site", "acme", data_dir=data).stdout == ""  # nothing to head
    made = parse_fields(run_cli("token", "create", "--site", "acme", "--scope", "memory:read", data_dir=data).stdout)
    lines = run_cli("token", "list", "--site", "acme", data_dir=data).stdout.splitlines()
    assert lines[0].split("\t") == ["ID", "SCOPES", "BOUNDS", "STATE", "LABEL OR OAUTH CLIENT", "LAST USED"]
    assert lines[1].split("\t") == [made["id"], "memory:read", "unbounded", "active", "label: -", "last used: never"]


def test_import_help_wraps_its_paragraphs_evenly(tmp_path: Path) -> None:
    width = 100
    done = subprocess.run(
        [sys.executable, "-m", "memory_server", "import", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=server_env(COLUMNS=str(width), TERM="dumb"),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout.split("Usage:")[1].split("╭")[0]
    paragraphs = [p.splitlines() for p in re.split(r"\n\s*\n", text) if p.strip()][1:]  # after the usage line
    assert len(paragraphs) >= 4
    for lines in paragraphs:
        for line in lines[:-1]:  # a paragraph's lines run to the width, but for its last
            assert len(line.rstrip()) >= width - 25, (line, lines)
    assert "--from" in done.stdout and "mcp-memory" in done.stdout
