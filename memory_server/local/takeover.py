"""`memory-server serve` (HTTP) and the commands that open the embedded index take the store from an owner
that serves only stdio clients: it closes the store and hands its lock over through the socket
(memory_server/api/owner/daemon.py), and its bridges join the new owner. One process per store stays the rule.
"""

from __future__ import annotations

import os
import socket
import time

from memory_server.local import handshake
from memory_server.local.bridge import lock_is_free
from memory_server.local.paths import StorePaths, check_socket, open_lock, private_dir

HANDOVER_TIMEOUT_S = 60.0  # the owner finishes what it is doing and closes the store first
STARTING_OWNER_S = 10.0  # an owner that holds the lock binds its socket within this


class StoreBusy(Exception):
    """Another process holds the store and will not (or cannot) hand it over."""


def take_store(paths: StorePaths, version: str) -> int:
    """The owner lock of the store, taken from its owner if it has one; raises StoreBusy."""
    private_dir(paths.data_dir)
    fd = open_lock(paths.lock)
    deadline = time.monotonic() + STARTING_OWNER_S
    while True:
        if lock_is_free(fd):
            return fd
        try:
            handed = ask_handover(paths, version) if check_socket(paths.socket) else None
        except OSError:
            handed = None  # an owner starting, or one going away: look again
        except BaseException:
            os.close(fd)
            raise
        if handed is not None:
            os.close(fd)
            return handed
        if time.monotonic() > deadline:
            os.close(fd)
            raise StoreBusy(
                f"the store in {paths.data_dir} is held by another process that does not share it (an older "
                "memory-server, or an admin command still running); stop it, or use another --data-dir"
            )
        time.sleep(0.05)


def ask_handover(paths: StorePaths, version: str) -> int | None:
    """Ask the owner to close the store and pass its lock; None if it went away before it did."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5.0)
        conn.connect(str(paths.socket))
        conn.sendall(handshake.encode({"role": "handover", "version": version, "pid": os.getpid()}))
        conn.settimeout(HANDOVER_TIMEOUT_S)
        data, fds, _, _ = socket.recv_fds(conn, handshake.MAX_HELLO_BYTES, 1)
    try:
        answer = handshake.decode(data.partition(b"\n")[0]) if data else {}
    except handshake.HandshakeError:
        answer = {}
    if not answer.get("ok"):
        for fd in fds:
            os.close(fd)
        if answer.get("error"):
            raise StoreBusy(str(answer["error"]))
        return None
    if fds and lock_is_free(fds[0]):  # the same open file as the owner's lock: held now by this process
        return fds[0]
    for fd in fds:
        os.close(fd)
    return None
