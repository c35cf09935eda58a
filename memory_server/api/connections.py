"""HTTP connections that cannot be held hostage: timeouts, a minimum body rate, a connection cap, shedding.

uvicorn closes a keep-alive connection that stays idle between requests, but nothing else: a connection that
never sends a byte, a request head trickled in a byte at a time, or a body sent at 1 byte/s is held as long
as the client likes, and a few hundred of them exhaust the process's file descriptors, locking out every
legitimate client. `GuardedHttpProtocol` (uvicorn's httptools protocol plus these guards) closes:

- a connection whose request head is not complete `header_timeout` seconds after the connection opened or
  the previous response ended (covers idle connections that never send anything, and slow-loris heads);
- a connection whose request body is not complete `body_timeout` seconds after its head;
- a connection whose body arrives slower than `body_min_rate` bytes/s on average once BODY_GRACE_S have
  passed since its head (time the server itself stopped reading, its buffer full, is not held against it):
  a body trickled in is cut off in seconds, not held until the body timeout;
- when a new connection would take the open count over `max_connections`, another one, chosen in this
  order: the longest-idle connection between two requests; the slowest unauthenticated body in progress
  (a request to /register, /ui/sign-in…, or one whose credential was not accepted); the oldest connection
  still waiting for its first request head; the slowest authenticated body. A request being answered is
  never cut; if every connection is answering one, the new connection is refused. Legitimate clients get
  in; idle and slow ones make room.

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


BODY_GRACE_S = 5.0  # a body's first seconds are not held to the minimum rate (a client's slow start)
RATE_CHECK_S = 1.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int
    header_timeout: float
    body_timeout: float
    body_min_rate: int = 0  # bytes/s; 0: no minimum


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
        log.warning(
            "serving at most %d connections (MEMORY_MAX_CONNECTIONS is %d): the descriptor limit is %d",
            budget,
            wanted,
            soft,
        )
    return min(wanted, budget)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the guards above. `limits` is set by `guarded_protocol`."""

    limits: ConnectionLimits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._idle_since: float | None = None  # None while a request runs
        self._served = False  # a response was sent on this connection: idle now means between requests
        self._body_since: float | None = None  # while a request body is being received: when its head ended
        self._body_bytes = 0
        self._excused = 0.0  # seconds the server did not read this body (its buffer full): not the client's
        self._rate_check: asyncio.TimerHandle | None = None

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
        self._close()

    def _close(self) -> None:
        self._end_body()
        if not self.transport.is_closing():
            self.transport.close()

    def _end_body(self) -> None:
        self._body_since = None
        if self._rate_check is not None:
            self._rate_check.cancel()
            self._rate_check = None

    def _check_rate(self) -> None:
        """Once a second while a body arrives: close the connection once it is behind the minimum rate."""
        self._rate_check = None
        if self._body_since is None:
            return
        if self.flow.read_paused:  # the server is not reading (the app has not taken what came): not slow
            self._excused += RATE_CHECK_S
        owed = self.limits.body_min_rate * (time.monotonic() - self._body_since - self._excused - BODY_GRACE_S)
        if self._body_bytes < owed:
            log.debug("closing a connection whose request body arrives at under %d bytes/s", self.limits.body_min_rate)
            self._close()
            return
        self._rate_check = self.loop.call_later(RATE_CHECK_S, self._check_rate)

    def _body_rate(self, now: float) -> float:
        return self._body_bytes / max(now - (self._body_since or now), 1e-3)

    def _shed_rank(self, now: float) -> tuple[int, float] | None:
        """Which connections make room first (lowest rank); None: never shed (a request being answered)."""
        if self._idle_since is not None:
            return (0, self._idle_since) if self._served else (2, self._idle_since)  # oldest first
        if self._body_since is not None:
            state = self.cycle.scope.get("state") if self.cycle is not None else None
            authenticated = isinstance(state, dict) and state.get("principal") is not None
            return (3 if authenticated else 1, self._body_rate(now))  # slowest first
        return None

    def _make_room(self) -> None:
        if len(self.connections) <= self.limits.max_connections:
            return
        now = time.monotonic()
        ranked = [
            (rank, c)
            for c in self.connections
            if c is not self and isinstance(c, GuardedHttpProtocol) and (rank := c._shed_rank(now)) is not None
        ]
        if ranked:
            victim = min(ranked, key=lambda pair: pair[0])[1]
            victim._close()
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
        self._end_body()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._idle_since = None
        self._arm(self.limits.body_timeout)
        self._end_body()  # a previous (pipelined) request's, if it never completed
        self._body_since, self._body_bytes, self._excused = time.monotonic(), 0, 0.0
        if self.limits.body_min_rate > 0:
            self._rate_check = self.loop.call_later(RATE_CHECK_S, self._check_rate)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        self._end_body()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # super() starts the next pipelined request, if any
        super().on_response_complete()  # else it arms uvicorn's keep-alive timeout for the next request
        self._served = True
        if not pipelined and not self.transport.is_closing():
            self._idle_since = time.monotonic()
            self._arm(self.limits.header_timeout)


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedHttpProtocol]:
    """A protocol class bound to `limits` (uvicorn instantiates the class it is given)."""
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,), {"limits": limits})
