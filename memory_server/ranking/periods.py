"""Calendar dates named in a text: "on Dec 4, 2023", "in March 2024", "2024-05", "Q2 2024", "in 2023",
"yesterday", "last Friday", "three weeks ago", "next month".

`periods(text, anchor)` returns each period the text names as a `Period` (first and last day, inclusive, and
its granularity). Absolute expressions need no anchor; relative ones ("yesterday", "last month") and a day
without a year ("on May 7") are resolved against `anchor` (the day the text was written: a memory's
`occurred_at`, or today for a query) and are skipped without one.

Written for speed and predictability rather than coverage: one compiled pattern per family, English month
and weekday names, no locale guessing (numeric dates only in ISO form, `YYYY-MM-DD` and `YYYY-MM`; `D/M/YYYY`
is not read, since 04/05/2024 is ambiguous). It runs on every `recall` query, so it must cost microseconds.
Measurements: docs/ranking.md.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

MONTHS = {name.lower(): n for n, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): n for n, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
WEEKDAYS = {name.lower(): n for n, name in enumerate(calendar.day_name)}
QUARTERS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
    "several": 3,
}
SEASONS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "fall": (9, 11), "winter": (12, 2)}
FIRST_YEAR, LAST_YEAR = 1900, 2100  # a four-digit number outside is not a year
SHORT_YEAR_PIVOT = 70  # '70 to '99 are 1970-1999, '00 to '69 2000-2069

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
# A year in full, or as an apostrophe and two digits ("Oct '22", "summer ’19": `_year` reads it).
_YEAR = r"(?P<year>(?:19|20|21)\d\d|['’]\d\d)"
_NUMBER = r"(?P<n>\d+|" + "|".join(sorted(NUMBERS, key=len, reverse=True)) + r")"


@dataclass(frozen=True, slots=True)
class Period:
    first: date
    last: date
    granularity: str  # day, week, month, quarter, season, year


def _pattern(body: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + body + r"(?![\w-])", re.IGNORECASE)


# Cheap tests that decide whether the patterns run at all (most texts name no date): a year for the absolute
# forms; for the relative ones a month name or a relative word, searched in the lowercased text (a case-
# insensitive search costs twice as much).
_DIGIT = re.compile(r"\d")
_YEAR_HINT = re.compile(r"(?<!\d)(?:19|20|21)\d\d(?!\d)|['’]\d\d")
_WORD_HINT = re.compile(
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|today|tonight|this|yesterday|"
    r"tomorrow|ago|last|next)"
)
# What each relative family needs (see `_relative`): a month name starts with its abbreviation.
_MONTH_HINT = re.compile(r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)")
_RELATIVE_DAY_HINT = re.compile(r"\b(?:today|tonight|this|yesterday|tomorrow)")
_LAST_NEXT_HINT = re.compile(r"\b(?:last|next|this)")

ISO_DAY = _pattern(r"(?P<year>(?:19|20|21)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)")
ISO_MONTH = _pattern(r"(?P<year>(?:19|20|21)\d\d)-(?P<month>[01]\d)(?!-\d)")
DAY_MONTH_YEAR = _pattern(r"(?:the\s+)?" + _DAY + r"(?:\s+of)?\s+" + _MONTH + r",?\s+" + _YEAR)
MONTH_DAY_YEAR = _pattern(_MONTH + r"\s+" + _DAY + r",?\s+" + _YEAR)
MONTH_YEAR = _pattern(_MONTH + r"(?:\s+of)?,?\s+" + _YEAR)
DAY_MONTH = _pattern(r"(?:the\s+)?" + _DAY + r"(?:\s+of)?\s+" + _MONTH)
MONTH_DAY = _pattern(_MONTH + r"\s+" + _DAY)
QUARTER = _pattern(
    r"(?:Q(?P<q>[1-4])\s+" + _YEAR + r"|(?:the\s+)?(?P<ordinal>first|second|third|fourth|1st|2nd|"
    r"3rd|4th)\s+quarter\s+(?:of\s+)?(?P<year2>(?:19|20|21)\d\d))"
)
SEASON_YEAR = _pattern(r"(?P<season>spring|summer|autumn|fall|winter)\s+(?:of\s+)?" + _YEAR)
YEAR = _pattern(r"(?:in|of|since|during|by|before|after)\s+" + _YEAR)
RELATIVE_DAY = _pattern(
    r"(?P<word>today|tonight|this morning|this afternoon|this evening|yesterday|"
    r"the day before yesterday|tomorrow)"
)
AGO = _pattern(_NUMBER + r"\s+(?P<unit>day|week|month|year)s?\s+ago")
LAST_NEXT = _pattern(
    r"(?P<which>last|next|this)\s+(?P<unit>week|month|year|weekend|"
    + "|".join(WEEKDAYS)
    + "|"
    + "|".join(SEASONS)
    + r")"
)
MONTH_ALONE = _pattern(r"(?:in|last|this|since|during)\s+" + _MONTH)


def _day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _year(text: str) -> int:
    """A year as written: in full, or '22 for 2022 ('70 to '99 for the 1900s)."""
    if text[0].isdigit():
        return int(text)
    short = int(text[1:])
    return (1900 if short >= SHORT_YEAR_PIVOT else 2000) + short


def _month(year: int, month: int) -> Period:
    return Period(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]), "month")


def _month_number(text: str) -> int:
    return MONTHS[text.lower().rstrip(".")]


def _modal_may(match: re.Match[str]) -> bool:
    """ "this may be", "in may" written lowercase: the verb, not the month (the patterns ignore case)."""
    return match["month"] == "may"


def _add_months(day: date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def _season(year: int, season: str) -> Period:
    first_month, last_month = SEASONS[season]
    last_year = year + 1 if last_month < first_month else year
    return Period(
        date(year, first_month, 1), date(last_year, last_month, calendar.monthrange(last_year, last_month)[1]), "season"
    )


def _absolute(text: str, taken: list[tuple[int, int]]) -> list[Period]:
    """Dates that need no anchor, most specific first; `taken` collects the spans they cover."""
    found: list[Period] = []

    def free(match: re.Match[str]) -> bool:
        start, end = match.span()
        return not any(start < e and s < end for s, e in taken)

    def add(match: re.Match[str], period: Period | None) -> None:
        if period is not None and FIRST_YEAR <= period.first.year <= LAST_YEAR:
            found.append(period)
            taken.append(match.span())

    for pattern in (ISO_DAY, DAY_MONTH_YEAR, MONTH_DAY_YEAR):
        for m in pattern.finditer(text):
            if free(m):
                month = int(m["month"]) if m["month"].isdigit() else _month_number(m["month"])
                day = _day(_year(m["year"]), month, int(m["day"]))
                add(m, Period(day, day, "day") if day else None)
    for pattern in (ISO_MONTH, MONTH_YEAR):
        for m in pattern.finditer(text):
            if free(m):
                month = int(m["month"]) if m["month"].isdigit() else _month_number(m["month"])
                add(m, _month(_year(m["year"]), month) if 1 <= month <= 12 else None)
    for m in QUARTER.finditer(text):
        if free(m):
            quarter = int(m["q"]) if m["q"] else QUARTERS[m["ordinal"].lower()]
            year = _year(m["year"] or m["year2"])
            first = date(year, 3 * quarter - 2, 1)
            add(m, Period(first, _month(year, 3 * quarter).last, "quarter"))
    for m in SEASON_YEAR.finditer(text):
        if free(m):
            add(m, _season(_year(m["year"]), m["season"].lower()))
    for m in YEAR.finditer(text):
        if free(m):
            year = _year(m["year"])
            add(m, Period(date(year, 1, 1), date(year, 12, 31), "year"))
    return found


def _relative(text: str, anchor: date, taken: list[tuple[int, int]]) -> list[Period]:
    found: list[Period] = []
    # Each family only where the lowercased text holds a word it needs: the patterns ignore case and cost
    # more than that test.
    lower = text.lower()
    month = _MONTH_HINT.search(lower) is not None
    families: list[tuple[re.Pattern[str], Callable[[re.Match[str], date], Period | None]]] = []
    if _RELATIVE_DAY_HINT.search(lower):
        families.append((RELATIVE_DAY, _relative_day))
    if "ago" in lower:
        families.append((AGO, _ago))
    if _LAST_NEXT_HINT.search(lower):
        families.append((LAST_NEXT, _last_next_match))
    if month and _DIGIT.search(text):
        families += [(DAY_MONTH, _day_without_year), (MONTH_DAY, _day_without_year)]
    if month:
        families.append((MONTH_ALONE, _month_without_year))
    for pattern, resolve in families:
        for m in pattern.finditer(text):
            start, end = m.span()
            if any(start < e and s < end for s, e in taken):
                continue
            try:
                period = resolve(m, anchor)
            except (ValueError, OverflowError):  # "99999 days ago", "tomorrow" on 9999-12-31: off the calendar
                period = None
            if period is not None and FIRST_YEAR <= period.first.year and period.last.year <= LAST_YEAR:
                found.append(period)
                taken.append(m.span())
    return found


def _relative_day(m: re.Match[str], anchor: date) -> Period:
    shift = {"yesterday": -1, "the day before yesterday": -2, "tomorrow": 1}.get(m["word"].lower(), 0)
    day = anchor + timedelta(days=shift)
    return Period(day, day, "day")


def _ago(m: re.Match[str], anchor: date) -> Period | None:
    raw = m["n"].lower()
    n = int(raw) if raw.isdigit() else NUMBERS[raw]
    unit = m["unit"].lower()
    if unit == "day":
        day = anchor - timedelta(days=n)
        return Period(day, day, "day")
    if unit == "week":
        day = anchor - timedelta(weeks=n)
        return Period(day - timedelta(days=3), day + timedelta(days=3), "week")
    if unit == "month":
        return _month(*_add_months(anchor, -n))
    return Period(date(anchor.year - n, 1, 1), date(anchor.year - n, 12, 31), "year")


def _last_next_match(m: re.Match[str], anchor: date) -> Period | None:
    return _last_next(m["which"].lower(), m["unit"].lower(), anchor)


def _day_without_year(m: re.Match[str], anchor: date) -> Period | None:
    if _modal_may(m):
        return None
    month = _month_number(m["month"])
    # a day without a year is in the anchor's year, unless that is over a month ahead of it (texts mostly
    # tell of the past: "on Dec 20" written in January is last December)
    named = _day(anchor.year, month, int(m["day"]))
    if named is not None and named > anchor + timedelta(days=31):
        named = _day(anchor.year - 1, month, int(m["day"]))
    return Period(named, named, "day") if named is not None else None


def _month_without_year(m: re.Match[str], anchor: date) -> Period | None:
    if _modal_may(m):
        return None
    month = _month_number(m["month"])
    return _month(anchor.year if month <= anchor.month else anchor.year - 1, month)


def _last_next(which: str, unit: str, anchor: date) -> Period | None:
    step = {"last": -1, "next": 1, "this": 0}[which]
    if unit == "week":
        start = anchor - timedelta(days=anchor.weekday()) + timedelta(weeks=step)
        return Period(start, start + timedelta(days=6), "week")
    if unit == "weekend":
        saturday = anchor - timedelta(days=anchor.weekday()) + timedelta(days=5) + timedelta(weeks=step)
        if which == "last" and saturday > anchor - timedelta(days=1):
            saturday -= timedelta(weeks=1)
        return Period(saturday, saturday + timedelta(days=1), "day")
    if unit == "month":
        return _month(*_add_months(anchor, step))
    if unit == "year":
        year = anchor.year + step
        return Period(date(year, 1, 1), date(year, 12, 31), "year")
    if unit in WEEKDAYS:
        delta = (anchor.weekday() - WEEKDAYS[unit]) % 7
        if which == "last":
            day = anchor - timedelta(days=delta or 7)
        elif which == "next":
            day = anchor + timedelta(days=(WEEKDAYS[unit] - anchor.weekday()) % 7 or 7)
        else:
            day = anchor - timedelta(days=delta)
        return Period(day, day, "day")
    if unit in SEASONS:
        first_month = SEASONS[unit][0]
        year = anchor.year if first_month <= anchor.month else anchor.year - 1  # this season's year
        # "last summer" said in or before a summer is the year before's, said after one (in December) the one
        # just over. "next" is the next one to start.
        if which == "next":
            year += 1
        elif which == "last" and _season(year, unit).last >= anchor:
            year -= 1
        return _season(year, unit)
    return None


# Bounds on the work one text can cause: the start of a text is where its dates are, and a memory of
# thousands of dates would otherwise cost a second to read (the overlap check is quadratic in matches).
MAX_TEXT_CHARS = 2000
MAX_PERIODS = 16


def periods(text: str, anchor: date | None = None) -> list[Period]:
    """The periods `text` names (at most MAX_PERIODS, in its first MAX_TEXT_CHARS characters); relative
    ones only when an `anchor` day is given."""
    text = text[:MAX_TEXT_CHARS]
    if not text:
        return []
    taken: list[tuple[int, int]] = []
    found = _absolute(text, taken) if _YEAR_HINT.search(text) else []  # every absolute form has a year
    if anchor is not None and _WORD_HINT.search(text.lower()):
        found.extend(_relative(text, anchor, taken))
    return found[:MAX_PERIODS]


def query_periods(query: str, today: date | None = None) -> list[Period]:
    """The periods a query names; relative ones ("last week") are taken from today (UTC)."""
    return periods(query, today or datetime.now(UTC).date())
