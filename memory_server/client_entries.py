"""Each MCP client's server entry and configuration file, as its own documentation describes them.

- Claude Desktop: `claude_desktop_config.json` (macOS `~/Library/Application Support/Claude/`, Windows
  `%APPDATA%\\Claude\\`, Linux `~/.config/Claude/`), `mcpServers.NAME` = `{command, args, env}`. Its file
  takes local (stdio) servers only: a remote one goes through the `mcp-remote` bridge (`npx mcp-remote URL
  --header Authorization:${AUTH_HEADER}`, the header's value in `env`, since a space inside `args` does not
  survive). It expands no variables: the only entry that holds a credential, in a file of the user's own.
- Claude Code: `claude mcp add NAME ...` on the command line (the name before `--env`, which takes several
  values); its project file `.mcp.json` has `mcpServers.NAME` = `{type: "stdio", command, args, env}` or
  `{type: "http", url, headers}`, and `${VAR}` in them is read from the environment (in every scope).
- Cursor: `~/.cursor/mcp.json`, `mcpServers.NAME` = `{command, args, env}` or `{url, headers}`; `${env:VAR}`.
- VS Code: `.vscode/mcp.json` of the workspace (or the user profile's `mcp.json`), `servers.NAME` =
  `{type: "stdio", command, args, env}` or `{type: "http", url, headers}`; `inputs` of type `promptString`
  with `password: true` are asked for once and kept in its secret storage (`${input:ID}`), `${env:VAR}`.
- Windsurf: `~/.codeium/windsurf/mcp_config.json`, `mcpServers.NAME` = `{command, args, env}` or
  `{serverUrl, headers}`; `${env:VAR}`.
- Codex: `~/.codex/config.toml` (`$CODEX_HOME/config.toml`), a table `[mcp_servers.NAME]` with `command`,
  `args`, `env`, `env_vars` (names passed on from Codex's environment), or `url` and `env_http_headers`
  (header name to the variable holding its value).

No entry written to a file a project shares holds a credential: the Authorization header, and the settings
that hold a password (`SECRET_SETTINGS`), are references to the environment (or VS Code's prompt).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLIENTS = ("claude-desktop", "claude-code", "cursor", "vscode", "windsurf", "codex")
# Settings a stdio server needs from the user's environment that hold a password or key: an entry names them
# for the client to pass on from its own environment (`${VAR}`, `${env:VAR}`, Codex's `env_vars`), never
# their values.
SECRET_SETTINGS = ("MEMORY_DATABASE_URL", "MEMORY_QDRANT_API_KEY")


@dataclass(frozen=True)
class Launch:
    """A stdio server: the process a client starts. `passed`: settings taken from the client's environment."""

    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    passed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Remote:
    """An HTTP server: its MCP URL and the Authorization header's value, which entries read from the
    environment variable `variable` (VS Code: asks for it, as the input of that id)."""

    url: str
    authorization: str
    variable: str


Connection = Launch | Remote


def variable_for(name: str) -> str:
    """The environment variable that holds the Authorization header of server `name`."""
    return f"MCP_{name.upper().replace('-', '_')}_AUTHORIZATION"


def servers_key(client: str) -> str:
    """Where a JSON client keeps its servers (Codex: the TOML table `mcp_servers`)."""
    return {"vscode": "servers", "codex": "mcp_servers"}.get(client, "mcpServers")


def reference(client: str, variable: str) -> str:
    """How the client's file names an environment variable's value."""
    return "${" + variable + "}" if client == "claude-code" else "${env:" + variable + "}"


def input_id(variable: str) -> str:
    return variable.lower().replace("_", "-")


def holds_credential(client: str, connection: Connection) -> bool:
    """Whether the entry holds a credential itself: only Claude Desktop's bridge, whose file expands nothing."""
    return client == "claude-desktop" and isinstance(connection, Remote)


def entry(client: str, connection: Connection) -> dict[str, Any]:
    """The value of the client's `servers_key[NAME]` for this connection."""
    if isinstance(connection, Launch):
        return _launch(client, connection)
    if client == "claude-desktop":
        return _bridge(connection)
    if client == "codex":
        return {"url": connection.url, "env_http_headers": {"Authorization": connection.variable}}
    if client == "vscode":
        value = "${input:" + input_id(connection.variable) + "}"
    else:
        value = reference(client, connection.variable)
    headers = {"Authorization": value}
    if client == "windsurf":
        return {"serverUrl": connection.url, "headers": headers}
    if client in ("claude-code", "vscode"):
        return {"type": "http", "url": connection.url, "headers": headers}
    return {"url": connection.url, "headers": headers}  # cursor


def _launch(client: str, launch: Launch) -> dict[str, Any]:
    env = dict(launch.env)
    values: dict[str, Any] = {"command": launch.command, "args": list(launch.args), "env": env}
    if client == "codex":
        if launch.passed:
            values["env_vars"] = list(launch.passed)
    elif client != "claude-desktop":  # Claude Desktop expands nothing: those settings are left out (see notes)
        env.update({variable: reference(client, variable) for variable in launch.passed})
    return {"type": "stdio", **values} if client in ("claude-code", "vscode") else values


def inputs(client: str, connection: Connection) -> list[dict[str, Any]]:
    """VS Code's `inputs` the entry uses: the header, asked for once as a password and kept by VS Code."""
    if client != "vscode" or not isinstance(connection, Remote):
        return []
    return [
        {
            "type": "promptString",
            "id": input_id(connection.variable),
            "description": f"Authorization header of memory-server at {connection.url} (Bearer ... or Basic ...)",
            "password": True,
        }
    ]


def _bridge(remote: Remote) -> dict[str, Any]:
    """Claude Desktop's file takes local servers only: `mcp-remote` speaks stdio to it and HTTP to the server.
    The header travels as `Authorization:${AUTH_HEADER}` with its value in `env` (a space in `args` is split
    by the app)."""
    args = ["-y", "mcp-remote", remote.url]
    if remote.url.startswith("http://"):
        args.append("--allow-http")  # mcp-remote refuses plain http for anything but localhost otherwise
    args += ["--header", "Authorization:${AUTH_HEADER}"]
    return {"command": "npx", "args": args, "env": {"AUTH_HEADER": remote.authorization}}


def document(client: str, name: str, connection: Connection) -> dict[str, Any]:
    """What the client's file holds for this one server."""
    wanted = inputs(client, connection)
    return {**({"inputs": wanted} if wanted else {}), servers_key(client): {name: entry(client, connection)}}


def render(client: str, name: str, connection: Connection) -> str:
    """What to paste: JSON for most clients, a TOML table for Codex, the `claude mcp add` line for Claude Code."""
    if client == "codex":
        return toml_table(f"mcp_servers.{name}", entry(client, connection))
    if client == "claude-code":
        return claude_mcp_add(name, connection)
    return json.dumps(document(client, name, connection), indent=2, ensure_ascii=False) + "\n"


def claude_mcp_add(name: str, connection: Connection) -> str:
    """The line for Claude Code's CLI. The name comes first: `--env` and `--header` take several values and
    would take the name for one. `${VAR}` stays unexpanded (single-quoted) for Claude Code to read."""
    if isinstance(connection, Remote):
        words = ["claude", "mcp", "add", name, "--transport", "http", connection.url]
        words += ["--header", "Authorization: " + reference("claude-code", connection.variable)]
        return shlex.join(words) + "\n"
    words = ["claude", "mcp", "add", name, "--transport", "stdio"]
    for variable, value in _launch("claude-code", connection)["env"].items():
        words += ["--env", f"{variable}={value}"]
    words += ["--", connection.command, *connection.args]
    return shlex.join(words) + "\n"


def default_file(client: str, *, home: Path | None = None, cwd: Path | None = None) -> Path:
    """The client's configuration file: the user's (Claude Desktop, Cursor, Windsurf, Codex) or the project's in
    the current directory (Claude Code's `.mcp.json`, VS Code's `.vscode/mcp.json`)."""
    home = home or Path.home()
    cwd = cwd or Path.cwd()
    if client == "claude-desktop":
        if sys.platform == "darwin":
            return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
        if sys.platform == "win32":
            return (
                Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
                / "Claude"
                / "claude_desktop_config.json"
            )
        config = Path(os.environ["XDG_CONFIG_HOME"]) if os.environ.get("XDG_CONFIG_HOME") else home / ".config"
        return config / "Claude" / "claude_desktop_config.json"
    if client == "claude-code":
        return cwd / ".mcp.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "vscode":
        return cwd / ".vscode" / "mcp.json"
    if client == "windsurf":
        return home / ".codeium" / "windsurf" / "mcp_config.json"
    if client == "codex":
        return (Path(os.environ["CODEX_HOME"]) if os.environ.get("CODEX_HOME") else home / ".codex") / "config.toml"
    raise ValueError(f"unknown client {client!r}")


# --- TOML (Codex): the little of it an entry needs; the standard library only reads TOML ------------------


def toml_table(name: str, values: dict[str, Any]) -> str:
    lines = [f"[{name}]"]
    lines += [f"{toml_key(key)} = {toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def toml_key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else toml_string(key)


def toml_value(value: Any) -> str:
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml_string(text: str) -> str:
    """A TOML basic string: quotes and backslashes escaped, control characters as \\uXXXX."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


# How each client is named to a person (notes, token labels, the console).
CLIENT_NAMES = {
    "claude-desktop": "Claude Desktop",
    "claude-code": "Claude Code",
    "cursor": "Cursor",
    "vscode": "VS Code",
    "windsurf": "Windsurf",
    "codex": "Codex",
}
