"""server.json, the entry of the official MCP registry, against the registry's published schema and the code.

tests/data/mcp-registry-server.schema.json is the registry's schema for server.json, version 2025-12-11, as published
at https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json (generated from the OpenAPI document
of github.com/modelcontextprotocol/registry, its `$comment` says): vendored, so the test runs offline.
When the registry publishes a newer schema, replace the file and the `$schema` of server.json together.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_server.settings import Settings

from procs import REPO_ROOT, server_env

SERVER_JSON = REPO_ROOT / "server.json"
SCHEMA = REPO_ROOT / "tests" / "data" / "mcp-registry-server.schema.json"
PUBLISHED = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def validator() -> jsonschema.Draft7Validator:
    schema = load(SCHEMA)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def test_server_json_follows_the_registry_schema() -> None:
    entry = load(SERVER_JSON)
    assert load(SCHEMA)["$id"] == entry["$schema"] == PUBLISHED
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(entry)]
    assert errors == []
    # The schema has teeth: what the registry refuses, it refuses here too.
    for broken in ({"description": "x" * 101}, {"name": "no-namespace"}, {"version": None}):
        wrong = {**copy.deepcopy(entry), **broken}
        assert not validator().is_valid({k: v for k, v in wrong.items() if v is not None}), broken


def test_server_json_says_what_the_package_is() -> None:
    entry = load(SERVER_JSON)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert entry["version"] == project["version"]
    packages = entry["packages"]
    assert {package["transport"]["type"] for package in packages} == {"stdio", "streamable-http"}
    defaults = Settings.model_fields
    for package in packages:
        assert (package["registryType"], package["identifier"], package["version"]) == (
            "pypi",
            project["name"],
            project["version"],
        )
        assert [argument["value"] for argument in package["packageArguments"]] == ["serve"]
        for variable in package["environmentVariables"]:
            setting = variable["name"].removeprefix("MEMORY_").lower()
            assert setting in defaults, variable["name"]  # a real setting (docs/operations.md documents each)
            if "default" in variable:
                assert variable["default"] == str(defaults[setting].default), variable["name"]
            if "choices" in variable:
                assert set(variable["choices"]) == set(defaults[setting].annotation.__args__), variable["name"]
    http = next(package for package in packages if package["transport"]["type"] == "streamable-http")
    assert http["transport"]["url"] == "http://127.0.0.1:{MEMORY_PORT}/mcp"
    assert [header["name"] for header in http["transport"]["headers"]] == ["Authorization"]


def test_the_readme_names_the_entry() -> None:
    """PyPI shows the README; the registry checks a PyPI package's ownership by the mcp-name line in it."""
    readme = (REPO_ROOT / "README.md").read_text()
    assert f"mcp-name: {load(SERVER_JSON)['name']}" in readme
    assert re.search(r"`server\.json`", readme)


@pytest.mark.timeout(120)
async def test_the_stdio_package_starts_as_the_entry_says(tmp_path: Path) -> None:
    """The stdio package's arguments and fixed variables, run from this checkout, make a working MCP server."""
    package = next(p for p in load(SERVER_JSON)["packages"] if p["transport"]["type"] == "stdio")
    fixed = {v["name"]: v["value"] for v in package["environmentVariables"] if "value" in v}
    env = server_env(**fixed, MEMORY_DATA_DIR=str(tmp_path / "data"))
    arguments = [argument["value"] for argument in package["packageArguments"]]
    transport = StdioTransport(
        command=sys.executable, args=["-m", "memory_server", *arguments], env=env, cwd=str(REPO_ROOT), keep_alive=False
    )
    async with Client(transport, timeout=60) as client:
        assert "remember" in {tool.name for tool in await client.list_tools()}
