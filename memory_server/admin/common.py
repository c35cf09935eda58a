"""What every `memory-server` command shares: the Typer apps, settings from flags and the environment, and
one-line errors (never a traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from memory_server.settings import Settings
from memory_server.storage.backends import backend_of, database_url

if TYPE_CHECKING:
    from rich.progress import Progress  # imported when used: rich is slow to import

app = typer.Typer(
    help="memory-server: durable conversation logs and saved memories for AI agents.",
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    add_completion=False,
)
site_app = typer.Typer(help="Manage sites (tenants) and their Basic credentials.", no_args_is_help=True)
token_app = typer.Typer(help="Manage Bearer tokens and OAuth grants.", no_args_is_help=True)
conversation_app = typer.Typer(help="Manage conversation logs.", no_args_is_help=True)
app.add_typer(site_app, name="site")
app.add_typer(token_app, name="token")
app.add_typer(conversation_app, name="conversation")

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Data directory (MEMORY_DATA_DIR; default: the per-user data directory, "
        "~/.local/share/memory-server on Linux, ~/Library/Application Support/memory-server on macOS).",
    ),
]


def _print_version(value: bool) -> None:
    if value:
        from memory_server.version import __version__

        typer.echo(f"memory-server {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    pass


SECRET_SETTINGS = frozenset({"database_url", "qdrant_api_key"})


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment and flags; a bad value is a one-line error naming it, never a traceback."""
    from pydantic import ValidationError

    try:
        # Any: flag values of every setting's type, which Settings itself validates.
        values: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        settings = Settings(**values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            name = ".".join(str(p) for p in err.get("loc", ()))
            given = name in overrides and overrides[name] is not None
            flag = f"--{name.replace('_', '-')}" if given else f"MEMORY_{name.upper()}"
            shown = "" if name in SECRET_SETTINGS else f" (got {err.get('input')!r})"  # a URL may hold a password
            problems.append(f"{flag}: {err.get('msg', 'invalid')}{shown}")
        fail(RuntimeError("; ".join(problems)))
    if backend_of(settings).needs_url:  # malformed, it would be printed back, password and all
        from memory_server.storage.postgres.errors import url_problem

        problem = url_problem(database_url(settings))
        if problem is not None:
            fail(
                RuntimeError(
                    f"MEMORY_DATABASE_URL is not a PostgreSQL URL psycopg can use ({problem}); correct it, "
                    "or unset it to use SQLite in the data directory"
                )
            )
    return settings


def fail(error: Exception) -> NoReturn:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(1)


def announce(settings: Settings, message: str, **fields: str) -> None:
    """A start-up line on stderr: plain text, or one JSON object when the log format is JSON (so every line
    a container writes parses). Not through logging: the first-start secret must not reach log handlers."""
    if settings.log_format == "json":
        from memory_server.logging_setup import json_line

        typer.echo(json_line("memory_server.serve", message, **fields), err=True)
        return
    typer.echo("\n".join([message, *(f"  {name}: {value}" for name, value in fields.items())]), err=True)


def stderr_progress() -> Progress:
    from rich.console import Console
    from rich.progress import Progress

    return Progress(console=Console(stderr=True), transient=False)
