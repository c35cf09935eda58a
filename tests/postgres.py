"""Pytest plugin: one private PostgreSQL server for the test session, and a fresh database per test.

`postgres_server` (session) runs the machine's PostgreSQL binaries (`/usr/lib/postgresql/<version>/bin`,
Debian's layout, or `initdb` on PATH) on a data directory in a new temporary directory, listening on a
Unix socket in that directory only (no TCP). PostgreSQL refuses to run as root, so under root every
server command runs as the `postgres` user; as any other user it runs as that user.

Durability settings are production ones, set explicitly (`fsync=on`, `synchronous_commit=on`,
`full_page_writes=on`): tests that restart or crash the server mid-write prove what production does. Only
sizes are lowered. Start-up (initdb and the first start) takes about half a second.

Clean-up happens at session end; should the test process die without running it (SIGKILL, SIGTERM, a CI
time-out), a watchdog process that waits on a pipe from this one stops the server and removes the
directory as soon as the pipe closes.

`postgres_url` (function) creates an empty database `t_<random>` and returns its URL
(`postgresql://postgres@/t_...?host=<socket dir>&port=<port>`); it is dropped afterwards with FORCE.
`postgres_databases` (function) makes more of them: `postgres_databases.create()` returns another URL.

`replicated_postgres` (function): `replicated_postgres(synchronous=...)` starts a primary and a streaming
standby of its own (ReplicatedPostgres, below) for a failover test; both are removed after the test, and each
has its watchdog.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

# Seconds pg_ctl waits for the server to start or stop.
_WAIT_S = 60
# The socket file is DIR/.s.PGSQL.<port>; a Unix socket path holds at most 107 bytes.
_MAX_SOCKET_DIR = 80
_SETTINGS = {
    "listen_addresses": "",
    "shared_buffers": "32MB",
    "max_connections": "200",
    "max_wal_size": "256MB",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "log_min_messages": "warning",
    "log_line_prefix": "%m [%p] %d ",
}

_WATCHDOG = r"""
import json, shutil, subprocess, sys
argv, user, directory = json.loads(sys.argv[1])
sys.stdin.buffer.read()  # returns at EOF: the test process has ended, however it ended
try:
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120, cwd="/", user=user, group=user, extra_groups=[] if user else None)
finally:
    shutil.rmtree(directory, ignore_errors=True)
"""


def find_bindir() -> Path | None:
    """The newest installed PostgreSQL server's bin directory, or None."""
    versions = []
    for initdb in glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        version = Path(initdb).parent.parent.name
        if re.fullmatch(r"\d+(\.\d+)?", version):
            versions.append((tuple(int(p) for p in version.split(".")), Path(initdb).parent))
    if versions:
        return max(versions)[1]
    on_path = shutil.which("initdb")
    return Path(on_path).resolve().parent if on_path else None


def _free_port() -> int:
    # Only names the socket file (the server has no TCP listener); a free TCP port keeps the name unique.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresServer:
    """One PostgreSQL server on a private data directory; see the module docstring."""

    def __init__(
        self, bindir: Path, directory: Path, *, user: str | None, settings: dict[str, str] | None = None
    ) -> None:
        self.bindir = bindir
        self.settings = {**_SETTINGS, **(settings or {})}  # passed with -c: above postgresql(.auto).conf
        self.socket_dir = directory  # DIR: sockets; DIR/data: the cluster; DIR/postgres.log: its log
        self.data_dir = directory / "data"
        self.log_path = directory / "postgres.log"
        self.port = _free_port()
        self.user = user  # the OS user the server runs as when the tests run as root; None: this one
        self.startup_seconds = 0.0  # initdb + first start, as measured by the session fixture
        self._watchdog: subprocess.Popen[bytes] | None = None

    # --- connection strings ---

    def url(self, dbname: str = "postgres") -> str:
        host = quote(str(self.socket_dir), safe="/")
        return f"postgresql://postgres@/{quote(dbname)}?host={host}&port={self.port}"

    @property
    def version(self) -> str:
        return (self.data_dir / "PG_VERSION").read_text().strip()

    # --- life cycle ---

    def _run(self, *argv: str, check: bool = True, timeout: float = _WAIT_S + 30) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.bindir / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            cwd=self.socket_dir,
            user=self.user,
            group=self.user,
            extra_groups=[] if self.user else None,
            # The postmaster must not share the terminal's process group: a Ctrl-C meant for pytest would
            # shut it down under the tests still running their clean-up.
            start_new_session=True,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
                f"\n--- {self.log_path} ---\n{self.log_tail()}"
            )
        return result

    def _options(self) -> str:
        # pg_ctl hands these to the shell that starts the postmaster: quote every value.
        settings = " ".join(f"-c {name}={shlex.quote(value)}" for name, value in self.settings.items())
        return f"-p {self.port} -k {shlex.quote(str(self.socket_dir))} {settings}"

    def init(self) -> None:
        # --no-sync skips initdb's final flush of the template files only; the server's fsync stays on.
        self._run(
            "initdb",
            "-D",
            str(self.data_dir),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        )

    def start(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_path),
            "-o",
            self._options(),
            "-w",
            "-t",
            str(_WAIT_S),
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m MODE`: smart, fast (rolls back open transactions) or immediate (a crash)."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", str(_WAIT_S), "stop")

    def restart(self, mode: str = "fast") -> None:
        """`pg_ctl restart -m MODE`: clients see their connections closed and must reconnect."""
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_path),
            "-o",
            self._options(),
            "-m",
            mode,
            "-w",
            "-t",
            str(_WAIT_S),
            "restart",
        )

    def promote(self) -> None:
        """`pg_ctl promote`: a standby becomes a primary; returns once it accepts writes."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", str(_WAIT_S), "promote")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data_dir), "status", check=False).returncode == 0

    def ensure_running(self) -> None:
        if not self.running():
            self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # --- clean-up, also when this process dies without running it ---

    def arm_watchdog(self) -> None:
        stop = [str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop"]
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, json.dumps([stop, self.user, str(self.socket_dir)])],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def destroy(self) -> None:
        try:
            if self.data_dir.exists() and self.running():
                self.stop("fast")
        finally:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            if self._watchdog is not None:
                self._watchdog.stdin.close()  # type: ignore[union-attr]
                try:
                    self._watchdog.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._watchdog.kill()


def _server_user() -> str | None:
    """None when the tests do not run as root; otherwise the user to run PostgreSQL as."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip(
            "the tests run as root and there is no 'postgres' user to run PostgreSQL as "
            "(install Debian's postgresql package, or run the tests as a non-root user)"
        )
    return "postgres"


def _make_directory(user: str | None) -> Path:
    base = tempfile.gettempdir()
    if len(base) > _MAX_SOCKET_DIR - 20:
        base = "/tmp"
    directory = Path(tempfile.mkdtemp(prefix="memory-pg-", dir=base))
    if user:
        entry = pwd.getpwnam(user)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    return directory


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb, no initdb on "
            "PATH): install Debian's postgresql package (`make system-packages`, as root)"
        )
    user = _server_user()
    server = PostgresServer(bindir, _make_directory(user), user=user)
    server.arm_watchdog()
    try:
        started = time.monotonic()
        server.init()
        server.start()
        server.startup_seconds = time.monotonic() - started
        yield server
    finally:
        server.destroy()


def _admin_execute(server: PostgresServer, statement: str) -> None:
    import psycopg

    with psycopg.connect(server.url("postgres"), autocommit=True, connect_timeout=30) as conn:
        conn.execute(statement)


class PostgresDatabases:
    """Creates empty databases on the session's server; `drop_all()` drops them, open connections or not."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.names: list[str] = []

    def create(self) -> str:
        """A new, empty database; returns its URL."""
        self.server.ensure_running()  # an earlier test may have stopped it and failed before restarting
        name = f"t_{uuid.uuid4().hex[:16]}"
        # template0: nothing else connects to it, so CREATE DATABASE never waits on another session.
        _admin_execute(self.server, f'CREATE DATABASE "{name}" TEMPLATE template0')
        self.names.append(name)
        return self.server.url(name)

    def drop_all(self) -> None:
        if not self.names:
            return
        self.server.ensure_running()
        while self.names:
            _admin_execute(self.server, f'DROP DATABASE IF EXISTS "{self.names.pop()}" WITH (FORCE)')


@pytest.fixture
def postgres_databases(postgres_server: PostgresServer) -> Iterator[PostgresDatabases]:
    """`postgres_databases.create()` -> URL of a new empty database; all are dropped after the test."""
    pytest.importorskip("psycopg")
    databases = PostgresDatabases(postgres_server)
    try:
        yield databases
    finally:
        databases.drop_all()


@pytest.fixture
def postgres_url(postgres_databases: PostgresDatabases) -> str:
    """The URL of a new, empty database for this test (dropped afterwards)."""
    return postgres_databases.create()


# --- a primary and a streaming standby: failover ------------------------------------------------------

REPLICATION_ROLE = "replicator"
STANDBY_NAME = "standby1"  # the standby's application_name, which synchronous_standby_names refers to
_REPLICATION_HBA = f"local replication {REPLICATION_ROLE} trust\n"


class ReplicatedPostgres:
    """A primary and one streaming standby on this machine, each on a socket directory and port of its own.

    The standby is a `pg_basebackup -R -X stream` copy of the primary, taken as the replication role over the
    primary's Unix socket, with a replication slot, following the primary from then on. `synchronous`: the
    primary's `synchronous_standby_names` names the standby, so a COMMIT (with `synchronous_commit = on`)
    returns only once the standby has flushed it; otherwise the standby trails the primary asynchronously.
    `crash_primary()` is `pg_ctl stop -m immediate` (no shutdown checkpoint, nothing more sent to the
    standby); `promote()` is `pg_ctl promote` on the standby. `url()` names both servers, primary first, with
    `target_session_attrs=read-write`: a client connects to whichever of them accepts writes.
    """

    def __init__(self, bindir: Path, user: str | None, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.primary = PostgresServer(bindir, _make_directory(user), user=user)
        # Passed with -c, so it holds over what pg_basebackup copied: once promoted, the standby has no
        # standby of its own to wait for.
        self.standby = PostgresServer(
            bindir, _make_directory(user), user=user, settings={"synchronous_standby_names": ""}
        )
        self.startup_seconds = 0.0

    def url(self, dbname: str = "postgres") -> str:
        servers = (self.primary, self.standby)
        hosts = ",".join(quote(str(server.socket_dir), safe="/") for server in servers)
        ports = ",".join(str(server.port) for server in servers)
        return f"postgresql://postgres@/{quote(dbname)}?host={hosts}&port={ports}&target_session_attrs=read-write"

    def start(self) -> None:
        started = time.monotonic()
        self.primary.arm_watchdog()
        self.standby.arm_watchdog()
        self.primary.init()
        hba = self.primary.data_dir / "pg_hba.conf"
        hba.write_text(_REPLICATION_HBA + hba.read_text())  # first line that matches wins
        self.primary.start()
        _admin_execute(self.primary, f"CREATE ROLE {REPLICATION_ROLE} WITH REPLICATION LOGIN")
        source = (
            f"host={self.primary.socket_dir} port={self.primary.port} user={REPLICATION_ROLE} "
            f"application_name={STANDBY_NAME}"
        )
        self.standby._run(
            "pg_basebackup",
            "-D",
            str(self.standby.data_dir),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "-C",
            "-S",
            STANDBY_NAME,
            "-d",
            source,
        )
        self.standby.start()
        if self.synchronous:
            _admin_execute(self.primary, f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            _admin_execute(self.primary, "SELECT pg_reload_conf()")
        self.wait_streaming()
        self.startup_seconds = time.monotonic() - started

    def wait_streaming(self) -> None:
        """Until the primary streams to the standby (as a synchronous standby when `synchronous`)."""
        import psycopg

        wanted = ("streaming", "sync" if self.synchronous else "async")
        deadline = time.monotonic() + _WAIT_S
        with psycopg.connect(self.primary.url(), autocommit=True, connect_timeout=30) as conn:
            while True:
                row = conn.execute(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s", [STANDBY_NAME]
                ).fetchone()
                if row == wanted:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the standby is {row}, not {wanted}:\n{self.standby.log_tail()}")
                time.sleep(0.05)

    def create_database(self) -> str:
        """A new, empty database (created on the primary, replicated to the standby); its multi-host URL."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        _admin_execute(self.primary, f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def crash_primary(self) -> None:
        self.primary.stop("immediate")

    def stop_standby(self) -> None:
        """The standby goes away (as when disconnected): it holds what it received until then."""
        self.standby.stop("fast")

    def start_standby(self) -> None:
        self.standby.start()

    def promote(self) -> None:
        self.standby.promote()

    def destroy(self) -> None:
        try:
            self.standby.destroy()
        finally:
            self.primary.destroy()


class ReplicatedPostgresFactory:
    def __init__(self) -> None:
        self.made: list[ReplicatedPostgres] = []

    def __call__(self, *, synchronous: bool) -> ReplicatedPostgres:
        bindir = find_bindir()
        if bindir is None:
            pytest.skip("PostgreSQL server binaries not found: install Debian's postgresql package")
        pair = ReplicatedPostgres(bindir, _server_user(), synchronous=synchronous)
        self.made.append(pair)
        pair.start()
        return pair

    def destroy_all(self) -> None:
        while self.made:
            self.made.pop().destroy()


@pytest.fixture
def replicated_postgres() -> Iterator[ReplicatedPostgresFactory]:
    """`replicated_postgres(synchronous=...)` -> a started primary + standby, both removed after the test."""
    pytest.importorskip("psycopg")
    factory = ReplicatedPostgresFactory()
    try:
        yield factory
    finally:
        factory.destroy_all()
