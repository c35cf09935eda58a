"""What a session lists, and what the list costs, through a real `memory-server serve` process.

- A session lists only the tools its credential may call: the site's Basic credential and stdio every tool, a
  token (Bearer or an OAuth access token) never the conversation-log tools, and only the saved-memory tools its
  scopes allow. The instructions name only the listed tools, and so does every listed tool's description.
- A tool the session does not list still answers a call with the error it always gave (the listing hides, the
  operation refuses).
- The default (full profile) tool list is at most 12,000 bytes of JSON (bench/tool_list.py measures it, before
  and after, with a token count).
"""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_server.api.mcp.server import INSTRUCTIONS

from oauth_support import Owner, RawClient
from procs import REPO_ROOT, ServerProcess, parse_fields, run_cli, server_env, server_processes  # noqa: F401

LOGS = {"append_memory", "recall_memory", "replay_memory", "list_conversations"}
READS = {"recall", "search_memory", "recall_context"}
WRITES = {"remember", "forget"}
TOOLS = LOGS | READS | WRITES
BUDGET = 12_000  # bytes of the full profile's tools/list answer (issue 43)
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
CONV = "conv-listing-0001"
# A call of each hidden tool and the error it has always answered a token with.
REFUSED = {
    "append_memory": ({"conversation_id": CONV, "items": [{"n": 1}]}, "unprocessable_parameters"),
    "recall_memory": ({"conversation_id": CONV}, "unprocessable_parameters"),
    "replay_memory": ({"conversation_id": CONV, "limit": 5}, "unprocessable_parameters"),
    "list_conversations": ({}, "unprocessable_parameters"),
    "remember": ({"content": "a token without memory:write cannot save this"}, "forbidden"),
    "forget": ({"reference": "mem_whatever"}, "forbidden"),
    "recall": ({"query": "anything"}, "forbidden"),
    "search_memory": ({"query": "anything"}, "forbidden"),
    "recall_context": ({"query": "anything"}, "forbidden"),
}


def mcp(url: str, authorization: str, method: str, params: dict[str, Any]) -> httpx2.Response:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    response = httpx2.post(url, content=body, headers={**MCP_HEADERS, "Authorization": authorization}, timeout=60)
    assert response.status_code == 200, response.text
    return response


def session(url: str, authorization: str) -> tuple[dict[str, dict[str, Any]], str]:
    """(the listed tools by name, the instructions) as a client with this credential sees them."""
    info = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "listing", "version": "1"}}
    instructions = mcp(url, authorization, "initialize", info).json()["result"]["instructions"]
    tools = mcp(url, authorization, "tools/list", {}).json()["result"]["tools"]
    return {tool["name"]: tool for tool in tools}, instructions


def named(text: str) -> set[str]:
    return {tool for tool in TOOLS if re.search(rf"(?<![a-z_]){tool}(?![a-z_])", text)}


def token(data_dir: Path, *scopes: str) -> str:
    args = [arg for scope in scopes for arg in ("--scope", scope)]
    done = run_cli("token", "create", "--site", "acme", *args, data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    return "Bearer " + parse_fields(done.stdout)["token"]


async def oauth_token(base: str, secret: str, *scopes: str) -> str:
    async with httpx2.AsyncClient(timeout=30) as http:
        client = await RawClient.register(http, base)
        tokens = await client.tokens(http, Owner("acme", secret, scopes=list(scopes)))
    return f"Bearer {tokens['access_token']}"


@pytest.fixture
def server(tmp_path: Path, server_processes: Any) -> tuple[ServerProcess, str]:  # noqa: F811
    data_dir = tmp_path / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data_dir).stdout)["secret"]
    return server_processes.start(data_dir), secret


async def test_a_session_lists_only_what_its_credential_may_call(server: tuple[ServerProcess, str]) -> None:
    process, secret = server
    basic = "Basic " + base64.b64encode(f"acme:{secret}".encode()).decode()
    credentials = {
        "basic": (basic, TOOLS),
        "token read+write": (token(process.data_dir, "memory:read", "memory:write"), READS | WRITES),
        "token read-only": (token(process.data_dir, "memory:read"), READS),
        "token write-only": (token(process.data_dir, "memory:write"), WRITES),
        "oauth read-only": (await oauth_token(process.base, secret, "memory:read"), READS),
    }
    for kind, (authorization, expected) in credentials.items():
        tools, instructions = session(process.url, authorization)
        assert set(tools) == expected, kind
        assert named(instructions) == expected, (kind, instructions)
        for name, tool in tools.items():
            assert named(tool["description"]) <= expected, (kind, name, tool["description"])
        for name in TOOLS - expected:  # hidden, and answered as before
            arguments, code = REFUSED[name]
            result = mcp(process.url, authorization, "tools/call", {"name": name, "arguments": arguments})
            text = result.json()["result"]["content"][0]["text"]
            assert result.json()["result"]["isError"] and text.startswith(f"{code}: "), (kind, name, text)
    assert session(process.url, basic)[1] == INSTRUCTIONS


async def test_stdio_lists_every_tool(tmp_path: Path) -> None:
    transport = StdioTransport(
        command=sys.executable,
        args=["-m", "memory_server", "serve", "--transport", "stdio", "--data-dir", str(tmp_path / "data")],
        env=server_env(),
        cwd=str(REPO_ROOT),
        keep_alive=False,
    )
    async with Client(transport, timeout=60, mode="legacy") as client:  # the initialize handshake
        assert {tool.name for tool in await client.list_tools()} == TOOLS
        assert client.initialize_result is not None and client.initialize_result.instructions == INSTRUCTIONS


def test_the_default_tool_list_fits_its_budget(server: tuple[ServerProcess, str]) -> None:
    process, secret = server
    basic = "Basic " + base64.b64encode(f"acme:{secret}".encode()).decode()
    answer = mcp(process.url, basic, "tools/list", {})
    tools = answer.json()["result"]["tools"]
    assert {tool["name"] for tool in tools} == TOOLS
    assert len(answer.content) <= BUDGET, len(answer.content)
    for tool in tools:  # what makes it small: no output schema, no empty _meta, bounds in the input schema
        assert "outputSchema" not in tool and "_meta" not in tool, tool["name"]
