"""What the owner of a store says of itself (`memory-server owner status`, `doctor`)."""

from __future__ import annotations

import os
import time
from typing import Any

from memory_server.local import handshake
from memory_server.local.paths import StorePaths, check_socket


def owner_status(paths: StorePaths) -> dict[str, Any] | None:
    """The owner's answer, or None when nothing serves the store. Raises UnsafePath for a socket that is not
    this user's own."""
    if not check_socket(paths.socket):
        return None
    try:
        conn, answer, _ = handshake.ask(str(paths.socket), {"role": "status", "pid": os.getpid()})
    except (OSError, handshake.HandshakeError):
        return None  # a dead owner's file: the next client replaces it
    conn.close()
    return answer


def describe(status: dict[str, Any]) -> str:
    """One line: who owns the store and who uses it."""
    clients = status.get("clients") or []
    now = time.time()
    used = ", ".join(f"pid {c.get('pid')} ({c.get('site')}, {now - float(c.get('since', now)):.0f} s)" for c in clients)
    return (
        f"pid {status.get('pid')}, memory-server {status.get('version')}, serving {status.get('serving')}, "
        f"model {status.get('model')}, socket {status.get('socket')}; "
        f"{len(clients)} client{'s' if len(clients) != 1 else ''}{': ' + used if used else ''}"
    )
