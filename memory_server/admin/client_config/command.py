"""`memory-server client-config CLIENT`: print (or `--write`) an MCP client's entry for this server.

stdio (the default): the client starts `memory-server serve` itself, on the data directory given (`--data-dir`,
MEMORY_DATA_DIR) or else the per-user default, with the transport given as `MEMORY_TRANSPORT=stdio` in the
entry's environment (a launcher can take a `--transport` argument for its own); it holds no credential. HTTP:
the client reaches a running server at its MCP URL with a header: a new Bearer token (`--token`, made as
`token create` makes one, with its scopes, bounds and a label) or the site's Basic credential. The entry reads
the header from an environment variable (VS Code: asks for it once); the value is printed on stderr, with where
to put it.
"""

from __future__ import annotations

import base64
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from memory_server.admin.common import DataDir, app, fail, load_settings
from memory_server.client_entries import (
    CLIENT_NAMES,
    CLIENTS,
    SECRET_SETTINGS,
    Connection,
    Launch,
    Remote,
    default_file,
    entry,
    holds_credential,
    input_id,
    inputs,
    render,
    servers_key,
    variable_for,
)
from memory_server.settings import Settings
from memory_server.storage.backends import backend_of

if TYPE_CHECKING:
    from memory_server.admin.client_config.files import Merged
    from memory_server.storage.protocols import SiteStore

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Settings that say where the data is and how it is read: a stdio server started by a client needs the same.
# Those holding a password or key (clients.SECRET_SETTINGS) are passed on by name from the client's environment.
CARRIED_SETTINGS = (
    "MEMORY_INDEX_BACKEND",
    "MEMORY_QDRANT_URL",
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
    label: Annotated[
        str | None,
        typer.Option(
            "--label", help="With --token: what the token is for, shown where tokens are listed (default: CLIENT)."
        ),
    ] = None,
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
    a new scoped token with --token, otherwise the site's Basic credential, read from an environment variable
    (VS Code asks for it); its value is printed on stderr with where to put it. No file a project shares ever
    holds a credential.
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
        if token or secret is not None or scope or team or project or bucket or label is not None:
            fail(
                RuntimeError(
                    "a stdio server needs no credential (it acts for --site with full access): "
                    "--token, --secret, --label and the bounds are for --transport http"
                )
            )
        pinned = data_dir is not None or bool(os.environ.get("MEMORY_DATA_DIR"))
        connection = stdio_launch(settings, site, pin_data_dir=pinned)
        token_id = None
    else:
        address = _mcp_url(settings, url)
        if token:
            token_id, authorization = _token_header(
                settings, site, scope, team, project, bucket, label if label is not None else client
            )
        else:
            token_id, authorization = None, _basic_header(settings, site, secret)
        connection = Remote(address, authorization, variable_for(name))
    typer.echo(render(client, name, connection), nl=False)
    _notes(client, connection, settings)
    if write:
        try:
            merged = _write(client, name, connection, config_file, replace)
        except typer.Exit:
            if token_id is not None:  # the new token is in no file: it would be live and unused
                _revoke(settings, token_id)
                typer.echo(f"revoked the new token {token_id}, which nothing uses", err=True)
            raise
        if merged.previous is not None and isinstance(connection, Remote):
            _replaced(merged.previous, settings, site, token_id, client, changed=merged.changed)
    elif client == "claude-code":
        typer.echo("(run the line above; --write adds it to ./.mcp.json instead)", err=True)


def stdio_launch(settings: Settings, site: str, *, pin_data_dir: bool = True) -> Launch:
    """This memory-server as a client starts it: the installed `memory-server` script when that is what runs,
    else this Python with `-m memory_server` and the package's directory on PYTHONPATH (a client starts it
    anywhere). `pin_data_dir`: the data directory given (its absolute path); otherwise none, so the server's
    per-user default applies."""
    serve = ["serve", "--data-dir", str(settings.data_dir.resolve())] if pin_data_dir else ["serve"]
    env = {"MEMORY_TRANSPORT": "stdio"}
    if site != "default":
        env["MEMORY_STDIO_SITE"] = site
    env.update({name: os.environ[name] for name in CARRIED_SETTINGS if os.environ.get(name)})
    passed = tuple(name for name in SECRET_SETTINGS if os.environ.get(name))
    script = Path(sys.argv[0])
    if script.name in ("memory-server", "memory-server.exe") and script.is_file():
        return Launch(str(script.absolute()), serve, env, passed)
    import memory_server as server

    env["PYTHONPATH"] = str(Path(server.__file__).resolve().parent.parent)
    return Launch(sys.executable, ["-m", "memory_server", *serve], env, passed)


def _notes(client: str, connection: Connection, settings: Settings) -> None:
    """On stderr: where the credential goes (the entry names it only), and what the entry leaves out."""
    app_name = CLIENT_NAMES[client]
    if isinstance(connection, Launch):
        if settings.index_backend == "embedded" and backend_of(settings).in_data_dir:
            typer.echo(
                f"note: the client starts its own server on {settings.data_dir.resolve()}; a `memory-server "
                "serve` already running there holds its vector index (stop it, or use --transport http)",
                err=True,
            )
        if connection.passed:
            names = ", ".join(connection.passed)
            if client == "claude-desktop":
                typer.echo(
                    f"note: {names} (a password or key) is not written: Claude Desktop cannot read it from the "
                    "environment, and the server it starts will not have it; use --transport http instead",
                    err=True,
                )
            else:
                typer.echo(
                    f"note: the entry names {names} without its value: {app_name} passes it on from its own "
                    "environment, so set it where you start it",
                    err=True,
                )
        return
    value = connection.authorization
    if holds_credential(client, connection):
        typer.echo(
            "note: the entry holds the credential itself (Claude Desktop reads no variables): keep the file "
            "private; --write makes it, and its backups, readable by you alone",
            err=True,
        )
        return
    if client == "vscode":
        typer.echo(
            f"VS Code asks for the header the first time it starts the server ({input_id(connection.variable)}) "
            f"and keeps it in its secret storage; paste this value then:\n  {value}",
            err=True,
        )
        return
    typer.echo(
        f"{app_name} reads the Authorization header from the environment variable {connection.variable}; "
        f"set it where {app_name} starts (your shell profile, not a project file):\n"
        f"  export {connection.variable}='{value}'",
        err=True,
    )


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
    label: str,
) -> tuple[str, str]:
    """(the new token's id, its Authorization header)."""
    from memory_server.admin.access import with_sites
    from memory_server.auth import admin
    from memory_server.auth.principal import SCOPES

    token_id, made = with_sites(
        settings.data_dir,
        lambda sites: admin.create_token(
            sites, site, scopes=scope or list(SCOPES), teams=team, projects=project, buckets=bucket, label=label
        ),
    )
    typer.echo(
        f"made token {token_id} '{label}' for site '{site}' (memory-server token revoke {token_id} ends it)",
        err=True,
    )
    return token_id, f"Bearer {made}"


def _revoke(settings: Settings, token_id: str) -> None:
    from memory_server.admin.access import with_sites
    from memory_server.auth import admin

    with_sites(settings.data_dir, lambda sites: admin.revoke_token(sites, token_id))


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


def _write(client: str, name: str, connection: Connection, config_file: Path | None, replace: bool) -> Merged:
    """Merge the entry into the file; what was written (or found there already)."""
    from memory_server.admin.client_config.files import CannotMerge, merge_json, merge_toml

    path = config_file or default_file(client)
    value = entry(client, connection)
    private = holds_credential(client, connection)
    try:
        if client == "codex":
            merged = merge_toml(path, servers_key(client), name, value, replace=replace, private=private)
        else:
            wanted = inputs(client, connection)
            merged = merge_json(path, servers_key(client), name, value, replace=replace, private=private, inputs=wanted)
    except CannotMerge as exc:
        fail(exc)
    through = f" (through the link {path})" if merged.path != path else ""
    if not merged.changed:
        typer.echo(f"{merged.path}{through} already has this entry for {name!r}; nothing changed", err=True)
        return merged
    saved = f" (the previous file is saved as {merged.backup})" if merged.backup else ""
    typer.echo(
        f"wrote {name!r} to {merged.path}{through}{saved}; restart the client (or reload its MCP servers) to use it",
        err=True,
    )
    if client == "claude-code":
        typer.echo(
            f"Claude Code asks you to approve a project's server from .mcp.json the first time it starts in "
            f"that project: approve {name!r} then (`claude mcp reset-project-choices` asks again)",
            err=True,
        )
    return merged


def _replaced(
    previous: dict[str, object], settings: Settings, site: str, new_token: str | None, client: str, *, changed: bool
) -> None:
    """The entry the file held before (replaced, or the same): a token it held is revoked; one it only named
    (through a variable) is still live, so the tokens that may be it are named with how to revoke them."""
    from memory_server.admin.access import with_sites
    from memory_server.auth import admin
    from memory_server.auth.secrets import TOKEN_PREFIX, token_hash

    words = _strings(previous)
    held = [found for word in words for found in re.findall(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]+", word)]

    def revoke_held(sites: SiteStore) -> list[str]:
        revoked = []
        for token in held:
            record = sites.token(token_hash(token))
            if record is not None and record.revoked_at is None and record.id != new_token:
                admin.revoke_token(sites, record.id)
                revoked.append(record.id)
        return revoked

    for token_id in with_sites(settings.data_dir, revoke_held) if held else []:
        typer.echo(f"revoked token {token_id}, which the replaced entry held", err=True)
    if held or not (changed or new_token) or not any("AUTHORIZATION" in w or "${input:" in w for w in words):
        return
    label = CLIENT_NAMES.get(client, client)
    others = [
        token
        for token in with_sites(settings.data_dir, lambda sites: admin.list_tokens(sites, site))
        if token.revoked_at is None and token.id != new_token and token.label in (client, label)
    ]
    if others:
        ids = " ".join(token.id for token in others)
        typer.echo(
            f"note: the entry there before read its credential from the environment; a token made for it is "
            f"still live until revoked: tokens labelled {client!r}: {ids} (memory-server token revoke ID)",
            err=True,
        )
    else:
        typer.echo(
            "note: the entry there before read its credential from the environment; if that was a token, it is "
            f"still live: `memory-server token list --site {site}` shows it, `memory-server token revoke ID` ends it",
            err=True,
        )


def _strings(value: object) -> list[str]:
    """Every string inside a JSON or TOML value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
