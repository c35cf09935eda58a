"""The documentation is part of the product: every tool, setting, command and route the README and docs/ name
exists, and every setting is documented in one of them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memory_server.auth.bootstrap import BootstrapSettings
from memory_server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS = "\n".join(page.read_text() for page in PAGES)
# Variables the compose file reads for itself (e.g. PostgreSQL's password), not server settings.
COMPOSE_VARIABLES = set(re.findall(r"\$\{(MEMORY_[A-Z_]+)", (ROOT / "docker-compose.yml").read_text()))
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


def test_every_setting_named_exists() -> None:
    named = set(re.findall(r"(?<![A-Z_])MEMORY_[A-Z_]+", DOCS))
    known = {f"MEMORY_{name.upper()}" for name in Settings.model_fields}
    known |= {f"MEMORY_BOOTSTRAP_{name.upper()}" for name in BootstrapSettings.model_fields}
    known |= COMPOSE_VARIABLES
    assert named, "the documentation names its settings"
    assert named <= known, named - known
    documented = {f"MEMORY_{name.upper()}" for name in Settings.model_fields}
    assert documented <= named, f"settings missing from the README and docs/: {documented - named}"


async def test_every_tool_named_exists(live: Any) -> None:
    named = {m for m in re.findall(r"^\| `([a-z_]+)\(", DOCS, re.M)}
    assert named == TOOLS
    async with live.client() as client:
        assert {t.name for t in await client.list_tools()} == TOOLS


def test_every_command_named_exists() -> None:
    from typer.main import get_command

    from memory_server.admin.cli import app
    from memory_server.client_entries import CLIENTS

    root = get_command(app)
    # Commands as shown: at the start of a line of a code block, or in inline code anywhere.
    blocks = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", DOCS, re.M | re.S))
    named = set(re.findall(r"^memory-server ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", blocks, re.M))
    named |= set(re.findall(r"`memory-server ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", DOCS))
    assert named
    for command, sub in named:
        assert command in root.commands, command  # type: ignore[attr-defined]
        group = root.commands[command]  # type: ignore[attr-defined]
        if sub and hasattr(group, "commands"):
            assert sub in group.commands, (command, sub)
        if command == "client-config" and sub:
            assert sub in CLIENTS, sub


def test_every_route_named_exists(live: Any) -> None:
    import httpx2

    spec = httpx2.get(f"{live.base}/openapi.json").json()
    paths = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    named = set(re.findall(r"`([A-Z]+) (/v1/[^`?\s]+)`", DOCS))
    assert len(named) >= 11
    assert named <= paths, named - paths
    for path in ("/healthz", "/readyz", "/metrics"):
        assert httpx2.get(f"{live.base}{path}").status_code == 200


def test_readme_is_a_first_page() -> None:
    """The README is what a newcomer reads first; the rest is in docs/, each page linked from it."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in readme, f"docs/{page.name} is not linked from the README"


def heading_anchors(page: Path) -> set[str]:
    """The anchors a Markdown renderer gives the page's headings (lower case, punctuation dropped, spaces
    as hyphens), outside code blocks."""
    anchors, fenced = set(), False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("#"):
            anchors.add(re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-"))
    return anchors


def test_relative_links_lead_somewhere() -> None:
    """Every relative link of the README, docs/ and the other top-level pages names a file that exists, and a
    heading of it when it has an #anchor: moving a section between pages must not strand its links."""
    pages = [*PAGES, *sorted(ROOT.glob("*.md")), *sorted(ROOT.glob("*/README.md"))]
    broken = []
    for page in dict.fromkeys(pages):
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
