"""`memory-server owner`: the process that owns a store for local clients (memory_server/api/owner/daemon.py):
where it is, who uses it, and stopping it."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import typer

from memory_server.admin.common import DataDir, app, fail, load_settings

if TYPE_CHECKING:
    from memory_server.local.paths import StorePaths

owner_app = typer.Typer(help="The process that serves a store to every local (stdio) client.", no_args_is_help=True)
app.add_typer(owner_app, name="owner")


@owner_app.command("status")
def owner_status(data_dir: DataDir = None) -> None:
    """Print the store's owner (pid, version, how it serves), its socket and its clients, as JSON."""
    from memory_server.local.paths import store_paths

    paths = store_paths(load_settings(data_dir=data_dir).data_dir)
    status = owner_status_of(paths)
    if status is None:
        typer.echo(f"data_dir: {paths.data_dir}\nowner: none (the next client starts one)\nsocket: {paths.socket}")
        return
    typer.echo(json.dumps(status, indent=2))


def owner_status_of(paths: StorePaths) -> dict[str, Any] | None:
    from memory_server.local.paths import UnsafePath
    from memory_server.local.status import owner_status

    try:
        return owner_status(paths)
    except UnsafePath as exc:
        fail(exc)


@owner_app.command("stop")
def owner_stop(data_dir: DataDir = None) -> None:
    """Stop the owner that serves the store to stdio clients (they start a new one when next used)."""
    from memory_server.local.paths import store_paths
    from memory_server.local.takeover import StoreBusy, ask_handover
    from memory_server.version import __version__

    paths = store_paths(load_settings(data_dir=data_dir).data_dir)
    status = owner_status_of(paths)
    try:
        fd = ask_handover(paths, __version__)
    except FileNotFoundError:
        fd = None
    except (StoreBusy, OSError) as exc:
        fail(exc)
    if fd is None:
        typer.echo(f"no owner serves {paths.data_dir}")
        return
    os.close(fd)
    if status is not None and isinstance(status.get("pid"), int):
        _wait_gone(status["pid"])
    typer.echo(f"stopped the owner of {paths.data_dir}")


def _wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    """Until the owner process has exited (its log file closed): the store is then free of it entirely."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:  # a pid taken since by another user's process
            return
        time.sleep(0.05)


@owner_app.command("run", hidden=True)
def owner_run(data_dir: DataDir = None) -> None:
    """Own the store (started by a stdio client's bridge)."""
    from memory_server.admin.serve import own_store

    own_store(load_settings(data_dir=data_dir))
