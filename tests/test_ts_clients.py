"""The MCP TypeScript SDKs as clients of `memory-server serve` processes.

`@modelcontextprotocol/sdk` 1.x is what the MCP Inspector and most desktop clients are built on; it checks
structured content against the tool's output schema even on error results. `@modelcontextprotocol/client`
2.x is its successor. tests/ts/clients.mjs connects with both (after listing the tools, as real clients
do, so their output schemas apply), makes the calls planned here and reports what each SDK handed back.
Every error kind must arrive as `isError` with its code first in the text, and a success of every
tool must parse. Tokens are minted with the CLI. Skipped only when `node` is not installed; the npm
packages are installed from tests/ts/package-lock.json when missing or stale (as `make test` does).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_server.api.mcp.descriptions import instructions
from memory_server.api.mcp.server import INSTRUCTIONS
from memory_server.version import __version__

from conftest import wait_ready
from procs import REPO_ROOT, ServerProcess, parse_fields, run_cli, server_env

NODE = shutil.which("node")
HARNESS = REPO_ROOT / "tests" / "ts"
SDKS = {"sdk1": "1.", "client2": "2."}  # harness key -> major version it must be
CONV = "conv-ts-clients-01"
CONTENT_LIMIT, PAYLOAD_LIMIT = 1024, 2048  # small, so payload_too_large is cheap to reach
TOOLS = {
    "append_memory",
    "recall_memory",
    "replay_memory",
    "list_conversations",
    "remember",
    "recall",
    "search_memory",
    "recall_context",
    "forget",
}
READS = {"recall", "search_memory", "recall_context"}

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def ensure_harness() -> None:
    """`npm ci` when node_modules is missing or older than the lock file (the Makefile's rule too)."""
    installed, lock = HARNESS / "node_modules" / ".package-lock.json", HARNESS / "package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    npm = shutil.which("npm")
    assert npm is not None, "node is installed but npm is not: cannot set up tests/ts"
    done = subprocess.run(
        [npm, "ci", "--prefix", str(HARNESS), "--no-audit", "--no-fund"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def run_harness(url: str, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    assert NODE is not None
    done = subprocess.run(
        [NODE, str(HARNESS / "clients.mjs")],
        input=json.dumps({"url": url, "sessions": sessions}),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=HARNESS,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    for key, major in SDKS.items():
        assert answer[key]["version"].startswith(major), answer[key]["version"]
    return answer


def cli_field(*args: str, data_dir: Path, field: str) -> str:
    done = run_cli(*args, data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    return parse_fields(done.stdout)[field]


def basic(site: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()


def start(data_dir: Path, started: list[ServerProcess], **env: str) -> tuple[ServerProcess, str, str]:
    """A server process for a new site: (server, Basic header, read-only Bearer header)."""
    secret = cli_field("site", "create", "acme", data_dir=data_dir, field="secret")
    token = cli_field("token", "create", "--site", "acme", "--scope", "memory:read", data_dir=data_dir, field="token")
    server = ServerProcess(data_dir, env=server_env(**env))
    started.append(server)
    server.start()
    return server, basic("acme", secret), f"Bearer {token}"


SUCCESSES = [  # (tool, arguments): on the full profile, with the Basic credential
    (
        "append_memory",
        {"conversation_id": CONV, "items": [{"role": "user", "text": "hi"}, {"n": 1.5}], "idempotency_key": "turn-1"},
    ),
    ("recall_memory", {"conversation_id": CONV, "count": 5}),
    ("replay_memory", {"conversation_id": CONV, "limit": 1, "offset": 1}),
    ("list_conversations", {"limit": 10}),
    (
        "remember",
        {
            "content": "The TypeScript clients test decided that deploys wait for a green build.",
            "type": "decision",
            "project": "memory-os",
            "tags": ["docs"],
            "metadata": {"k": 1},
        },
    ),
    ("recall", {"query": "what do deploys wait for?", "limit": 3, "tags": ["docs"]}),
    ("search_memory", {"query": "deploys wait for a green build", "min_score": 0.2, "project": "memory-os"}),
    ("recall_context", {"query": "deploy decisions", "max_items": 2, "max_tokens": 200}),
    ("forget", {"reference": {"$from": 4, "field": "reference"}}),
]

ERRORS = [  # (session, tool, arguments, code)
    ("basic", "recall_memory", {"conversation_id": "bad"}, "invalid_parameters"),
    ("basic", "replay_memory", {"conversation_id": CONV, "limit": 1001}, "invalid_parameters"),
    ("basic", "recall", {"query": "x", "limit": "2"}, "invalid_parameters"),
    ("basic", "recall", {"query": "x", "tags": "docs"}, "invalid_parameters"),
    ("basic", "search_memory", {"query": "x", "min_score": "0.3"}, "invalid_parameters"),
    ("basic", "recall_context", {"query": "   "}, "invalid_parameters"),
    ("bearer", "append_memory", {"conversation_id": CONV, "items": [{}]}, "unprocessable_parameters"),
    ("bearer", "recall_memory", {"conversation_id": CONV}, "unprocessable_parameters"),
    ("bearer", "remember", {"content": "a read-only token cannot write this"}, "forbidden"),
    ("bearer", "forget", {"reference": "mem_whatever"}, "forbidden"),
    ("basic", "forget", {"reference": "mem_doesnotexist"}, "not_found"),
    ("basic", "remember", {"content": "x" * (CONTENT_LIMIT + 1)}, "payload_too_large"),
    ("basic", "append_memory", {"conversation_id": CONV, "items": [{"big": "x" * PAYLOAD_LIMIT}]}, "payload_too_large"),
]

UNAVAILABLE = [
    (tool, args) for tool, args in SUCCESSES if tool in {"remember", "recall", "search_memory", "recall_context"}
] + [("forget", {"reference": "mem_x"})]


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """What both SDKs got from three servers: full profile, public profile, and one with no model."""
    ensure_harness()
    root = tmp_path_factory.mktemp("ts-clients")
    limits = {"MEMORY_MAX_CONTENT_BYTES": str(CONTENT_LIMIT), "MEMORY_MAX_PAYLOAD_BYTES": str(PAYLOAD_LIMIT)}
    started: list[ServerProcess] = []
    try:
        (full, full_basic, full_bearer), (public, public_basic, _), (broken, broken_basic, _) = (
            start(root / name, started, **env)
            for name, env in (
                ("full", limits),
                ("public", {"MEMORY_TOOL_PROFILE": "public"}),
                ("broken", {"MEMORY_EMBEDDING_MODEL": str(root / "no-such-model")}),
            )
        )
        wait_ready(full.base)
        wait_ready(public.base)
        calls = {
            "basic": [{"tool": t, "arguments": a} for t, a in SUCCESSES],
            "bearer": [{"tool": "recall", "arguments": {"query": "deploys"}}],
        }
        for session, tool, arguments, _ in ERRORS:
            calls[session].append({"tool": tool, "arguments": arguments})
        yield {
            "full": run_harness(
                full.url,
                [
                    {"name": name, "authorization": {"basic": full_basic, "bearer": full_bearer}[name], "calls": made}
                    for name, made in calls.items()
                ],
            ),
            "public": run_harness(
                public.url,
                [
                    {
                        "name": "basic",
                        "authorization": public_basic,
                        "calls": [
                            {
                                "tool": "remember",
                                "arguments": {"content": "Public packs are plain text for the prompt."},
                            },
                            {"tool": "recall", "arguments": {"query": "what are public packs?", "limit": 2}},
                            {
                                "tool": "recall_context",
                                "arguments": {"query": "public packs", "max_items": 2, "max_tokens": 300},
                            },
                            {"tool": "recall_context", "arguments": {"query": "public packs", "max_items": 0}},
                        ],
                    }
                ],
            ),
            "broken": run_harness(
                broken.url,
                [
                    {
                        "name": "basic",
                        "authorization": broken_basic,
                        "calls": [{"tool": tool, "arguments": arguments} for tool, arguments in UNAVAILABLE]
                        + [{"tool": "recall_memory", "arguments": {"conversation_id": CONV}}],
                    }
                ],
            ),
        }
    finally:
        for server in started:
            server.kill()


def sessions(answer: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for key in SDKS:
        yield key, answer[key]["sessions"]


def assert_error_arrives(call: dict[str, Any], code: str, where: Any) -> None:
    assert "thrown" not in call, (where, call)  # the SDK did not turn the error into an exception
    assert call["isError"] is True, (where, call)
    assert call["text"].startswith(f"{code}: "), (where, call)
    assert call["hasStructuredContent"] is False, (where, call)


def assert_parses(call: dict[str, Any], where: Any, *, structured: bool = True) -> None:
    assert "thrown" not in call, (where, call)
    assert call["isError"] is False, (where, call)
    assert call["hasStructuredContent"] is structured, (where, call)


def test_every_error_kind_arrives_with_its_code(answers: dict[str, dict[str, Any]]) -> None:
    for sdk, found in sessions(answers["full"]):
        positions = {"basic": len(SUCCESSES), "bearer": 1}
        for session, tool, arguments, code in ERRORS:
            call = found[session]["calls"][positions[session]]
            positions[session] += 1
            assert_error_arrives(call, code, (sdk, session, tool, arguments))
    for sdk, found in sessions(answers["broken"]):
        *unavailable, logs = found["basic"]["calls"]
        for (tool, _), call in zip(UNAVAILABLE, unavailable, strict=False):
            assert_error_arrives(call, "unavailable", (sdk, tool))
        assert_parses(logs, (sdk, "recall_memory without a model"))  # the logs do not need the model


def test_a_success_of_every_tool_parses(answers: dict[str, dict[str, Any]]) -> None:
    for sdk, found in sessions(answers["full"]):
        calls = found["basic"]["calls"]
        for (tool, _), call in zip(SUCCESSES, calls, strict=False):
            assert_parses(call, (sdk, tool))
        results = {tool: call["structuredContent"] for (tool, _), call in zip(SUCCESSES, calls, strict=False)}
        assert results["append_memory"]["count"] == 2
        assert [item["payload"] for item in results["recall_memory"]["items"]] == [
            {"role": "user", "text": "hi"},
            {"n": 1.5},
        ]
        assert results["replay_memory"]["items"][0]["seq"] == 1
        assert results["recall"]["results"][0]["content"].startswith("The TypeScript clients test")
        assert results["search_memory"]["results"], "a close match passes min_score 0.2"
        assert results["recall_context"]["budget"]["used_items"] >= 1
        assert results["forget"] == {"reference": results["remember"]["reference"], "forgotten": True}
        assert_parses(found["bearer"]["calls"][0], (sdk, "recall with a read-only token"))
    sdk1, client2 = (answers["full"][key]["sessions"]["basic"]["calls"] for key in SDKS)
    assert sdk1[0]["structuredContent"]["duplicate"] is False and client2[0]["structuredContent"]["duplicate"]


def test_both_sdks_see_our_version_plain_schemas_and_instructions(answers: dict[str, dict[str, Any]]) -> None:
    # The bearer session's token is read-only: it lists the read tools alone, and its instructions name no other.
    listed = {"basic": (TOOLS, INSTRUCTIONS), "bearer": (READS, instructions(READS))}
    for profile in ("full", "public", "broken"):
        for sdk, found in sessions(answers[profile]):
            for name, session in found.items():
                assert session["serverInfo"] == {"name": "memory-server", "version": __version__}, (profile, sdk)
                expected, said = listed[name]
                assert session["instructions"] == said, (profile, sdk, name)
                tools = {tool["name"]: tool for tool in session["tools"]}
                assert set(tools) == expected, (profile, sdk, name)
                text = json.dumps([tool["inputSchema"] for tool in tools.values()])
                assert '"anyOf"' not in text and '"null"' not in text, (profile, sdk)


def test_public_recall_context_is_text_only(answers: dict[str, dict[str, Any]]) -> None:
    for sdk, found in sessions(answers["public"]):
        session = found["basic"]
        tools = {tool["name"]: tool for tool in session["tools"]}
        assert "outputSchema" not in tools["recall_context"]
        assert set(tools["recall"]["inputSchema"]["properties"]) == {"query", "limit"}
        remembered, recalled, packed, bad = session["calls"]
        assert_parses(remembered, (sdk, "remember"))
        assert_parses(recalled, (sdk, "recall"))
        assert_parses(packed, (sdk, "recall_context"), structured=False)
        assert packed["text"].startswith("### XMemo Context\nItems: 1\nReference: mem_"), packed["text"]
        assert_error_arrives(bad, "invalid_parameters", (sdk, "recall_context max_items=0"))
