"""Shared helpers for the dataset generators: dates, RFC3339 and text tidying."""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta

MONTHS = list(calendar.month_name)[1:]
MONTHS_SHORT = list(calendar.month_abbr)[1:]


def rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def at(day: date, hour: int = 9, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def month_start(year: int, month: int) -> date:
    return date(year, month, 1)


def next_month(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def month_end(year: int, month: int) -> date:
    """The last day of the month."""
    y, m = next_month(year, month)
    return date(y, m, 1) - timedelta(days=1)


def months_between(first: date, last: date) -> list[tuple[int, int]]:
    """(year, month) of every month that lies wholly after `first`'s month and wholly before `last`'s."""
    out = []
    y, m = next_month(first.year, first.month)
    while (y, m) < (last.year, last.month):
        out.append((y, m))
        y, m = next_month(y, m)
    return out


def ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def cap(text: str) -> str:
    """Upper-case the first character only ("billing-api" stays as written after a leading word)."""
    return text[:1].upper() + text[1:] if text else text
