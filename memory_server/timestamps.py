"""Times as the server writes and reads them: RFC 3339 text in UTC with microseconds ("…Z"), and the
whole epoch seconds the vector index filters on. Validation of what a caller sends is
memory_server/memories/validation.py's; this module only converts."""

from __future__ import annotations

from datetime import UTC, datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def rfc3339_at(seconds: float) -> str:
    """Epoch seconds as now_rfc3339 writes a time."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_rfc3339(value: str) -> datetime | None:
    """An RFC 3339 / ISO 8601 text ("Z" or "z" for UTC) as a datetime, None when it is not one."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, AttributeError):
        return None


def epoch_seconds(timestamp: str, *, ceil: bool = False) -> int:
    """A stored (normalised) RFC3339 timestamp as whole seconds since the epoch, rounded down (or up): the
    integer the vector index filters on. Whole seconds stay exact as floats, which Qdrant's ranges are."""
    delta = datetime.fromisoformat(timestamp.replace("Z", "+00:00")) - _EPOCH
    whole = delta.days * 86400 + delta.seconds  # timedelta keeps seconds and microseconds non-negative
    return whole + 1 if ceil and delta.microseconds else whole
