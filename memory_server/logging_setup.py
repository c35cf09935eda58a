"""Log configuration: plain text or one JSON object per line. Never a secret or a payload body."""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import time
from typing import TextIO

from memory_server.settings import Settings

# The id of the HTTP request being served (set by memory_server.api.observability's middleware).
current_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class RequestIdFilter(logging.Filter):
    """Adds the current request's id to records made while it runs, so JSON lines carry it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            request_id = current_request_id.get()
            if request_id is not None:
                record.request_id = request_id
        return True


# Attributes every LogRecord has; anything else on a record came from `extra=` and becomes a JSON key.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def json_line(logger: str, message: str, *, level: str = "INFO", **fields: object) -> str:
    """One log line in the JsonFormatter's shape, for lines written without logging."""
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "level": level, "logger": logger, "message": message}
    return json.dumps({**entry, **fields}, ensure_ascii=False, default=str)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(settings: Settings, *, stream: TextIO) -> None:
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
    logging.captureWarnings(True)  # a library's warnings.warn() becomes a log line in the chosen format
    adopt_fastmcp_logger()


def adopt_fastmcp_logger() -> None:
    """fastmcp gives its logger rich handlers of its own (multi-line, padded blocks) and stops it propagating;
    send its records through the root handler instead, so every line has the one format chosen above."""
    import fastmcp

    fastmcp.settings.log_enabled = False  # fastmcp's run() would reconfigure its logger otherwise
    logger = logging.getLogger("fastmcp")
    logger.handlers.clear()
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


class Throttle:
    """Logs a recurring failure at most once per `interval` seconds, saying how many were not logged.

    A full disk or a dead index fails every write; a traceback per failure would fill the log (and the
    disk) within seconds, while one line a minute says the same."""

    def __init__(self, logger: logging.Logger, *, interval: float = 60.0) -> None:
        self._logger = logger
        self._interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def log(self, level: int, key: str, message: str, *args: object, exc_info: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return
            self._last[key] = now
            suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            message += f" ({suppressed} more since the last report)"
        self._logger.log(level, message, *args, exc_info=exc_info)
