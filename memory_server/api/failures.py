"""The answer to an exception that no operation turned into an AppError (one place for MCP, REST, fast path).

A storage failure that is not a bug (a full disk, a damaged database page, a lock held too long) is told to
the client as what it is, remembered for /readyz, and logged at most once a minute. Anything else is a bug:
logged with its traceback, answered as a generic `unavailable` (never a stack trace, never a 500).
"""

from __future__ import annotations

import logging

from memory_server.errors import AppError, Unavailable
from memory_server.logging_setup import Throttle
from memory_server.storage.health import StorageHealth, storage_failure

log = logging.getLogger("memory_server.failures")
_throttle = Throttle(log)


def unexpected(exc: BaseException, *, health: StorageHealth | None, where: str) -> AppError:
    failure = storage_failure(exc)
    if failure is not None:
        if health is not None:
            health.saw(failure)
        _throttle.log(logging.ERROR, failure.message, "%s failed: %s (%s)", where, failure.message, exc)
        return failure
    log.error("%s failed unexpectedly", where, exc_info=exc)
    return Unavailable("internal error; it has been logged, retry later")
