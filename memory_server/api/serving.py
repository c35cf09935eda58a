"""Serving HTTP: the listening socket, bound before anything else happens, and the uvicorn server around it
(with the connection guards of memory_server.api.connections, and proxy headers believed from trusted proxies only).

The socket is bound first so that a port already in use fails `serve` before it creates a site or prints a
first-start secret, with a message that says which process holds the port.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import Any

import uvicorn

from memory_server.api.connections import ConnectionLimits, connection_budget, guarded_protocol
from memory_server.settings import Settings


class PortInUse(Exception):
    """The port is taken; the message names the process holding it when it can be found."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port), as uvicorn would bind it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            holder = port_holder(port)
            by = f" by {holder}" if holder else " by another process"
            raise PortInUse(f"port {port} on {host} is in use{by}; stop it, or pass another --port") from None
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def port_holder(port: int) -> str | None:
    """'pid N (command line)' of the process listening on `port`, read from /proc (Linux); None if unknown."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        if links & inodes:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                command = ""
            return f"pid {pid} ({command.strip()[:120]})" if command.strip() else f"pid {pid}"
    return None


def run(app: Any, settings: Settings, sock: socket.socket) -> None:
    """Serve `app` on the bound socket until stopped, with the connection guards of memory_server.api.connections."""
    limits = ConnectionLimits(
        max_connections=connection_budget(settings.max_connections),
        header_timeout=settings.header_timeout_s,
        body_timeout=settings.body_timeout_s,
        body_min_rate=settings.body_min_rate,
    )
    proxies = settings.proxies
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        http=guarded_protocol(limits),
        timeout_keep_alive=settings.keep_alive_s,
        # X-Forwarded-For/-Proto only from MEMORY_TRUSTED_PROXIES: uvicorn's own default believes any
        # loopback peer (and FORWARDED_ALLOW_IPS), so a local client could claim any address it liked.
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
        # uvicorn answers 503 once open connections or running requests reach this. The protocol keeps
        # connections at max_connections; a request whose connection was just shed runs a moment longer (until
        # it sees the disconnect), so requests get room for as many again: only requests in flight beyond
        # that are refused.
        limit_concurrency=2 * limits.max_connections + 1,
    )
    uvicorn.Server(config).run(sockets=[sock])
