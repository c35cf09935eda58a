"""PostgreSQL connections: the pools and the retry policy.

Blocking store methods (called from worker threads) use a `ConnectionPool`; `LogStore.append` uses an
`AsyncConnectionPool` on the caller's event loop (one per loop, see LoopPool), so an append never blocks
the loop and costs no hop to another thread. Every connection runs with
`synchronous_commit = on`: COMMIT returns once the commit record is flushed, so an acknowledgement means
durable. Connections are in autocommit: a single statement is its own transaction, and multi-statement
work runs inside an explicit BEGIN … COMMIT.

Retries (see errors.py): a statement the server rolled back is run again; work whose connection broke is run
again if COMMIT had not been sent yet, or if it is idempotent; no connection at all is waited for. All of it
within `retry_budget_s`, then `unavailable`. A connection the server closed while it sat in the pool is
noticed before use (the socket is readable: the server's goodbye or EOF) and replaced, costing no round trip.
"""

from __future__ import annotations

import asyncio
import logging
import select
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed

from server.errors import AppError, Unavailable
from server.logging_setup import Throttle
from server.storage.health import StorageHealth
from server.storage.postgres.errors import (
    SHUTTING_DOWN,
    UNCERTAIN,
    Transient,
    first_line,
    postgres_failure,
    transient,
    unreachable,
)

log = logging.getLogger("memory_server.storage")

T = TypeVar("T")
Conn = psycopg.Connection[TupleRow]
AsyncConn = psycopg.AsyncConnection[TupleRow]

RETRY_BUDGET_S = 5.0
CONNECT_TIMEOUT_S = 10
SYNC_POOL = (1, 8)  # min, max connections for the blocking stores (worker threads)
ASYNC_POOL = (1, 16)  # min, max connections for appends
FIRST_DELAY_S, MAX_DELAY_S = 0.02, 0.5
# A pool retries a lost connection with doubling pauses (1 s, 2 s, 4 s, ...). Giving the slot up after this
# long bounds the pause after an outage: the next request that waits grows the pool, connecting at once.
RECONNECT_TIMEOUT_S = 2.0
SESSION = "SET synchronous_commit = on"
SNAPSHOT_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def connect(url: str) -> Conn:
    """One connection outside the pools (migrations, snapshots, doctor), configured like the pooled ones."""
    conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    conn.execute(SESSION)
    return conn


def _configure(conn: Conn) -> None:
    conn.execute(SESSION)


def usable(conn: Conn | AsyncConn) -> bool:
    """Whether a pooled connection is still open: an idle connection's socket has nothing to read unless the
    server said goodbye (a shutdown's FATAL message) or closed it."""
    if conn.closed or conn.broken:
        return False
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return not poller.poll(0)
    except (OSError, ValueError, psycopg.Error):
        return False


class Attempts:
    """One unit of work's tries: what a failure means, and how long to wait before the next try."""

    def __init__(self, budget_s: float, *, idempotent: bool, health: StorageHealth, throttle: Throttle) -> None:
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s
        self.idempotent = idempotent
        self.committing = False  # COMMIT (or the one autocommit statement) was sent
        self.delay = FIRST_DELAY_S
        self._health = health
        self._throttle = throttle

    def remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.05)

    def next_delay(self, exc: Exception) -> float:
        """The pause before trying again; raises the client-facing error when it must not be retried (or the
        exception itself when it is not a storage failure)."""
        kind = transient(exc)
        if kind is None:
            failure = postgres_failure(exc)
            if failure is None:
                raise exc
            self._give_up(failure, exc)
        if kind is Transient.LOST and self.committing and not self.idempotent:
            self._give_up(Unavailable(UNCERTAIN), exc)
        if time.monotonic() + self.delay > self.deadline:
            if kind is Transient.UNREACHABLE:
                self._give_up(unreachable(exc, self.budget_s), exc)
            self._give_up(postgres_failure(exc) or Unavailable(first_line(exc)), exc)
        delay, self.delay = self.delay, min(self.delay * 2, MAX_DELAY_S)
        self.committing = False
        return delay

    def _give_up(self, failure: AppError, exc: Exception) -> None:
        self._health.saw(failure)
        self._throttle.log(logging.ERROR, failure.message, "postgres: %s (%s)", failure.message, first_line(exc))
        raise failure from exc


class Database:
    """The pools of one PostgreSQL database, and the one way work is run on them."""

    def __init__(self, url: str, *, retry_budget_s: float = RETRY_BUDGET_S) -> None:
        self.url = url
        self.retry_budget_s = retry_budget_s
        self.health = StorageHealth("postgres")
        self._throttle = Throttle(log)
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            url, min_size=SYNC_POOL[0], max_size=SYNC_POOL[1], open=False, name="memory-server",
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S}, configure=_configure,
            timeout=retry_budget_s, reconnect_timeout=RECONNECT_TIMEOUT_S)
        self._pool.open(wait=False)
        self._lock = threading.Lock()
        self._apools: dict[asyncio.AbstractEventLoop, LoopPool] = {}
        self._closed = False

    # --- blocking work, from worker threads -----------------------------------------------------------

    def read(self, work: Callable[[Conn], T], *, snapshot: bool = False) -> T:
        """Run a read (retried whatever happens: reads change nothing). `snapshot`: its statements inside one
        REPEATABLE READ transaction, so they all see the same commit."""
        def run(conn: Conn, _: Attempts) -> T:
            if not snapshot:
                return work(conn)
            conn.execute(SNAPSHOT_BEGIN)
            try:
                return work(conn)
            finally:
                if not conn.closed and not conn.broken:
                    conn.execute("ROLLBACK")  # nothing to commit; ends the snapshot

        return self._run(run, idempotent=True, writes=False)

    def write(self, work: Callable[[Conn], T], *, idempotent: bool = False, single: bool = False) -> T:
        """Run a write inside BEGIN … COMMIT, acknowledged after COMMIT. `single`: `work` is one statement,
        run as its own transaction (one round trip). `idempotent`: running it twice does no harm, so it is
        retried even when the connection broke after COMMIT was sent."""
        def run(conn: Conn, attempts: Attempts) -> T:
            if single:
                attempts.committing = True
                return work(conn)
            with conn.transaction():
                result = work(conn)
                attempts.committing = True
            return result

        return self._run(run, idempotent=idempotent, writes=True)

    def _run(self, run: Callable[[Conn, Attempts], T], *, idempotent: bool, writes: bool) -> T:
        attempts = Attempts(self.retry_budget_s, idempotent=idempotent, health=self.health,
                            throttle=self._throttle)
        while True:
            try:
                with self._connection(attempts) as conn:
                    result = run(conn, attempts)
                if writes:
                    self.health.wrote()
                return result
            except PoolClosed as exc:
                raise Unavailable(SHUTTING_DOWN) from exc
            except Exception as exc:  # what is not a storage failure (AppError, StaleRow, a bug) is re-raised
                delay = attempts.next_delay(exc)
            time.sleep(delay)

    @contextmanager
    def _connection(self, attempts: Attempts) -> Iterator[Conn]:
        conn = self._pool.getconn(timeout=attempts.remaining())
        for _ in range(SYNC_POOL[1]):
            if usable(conn):
                break
            conn.close()  # closed: the pool opens a replacement
            self._pool.putconn(conn)
            conn = self._pool.getconn(timeout=attempts.remaining())
        try:
            yield conn
        except psycopg.errors.ReadOnlySqlTransaction:
            conn.close()  # a standby: the retry must get a connection to the new primary
            raise
        finally:
            self._pool.putconn(conn)

    # --- appends, on the caller's event loop -------------------------------------------------------------

    async def run_async(self, work: Callable[[AsyncConn], Awaitable[T]], *, idempotent: bool) -> T:
        """Run one autocommit statement's work on the running loop's append pool; retried as
        `write(single=True)`."""
        pool = await self._async_pool()
        attempts = Attempts(self.retry_budget_s, idempotent=idempotent, health=self.health,
                            throttle=self._throttle)
        while True:
            try:
                conn = await self._async_connection(pool, attempts)
                try:
                    attempts.committing = True
                    result = await work(conn)
                except psycopg.errors.ReadOnlySqlTransaction:
                    await conn.close()  # a standby: the retry must get a connection to the new primary
                    raise
                finally:
                    await pool.putconn(conn)
                self.health.wrote()
                return result
            except PoolClosed as exc:
                raise Unavailable(SHUTTING_DOWN) from exc
            except Exception as exc:
                delay = attempts.next_delay(exc)
            await asyncio.sleep(delay)

    async def _async_pool(self) -> AsyncConnectionPool[AsyncConn]:
        loop = asyncio.get_running_loop()
        entry = self._apools.get(loop)
        if entry is None:
            with self._lock:
                if self._closed:
                    raise Unavailable(SHUTTING_DOWN)
                for gone in [e for e in self._apools.values() if e.loop.is_closed()]:
                    del self._apools[gone.loop]
                    gone.close()
                entry = self._apools[loop] = LoopPool(loop, self.url, self.retry_budget_s)
        await asyncio.shield(entry.opened)
        return entry.pool

    async def _async_connection(self, pool: AsyncConnectionPool[AsyncConn], attempts: Attempts) -> AsyncConn:
        conn = await pool.getconn(timeout=attempts.remaining())
        for _ in range(ASYNC_POOL[1]):
            if usable(conn):
                break
            await conn.close()
            await pool.putconn(conn)
            conn = await pool.getconn(timeout=attempts.remaining())
        return conn

    # --- life cycle -------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            entries = list(self._apools.values())
            self._apools.clear()
        for entry in entries:
            entry.close()
        self._pool.close()


class LoopPool:
    """The append pool of one event loop, and every connection it opened.

    An asyncio pool belongs to its loop: a server has one, but a script may append from several (each
    `asyncio.run` makes one). A pool is closed on its loop when that can be waited for; when its loop is
    gone, or is the caller's own (a server shutting down inside its lifespan), its connections are closed
    directly, which needs no loop."""

    CLOSE_TIMEOUT_S = 10.0

    def __init__(self, loop: asyncio.AbstractEventLoop, url: str, timeout_s: float) -> None:
        self.loop = loop
        self.connections: weakref.WeakSet[AsyncConn] = weakref.WeakSet()

        async def configure(conn: AsyncConn) -> None:
            self.connections.add(conn)
            await conn.execute(SESSION)

        self.pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
            url, min_size=ASYNC_POOL[0], max_size=ASYNC_POOL[1], open=False, name="memory-server-appends",
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S}, configure=configure,
            timeout=timeout_s, reconnect_timeout=RECONNECT_TIMEOUT_S)
        self.opened = loop.create_task(self.pool.open(wait=False))

    def close(self) -> None:
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop.is_closed() or running is loop:
            self._finish()
            if running is loop:
                loop.create_task(self.pool.close())  # stops its tasks if the loop goes on
            return
        try:
            if loop.is_running():  # another thread's
                asyncio.run_coroutine_threadsafe(self.pool.close(), loop).result(timeout=self.CLOSE_TIMEOUT_S)
            else:
                loop.run_until_complete(self.pool.close())
        except Exception as exc:  # e.g. another loop runs in this thread
            log.debug("closing an append pool on its loop failed (%s); closing its connections", exc)
            self._finish()

    def _finish(self) -> None:
        for conn in list(self.connections):
            if not conn.closed:
                conn.pgconn.finish()
