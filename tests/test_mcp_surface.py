"""The MCP surface as a client nobody here wrote sees it, over real HTTP against the real app.

- Errors: `isError: true` and one text block `code: message`, no structured content (so clients that
  validate structured content against the output schema, like the TypeScript SDK 1.x, get the error), and
  the metrics still count each error code.
- Schemas: optional parameters are plain types (no `anyOf`, no `null`); `serverInfo.version` is this
  project's version, on both tool profiles and over stdio.
- One argument rule for every tool: the JSON type the schema declares, 5.0 counts as an integer, and
  null for an optional parameter is the same as leaving it out. Every parameter of every tool is tried.
- Descriptions and instructions that let a model choose the right tool: each description says when to use its
  tool and when not (tests/test_tool_listing.py checks what each credential lists and what the list costs).
- Answers keep their documented shape, which clients cannot read from an output schema (tools have none).

tests/test_ts_clients.py runs the TypeScript SDKs themselves against a server process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastmcp
import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from memory_server.api.app import create_app
from memory_server.api.mcp.server import INSTRUCTIONS
from memory_server.api.schemas import (
    AppendResult,
    ContextPack,
    ConversationsResult,
    Forgotten,
    Hit,
    ItemsResult,
    PublicHit,
    PublicResults,
    Remembered,
    Results,
)
from memory_server.auth import admin as auth
from memory_server.auth.principal import READ
from memory_server.version import __version__

from conftest import LiveServer, ThreadedServer, admin, free_port, make_settings, serve
from procs import REPO_ROOT, server_env

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
CONV = "conv-surface-0001"
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
# A valid call of each tool, which each test varies one parameter of.
BASE_ARGUMENTS: dict[str, dict[str, Any]] = {
    "append_memory": {"conversation_id": CONV, "items": [{"n": 1}]},
    "recall_memory": {"conversation_id": CONV},
    "replay_memory": {"conversation_id": CONV, "limit": 10},
    "list_conversations": {},
    "remember": {"content": "The surface test keeps its fixtures in tests/fixtures."},
    "recall": {"query": "where are the fixtures?"},
    "search_memory": {"query": "where are the fixtures?"},
    "recall_context": {"query": "where are the fixtures?"},
    "forget": {"reference": "mem_surface_unknown"},  # valid, and not_found: never invalid_parameters
}


def rpc(method: str, params: dict[str, Any], request_id: int = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


def post(server: LiveServer, method: str, params: dict[str, Any], authorization: str | None = None) -> dict[str, Any]:
    headers = {**MCP_HEADERS, "Authorization": authorization or server.basic_header()}
    response = httpx2.post(server.url, content=rpc(method, params), headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["result"]


def call(server: LiveServer, tool: str, arguments: Any, authorization: str | None = None) -> dict[str, Any]:
    return post(server, "tools/call", {"name": tool, "arguments": arguments}, authorization)


def initialize(server: LiveServer) -> dict[str, Any]:
    return post(
        server,
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "surface-test", "version": "1"}},
    )


def list_tools(server: LiveServer) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in post(server, "tools/list", {})["tools"]}


def assert_error(result: dict[str, Any], code: str, *words: str) -> str:
    """An error result as every client can read it: isError, `code: message` alone, no structured content."""
    assert result.get("isError") is True, result
    assert "structuredContent" not in result, result
    assert [block["type"] for block in result["content"]] == ["text"], result
    text = result["content"][0]["text"]
    assert text.startswith(f"{code}: "), text
    for word in words:
        assert word in text, (word, text)
    return text


def tool_outcomes(base: str) -> dict[tuple[str, str], float]:
    """memory_server_tool_calls_total by (tool, outcome)."""
    found = {}
    for family in text_string_to_metric_families(httpx2.get(f"{base}/metrics").text):
        for sample in family.samples:
            if sample.name == "memory_server_tool_calls_total":
                found[(sample.labels["tool"], sample.labels["outcome"])] = sample.value
    return found


def error_code(result: dict[str, Any]) -> str | None:
    if not result.get("isError"):
        return None
    assert "structuredContent" not in result, result
    return result["content"][0]["text"].split(":", 1)[0]


@pytest.fixture
def public(tmp_path: Path, embedder: Any) -> Iterator[LiveServer]:
    with serve(make_settings(tmp_path / "public", tool_profile="public"), embedder) as server:
        yield server


# --- errors ---------------------------------------------------------------------------------------------


def test_every_error_kind_is_text_only_and_counted(live: LiveServer, tmp_path: Path) -> None:
    _, read_only = live.create_token(scopes=[READ])
    bearer = f"Bearer {read_only}"
    cases = [
        ("invalid_parameters", "recall_memory", {"conversation_id": "short"}, None, ["conversation_id"]),
        ("invalid_parameters", "recall", {"query": "  "}, None, ["query"]),
        ("invalid_parameters", "search_memory", {"query": "q", "limit": "2"}, None, ["limit"]),
        ("invalid_parameters", "no_such_tool", {}, None, ["no_such_tool"]),
        ("unprocessable_parameters", "append_memory", {"conversation_id": CONV, "items": [{}]}, bearer, ["Basic"]),
        ("unprocessable_parameters", "list_conversations", {}, bearer, ["Basic"]),
        ("forbidden", "remember", {"content": "read-only tokens cannot write"}, bearer, ["memory:write"]),
        ("not_found", "forget", {"reference": "mem_doesnotexist"}, None, ["mem_doesnotexist"]),
        ("payload_too_large", "remember", {"content": "x" * (live.settings.max_content_bytes + 1)}, None, []),
        (
            "payload_too_large",
            "append_memory",
            {"conversation_id": CONV, "items": [{"big": "x" * live.settings.max_payload_bytes}]},
            None,
            [],
        ),
    ]
    for code, tool, arguments, authorization, words in cases:
        assert_error(call(live, tool, arguments, authorization), code, *words)

    outcomes = tool_outcomes(live.base)
    for code, tool, _, _, _ in cases:
        assert outcomes.get((tool if tool != "no_such_tool" else "unknown", code), 0) >= 1, (code, tool, outcomes)
    assert not any(outcome == "error" for _, outcome in outcomes)

    # unavailable: a server whose model directory is missing answers saved-memory tools with it.
    settings = make_settings(tmp_path / "broken", embedding_model=str(tmp_path / "no-such-model"))
    secret = admin(settings, lambda sites: auth.create_site(sites, "acme"))
    port = free_port()
    with ThreadedServer(create_app(settings), port):
        broken = LiveServer(settings, f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}", "acme", secret)
        for tool in ("remember", "recall", "search_memory", "recall_context", "forget"):
            assert_error(call(broken, tool, BASE_ARGUMENTS[tool]), "unavailable")
        assert error_code(call(broken, "recall_memory", {"conversation_id": CONV})) is None  # logs still work
        assert tool_outcomes(broken.base)[("recall", "unavailable")] == 1


# --- schemas and version ----------------------------------------------------------------------------------


def nullable_anywhere(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict):
        found = (
            [path]
            if (
                "anyOf" in node
                or "oneOf" in node
                or node.get("type") == "null"
                or (isinstance(node.get("type"), list) and "null" in node["type"])
                or ("default" in node and node["default"] is None)
            )
            else []
        )
        return found + [p for key, value in node.items() for p in nullable_anywhere(value, f"{path}/{key}")]
    if isinstance(node, list):
        return [p for i, item in enumerate(node) for p in nullable_anywhere(item, f"{path}/{i}")]
    return []


@pytest.mark.parametrize("profile", ["full", "public"])
def test_optional_parameters_are_plain_types_and_the_version_is_ours(
    profile: str, live: LiveServer, public: LiveServer
) -> None:
    server = live if profile == "full" else public
    info = initialize(server)
    assert info["serverInfo"]["name"] == "memory-server"
    assert info["serverInfo"]["version"] == __version__ != fastmcp.__version__
    tools = list_tools(server)
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        schema = tool["inputSchema"]
        assert nullable_anywhere(schema) == [], (name, schema)
        for param, prop in schema["properties"].items():
            assert isinstance(prop.get("type"), str), (name, param, prop)
            assert prop.get("description"), (name, param)
    tags = tools["remember"]["inputSchema"]["properties"]["tags"]
    assert tags == {
        "type": "array",
        "items": {"type": "string", "pattern": tags["items"]["pattern"]},
        "maxItems": 32,
        "description": tags["description"],
    }
    assert set(tools["remember"]["inputSchema"]["required"]) == {"content"}
    assert set(tools["replay_memory"]["inputSchema"]["required"]) == {"conversation_id", "limit"}
    assert "required" not in tools["list_conversations"]["inputSchema"]


async def test_stdio_server_reports_our_version(tmp_path: Path) -> None:
    transport = StdioTransport(
        command=sys.executable,
        env=server_env(),
        cwd=str(REPO_ROOT),
        keep_alive=False,
        args=["-m", "memory_server", "serve", "--transport", "stdio", "--data-dir", str(tmp_path / "data")],
    )
    async with Client(transport, timeout=60, mode="legacy") as client:  # the initialize handshake
        result = client.initialize_result
        assert result is not None and result.server_info.version == __version__
        assert result.instructions == INSTRUCTIONS
        tools = await client.list_tools()
        assert all(nullable_anywhere(tool.input_schema) == [] for tool in tools)


# --- one argument rule for every tool ------------------------------------------------------------------

STRING_IN_SCHEMA = {
    "string": ["5", "x"],
    "integer": ["2"],
    "number": ["0.3"],
    "boolean": ["true"],
    "array": ["docs", "[{}]"],
    "object": ["{}"],
}


def wrong_types(prop: dict[str, Any]) -> list[Any]:
    """Values of another JSON type than the schema declares (and arrays with elements of another type)."""
    kind = prop["type"]
    wrong: list[Any] = list(STRING_IN_SCHEMA[kind]) if kind != "string" else []
    wrong += {
        "string": [5, 5.0, True, ["x"], {"x": 1}],
        "integer": [True, False, 2.5, [2], {"n": 2}],
        "number": [True, [0.3], {"n": 0.3}],
        "boolean": [1, 0, [True]],
        "array": [{"a": 1}, 5, True],
        "object": [[], 5, True, "x"],
    }[kind]
    if kind == "array":
        element = prop["items"].get("type")
        wrong += [[1]] if element in ("string", "object") else []
        wrong += [["x"]] if element == "object" else []
    return wrong


def right_value(name: str, prop: dict[str, Any]) -> list[Any]:
    """Values the rule accepts that a naive implementation might not: an integral float for an integer,
    an int for a number."""
    if prop["type"] == "integer":
        low = max(prop.get("minimum", 0), 1 if name != "offset" else 0)
        return [float(low), float(min(prop.get("maximum", 10), 10))]
    if prop["type"] == "number":
        return [0, 1, 0.25]
    return []


@pytest.mark.parametrize("profile", ["full", "public"])
def test_every_parameter_takes_exactly_its_json_type(profile: str, live: LiveServer, public: LiveServer) -> None:
    server = live if profile == "full" else public
    tools = list_tools(server)
    assert set(tools) == set(BASE_ARGUMENTS)
    tried: set[tuple[str, str, str]] = set()
    for tool, spec in tools.items():
        schema = spec["inputSchema"]
        base = BASE_ARGUMENTS[tool]
        assert error_code(call(server, tool, base)) in (None, "not_found"), tool
        required = set(schema.get("required", []))
        for name, prop in schema["properties"].items():
            for value in wrong_types(prop):
                result = call(server, tool, {**base, name: value})
                assert_error(result, "invalid_parameters", name)
                tried.add((tool, name, prop["type"]))
            for value in right_value(name, prop):
                result = call(server, tool, {**base, name: value})
                assert error_code(result) in (None, "not_found"), (tool, name, value, result)
            if prop["type"] == "integer" and "maximum" in prop:
                assert_error(call(server, tool, {**base, name: float(prop["maximum"] + 1)}), "invalid_parameters", name)
            result = call(server, tool, {**base, name: None})
            if name in required:
                assert_error(result, "invalid_parameters", name)
            else:  # null is the same as leaving the parameter out
                assert error_code(result) in (None, "not_found"), (tool, name, result)
    kinds = {kind for _, _, kind in tried}
    assert {"string", "integer", "array"} <= kinds
    if profile == "full":
        assert {"number", "object"} <= kinds
        assert ("search_memory", "min_score", "number") in tried and ("recall", "tags", "array") in tried
    else:
        assert ("recall_context", "max_tokens", "integer") in tried


def test_integral_floats_and_nulls_mean_what_they_say(live: LiveServer) -> None:
    for n in range(7):
        call(live, "append_memory", {"conversation_id": CONV, "items": [{"n": n}]})
    tail = call(live, "recall_memory", {"conversation_id": CONV, "count": 3.0})["structuredContent"]["items"]
    assert [item["payload"]["n"] for item in tail] == [4, 5, 6]
    page = call(live, "replay_memory", {"conversation_id": CONV, "limit": 2.0, "offset": 1e0})
    assert [item["seq"] for item in page["structuredContent"]["items"]] == [1, 2]
    everything = call(live, "recall_memory", {"conversation_id": CONV, "count": None})["structuredContent"]
    assert len(everything["items"]) == 7  # the default, 50
    assert error_code(call(live, "search_memory", {"query": "q", "min_score": None})) is None


# --- descriptions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["full", "public"])
def test_every_description_says_when_to_use_the_tool_and_when_not(
    profile: str, live: LiveServer, public: LiveServer
) -> None:
    server = live if profile == "full" else public
    for name, tool in list_tools(server).items():
        text = tool["description"]
        assert "Use it " in text and "Do not use it " in text, (name, text)


def test_descriptions_say_when_to_use_each_tool(live: LiveServer) -> None:
    tools = list_tools(live)
    describe = {name: tool["description"] for name, tool in tools.items()}
    params = {name: tool["inputSchema"]["properties"] for name, tool in tools.items()}
    append = describe["append_memory"]
    assert "save a memory" in append and "idempotency_key" in append
    assert "unavailable" in append and "retry" in append and "permanent" in append
    assert "turn-by-turn record of a conversation" in describe["remember"]
    assert "shorter than limit" in describe["replay_memory"] and "replay_memory" in describe["recall_memory"]
    assert "unknown conversation is empty" in describe["recall_memory"]
    for name in ("recall", "search_memory", "recall_context"):
        others = {"recall", "search_memory", "recall_context"} - {name}
        assert all(other in describe[name] for other in others), name
    assert "weak matches allowed" in describe["recall"]
    assert "nothing rather than a weak match" in describe["search_memory"]
    assert "lower min_score" in describe["search_memory"]
    for name in ("recall", "search_memory"):
        assert "Never compare scores across answers" in describe[name], name
    assert "used_items" in describe["recall_context"] and "used_tokens" in describe["recall_context"]
    assert live.settings.context_header in describe["recall_context"]
    assert "mem_" in describe["forget"] and "remember" in describe["forget"] and "supersedes" in describe["forget"]
    assert "mem_" in describe["remember"] and "created=false" in describe["remember"]

    conversation_id = params["append_memory"]["conversation_id"]
    assert conversation_id["pattern"] == "^[A-Za-z0-9_-]{8,64}$" and "personal data" in conversation_id["description"]
    assert all(params[name]["conversation_id"] == conversation_id for name in ("recall_memory", "replay_memory"))
    # Bounds and defaults are the schema's; the descriptions name the configured limits a schema cannot hold.
    bounds = [
        ("recall_memory", "count", 0, 1000, 50),
        ("replay_memory", "limit", 0, 1000, None),
        ("replay_memory", "offset", 0, None, 0),
        ("list_conversations", "limit", 1, 1000, 100),
        ("recall", "limit", 1, 50, 5),
        ("search_memory", "limit", 1, 100, 10),
        ("recall_context", "max_items", 1, 50, 8),
        ("recall_context", "max_tokens", 1, 12000, 1500),
        ("search_memory", "min_score", 0, 1, None),
    ]
    for tool, param, low, high, default in bounds:
        prop = params[tool][param]
        assert (prop.get("minimum"), prop.get("maximum"), prop.get("default")) == (low, high, default), (tool, param)
    assert set(tools["replay_memory"]["inputSchema"]["required"]) == {"conversation_id", "limit"}
    assert (params["append_memory"]["items"]["minItems"], params["append_memory"]["items"]["maxItems"]) == (1, 1000)
    assert (params["append_memory"]["idempotency_key"]["maxLength"], params["recall"]["query"]["maxLength"]) == (
        128,
        4096,
    )
    texts = [
        ("append_memory", "items", "256 KiB", "4 MiB"),
        ("append_memory", "idempotency_key", "duplicate"),
        ("remember", "content", "32 KiB"),
        ("search_memory", "min_score", f"default {live.settings.search_min_score}"),
        ("forget", "reference", "remember", "mem_"),
    ]
    for tool, param, *words in texts:
        text = params[tool][param]["description"]
        assert all(word in text for word in words), (tool, param, text)


def test_instructions_summarise_the_choice(live: LiveServer) -> None:
    instructions = initialize(live)["instructions"]
    assert instructions == INSTRUCTIONS
    lines = instructions.splitlines()
    assert len(lines) == 5
    for tool in TOOLS:
        assert tool in instructions, tool
    assert "retry" in instructions and "permanent" in instructions


def shaped(model: type[BaseModel], answer: dict[str, Any]) -> None:
    """`answer` has the fields of `model` (memory_server.api.schemas, the REST answers), every required one, and
    they validate."""
    model.model_validate(answer)
    required = {name for name, field in model.model_fields.items() if field.is_required()}
    assert required <= set(answer) <= set(model.model_fields), (model.__name__, sorted(answer))


@pytest.mark.parametrize("profile", ["full", "public"])
def test_answers_keep_their_documented_shapes(profile: str, live: LiveServer, public: LiveServer) -> None:
    server = live if profile == "full" else public
    structured = {
        tool: call(server, tool, arguments).get("structuredContent") for tool, arguments in BASE_ARGUMENTS.items()
    }
    reference = call(server, "remember", {"content": "Shapes are checked against the REST models."})
    hits = PublicResults if profile == "public" else Results
    expected: dict[str, type[BaseModel] | None] = {
        "append_memory": AppendResult,
        "recall_memory": ItemsResult,
        "replay_memory": ItemsResult,
        "list_conversations": ConversationsResult,
        "remember": Remembered,
        "recall": hits,
        "search_memory": hits,
        "recall_context": ContextPack if profile == "full" else None,  # the public profile answers text only
    }
    for tool, model in expected.items():
        if model is None:
            assert structured[tool] is None, tool
        else:
            shaped(model, structured[tool])
    for hit in call(server, "recall", {"query": "what is checked?"})["structuredContent"]["results"]:
        shaped(Hit if profile == "full" else PublicHit, hit)
    forgotten = call(server, "forget", {"reference": reference["structuredContent"]["reference"]})
    shaped(Forgotten, forgotten["structuredContent"])


def test_public_recall_context_answers_text_only(public: LiveServer) -> None:
    tools = list_tools(public)
    assert not any("outputSchema" in tool for tool in tools.values())  # no tool has one (docs/spec.md, MCP)
    call(public, "remember", {"content": "Public profile packs are plain text for the prompt."})
    result = call(public, "recall_context", {"query": "what do public packs look like?", "max_items": 2})
    assert result["isError"] is False and "structuredContent" not in result, result
    text = result["content"][0]["text"]
    assert text.startswith(f"{public.settings.context_header}\nItems: 1\nReference: mem_"), text
