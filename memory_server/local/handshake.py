"""The first line each side of an owner socket sends, before any MCP message: who connects and what for, and
who answers (its version, its pid, how it serves). One JSON object per line, like MCP over stdio.

Roles: `bridge` (an MCP session for a stdio client follows), `status` (the owner answers what it serves and
closes), `handover` (a server that needs the store asks an idle-able owner to leave).
"""

from __future__ import annotations

import json
import socket
from typing import Any

PROTOCOL = 1
MAX_HELLO_BYTES = 64 * 1024


class HandshakeError(Exception):
    """The other side answered something that is not this protocol (or nothing)."""


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps({"memory_server": PROTOCOL, **message}, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError:
        raise HandshakeError("not a memory-server handshake") from None
    if not isinstance(message, dict) or message.get("memory_server") != PROTOCOL:
        raise HandshakeError("not a memory-server handshake of this protocol")
    return message


def read_line(sock: socket.socket, limit: int = MAX_HELLO_BYTES) -> tuple[bytes, bytes]:
    """One line from a blocking socket, and what arrived after it."""
    buffer = b""
    while b"\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise HandshakeError("the owner closed the connection during the handshake")
        buffer += chunk
        if len(buffer) > limit and b"\n" not in buffer:
            raise HandshakeError("handshake line too long")
    line, _, rest = buffer.partition(b"\n")
    return line, rest


def ask(path: str, message: dict[str, Any], timeout: float = 5.0) -> tuple[socket.socket, dict[str, Any], bytes]:
    """Connect to the owner socket at `path`, send `message`, and return the socket, the owner's answer and any
    bytes that followed it. Raises OSError when nobody listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(encode(message))
        line, rest = read_line(sock)
        sock.settimeout(None)
        return sock, decode(line), rest
    except BaseException:
        sock.close()
        raise
