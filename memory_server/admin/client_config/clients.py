"""Each MCP client's server entry and configuration file, as its own documentation describes them.

- Claude Desktop: `claude_desktop_config.json` (macOS `~/Library/Application Support/Claude/`, Windows
  `%APPDATA%\\Claude\\`, Linux `~/.config/Claude/`), `mcpServers.NAME` = `{command, args, env}`. Its file
  takes local (stdio) servers only: a remote one goes through the `mcp-remote` bridge (`npx mcp-remote URL
  --header Authorization:${AUTH_HEADER}`, the header's value in `env`, since a space inside `args` does not
  survive).
- Claude Code: `claude mcp add ...` on the command line; its project file `.mcp.json` has `mcpServers.NAME` =
  `{type: "stdio", command, args, env}` or `{type: "http", url, headers}`.
- Cursor: `~/.cursor/mcp.json`, `mcpServers.NAME` = `{command, args, env}` or `{url, headers}`.
- VS Code: `.vscode/mcp.json` of the workspace (or the user profile's `mcp.json`), `servers.NAME` =
  `{type: "stdio", command, args, env}` or `{type: "http", url, headers}`.
- Windsurf: `~/.codeium/windsurf/mcp_config.json`, `mcpServers.NAME` = `{command, args, env}` or
  `{serverUrl, headers}`.
- Codex: `~/.codex/config.toml` (`$CODEX_HOME/config.toml`), a table `[mcp_servers.NAME]` with `command`,
  `args`, `env`, or `url` and `http_headers`.
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


@dataclass(frozen=True)
class Launch:
    """A stdio server: the process a client starts."""

    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Remote:
    """An HTTP server: its MCP URL and the header that authenticates."""

    url: str
    headers: dict[str, str]


Connection = Launch | Remote


def servers_key(client: str) -> str:
    """Where a JSON client keeps its servers (Codex: the TOML table `mcp_servers`)."""
    return {"vscode": "servers", "codex": "mcp_servers"}.get(client, "mcpServers")


def entry(client: str, connection: Connection) -> dict[str, Any]:
    """The value of the client's `servers_key[NAME]` for this connection."""
    if isinstance(connection, Launch):
        launch: dict[str, Any] = {
            "command": connection.command,
            "args": list(connection.args),
            "env": dict(connection.env),
        }
        return {"type": "stdio", **launch} if client in ("claude-code", "vscode") else launch
    headers = dict(connection.headers)
    if client == "claude-desktop":
        return _bridge(connection)
    if client == "windsurf":
        return {"serverUrl": connection.url, "headers": headers}
    if client == "codex":
        return {"url": connection.url, "http_headers": headers}
    if client in ("claude-code", "vscode"):
        return {"type": "http", "url": connection.url, "headers": headers}
    return {"url": connection.url, "headers": headers}  # cursor


def _bridge(remote: Remote) -> dict[str, Any]:
    """Claude Desktop's file takes local servers only: `mcp-remote` speaks stdio to it and HTTP to the server.
    Each header travels as `Name:${VAR}` with its value in `env` (a space in `args` is split by the app)."""
    args = ["-y", "mcp-remote", remote.url]
    if remote.url.startswith("http://"):
        args.append("--allow-http")  # mcp-remote refuses plain http for anything but localhost otherwise
    env = {}
    for n, (name, value) in enumerate(remote.headers.items()):
        variable = "AUTH_HEADER" if n == 0 else f"HEADER_{n}"
        args += ["--header", f"{name}:${{{variable}}}"]
        env[variable] = value
    return {"command": "npx", "args": args, "env": env}


def document(client: str, name: str, connection: Connection) -> dict[str, Any]:
    """What the client's file holds for this one server."""
    return {servers_key(client): {name: entry(client, connection)}}


def render(client: str, name: str, connection: Connection) -> str:
    """What to paste: JSON for most clients, a TOML table for Codex, the `claude mcp add` line for Claude Code."""
    if client == "codex":
        return toml_table(f"mcp_servers.{name}", entry(client, connection))
    if client == "claude-code":
        return claude_mcp_add(name, connection)
    return json.dumps(document(client, name, connection), indent=2, ensure_ascii=False) + "\n"


def claude_mcp_add(name: str, connection: Connection) -> str:
    if isinstance(connection, Remote):
        words = ["claude", "mcp", "add", "--transport", "http", name, connection.url]
        for header, value in connection.headers.items():
            words += ["--header", f"{header}: {value}"]
    else:
        words = ["claude", "mcp", "add", "--transport", "stdio"]
        for variable, value in connection.env.items():
            words += ["--env", f"{variable}={value}"]
        words += [name, "--", connection.command, *connection.args]
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
