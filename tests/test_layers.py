"""The packages' layering, read from the source: the transports sit on top (only the entry point that serves
them imports memory_server.api), and no two packages of memory_server/ import each other, directly or through others."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `memory-server serve` builds the app and the stdio MCP server: the one place outside the API that needs it.
SERVES_THE_API = {"memory_server/admin/serve.py"}


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / "memory_server").rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path


def imported(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def package(module: str) -> str:
    """The package of a module under memory_server/ (the first two parts of its name: a top-level module is its own)."""
    return ".".join(module.split(".")[:2])


def test_only_the_entry_point_imports_the_api() -> None:
    outside = [
        f"{name}: {module}"
        for name, path in modules()
        if not name.startswith("memory_server/api/") and name not in SERVES_THE_API
        for module in imported(path)
        if module == "memory_server.api" or module.startswith("memory_server.api.")
    ]
    assert outside == []


def test_no_two_packages_import_each_other() -> None:
    edges: dict[str, set[str]] = {}
    for name, path in modules():
        source = package(name.removesuffix(".py").replace("/", "."))
        edges.setdefault(source, set()).update(
            package(m) for m in imported(path) if m.startswith("memory_server.") and package(m) != source
        )

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            for following in edges.get(stack.pop(), ()):
                if following not in seen:
                    seen.add(following)
                    stack.append(following)
        return seen

    assert sorted(p for p in edges if p in reachable(p)) == []


def test_ranking_scores_without_io() -> None:
    """memory_server/ranking/ is the scoring: it reads no store, no index and nothing of retrieval, which feeds it."""
    io = (
        "memory_server.storage",
        "memory_server.index",
        "memory_server.retrieval",
        "memory_server.memories",
        "memory_server.logs",
        "memory_server.operations",
    )
    reads = [
        f"{name}: {module}"
        for name, path in modules()
        if name.startswith("memory_server/ranking/")
        for module in imported(path)
        if module.startswith(io)
    ]
    assert reads == []
