"""The owner of a store: the one process that holds its model, its index and its SQLite writer, and serves
every local client's MCP session over the owner socket (memory_server/api/owner/sessions.py).

A stdio bridge starts it, in a session of its own, with the owner lock already taken (the locked file is
handed down); it listens as soon as the database is open, loads the model behind that, and exits after
`MEMORY_OWNER_IDLE_S` seconds without a client, when its socket or data directory is removed, when told to stop
(SIGTERM, `memory-server owner stop`), or when `memory-server serve` asks to take the store over: it then
closes the store and passes its lock to that server through the socket, so no third process can come between.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

import anyio

from memory_server.api.owner.sessions import OwnerSocket, bind_socket
from memory_server.local import handshake
from memory_server.local.paths import StorePaths, open_lock, private_dir, store_paths
from memory_server.services import Services
from memory_server.settings import Settings

log = logging.getLogger("memory_server.local")

WATCH_S = 0.5


def inherited_fd(name: str) -> int | None:
    value = os.environ.pop(name, None)  # not passed on to anything this process starts
    return int(value) if value and value.isdigit() else None


def report(status_fd: int | None, text: str) -> None:
    """Tell the bridge that started this owner why it could not serve (read once the owner has exited)."""
    if status_fd is None:
        return
    try:
        os.write(status_fd, text.encode()[:65000])
    except OSError:
        pass


def run_owner(settings: Settings, open_services: Callable[[Settings], Services]) -> int:
    """Own the store until idle or stopped. `open_services(settings)` opens the storage (raising on failure)."""
    from memory_server.local.bridge import JOINED, SERVING, lock_is_free

    status_fd = inherited_fd("MEMORY_OWNER_STATUS_FD")
    lock_fd = inherited_fd("MEMORY_OWNER_LOCK_FD")
    paths = store_paths(settings.data_dir)
    try:
        if lock_fd is None:
            private_dir(paths.data_dir)
            lock_fd = open_lock(paths.lock)
        if not lock_is_free(lock_fd):  # started by hand while another owner serves: nothing to do
            report(status_fd, JOINED)
            return 0
        sock = bind_socket(paths)  # bridges connect at once and wait in the backlog while the store opens
        services = open_services(settings)
        owner = OwnerSocket(services, paths, serving="stdio", lock_fd=lock_fd)
    except Exception as exc:
        report(status_fd, str(exc))
        log.error("cannot own the store in %s: %s", paths.data_dir, exc)
        if "sock" in locals():
            sock.close()
            os.unlink(paths.socket)
        return 1
    if status_fd is not None:
        report(status_fd, SERVING)
        os.close(status_fd)
    log.info("owning the store in %s; local clients connect at %s", paths.data_dir, paths.socket)
    threading.Thread(target=load_in_background, args=(services,), name="load", daemon=True).start()
    try:
        anyio.run(_serve, owner, sock, settings.owner_idle_s, paths)
    finally:
        owner.unlink()
        services.close()
        _pass_lock(owner)
        os.close(lock_fd)
    return 0


def load_in_background(services: Services) -> None:
    services.start_log_retention()
    try:
        services.load_memories()
    except Exception:  # kept in services.memory_error: the tools answer unavailable with it
        return
    if not services.closed:  # an owner that left while the model loaded starts no more work
        services.start_maintenance()


async def _serve(owner: OwnerSocket, sock: socket.socket, idle_s: float, paths: StorePaths) -> None:
    stop = anyio.Event()
    owner.on_handover = stop.set
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(owner.serve, sock)
        tasks.start_soon(_watch, owner, idle_s, stop)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            tasks.start_soon(_stop_on_signal, signals, stop)
            await stop.wait()
        tasks.cancel_scope.cancel()


async def _stop_on_signal(signals: Any, stop: anyio.Event) -> None:
    async for _ in signals:
        stop.set()
        return


async def _watch(owner: OwnerSocket, idle_s: float, stop: anyio.Event) -> None:
    import time

    while True:
        await anyio.sleep(WATCH_S)
        idle = owner.idle_since
        if idle is not None and time.monotonic() - idle >= idle_s:
            log.info("no client for %.0f s: the owner exits", idle_s)
            stop.set()
        if not owner.still_ours():
            log.info("the owner socket %s was removed or replaced: the owner exits", owner.paths.socket)
            stop.set()


def _pass_lock(owner: OwnerSocket) -> None:
    """Give the owner lock to the server that asked to take the store over, now that the store is closed."""
    if owner.handover_to is None:
        return
    with owner.handover_to as raw:
        try:
            raw.setblocking(True)
            socket.send_fds(raw, [handshake.encode({"ok": True, "lock": True})], [owner.lock_fd])
        except OSError as exc:
            log.warning("could not hand the store over: %s", exc)
