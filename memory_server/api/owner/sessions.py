"""The owner's Unix socket: MCP sessions for the stdio bridges of this user's clients, and the owner's answers
to `status` and `handover` (memory_server/local/handshake.py).

The socket file is mode 0600 in a directory only this user enters, and each peer's user is checked again
where the platform tells it (SO_PEERCRED): the operating system's user is the credential, as for stdio.
Every session acts for the site its bridge names, with full access, like a stdio server of its own did.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from mcp.server.stdio import stdio_server

from memory_server.api.mcp.descriptions import READ_TOOLS, WRITE_TOOLS
from memory_server.api.mcp.server import build_mcp
from memory_server.auth.principal import Principal
from memory_server.local import handshake
from memory_server.local.paths import StorePaths, private_dir
from memory_server.local.sites import local_principal
from memory_server.services import Services
from memory_server.version import __version__

log = logging.getLogger("memory_server.local")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one MCP message; the operations bound what they accept far lower
HELLO_TIMEOUT_S = 5.0
MEMORY_TOOLS = frozenset(READ_TOOLS + WRITE_TOOLS)  # what needs the model
MODEL_WAIT_S = 120.0  # a saved-memory tool called while the model loads waits this long, then says unavailable

_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("local_principal")


@dataclass
class Client:
    pid: int | None
    site: str
    since: float = field(default_factory=time.time)


class WaitForMemories(Middleware):
    """Over the owner socket a saved-memory tool waits for the model to load rather than failing: a client
    starts with the owner, before the model is in memory, and its first recall should simply take longer."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]) -> Any:
        if getattr(context.message, "name", None) in MEMORY_TOOLS and self.services.memories is None:
            await anyio.to_thread.run_sync(self.services.memories_settled.wait, MODEL_WAIT_S)
        return await call_next(context)


class OwnerSocket:
    """Serves one store's MCP tools to local clients over a Unix socket."""

    def __init__(
        self,
        services: Services,
        paths: StorePaths,
        *,
        serving: str,
        lock_fd: int,
        on_handover: Callable[[], None] | None = None,
    ) -> None:
        self.services = services
        self.paths = paths
        self.serving = serving  # "stdio" for an owner of its own, else how the store is served (an HTTP URL)
        self.lock_fd = lock_fd
        self.on_handover = on_handover
        self.clients: dict[int, Client] = {}
        self.idle_since: float | None = time.monotonic()
        self.handover_to: socket.socket | None = None
        self.mcp = build_mcp(services, local=_principal.get)
        self.mcp.add_middleware(WaitForMemories(services))
        self._inode = os.lstat(paths.socket).st_ino  # bound already (bind_socket)

    def still_ours(self) -> bool:
        """Whether the socket file is still the one this owner bound (a removed data directory ends it)."""
        try:
            return os.lstat(self.paths.socket).st_ino == self._inode and self.paths.data_dir.is_dir()
        except OSError:
            return False

    def unlink(self) -> None:
        if self.still_ours():
            try:
                os.unlink(self.paths.socket)
            except OSError:
                pass

    def status(self) -> dict[str, Any]:
        memories = self.services
        model = "loaded" if memories.memories else ("failed" if memories.memory_error else "loading")
        return {
            "ok": True,
            "version": __version__,
            "pid": os.getpid(),
            "serving": self.serving,
            "data_dir": str(self.paths.data_dir),
            "socket": str(self.paths.socket),
            "model": model,
            "clients": [{"pid": c.pid, "site": c.site, "since": c.since} for c in self.clients.values()],
        }

    async def serve(self, sock: socket.socket) -> None:
        """Accept connections until cancelled."""
        listener = await anyio.abc.SocketListener.from_socket(sock)
        # fastmcp's own stdio runner enters this once around its session; here it spans every session.
        async with self.mcp._lifespan_manager(), anyio.create_task_group() as tasks:
            await listener.serve(self._connection, tasks)

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            if not same_user(raw):
                return
            buffered = BufferedByteReceiveStream(stream)
            try:
                with anyio.fail_after(HELLO_TIMEOUT_S):
                    hello = handshake.decode(await buffered.receive_until(b"\n", handshake.MAX_HELLO_BYTES))
            except (TimeoutError, handshake.HandshakeError, anyio.EndOfStream, anyio.IncompleteRead) as exc:
                log.info("a connection to the owner socket was not a memory-server client: %s", exc)
                return
            except (anyio.DelimiterNotFound, anyio.BrokenResourceError, OSError):
                return
            role = hello.get("role")
            if role == "status":
                await stream.send(handshake.encode(self.status()))
            elif role == "handover":
                await self._hand_over(stream)
            elif role == "bridge":
                await self._session(stream, buffered, hello)

    async def _hand_over(self, stream: anyio.abc.SocketStream) -> None:
        if self.on_handover is None:
            error = f"the store is served by memory-server (pid {os.getpid()}, {self.serving}); stop it first"
            await stream.send(handshake.encode({"ok": False, "error": error, "pid": os.getpid()}))
            return
        # Answered once the store is closed, with the owner lock attached (memory_server/local/takeover.py),
        # through a copy of the connection that outlives this task.
        self.handover_to = stream.extra(anyio.abc.SocketAttribute.raw_socket).dup()
        self.on_handover()

    async def _session(self, stream: anyio.abc.SocketStream, buffered: BufferedByteReceiveStream, hello: Any) -> None:
        site = str(hello.get("site") or self.services.settings.stdio_site)
        try:
            principal = await anyio.to_thread.run_sync(local_principal, self.services, site)
        except Exception as exc:  # a bad site name, a store that cannot be written
            await stream.send(handshake.encode({"ok": False, "error": f"site {site!r}: {exc}"}))
            return
        await stream.send(handshake.encode({"ok": True, "version": __version__, "pid": os.getpid()}))
        pid = hello.get("pid")
        self.clients[id(stream)] = Client(pid if isinstance(pid, int) else None, site)
        self.idle_since = None
        _principal.set(principal)
        try:
            lines = cast(Any, SocketLines(buffered))
            async with stdio_server(stdin=lines, stdout=cast(Any, SocketWriter(stream))) as (read, write):
                server = self.mcp._mcp_server
                await server.run(read, write, server.create_initialization_options())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the bridge went away
        finally:
            del self.clients[id(stream)]
            if not self.clients:
                self.idle_since = time.monotonic()


def bind_socket(paths: StorePaths) -> socket.socket:
    """Listen at the store's socket path (a dead owner's file is replaced: the caller holds the owner lock).
    Connections wait in the backlog until the owner serves them."""
    private_dir(paths.socket.parent)
    try:
        os.unlink(paths.socket)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(paths.socket))
    finally:
        os.umask(old)
    os.chmod(paths.socket, 0o600)
    sock.listen(64)
    return sock


class SocketLines:
    """The socket's lines as the text stream mcp's stdio transport reads (`async for line in ...`)."""

    def __init__(self, buffered: BufferedByteReceiveStream) -> None:
        self.buffered = buffered

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            try:
                line = await self.buffered.receive_until(b"\n", MAX_MESSAGE_BYTES)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            except anyio.DelimiterNotFound:
                log.warning("a local client sent a message over %d bytes; its session is closed", MAX_MESSAGE_BYTES)
                return
            yield line.decode("utf-8", errors="replace")


class SocketWriter:
    """The socket as the text stream mcp's stdio transport writes (`write`, `flush`)."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream

    async def write(self, text: str) -> None:
        await self.stream.send(text.encode())

    async def flush(self) -> None:
        pass


def same_user(sock: socket.socket) -> bool:
    """Whether the peer runs as this user, where the platform says (Linux's SO_PEERCRED); elsewhere the
    socket's mode and its private directory keep other users out."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    try:
        _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    except OSError:
        return False
    if uid != os.getuid():
        log.warning("refused a connection to the owner socket from uid %d", uid)
        return False
    return True
