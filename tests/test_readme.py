"""The README is part of the product: every tool, setting, command and route it names exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from server.auth.bootstrap import BootstrapSettings
from server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# Variables the compose file reads for itself (e.g. PostgreSQL's password), not server settings.
COMPOSE_VARIABLES = set(re.findall(r"\$\{(MEMORY_[A-Z_]+)", (ROOT / "docker-compose.yml").read_text()))
TOOLS = {"append_memory", "recall_memory", "replay_memory", "list_conversations", "remember", "recall",
         "search_memory", "recall_context", "forget"}


def test_every_setting_named_exists() -> None:
    named = set(re.findall(r"MEMORY_[A-Z_]+", README))
    known = {f"MEMORY_{name.upper()}" for name in Settings.model_fields}
    known |= {f"MEMORY_BOOTSTRAP_{name.upper()}" for name in BootstrapSettings.model_fields}
    known |= COMPOSE_VARIABLES
    assert named, "the README documents its settings"
    assert named <= known, named - known
    documented = {f"MEMORY_{name.upper()}" for name in Settings.model_fields}
    assert documented <= named, f"settings missing from the README: {documented - named}"


async def test_every_tool_named_exists(live: Any) -> None:
    named = {m for m in re.findall(r"^\| `([a-z_]+)\(", README, re.M)}
    assert named == TOOLS
    async with live.client() as client:
        assert {t.name for t in await client.list_tools()} == TOOLS


def test_every_command_named_exists() -> None:
    from typer.main import get_command

    from server.admin.cli import app
    from server.admin.client_config.clients import CLIENTS

    root = get_command(app)
    named = set(re.findall(r"^memory-server ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", README, re.M))
    assert named
    for command, sub in named:
        assert command in root.commands, command  # type: ignore[attr-defined]
        group = root.commands[command]  # type: ignore[attr-defined]
        if sub and hasattr(group, "commands"):
            assert sub in group.commands, (command, sub)
        if command == "client-config":
            assert sub in CLIENTS, sub


def test_every_route_named_exists(live: Any) -> None:
    import httpx2

    spec = httpx2.get(f"{live.base}/openapi.json").json()
    paths = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    named = set(re.findall(r"`([A-Z]+) (/v1/[^`?\s]+)`", README))
    assert len(named) >= 11
    assert named <= paths, named - paths
    for path in ("/healthz", "/readyz", "/metrics"):
        assert httpx2.get(f"{live.base}{path}").status_code == 200
