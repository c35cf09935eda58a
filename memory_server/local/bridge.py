"""The stdio bridge: what `memory-server serve --transport stdio` is. It joins the process that owns the store
(starting one when there is none) over the owner's Unix socket and passes its client's MCP messages through,
line for line, so every local client shares one model, one index and one SQLite writer.

It imports the standard library only, so it starts in a few tens of milliseconds and stays small. When the
owner goes away (stopped, killed, handing over to `memory-server serve`), the bridge joins the next one,
replays its client's `initialize` there, and answers every request the lost owner had not answered with a
retryable `unavailable`: an acknowledged write is in SQLite already, an unacknowledged one is the client's to
retry (with its idempotency key).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from memory_server.local import handshake
from memory_server.local.paths import (
    StorePaths,
    UnsafePath,
    check_socket,
    former_default_notice,
    open_lock,
    private_dir,
    store_paths,
)

REINITIALIZE_ID = "memory-server-bridge-reinitialize"
FIRST_START_S = 90.0  # a new owner imports the server and opens the store before it listens
QUEUE_WAIT_S = 10.0  # a request that waited this long for a new owner is answered unavailable
POLL_S = 0.02
FAILED_WAIT_S = 300.0  # a bridge that cannot join answers its client's requests with the reason this long
# What an owner tells the bridge that started it, on the status pipe, when it is not a reason it failed.
SERVING = "serving"
JOINED = "joined"


class BridgeFailure(Exception):
    """The store cannot be joined (another version owns it, the data directory is unusable, the owner could
    not start): the message says why and what to do."""


def lock_is_free(fd: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class OwnerStarter:
    """Starts an owner when the store has none: whoever takes the owner lock starts it, handing the locked
    file to the new process (a flock belongs to the open file, so the child holds it from its first instruction
    and no second owner can start in between)."""

    def __init__(self, paths: StorePaths, command: list[str]) -> None:
        self.paths = paths
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None
        self._status_fd: int | None = None

    def start_if_free(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self.failure()  # raises what a previous attempt reported
        private_dir(self.paths.data_dir)
        fd = open_lock(self.paths.lock)
        try:
            if not lock_is_free(fd):
                return  # an owner is starting or serving: it will listen soon
            self._spawn(fd)
        finally:
            os.close(fd)

    def _spawn(self, lock_fd: int) -> None:
        read, write = os.pipe()
        log = os.open(self.paths.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        env = dict(os.environ, MEMORY_OWNER_LOCK_FD=str(lock_fd), MEMORY_OWNER_STATUS_FD=str(write))
        try:
            self.process = subprocess.Popen(
                [*self.command, "--data-dir", str(self.paths.data_dir)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                pass_fds=(lock_fd, write),
                start_new_session=True,  # outlives this client; a client's signal to its group misses it
                env=env,
            )
        finally:
            os.close(write)
            os.close(log)
        self._status_fd = read

    def failure(self) -> None:
        """Raise what a started owner that has exited said (its status pipe), if it failed."""
        if self.process is None or self.process.poll() is None or self._status_fd is None:
            return
        with os.fdopen(self._status_fd, "rb") as status:
            said = status.read(65536).decode(errors="replace").strip()
        self._status_fd, code, self.process = None, self.process.returncode, None
        if said in (SERVING, JOINED):
            return  # it served (and has gone since), or found another owner starting, which will listen
        raise BridgeFailure(said or f"the owner process exited with code {code} as it started; see {self.paths.log}")


class Bridge:
    def __init__(
        self,
        paths: StorePaths,
        *,
        site: str,
        version: str,
        owner_command: list[str],
        stdin: BinaryIO,
        stdout: BinaryIO,
        warn: Callable[[str], None],
    ) -> None:
        self.paths = paths
        self.site = site
        self.version = version
        self.starter = OwnerStarter(paths, owner_command)
        self.stdin, self.stdout, self.warn = stdin, stdout, warn
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._conn: socket.socket | None = None
        self._pending: dict[str, str] = {}  # requests the owner has, unanswered: id -> method
        self._queue: list[tuple[float, bytes, dict[str, Any] | None]] = []  # waiting for an owner
        self._initialize: dict[str, Any] | None = None
        self._initialized: bytes | None = None
        self._stdin_closed = threading.Event()
        self._failure: str | None = None  # why the store cannot be joined, once that is final

    # --- the client side ----------------------------------------------------------------------------

    def _read_client(self) -> None:
        for line in iter(self.stdin.readline, b""):
            message = parse(line)
            if self._failure is not None:
                self._refuse(message)
                continue
            with self._lock:
                if message is not None and message.get("method") == "initialize" and "id" in message:
                    self._initialize = message
                elif message is not None and message.get("method") == "notifications/initialized":
                    self._initialized = line
                if self._conn is None or not self._send(line, message):
                    if not is_response(message):  # an answer to a lost owner's request goes nowhere
                        self._queue.append((time.monotonic(), line, message))
        self._stdin_closed.set()
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.shutdown(socket.SHUT_WR)  # the owner ends the session, then closes
                except OSError:
                    pass

    def _send(self, line: bytes, message: dict[str, Any] | None) -> bool:
        """Send to the owner (the lock held); False if the connection is gone."""
        assert self._conn is not None
        try:
            self._conn.sendall(line if line.endswith(b"\n") else line + b"\n")
        except OSError:
            return False
        if message is not None and "method" in message and "id" in message:
            self._pending[key(message["id"])] = str(message["method"])
        return True

    def _answer(self, request_id: Any, method: str, reason: str) -> None:
        """A retryable `unavailable` for a request no owner answered: a tool error for tools/call, as the
        server itself reports one, and a JSON-RPC error otherwise."""
        text = f"unavailable: {reason}; retry"
        if method == "tools/call":
            result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
            if self._initialize is None:  # a client that never initialized speaks the per-request protocol
                result["resultType"] = "complete"
            body: dict[str, Any] = {"result": result}
        else:
            body = {"error": {"code": -32603, "message": text}}
        self._write(json.dumps({"jsonrpc": "2.0", "id": request_id, **body}).encode() + b"\n")

    def _write(self, line: bytes) -> None:
        with self._write_lock:
            try:
                self.stdout.write(line)
                self.stdout.flush()
            except (OSError, ValueError):  # the client went away
                self._stdin_closed.set()

    # --- the owner side -----------------------------------------------------------------------------

    def run(self) -> int:
        threading.Thread(target=self._read_client, name="stdin", daemon=True).start()
        try:
            conn, rest = self._join(deadline=time.monotonic() + FIRST_START_S)
        except BridgeFailure as exc:
            return self._fail(str(exc))
        except UnsafePath as exc:
            return self._fail(str(exc))
        except OSError as exc:
            return self._fail(f"cannot use the data directory {self.paths.data_dir}: {exc.strerror or exc}")
        while True:
            self._relay(conn, rest)
            if self._stdin_closed.is_set():
                return 0
            self.warn("the process that owned the store went away; joining the next one")
            try:
                conn, rest = self._join(deadline=None)
            except (BridgeFailure, UnsafePath) as exc:
                return self._fail(str(exc))
            except OSError as exc:
                return self._fail(f"cannot use the data directory {self.paths.data_dir}: {exc.strerror or exc}")

    def _fail(self, reason: str) -> int:
        """Answer every request with the reason until the client leaves: a client shows the error its initialize
        (or its first request) got, where a closed pipe would say only that the connection closed."""
        self.warn(reason)
        with self._lock:
            self._failure = reason
            waiting, self._queue = self._queue, []
        for _, _, message in waiting:
            self._refuse(message)
        self._stdin_closed.wait(timeout=FAILED_WAIT_S)
        return 1

    def _refuse(self, message: dict[str, Any] | None) -> None:
        if message is not None and "id" in message and "method" in message and self._failure is not None:
            self._write(failure_line(message["id"], self._failure))

    def _relay(self, conn: socket.socket, buffer: bytes) -> None:
        """Pass the owner's messages to the client until the connection ends; then answer what it left."""
        while True:
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                message = parse(line)
                if is_response(message):
                    assert message is not None
                    with self._lock:
                        self._pending.pop(key(message.get("id")), None)
                self._write(line + b"\n")
            try:
                chunk = conn.recv(1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
        with self._lock:
            self._conn = None
            lost, self._pending = self._pending, {}
        conn.close()
        for request_id, method in lost.items():
            self._answer(json.loads(request_id), method, "the memory server's owner process stopped")

    def _join(self, deadline: float | None) -> tuple[socket.socket, bytes]:
        """Connect to the store's owner (starting one if needed), replay the client's initialize, send what
        waited, and return the connection with any bytes already read from it."""
        while True:
            try:
                conn, rest = self._connect()
            except OSError:
                self.starter.start_if_free()
            else:
                with self._lock:
                    self._conn = conn
                    waiting, self._queue = self._queue, []
                    for _, line, message in waiting:
                        if not self._send(line, message):
                            self._queue.append((time.monotonic(), line, message))
                    if self._stdin_closed.is_set():  # the client left before the owner answered: end the session
                        try:
                            conn.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                return conn, rest
            if deadline is not None and time.monotonic() > deadline:
                raise BridgeFailure(f"no memory-server owner started for {self.paths.data_dir}; see {self.paths.log}")
            if self._stdin_closed.is_set() and deadline is None:
                raise BridgeFailure("the client closed its side while the store had no owner")
            self._expire_queue()
            time.sleep(POLL_S)

    def _connect(self) -> tuple[socket.socket, bytes]:
        try:
            if not check_socket(self.paths.socket):
                raise FileNotFoundError(str(self.paths.socket))
        except UnsafePath as exc:
            raise BridgeFailure(str(exc)) from None
        hello = {"role": "bridge", "version": self.version, "site": self.site, "pid": os.getpid()}
        try:
            conn, answer, rest = handshake.ask(str(self.paths.socket), hello)
        except handshake.HandshakeError:
            raise ConnectionRefusedError("the owner is going away") from None
        if not answer.get("ok"):
            conn.close()
            raise BridgeFailure(str(answer.get("error") or "the owner refused this client"))
        if answer.get("version") != self.version:
            conn.close()
            raise BridgeFailure(version_mismatch(answer, self.version))
        if self._initialize is not None:
            rest = self._replay(conn, rest)
        return conn, rest

    def _replay(self, conn: socket.socket, buffer: bytes) -> bytes:
        """The client's initialize (and its initialized notification), said again to a new owner; its answer
        is for this bridge, not the client, which initialized once."""
        assert self._initialize is not None
        again = dict(self._initialize, id=REINITIALIZE_ID)
        try:
            conn.sendall(json.dumps(again).encode() + b"\n")
            while True:
                while b"\n" in buffer:
                    line, _, buffer = buffer.partition(b"\n")
                    message = parse(line)
                    if is_response(message) and message is not None and message.get("id") == REINITIALIZE_ID:
                        if self._initialized is not None:
                            conn.sendall(self._initialized)
                        return buffer
                chunk = conn.recv(1 << 20)
                if not chunk:
                    raise ConnectionResetError("the owner closed during initialize")
                buffer += chunk
        except OSError:
            conn.close()
            raise

    def _expire_queue(self) -> None:
        with self._lock:
            now = time.monotonic()
            expired = [entry for entry in self._queue if now - entry[0] > QUEUE_WAIT_S]
            self._queue = [entry for entry in self._queue if now - entry[0] <= QUEUE_WAIT_S]
        for _, _, message in expired:
            if message is not None and "id" in message and "method" in message:
                self._answer(message["id"], str(message["method"]), "no memory-server owner is serving yet")


def parse(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def is_response(message: dict[str, Any] | None) -> bool:
    return message is not None and "id" in message and "method" not in message


def key(request_id: Any) -> str:
    return json.dumps(request_id)


def failure_line(request_id: Any, reason: str) -> bytes:
    error = {"code": -32603, "message": f"memory-server cannot start: {reason}"}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n"


def version_mismatch(answer: dict[str, Any], mine: str) -> str:
    return (
        f"the store is served by memory-server {answer.get('version')} (pid {answer.get('pid')}) and this is "
        f"{mine}; a store is shared by one version at a time. Stop the other one (`memory-server owner stop`, "
        f"or close the clients that use it, or kill {answer.get('pid')}) and start this client again"
    )


def run_bridge(data_dir: Path, *, explicit: bool, site: str) -> NoReturn:
    """`serve --transport stdio`: bridge this process's stdin and stdout to the owner of the store in `data_dir`
    (`explicit`: named by a flag or MEMORY_DATA_DIR, else the per-user default), then exit."""
    from memory_server.version import __version__

    def warn(text: str) -> None:
        sys.stderr.write(f"memory-server: {text}\n")
        sys.stderr.flush()

    notice = former_default_notice(data_dir, explicit=explicit)
    if notice is not None:
        warn(notice)
    owner = [sys.executable, "-m", "memory_server", "owner", "run"]
    bridge = Bridge(
        store_paths(data_dir),
        site=site,
        version=__version__,
        owner_command=owner,
        stdin=sys.stdin.buffer,
        stdout=sys.stdout.buffer,
        warn=warn,
    )
    code = bridge.run()
    # The thread reading stdin may be inside a read: leave without the interpreter's shutdown waiting on it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
