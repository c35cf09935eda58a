"""PostgreSQL connections: the two pools, the retry policy, and the thread the async pool runs on.

Blocking store methods (called from worker threads) use a `ConnectionPool`; `LogStore.append` uses an
`AsyncConnectionPool` that lives on one event loop thread of its own, so an append never blocks the caller's
loop and works from any loop (a server's, or each `asyncio.run` of a script). Every connection runs with
`synchronous_commit = on`: COMMIT returns once the commit record is flushed, so an acknowledgement means
durable. Connections are in autocommit: a single statement is its own transaction, and multi-statement
work runs inside an explicit BEGIN … COMMIT.

Retries (see errors.py): a statement the server rolled back is run again; work whose connection broke is run
again if COMMIT had not been sent yet, or if it is idempotent; no connection at all is waited for. All of it
within `retry_budget_s`, then `unavailable`. A connection the server closed while it sat in the pool is
noticed before use (the socket is readable: the server's goodbye or EOF) and replaced, costing no round trip.

Failover: with a multi-host URL (`host=A,B&port=P,Q&target_session_attrs=read-write`) every new connection
tries the hosts in order and keeps the first that accepts writes. While none does (the primary is gone, the
standby not promoted yet), a pooled connection's opening is tried again every CONNECT_POLL_S for up to
RECONNECT_TIMEOUT_S, then once more at once, and then its slot is given up: the pools never pause on their
own back-off (a second, then two). A pool opens a connection for a slot given up only when a request comes
to wait for one, so a request waits WAIT_SLICE_S at a time and then asks again: while requests come, some
opening is always polling, and a standby promoted however late is reached within about a poll and a slice.
"""

from __future__ import annotations

import asyncio
import logging
import select
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Self, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

from memory_server.errors import AppError, Unavailable
from memory_server.logging_setup import Throttle
from memory_server.storage.health import StorageHealth
from memory_server.storage.postgres.errors import (
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
# How long one opening of a pooled connection keeps trying (see PooledConnection).
RECONNECT_TIMEOUT_S = 2.0
# A pool retries a failed opening after doubling pauses (1 s, 2 s, ...) until its reconnect_timeout has
# passed since the first failure, then gives the slot up. Zero: one more try at once, no pause (the opening's
# own polling is the only wait), so no pool sleeps through a promotion; a slot given up is opened again for
# the next request that waits.
POOL_RECONNECT_TIMEOUT_S = 0.0
# While no server accepts writes, a pooled connection tries the hosts again this often: at most a pool's
# 3 workers at once, so a standby is asked up to 15 times a second per pool until it is promoted.
CONNECT_POLL_S = 0.2
# A request waits for a pooled connection this long at a time, then asks again (see the module's docstring).
WAIT_SLICE_S = 0.5
SESSION = "SET synchronous_commit = on"
SNAPSHOT_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def connect_options(url: str) -> dict[str, Any]:
    """Autocommit, and CONNECT_TIMEOUT_S unless the URL sets `connect_timeout` itself: with several hosts it
    is how long a connection waits on one that is gone from the network before trying the next."""
    timeout = {} if "connect_timeout" in conninfo_to_dict(url) else {"connect_timeout": CONNECT_TIMEOUT_S}
    return {"autocommit": True, **timeout}


def connect(url: str) -> Conn:
    """One connection outside the pools (migrations, snapshots, doctor), configured like the pooled ones."""
    conn = psycopg.connect(url, **connect_options(url))
    conn.execute(SESSION)
    return conn


class PooledConnection(psycopg.Connection[TupleRow]):
    """Opened by the blocking pool; retried every CONNECT_POLL_S for up to RECONNECT_TIMEOUT_S (see above)."""

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        deadline = time.monotonic() + RECONNECT_TIMEOUT_S
        while True:
            try:
                return super().connect(conninfo, **kwargs)
            except psycopg.OperationalError:
                if time.monotonic() + CONNECT_POLL_S > deadline:
                    raise
            time.sleep(CONNECT_POLL_S)


class PooledAsyncConnection(psycopg.AsyncConnection[TupleRow]):
    """Opened by the append pool; retried as PooledConnection."""

    @classmethod
    async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        deadline = time.monotonic() + RECONNECT_TIMEOUT_S
        while True:
            try:
                return await super().connect(conninfo, **kwargs)
            except psycopg.OperationalError:
                if time.monotonic() + CONNECT_POLL_S > deadline:
                    raise
            await asyncio.sleep(CONNECT_POLL_S)


def _configure(conn: Conn) -> None:
    conn.execute(SESSION)


async def _configure_async(conn: AsyncConn) -> None:
    await conn.execute(SESSION)


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
            url,
            connection_class=PooledConnection,
            min_size=SYNC_POOL[0],
            max_size=SYNC_POOL[1],
            open=False,
            name="memory-server",
            kwargs=connect_options(url),
            configure=_configure,
            timeout=retry_budget_s,
            reconnect_timeout=POOL_RECONNECT_TIMEOUT_S,
        )
        self._pool.open(wait=False)
        self._loop = LoopThread("postgres-appends")
        self._apool: asyncio.Task[AsyncConnectionPool[AsyncConn]] | None = None

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
        attempts = Attempts(self.retry_budget_s, idempotent=idempotent, health=self.health, throttle=self._throttle)
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
        conn = self._getconn(attempts)
        for _ in range(SYNC_POOL[1]):
            if usable(conn):
                break
            conn.close()  # closed: the pool opens a replacement
            self._pool.putconn(conn)
            conn = self._getconn(attempts)
        try:
            yield conn
        except psycopg.errors.ReadOnlySqlTransaction:
            conn.close()  # a standby: the retry must get a connection to the new primary
            raise
        finally:
            self._pool.putconn(conn)

    def _getconn(self, attempts: Attempts) -> Conn:
        """A pooled connection, asked for again every WAIT_SLICE_S until the attempts' deadline."""
        while True:
            try:
                return self._pool.getconn(timeout=min(attempts.remaining(), WAIT_SLICE_S))
            except PoolTimeout:
                if attempts.remaining() <= WAIT_SLICE_S:
                    raise

    # --- appends, from any event loop ------------------------------------------------------------------

    async def run_async(self, work: Callable[[AsyncConn], Awaitable[T]], *, idempotent: bool) -> T:
        """Run one autocommit statement's work on the append pool's loop; retried as `write(single=True)`."""
        return await asyncio.wrap_future(self._loop.submit(lambda: self._run_async(work, idempotent)))

    async def _run_async(self, work: Callable[[AsyncConn], Awaitable[T]], idempotent: bool) -> T:
        attempts = Attempts(self.retry_budget_s, idempotent=idempotent, health=self.health, throttle=self._throttle)
        while True:
            try:
                pool = await self._async_pool()
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
        if self._apool is None or (self._apool.done() and (self._apool.cancelled() or self._apool.exception())):
            self._apool = asyncio.get_running_loop().create_task(self._open_async_pool())
        return await asyncio.shield(self._apool)

    async def _open_async_pool(self) -> AsyncConnectionPool[AsyncConn]:
        pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
            self.url,
            connection_class=PooledAsyncConnection,
            min_size=ASYNC_POOL[0],
            max_size=ASYNC_POOL[1],
            open=False,
            name="memory-server-appends",
            kwargs=connect_options(self.url),
            configure=_configure_async,
            timeout=self.retry_budget_s,
            reconnect_timeout=POOL_RECONNECT_TIMEOUT_S,
        )
        await pool.open(wait=False)
        return pool

    async def _async_connection(self, pool: AsyncConnectionPool[AsyncConn], attempts: Attempts) -> AsyncConn:
        conn = await _agetconn(pool, attempts)
        for _ in range(ASYNC_POOL[1]):
            if usable(conn):
                break
            await conn.close()
            await pool.putconn(conn)
            conn = await _agetconn(pool, attempts)
        return conn

    # --- life cycle -------------------------------------------------------------------------------------

    def close(self) -> None:
        self._loop.close(self._close_async_pool)
        self._pool.close()

    async def _close_async_pool(self) -> None:
        if self._apool is not None and self._apool.done() and self._apool.exception() is None:
            await self._apool.result().close()


async def _agetconn(pool: AsyncConnectionPool[AsyncConn], attempts: Attempts) -> AsyncConn:
    """As Database._getconn, on the append pool."""
    while True:
        try:
            return await pool.getconn(timeout=min(attempts.remaining(), WAIT_SLICE_S))
        except PoolTimeout:
            if attempts.remaining() <= WAIT_SLICE_S:
                raise


class LoopThread:
    """An event loop on a daemon thread of its own, started on first use."""

    CLOSE_TIMEOUT_S = 10.0

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, make: Callable[[], Coroutine[Any, Any, T]]) -> Future[T]:
        """Run the coroutine `make()` returns on this loop (`make` is called only once the loop is there)."""
        with self._lock:
            if self._closed:
                future: Future[T] = Future()
                future.set_exception(Unavailable(SHUTTING_DOWN))
                return future
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name=self._name, daemon=True)
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(make(), self._loop)

    def close(self, last: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `last()` on the loop, then stop it."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(last(), loop).result(timeout=self.CLOSE_TIMEOUT_S)
        except Exception as exc:  # closing anyway: the connections go with the process
            log.warning("closing the PostgreSQL append pool failed: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=self.CLOSE_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()
