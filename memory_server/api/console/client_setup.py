"""What `memory-server client-config CLIENT --transport http` writes, for a token just made on the Access page.

Each client's entry comes from the CLI's own builders (memory_server.client_entries), so the console
and the CLI never differ: wherever a client reads variables the entry names the Authorization header by its
environment variable (VS Code: asks for it once and keeps it), and only Claude Desktop's, whose file expands
nothing, holds the token itself. Beside each entry: where the header's value goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_server.client_entries import CLIENT_NAMES, CLIENTS, Remote, holds_credential, input_id, render, variable_for

SERVER_NAME = "memory"  # client-config's default --name


@dataclass(frozen=True)
class ClientEntry:
    client: str  # client-config's CLIENT argument
    title: str
    text: str  # what client-config prints on stdout
    paste: str  # how the entry is used: pasted into the client's file, or run
    variable: str | None  # the environment variable the entry reads the header from (None: it holds it, or asks)
    asks: str | None  # VS Code: the input it asks for on first start
    header: str  # the Authorization header's value


def client_entries(url: str, token: str) -> list[ClientEntry]:
    """Every client's entry for the MCP endpoint `url` with Bearer `token`, in client-config's order."""
    remote = Remote(url, f"Bearer {token}", variable_for(SERVER_NAME))
    entries = []
    for client in CLIENTS:
        held = holds_credential(client, remote)
        entries.append(
            ClientEntry(
                client=client,
                title=CLIENT_NAMES[client],
                text=render(client, SERVER_NAME, remote),
                paste="run this line" if client == "claude-code" else "add this to its MCP configuration file",
                variable=None if held or client == "vscode" else remote.variable,
                asks=input_id(remote.variable) if client == "vscode" else None,
                header=remote.authorization,
            )
        )
    return entries
