"""What PostgreSQL's failures mean to the server: retry it, tell the client, or a bug.

Three kinds of failure are transient. A statement the server refused and rolled back (a serialization
failure, a deadlock, a lock it could not take, a write sent to a standby, a unique index that a concurrent
transaction won) can always be run again. A connection lost while work was in flight (a restart, a failover,
an administrator's shutdown, a network reset) leaves the outcome unknown once COMMIT was sent. A database
that cannot be reached (no connection within the time allowed) has been sent nothing at all.

Everything else that is not a bug is told as what it is: a full disk, a damaged page, no memory.
"""

from __future__ import annotations

import re
from enum import Enum
from urllib.parse import unquote

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout

from memory_server.errors import AppError, InvalidParameters, Unavailable
from memory_server.storage.health import DISK_FULL


class Transient(Enum):
    ROLLED_BACK = "rolled back"  # the server refused the statement: nothing of it is committed
    LOST = "lost"  # the connection broke: committed or not, unknown once COMMIT was sent
    UNREACHABLE = "unreachable"  # no connection: nothing was sent


ROLLED_BACK_STATES = {
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "55P03",  # lock_not_available
    "25006",  # read_only_sql_transaction: a standby (after a failover, before the pool reconnects)
    "23505",  # unique_violation: a concurrent transaction committed the same key first
}
LOST_STATES = {"57P01", "57P02", "57P03"}  # admin_shutdown, crash_shutdown, cannot_connect_now
RESOURCE_STATES = {"53000", "53200", "53300", "53400"}  # insufficient resources, out of memory, connections
DAMAGE_STATES = {"XX001", "XX002"}  # data_corrupted, index_corrupted

UNCERTAIN = (
    "the connection to PostgreSQL was lost while the write was being committed, so it may or may not "
    "have been saved; retry (an append with an idempotency key is applied at most once)"
)
SHUTTING_DOWN = "the server is shutting down"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def transient(exc: BaseException) -> Transient | None:
    """Which kind of transient failure `exc` is, or None."""
    if isinstance(exc, PoolTimeout):
        return Transient.UNREACHABLE
    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate
    if state in ROLLED_BACK_STATES:
        return Transient.ROLLED_BACK
    if state in LOST_STATES or (state or "").startswith("08"):
        return Transient.LOST
    if isinstance(exc, psycopg.OperationalError) and state is None:
        return Transient.LOST  # libpq's own: "server closed the connection unexpectedly", a reset socket
    return None


class AuthenticationFailed(Unavailable):
    """PostgreSQL refused who connects (a wrong password, an unknown user, no pg_hba.conf entry): no retry can
    succeed until someone changes MEMORY_DATABASE_URL or the database's roles."""

    retryable = False


# libpq's own words (the server's reply to a failed authentication carries no SQLSTATE on the client).
REFUSALS = ("authentication failed", "no password supplied", "no pg_hba.conf entry")


def refusal(exc: BaseException) -> AuthenticationFailed | None:
    """The error for a connection PostgreSQL refused to the credentials given, or None."""
    if not isinstance(exc, psycopg.OperationalError) or not any(words in str(exc) for words in REFUSALS):
        return None
    detail = first_line(exc).rpartition("FATAL:")[2].strip()
    return AuthenticationFailed(
        f"PostgreSQL authentication failed ({detail}); correct the user and password in "
        "MEMORY_DATABASE_URL (retrying will not help)"
    )


def refusal_on_connect(url: str) -> AuthenticationFailed | None:
    """Whether a new connection is refused to its credentials (a pool that cannot connect says only that it
    timed out): one connection attempt, for /readyz."""
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        return refusal(exc)
    return None


def unreachable(exc: BaseException, budget_s: float) -> Unavailable:
    refused = refusal(exc)
    if refused is not None:
        return refused
    if isinstance(exc, PoolTimeout):
        detail = f"no connection could be opened or became free within {budget_s:g}s"
    else:
        detail = first_line(exc)
    return Unavailable(f"PostgreSQL is unreachable ({detail}); the server reconnects by itself: retry shortly")


def postgres_failure(exc: BaseException) -> AppError | None:
    """The client-facing error for a PostgreSQL failure that is not a bug; None for anything else."""
    if isinstance(exc, PoolClosed):
        return Unavailable(SHUTTING_DOWN)
    kind = transient(exc)
    if kind is Transient.UNREACHABLE:
        return unreachable(exc, 0)
    if kind is Transient.LOST:
        return Unavailable(f"the connection to PostgreSQL was lost ({first_line(exc)}); retry shortly")
    if kind is Transient.ROLLED_BACK:
        return Unavailable(f"PostgreSQL refused the write under contention ({first_line(exc)}); retry")
    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate
    if state == "53100":
        return Unavailable(DISK_FULL)
    if state in RESOURCE_STATES:
        return Unavailable(f"PostgreSQL is out of resources ({first_line(exc)}); retry later")
    if state in DAMAGE_STATES:
        # "is damaged" is what StorageHealth remembers a damaged store by (for /readyz).
        return Unavailable(
            f"the PostgreSQL database is damaged ({first_line(exc)}); restore it from its latest "
            "backup (then run `memory-server reindex`)"
        )
    if state == "57014":
        return Unavailable(f"PostgreSQL cancelled the statement ({first_line(exc)}); retry")
    if isinstance(exc, psycopg.DataError) and state is None and "NUL" in str(exc):
        # Raised before anything is sent: PostgreSQL text cannot hold U+0000, which SQLite stores.
        return InvalidParameters("text holds the NUL character (U+0000), which PostgreSQL cannot store")
    return None


def masked(text: str, url: str) -> str:
    """`text` with every form of the password in `url` (as written and percent-decoded) replaced by ***:
    psycopg quotes the part of a malformed URL it could not read, password and all."""
    for secret in sorted(url_secrets(url), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def url_secrets(url: str) -> set[str]:
    """What may be a password in `url`, however malformed: the text between `user:` and each later `@`, and
    every `password=` query value."""
    found: set[str] = set()
    rest = url.partition("://")[2]
    user, colon, after = rest.partition(":")
    if colon and "/" not in user:
        found |= {after[:at] for at in range(len(after)) if after[at] == "@"}
    for part in re.split(r"[?&]", url)[1:]:
        name, equals, value = part.partition("=")
        if equals and name.strip().lower() == "password":
            found.add(value)
    return {form for secret in found for form in (secret, unquote(secret)) if form}


def url_problem(url: str) -> str | None:
    """Why `url` is not a PostgreSQL URL psycopg can use (its password masked), or None."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.Error as exc:
        return masked(first_line(exc), url)
    return None
