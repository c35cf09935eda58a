"""Calendar dates named in a text: "on Dec 4, 2023", "in March 2024", "2024-05", "Q2 2024", "in 2023",
"yesterday", "last Friday", "three weeks ago", "next month", and the same in Spanish and Portuguese ("el 4 de
diciembre de 2023", "em maio de 2024", "hace dos semanas", "no ano passado", "desde marzo").

`periods(text, anchor)` returns each period the text names as a `Period` (first and last day, inclusive, and
its granularity). Absolute expressions need no anchor; relative ones ("yesterday", "last month") and a day
without a year ("on May 7") are resolved against `anchor` (the day the text was written: a memory's
`occurred_at`, or today for a query) and are skipped without one.

Written for speed and predictability rather than coverage: one compiled pattern per family, built from the
union of the languages' tables (memory_server/ranking/time_words.py), no locale guessing (numeric dates only in
ISO form, `YYYY-MM-DD` and `YYYY-MM`; `D/M/YYYY` is not read, since 04/05/2024 is ambiguous). It runs on every
`recall` query, so it must cost microseconds.
Measurements: docs/ranking.md.
"""

from __future__ import annotations

import calendar
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from memory_server.ranking import time_words as tw
from memory_server.ranking.languages import folded

_TABLES = tw.LANGUAGES
MONTHS = tw.merged(t.months for t in _TABLES)
WEEKDAYS = tw.merged(t.weekdays for t in _TABLES)
NUMBERS = tw.merged(t.numbers for t in _TABLES)
UNITS = tw.merged(t.units for t in _TABLES)
SEASONS = tw.merged(t.seasons for t in _TABLES)  # a season word -> its English name
RELATIVE_DAYS = tw.merged(t.relative_days for t in _TABLES)
ORDINALS = tw.merged(t.ordinals for t in _TABLES)
SHIFTS = tw.merged([*(t.shift_before for t in _TABLES), *(t.shift_after for t in _TABLES)])
WEEKENDS = frozenset(tw.words("weekend"))
FIRST_YEAR, LAST_YEAR = 1900, 2100  # a four-digit number outside is not a year
SHORT_YEAR_PIVOT = 70  # '70 to '99 are 1970-1999, '00 to '69 2000-2069


def _singular(units: Mapping[str, str]) -> list[str]:
    """The unit words that are no other's plural ("week", "mes"; not "weeks", "meses")."""
    return [w for w in units if w[:-1] not in units and w[:-2] not in units]


_alt = tw.alternation
_MONTH = rf"(?P<month>{_alt(MONTHS)})\.?"
_DAY = rf"(?P<day>[0-3]?\d){_alt(tw.words('day_suffixes'))}?"
_OF = _alt(tw.words("of"))
_ARTICLE = _alt(tw.words("articles"))
# A year in full, or as an apostrophe and two digits ("Oct '22", "summer ’19": `_year` reads it).
_YEAR = r"(?P<year>(?:19|20|21)\d\d|['’]\d\d)"
_NUMBER = rf"(?P<n>\d+|{_alt(NUMBERS)})"
# What "last", "la semana pasada", "no ano passado" shift: a week, month or year, a weekend, a weekday, a season.
_SHIFTED = _alt([w for w in _singular(UNITS) if UNITS[w] != "day"] + [*WEEKENDS, *WEEKDAYS, *SEASONS])


@dataclass(frozen=True, slots=True)
class Period:
    first: date
    last: date
    granularity: str  # day, week, month, quarter, season, year


def _pattern(body: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + body + r"(?![\w-])", re.IGNORECASE)


def _hint(phrases: Iterable[str]) -> str:
    """The word of each phrase a hint looks for: its longest (the last of equals: "que vem" -> "vem")."""
    return _alt(max(reversed(p.split()), key=len) for p in phrases)


def _prefixes(names: Iterable[str]) -> list[str]:
    """The names none of the others starts ("mar" for "march" and "marzo"; the hints match a word's start)."""
    ordered = sorted(set(names), key=len)
    return [n for i, n in enumerate(ordered) if not any(n.startswith(m) for m in ordered[:i])]


# Cheap tests that decide whether the patterns run at all (most texts name no date): a year for the absolute
# forms; for the relative ones a month name or a relative word, searched in the folded text (a case-
# insensitive search costs twice as much).
_DIGIT = re.compile(r"\d")
_YEAR_HINT = re.compile(r"(?<!\d)(?:19|20|21)\d\d(?!\d)|['’]\d\d")
# What each relative family needs (see `_relative`): a month's name or English abbreviation.
_MONTH_HINT = re.compile(r"\b" + _alt(_prefixes(MONTHS)))
_RELATIVE_DAY_HINT = re.compile(r"\b" + _hint(RELATIVE_DAYS))
_AGO_HINT = re.compile(r"\b" + _hint(tw.words("ago_before") + tw.words("ago_after")) + r"\b")
_SHIFT_HINT = re.compile(r"\b" + _hint(SHIFTS))
_WORD_HINT = re.compile("|".join(p.pattern for p in (_MONTH_HINT, _RELATIVE_DAY_HINT, _AGO_HINT, _SHIFT_HINT)))

ISO_DAY = _pattern(r"(?P<year>(?:19|20|21)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)")
ISO_MONTH = _pattern(r"(?P<year>(?:19|20|21)\d\d)-(?P<month>[01]\d)(?!-\d)")
DAY_MONTH_YEAR = _pattern(rf"(?:{_ARTICLE}\s+)?{_DAY}(?:\s+{_OF})?\s+{_MONTH}(?:\s+{_OF})?,?\s+{_YEAR}")
MONTH_DAY_YEAR = _pattern(_MONTH + r"\s+" + _DAY + r",?\s+" + _YEAR)
MONTH_YEAR = _pattern(rf"{_MONTH}(?:\s+{_OF})?,?\s+{_YEAR}")
DAY_MONTH = _pattern(rf"(?:{_ARTICLE}\s+)?{_DAY}(?:\s+{_OF})?\s+{_MONTH}")
MONTH_DAY = _pattern(_MONTH + r"\s+" + _DAY)
QUARTER = _pattern(
    rf"(?:Q(?P<q>[1-4])\s+{_YEAR}|(?:{_ARTICLE}\s+)?(?P<ordinal>{_alt(ORDINALS)})\s+{_alt(tw.words('quarter'))}"
    rf"\s+(?:{_OF}\s+)?(?P<year2>(?:19|20|21)\d\d))"
)
SEASON_YEAR = _pattern(rf"(?P<season>{_alt(SEASONS)})\s+(?:{_OF}\s+)?{_YEAR}")
YEAR = _pattern(rf"{_alt(tw.words('year_words'))}\s+{_YEAR}")
RELATIVE_DAY = _pattern(rf"(?P<word>{_alt(RELATIVE_DAYS)})")
# "three weeks ago", "hace tres semanas", "há três semanas", "três semanas atrás": a word before or after.
AGO = _pattern(
    rf"(?:(?P<pre>{_alt(tw.words('ago_before'))})\s+)?{_NUMBER}\s+(?P<unit>{_alt(UNITS)})"
    rf"(?:\s+(?P<post>{_alt(tw.words('ago_after'))}))?"
)
# "last week", "la próxima semana" (the shift before) or "la semana pasada", "o ano que vem" (after).
LAST_NEXT = _pattern(
    rf"(?:(?P<before>{_alt(tw.words('shift_before'))})\s+(?P<unit>{_SHIFTED})"
    rf"|(?P<unit2>{_SHIFTED})\s+(?P<after>{_alt(tw.words('shift_after'))}))"
)
MONTH_ALONE = _pattern(rf"{_alt(tw.words('month_alone'))}\s+{_MONTH}")


def _key(text: str) -> str:
    """A matched word or phrase as the tables write it: folded, its spaces single."""
    return " ".join(folded(text).split())


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
    return MONTHS[_key(text).rstrip(".")]


def _modal_may(match: re.Match[str]) -> bool:
    """ "this may be", "in may" written lowercase: the verb, not the month (the patterns ignore case)."""
    return match["month"] == "may"


def _add_months(day: date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def _season(year: int, season: str) -> Period:
    """The season of that English name starting in `year`."""
    first_month, last_month = tw.SEASON_MONTHS[season]
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
            quarter = int(m["q"]) if m["q"] else ORDINALS[_key(m["ordinal"])]
            year = _year(m["year"] or m["year2"])
            first = date(year, 3 * quarter - 2, 1)
            add(m, Period(first, _month(year, 3 * quarter).last, "quarter"))
    for m in SEASON_YEAR.finditer(text):
        if free(m):
            add(m, _season(_year(m["year"]), SEASONS[_key(m["season"])]))
    for m in YEAR.finditer(text):
        if free(m):
            year = _year(m["year"])
            add(m, Period(date(year, 1, 1), date(year, 12, 31), "year"))
    return found


def _relative(text: str, lower: str, anchor: date, taken: list[tuple[int, int]]) -> list[Period]:
    """Dates resolved against `anchor`; `lower` is the text folded, where the hints look."""
    found: list[Period] = []
    # Each family only where the folded text holds a word it needs: the patterns ignore case and cost more
    # than that test.
    month = _MONTH_HINT.search(lower) is not None
    families: list[tuple[re.Pattern[str], Callable[[re.Match[str], date], Period | None]]] = []
    if _RELATIVE_DAY_HINT.search(lower):
        families.append((RELATIVE_DAY, _relative_day))
    if _AGO_HINT.search(lower):
        families.append((AGO, _ago))
    if _SHIFT_HINT.search(lower):
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
    shift = RELATIVE_DAYS[_key(m["word"])]
    day = anchor + timedelta(days=shift)
    return Period(day, day, "day")


def _ago(m: re.Match[str], anchor: date) -> Period | None:
    if not m["pre"] and not m["post"]:  # "two weeks" alone
        return None
    raw = _key(m["n"])
    n = int(raw) if raw.isdigit() else NUMBERS[raw]
    unit = UNITS[_key(m["unit"])]
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
    which = _key(m["before"] or m["after"])
    return _last_next(SHIFTS[which], _key(m["unit"] or m["unit2"]), anchor)


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


def _last_next(step: int, unit: str, anchor: date) -> Period | None:
    """The week, month, year, weekend, weekday or season `step` (-1 last, 0 this, 1 next) from `anchor`'s."""
    unit = UNITS.get(unit, "weekend" if unit in WEEKENDS else unit)
    if unit == "week":
        start = anchor - timedelta(days=anchor.weekday()) + timedelta(weeks=step)
        return Period(start, start + timedelta(days=6), "week")
    if unit == "weekend":
        saturday = anchor - timedelta(days=anchor.weekday()) + timedelta(days=5) + timedelta(weeks=step)
        if step < 0 and saturday > anchor - timedelta(days=1):
            saturday -= timedelta(weeks=1)
        return Period(saturday, saturday + timedelta(days=1), "day")
    if unit == "month":
        return _month(*_add_months(anchor, step))
    if unit == "year":
        year = anchor.year + step
        return Period(date(year, 1, 1), date(year, 12, 31), "year")
    if unit in WEEKDAYS:
        weekday = WEEKDAYS[unit]
        delta = (anchor.weekday() - weekday) % 7
        if step < 0:
            day = anchor - timedelta(days=delta or 7)
        elif step > 0:
            day = anchor + timedelta(days=(weekday - anchor.weekday()) % 7 or 7)
        else:
            day = anchor - timedelta(days=delta)
        return Period(day, day, "day")
    if unit in SEASONS:
        season = SEASONS[unit]
        first_month = tw.SEASON_MONTHS[season][0]
        year = anchor.year if first_month <= anchor.month else anchor.year - 1  # this season's year
        # "last summer" said in or before a summer is the year before's, said after one (in December) the one
        # just over. "next" is the next one to start.
        if step > 0:
            year += 1
        elif step < 0 and _season(year, season).last >= anchor:
            year -= 1
        return _season(year, season)
    return None


# Bounds on the work one text can cause: the start of a text is where its dates are, and a memory of
# thousands of dates would otherwise cost a second to read (the overlap check is quadratic in matches).
MAX_TEXT_CHARS = 2000
MAX_PERIODS = 16


def periods(text: str, anchor: date | None = None) -> list[Period]:
    """The periods `text` names (at most MAX_PERIODS, in its first MAX_TEXT_CHARS characters); relative
    ones only when an `anchor` day is given."""
    text = unicodedata.normalize("NFC", text[:MAX_TEXT_CHARS])  # an accent typed apart is its letter's
    if not text:
        return []
    taken: list[tuple[int, int]] = []
    found = _absolute(text, taken) if _YEAR_HINT.search(text) else []  # every absolute form has a year
    if anchor is not None:
        lower = folded(text)
        if _WORD_HINT.search(lower):
            found.extend(_relative(text, lower, anchor, taken))
    return found[:MAX_PERIODS]


def query_periods(query: str, today: date | None = None) -> list[Period]:
    """The periods a query names; relative ones ("last week") are taken from today (UTC)."""
    return periods(query, today or datetime.now(UTC).date())
