"""The `memory-server` command. `serve` over stdio, what every MCP client starts, is a bridge to the store's
owner and starts without the rest of the server (memory_server/local/bridge.py); everything else is the full
command line (memory_server/admin/cli.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

VALUED = ("--transport", "--data-dir", "--host", "--port")


def stdio_request(args: Sequence[str], env: Mapping[str, str]) -> tuple[Path | None, str] | None:
    """(the data directory given, if any; the site) when `args` ask for `serve` over stdio, else None.
    Anything this does not recognise goes to the full command line, which says what is wrong with it."""
    if not args or args[0] != "serve":
        return None
    given = {"--transport": env.get("MEMORY_TRANSPORT"), "--data-dir": env.get("MEMORY_DATA_DIR")}
    rest = list(args[1:])
    while rest:
        name, sep, value = rest.pop(0).partition("=")
        if name not in VALUED:
            return None
        if not sep:
            if not rest:
                return None
            value = rest.pop(0)
        given[name] = value
    if given["--transport"] != "stdio":
        return None
    data_dir = given["--data-dir"]
    return (Path(data_dir) if data_dir is not None else None), env.get("MEMORY_STDIO_SITE", "default")


def main() -> None:
    request = stdio_request(sys.argv[1:], os.environ) if hasattr(os, "getuid") else None
    if request is None:
        from memory_server.admin.cli import main as cli

        cli()
        return
    from memory_server.local.bridge import run_bridge
    from memory_server.locations import default_data_dir

    data_dir, site = request
    run_bridge(data_dir or default_data_dir(), explicit=data_dir is not None, site=site)
