"""The `memory-server` command line (the one place, with `memory_server.__main__`, that reads settings).

Commands: serve (memory_server.admin.serve); site and token (memory_server.admin.access); export, import,
backup, reindex, doctor (memory_server.admin.data); client-config (memory_server.admin.client_config). Every
failure a user can cause prints one line, `error: ...`, and exits 1.
"""

from __future__ import annotations

import inspect
import os
import sqlite3
import sys

import typer

from memory_server.admin import access, data, owner, serve  # noqa: F401  # register their commands on `app`
from memory_server.admin.client_config import command as client_config  # noqa: F401
from memory_server.admin.common import app
from memory_server.errors import AppError


def unwrapped(text: str) -> str:
    """A docstring's paragraphs as single lines: typer's rich help keeps a docstring's line breaks and then
    wraps again at the terminal's width, which leaves every paragraph ragged. Lines that start a list item or
    are indented keep their own line."""
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines = paragraph.splitlines()
        if any(line.startswith(("-", " ", "*")) for line in lines):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


def _unwrap_help(group: typer.Typer) -> None:
    for command in group.registered_commands:
        text = command.help or (command.callback.__doc__ if command.callback else None)
        if text:
            command.help = unwrapped(text)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _unwrap_help(sub.typer_instance)


_unwrap_help(app)

# `memory-server --help` leads with what a newcomer runs, then the rest by what it is for.
PANELS = {
    "serve": "Start here",
    "client-config": "Start here",
    "import": "Data",
    "export": "Data",
    "backup": "Data",
    "doctor": "Data",
    "reindex": "Data",
    "conversation": "Data",
    "site": "Access",
    "token": "Access",
}
ORDER = list(PANELS)


def _front_page(group: typer.Typer) -> None:
    def name(info: typer.models.CommandInfo | typer.models.TyperInfo) -> str:
        if info.name:
            return info.name
        callback = info.callback
        return callback.__name__.replace("_", "-") if callback else ""

    def position(info: typer.models.CommandInfo | typer.models.TyperInfo) -> int:
        return ORDER.index(name(info)) if name(info) in ORDER else len(ORDER)

    group.registered_commands.sort(key=position)
    group.registered_groups.sort(key=position)
    infos: list[typer.models.CommandInfo | typer.models.TyperInfo] = [
        *group.registered_commands,
        *group.registered_groups,
    ]
    for info in infos:
        info.rich_help_panel = PANELS.get(name(info), "More")


_front_page(app)


def main() -> None:
    from memory_server.index.base import IndexUnavailable
    from memory_server.storage.files import PRIVATE_UMASK
    from memory_server.storage.health import DatabaseDamaged

    os.umask(PRIVATE_UMASK)  # every file this process writes (database, index, exports) is the owner's only
    try:
        app()
    except (AppError, DatabaseDamaged, IndexUnavailable, sqlite3.Error, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # a bug: one line for the user; the traceback only when asked for
        if os.environ.get("MEMORY_LOG_LEVEL", "").upper() == "DEBUG":
            raise
        typer.echo(
            f"error: unexpected failure ({type(exc).__name__}: {exc}); run with MEMORY_LOG_LEVEL=DEBUG to see where",
            err=True,
        )
        sys.exit(1)
