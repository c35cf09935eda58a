"""`memory-server doctor`'s checks of a PostgreSQL database: read-only, nothing is changed."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg

from memory_server.storage.checks import FAIL, OK, Check, CheckedDatabase, schema_check
from memory_server.storage.postgres.database import Conn, connect
from memory_server.storage.postgres.errors import first_line
from memory_server.storage.postgres.schema import SCHEMA, schema_version

MIN_VERSION = 120000  # server_version_num: generated columns and MATERIALIZED CTEs came in 12
SETTINGS = (
    "SELECT current_setting('server_version'), current_setting('server_version_num')::int,"
    " current_setting('synchronous_commit'), current_setting('fsync'), pg_is_in_recovery()"
)


class PostgresState(CheckedDatabase[Conn]):
    """What the PostgreSQL checks leave for doctor's later checks."""


def where(url: str) -> str:
    """The database a URL names, without its credentials."""
    parts = urlsplit(url)
    host = parts.hostname or "the local socket"
    return f"{parts.path.lstrip('/') or 'the default database'} on {host}"


def _counts(conn: Conn) -> tuple[int, int, int, int]:
    row = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE indexed = 1), (SELECT count(*) FROM index_deletions) FROM memories"
    ).fetchone()
    total, indexed, deletions = (int(v) for v in row) if row else (0, 0, 0)
    return total, indexed, total - indexed, deletions


def postgres_checks(url: str, state: PostgresState) -> Iterator[Check]:
    """The database answers, is a recent enough primary with durable commits, and has the current schema;
    leaves the connection and the memory counts in `state`."""
    try:
        conn = connect(url)
        row = conn.execute(SETTINGS).fetchone()
    except psycopg.Error as exc:
        yield Check(
            "postgres",
            FAIL,
            f"cannot connect to {where(url)}: {first_line(exc)}",
            "start PostgreSQL, or correct MEMORY_DATABASE_URL",
        )
        return
    state.conn = conn
    version, number, synchronous, fsync, standby = row if row else ("?", 0, "?", "?", False)
    yield Check("postgres", OK, f"connects to {where(url)}")
    if int(number) >= MIN_VERSION:
        yield Check("postgres version", OK, f"PostgreSQL {version}")
    else:
        yield Check(
            "postgres version",
            FAIL,
            f"PostgreSQL {version} is older than 12",
            "upgrade PostgreSQL to version 12 or newer",
        )
    yield from _durability(str(synchronous), str(fsync), bool(standby))
    version = schema_version(conn)
    yield schema_check(version, len(SCHEMA))
    if (version or 0) >= 2:
        state.counts = _counts(conn)


def _durability(synchronous: str, fsync: str, standby: bool) -> Iterator[Check]:
    if synchronous == "on":
        yield Check("postgres durability", OK, "synchronous_commit on (set on every connection)")
    else:
        yield Check(
            "postgres durability",
            FAIL,
            f"synchronous_commit is {synchronous} on this connection",
            "remove any override of synchronous_commit for the memory-server role or database",
        )
    if fsync != "on":
        yield Check(
            "postgres fsync",
            FAIL,
            "fsync is off: a crash of the machine can lose acknowledged writes",
            "set fsync = on in postgresql.conf and reload PostgreSQL",
        )
    if standby:
        yield Check(
            "postgres writable", FAIL, "connected to a standby (read-only)", "point MEMORY_DATABASE_URL at the primary"
        )
    else:
        yield Check("postgres writable", OK, "primary (not in recovery)")
