"""HTTP connections that cannot be held hostage: timeouts, a connection cap, and shedding idle connections.

uvicorn closes a keep-alive connection that stays idle between requests, but nothing else: a connection that
never sends a byte, a request head trickled in a byte at a time, or a body sent at 1 byte/s is held as long
as the client likes, and a few hundred of them exhaust the process's file descriptors, locking out every
legitimate client. `GuardedHttpProtocol` (uvicorn's httptools protocol plus three guards) closes:

- a connection whose request head is not complete `header_timeout` seconds after the connection opened or
  the previous response ended (covers idle connections that never send anything, and slow-loris heads);
- a connection whose request body is not complete `body_timeout` seconds after its head;
- when a new connection would take the open count over `max_connections`, the connection that has been
  idle longest (no request running: waiting for a head, or between keep-alive requests) — or, if every
  connection is running a request, the new one. Legitimate clients get in; idle ones make room.

`max_connections` is capped below the process's file-descriptor limit (see `connection_budget`), so
accept() never fails for lack of descriptors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("memory_server.connections")

# Descriptors kept for everything but client connections: SQLite (two per reader connection, and a reader
# per worker thread), the embedded index's files, the model, logs, the optimizer child's pipes.
RESERVED_DESCRIPTORS = 160


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int
    header_timeout: float
    body_timeout: float


def connection_budget(wanted: int) -> int:
    """How many client connections this process can hold: `wanted`, capped by the descriptor limit.

    The soft limit is first raised to the hard one (the usual 1024 soft limit is an accident of history)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    open_now = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 32
    budget = max(8, soft - open_now - RESERVED_DESCRIPTORS)
    if budget < wanted:
        log.warning("serving at most %d connections (MEMORY_MAX_CONNECTIONS is %d): the descriptor limit is %d",
                    budget, wanted, soft)
    return min(wanted, budget)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the guards above. `limits` is set by `guarded_protocol`."""

    limits: ConnectionLimits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._idle_since: float | None = None  # None while a request runs

    # -- the guards --------------------------------------------------------------------------------

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _idle(self) -> bool:
        return self._idle_since is not None

    def _make_room(self) -> None:
        if len(self.connections) <= self.limits.max_connections:
            return
        idle = [c for c in self.connections if c is not self and isinstance(c, GuardedHttpProtocol) and c._idle()]
        if idle:
            victim = min(idle, key=lambda c: c._idle_since or 0.0)
            victim.transport.close()
            victim.connections.discard(victim)  # counted out now; connection_lost follows on the loop
        else:
            log.warning("refusing a connection: all %d are serving requests", self.limits.max_connections)
            self.transport.close()
            self.connections.discard(self)

    # -- uvicorn's protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle_since = time.monotonic()
        self._arm(self.limits.header_timeout)
        self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._idle_since = None
        self._arm(self.limits.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # super() starts the next pipelined request, if any
        super().on_response_complete()  # else it arms uvicorn's keep-alive timeout for the next request
        if not pipelined and not self.transport.is_closing():
            self._idle_since = time.monotonic()
            self._arm(self.limits.header_timeout)


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedHttpProtocol]:
    """A protocol class bound to `limits` (uvicorn instantiates the class it is given)."""
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,), {"limits": limits})
