"""`memory-server client-config CLIENT`: print (or `--write`) an MCP client's entry for this server.

stdio (the default): the client starts `memory-server serve` itself on this data directory, with the transport
given as `MEMORY_TRANSPORT=stdio` in the entry's environment (a launcher can take a `--transport` argument for
its own). HTTP: the client reaches a running server at its MCP URL with a header: a new Bearer token (`--token`,
made as `token create` makes one, with its scopes and bounds) or the site's Basic credential.
"""

from __future__ import annotations

import base64
import os
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from memory_server.admin.client_config.clients import (
    CLIENTS,
    Connection,
    Launch,
    Remote,
    default_file,
    entry,
    render,
    servers_key,
)
from memory_server.admin.common import DataDir, app, fail, load_settings
from memory_server.settings import Settings

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Settings that say where the data is and how it is read: a stdio server started by a client needs the same.
CARRIED_SETTINGS = (
    "MEMORY_DATABASE_URL",
    "MEMORY_INDEX_BACKEND",
    "MEMORY_QDRANT_URL",
    "MEMORY_QDRANT_API_KEY",
    "MEMORY_QDRANT_COLLECTION",
    "MEMORY_EMBEDDING_MODEL",
    "MEMORY_EMBEDDING_ENGINE",
    "MEMORY_EMBEDDING_THREADS",
)


@app.command("client-config")
def client_config(
    client: Annotated[str, typer.Argument(metavar="CLIENT", help=f"One of: {', '.join(CLIENTS)}.")],
    transport: Annotated[
        str, typer.Option(help="stdio (the client starts the server) or http (a running server).")
    ] = "stdio",
    token: Annotated[
        bool,
        typer.Option(
            "--token",
            help="HTTP: make a new Bearer token (with --scope and the "
            "bounds below) instead of using the site's Basic credential.",
        ),
    ] = False,
    site: Annotated[
        str,
        typer.Option(
            "--site",
            help="The site: over stdio the one the server acts for "
            "(MEMORY_STDIO_SITE), over HTTP the one whose credential or token is used.",
        ),
    ] = "default",
    secret: Annotated[
        str | None, typer.Option("--secret", help="HTTP without --token: the site's secret (asked for when not given).")
    ] = None,
    scope: Annotated[
        list[str] | None, typer.Option("--scope", help="With --token: memory:read and/or memory:write (default both).")
    ] = None,
    team: Annotated[list[str] | None, typer.Option("--team", help="With --token: bound to these teams.")] = None,
    project: Annotated[
        list[str] | None, typer.Option("--project", help="With --token: bound to these projects.")
    ] = None,
    bucket: Annotated[list[str] | None, typer.Option("--bucket", help="With --token: bound to these buckets.")] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="HTTP: the server's MCP URL (default: MEMORY_PUBLIC_URL, "
            "or MEMORY_HOST and MEMORY_PORT, followed by /mcp).",
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", help="The server's name in the client.")] = "memory",
    write: Annotated[
        bool,
        typer.Option(
            "--write",
            help="Merge the entry into the client's configuration file "
            "(a timestamped backup first; other servers are kept).",
        ),
    ] = False,
    config_file: Annotated[
        Path | None,
        typer.Option(
            "--config-file",
            help="With --write: this file instead of the client's usual one (e.g. VS Code's user mcp.json).",
        ),
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="With --write: replace a server of the same name.")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Print an MCP client's configuration for this server, ready to paste, or merge it into the client's file.

    JSON for Claude Desktop, Cursor, VS Code and Windsurf, a TOML table for Codex, the `claude mcp add` command
    line for Claude Code. Over stdio the entry starts this memory-server on this data directory, with
    MEMORY_TRANSPORT=stdio in its environment. Over HTTP it names the server's URL and an Authorization header:
    a new scoped token with --token, otherwise the site's Basic credential.
    """
    if client not in CLIENTS:
        fail(RuntimeError(f"unknown client {client!r}; one of: {', '.join(CLIENTS)}"))
    if transport not in ("stdio", "http"):
        fail(RuntimeError(f"--transport must be stdio or http (got {transport!r})"))
    if not NAME.fullmatch(name):
        fail(RuntimeError("--name must be 1-64 characters of [A-Za-z0-9_-]"))
    settings = load_settings(data_dir=data_dir)
    connection: Connection
    if transport == "stdio":
        if token or secret is not None or scope or team or project or bucket:
            fail(
                RuntimeError(
                    "a stdio server needs no credential (it acts for --site with full access): "
                    "--token, --secret and the bounds are for --transport http"
                )
            )
        connection = stdio_launch(settings, site)
    else:
        address = _mcp_url(settings, url)
        headers = {
            "Authorization": _token_header(settings, site, scope, team, project, bucket)
            if token
            else _basic_header(settings, site, secret)
        }
        connection = Remote(address, headers)
    typer.echo(render(client, name, connection), nl=False)
    if isinstance(connection, Launch) and settings.index_backend == "embedded" and settings.database_url is None:
        typer.echo(
            f"note: the client starts its own server on {settings.data_dir.resolve()}; a `memory-server "
            "serve` already running there holds its vector index (stop it, or use --transport http)",
            err=True,
        )
    if write:
        _write(client, name, connection, config_file, replace)
    elif client == "claude-code":
        typer.echo("(run the line above; --write adds it to ./.mcp.json instead)", err=True)


def stdio_launch(settings: Settings, site: str) -> Launch:
    """This memory-server as a client starts it: the installed `memory-server` script when that is what runs,
    else this Python with `-m memory_server` and the package's directory on PYTHONPATH (a client starts it anywhere)."""
    data_dir = str(settings.data_dir.resolve())
    env = {"MEMORY_TRANSPORT": "stdio"}
    if site != "default":
        env["MEMORY_STDIO_SITE"] = site
    env.update({name: os.environ[name] for name in CARRIED_SETTINGS if os.environ.get(name)})
    script = Path(sys.argv[0])
    if script.name in ("memory-server", "memory-server.exe") and script.is_file():
        return Launch(str(script.absolute()), ["serve", "--data-dir", data_dir], env)
    import memory_server as server

    env["PYTHONPATH"] = str(Path(server.__file__).resolve().parent.parent)
    return Launch(sys.executable, ["-m", "memory_server", "serve", "--data-dir", data_dir], env)


def _mcp_url(settings: Settings, url: str | None) -> str:
    if url is None:
        return settings.mcp_resource
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        fail(RuntimeError(f"--url must be an http:// or https:// URL (got {url!r})"))
    return url


def _token_header(
    settings: Settings,
    site: str,
    scope: list[str] | None,
    team: list[str] | None,
    project: list[str] | None,
    bucket: list[str] | None,
) -> str:
    from memory_server.admin.access import with_sites
    from memory_server.auth import admin
    from memory_server.auth.principal import SCOPES

    token_id, made = with_sites(
        settings.data_dir,
        lambda sites: admin.create_token(
            sites, site, scopes=scope or list(SCOPES), teams=team, projects=project, buckets=bucket
        ),
    )
    typer.echo(f"made token {token_id} for site '{site}' (memory-server token revoke {token_id} ends it)", err=True)
    return f"Bearer {made}"


def _basic_header(settings: Settings, site: str, secret: str | None) -> str:
    """base64(site:secret), once the secret is checked against the site's (a typo would only show in the
    client, as a 401)."""
    from memory_server.admin.access import with_sites
    from memory_server.admin.serve import UNISSUED_SECRET
    from memory_server.auth.secrets import verify_secret

    credential = with_sites(settings.data_dir, lambda sites: sites.credential(site))
    if credential is None:
        fail(RuntimeError(f"no site named {site!r} (memory-server site list shows them; or use --token)"))
    if credential.secret_hash == UNISSUED_SECRET:
        fail(
            RuntimeError(
                f"site {site!r} has no secret yet (a stdio server created it): `memory-server site "
                f"rotate {site}` issues one, or pass --token for a new scoped token"
            )
        )
    if secret is None:
        secret = typer.prompt(f"secret of site '{site}'", hide_input=True, err=True)
    if not verify_secret(secret, credential.secret_hash):
        fail(
            RuntimeError(
                f"that is not the secret of site {site!r} (memory-server site rotate {site} issues a new "
                "one; or pass --token for a new scoped token)"
            )
        )
    return "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()


def _write(client: str, name: str, connection: Connection, config_file: Path | None, replace: bool) -> None:
    from memory_server.admin.client_config.files import CannotMerge, merge_json, merge_toml

    path = config_file or default_file(client)
    value = entry(client, connection)
    try:
        merge = merge_toml if client == "codex" else merge_json
        merged = merge(path, servers_key(client), name, value, replace=replace)
    except CannotMerge as exc:
        fail(exc)
    if not merged.changed:
        typer.echo(f"{path} already has this entry for {name!r}; nothing changed", err=True)
        return
    saved = f" (the previous file is saved as {merged.backup})" if merged.backup else ""
    typer.echo(f"wrote {name!r} to {path}{saved}; restart the client (or reload its MCP servers) to use it", err=True)
