"""What recall does with the calendar dates texts name (memory_server/ranking/periods.py reads them): the boost for
memories dated where a query points, the dated prefetch's windows, the days a memory is about in the vector
index, and the dates as lexical terms. Measurements: docs/ranking.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import numpy as np

from memory_server.ranking.candidate_set import Candidate, CandidateSet
from memory_server.ranking.fusion import format_date
from memory_server.ranking.languages import folded
from memory_server.ranking.per_text import SIZE, PerText
from memory_server.ranking.periods import Period, periods
from memory_server.ranking.time_words import alternation, words
from memory_server.timestamps import parse_rfc3339

# --- ranking: a soft boost for memories dated where the query points ------------------------------------

# A memory dated in a window around a period the query names gains DATE_BOOST z units; the window runs from
# DATE_BEFORE_DAYS before the period to DATE_AFTER_DAYS after it: what happened is often told days later.
DATE_BOOST = 1.0
DATE_BEFORE_DAYS = 1
DATE_AFTER_DAYS = 10
FINE = frozenset({"day", "week"})  # the periods a memory's own date answers


Spans = tuple[int | None, tuple[tuple[int, int], ...]]


def read_spans(text: str, occurred_at: str | None) -> Spans:
    """The memory's own day (an ordinal; None without occurred_at) and the (first, last) day ordinals of
    each period its content names."""
    anchor = _anchor(occurred_at)
    named = periods(content_of(text, occurred_at), anchor)
    return (
        anchor.toordinal() if anchor is not None else None,
        tuple((p.first.toordinal(), p.last.toordinal()) for p in named),
    )


class DatedTexts(PerText[Spans]):
    """The periods each candidate's text names, resolved once per text and kept (memory_server/ranking/per_text.py)."""

    def __init__(self, size: int = SIZE) -> None:
        super().__init__(read_spans, size)

    def spans(self, row_id: int, text: str, occurred_at: str | None) -> Spans:
        return self.of(row_id, text, occurred_at)


def content_of(text: str, occurred_at: str | None) -> str:
    """The candidate's text without the '[8 May 2023] ' date prefix document_text gave it."""
    date_text = format_date(occurred_at)
    prefix = f"[{date_text}] " if date_text else None
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


def _anchor(occurred_at: str | None) -> date | None:
    """The calendar day of a memory's occurred_at (in its own offset), what its relative dates count from."""
    moment = parse_rfc3339(occurred_at) if occurred_at else None
    return moment.date() if moment is not None else None


DATED_TEXTS = DatedTexts()


MAX_PREFETCH_WINDOWS = 2
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def epoch_day(day: date) -> int:
    """A calendar day as whole days since 1970-01-01: the unit of the vector index's `days` payload."""
    return day.toordinal() - EPOCH_ORDINAL


def prefetch_windows(asked: Sequence[Period]) -> list[tuple[int, int]]:
    """The windows (first and last day, inclusive, as `epoch_day`s) around the first MAX_PREFETCH_WINDOWS
    days or weeks a query names: in a large scope recall also prefetches the memories about a day inside
    them (`memory_days`), which the boost ranks higher but which might match the query by neither words nor
    meaning."""
    fine = [p for p in asked if p.granularity in FINE][:MAX_PREFETCH_WINDOWS]
    return [
        (epoch_day(p.first - timedelta(days=DATE_BEFORE_DAYS)), epoch_day(p.last + timedelta(days=DATE_AFTER_DAYS)))
        for p in fine
    ]


# At most this many days per memory in the vector index, so a text naming many dates cannot blow up its
# point (its up to MAX_PERIODS weeks would be 112 days).
MAX_MEMORY_DAYS = 32


def memory_days(content: str, occurred_at: str) -> list[int]:
    """The days a memory is about, as sorted `epoch_day`s: its own (occurred_at's) and every day of each day
    or week its content names, resolved against occurred_at as the boost resolves them ("yesterday", "last
    Friday", "on May 7"), up to MAX_MEMORY_DAYS. The vector index keeps them so the dated prefetch finds a
    memory by a day it tells of, not only by its own. A month or longer is left out: too coarse for the day
    or week the prefetch asks for, and up to a year's 366 values in a point."""
    anchor = _anchor(occurred_at)
    if anchor is None:
        return []
    days = {epoch_day(anchor)}
    for period in periods(content, anchor):
        if period.granularity in FINE:
            for day in range(epoch_day(period.first), epoch_day(period.last) + 1):
                if len(days) == MAX_MEMORY_DAYS:
                    return sorted(days)
                days.add(day)
    return sorted(days)


def date_boost(
    fused: np.ndarray, asked: Sequence[Period], candidates: Sequence[Candidate], texts: DatedTexts = DATED_TEXTS
) -> np.ndarray:
    """`fused` with DATE_BOOST added for every candidate dated inside a window around a period in `asked`:
    by a date its content names, or for a day or a week by its own (a month or longer is answered by what was
    written before it as much as in it: "who was her manager in March 2024?")."""
    if not asked:
        return fused
    out = np.asarray(fused, dtype=np.float64).copy()
    out[dated_inside(asked, candidates, texts)] += DATE_BOOST
    return out


def dated_inside(
    asked: Sequence[Period], candidates: Sequence[Candidate], texts: DatedTexts = DATED_TEXTS
) -> np.ndarray:
    """Which candidates (a mask by position) are dated inside a window around a period in `asked`: a date
    their content names, or for a day or a week their own."""
    dated = dated_spans(CandidateSet.of(candidates), texts)
    inside = np.zeros(len(dated.own), dtype=bool)
    for period in asked:
        lo = (period.first - timedelta(days=DATE_BEFORE_DAYS)).toordinal()
        hi = (period.last + timedelta(days=DATE_AFTER_DAYS)).toordinal()
        if period.granularity in FINE:
            inside |= (lo <= dated.own) & (dated.own <= hi)
        inside[dated.owner[(dated.first <= hi) & (lo <= dated.last)]] = True
    return inside


# Words that make a period a bound of a range rather than the time a question asks about ("since 2021",
# "after Q3 2024", "desde marzo de 2024", "até 2023"), in every language of memory_server/ranking/time_words.py.
RANGE_WORDS = re.compile(r"\b" + alternation(words("range_words")) + r"\b")


def as_of_end(query: str) -> float | None:
    """The end (seconds since the epoch, UTC) of the latest month or longer period `query` names with its
    year: what a question about the state of things then ("who was her manager in March 2024?") is answered
    by was written before it (ranking/recency.py, as_of_first). None when it names none, or only as the
    bound of a range."""
    if RANGE_WORDS.search(folded(query)):
        return None
    coarse = [p.last for p in periods(query) if p.granularity not in FINE]  # no anchor: absolute ones only
    if not coarse:
        return None
    end = max(coarse) + timedelta(days=1)
    return datetime(end.year, end.month, end.day, tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class DatedSpans:
    """A candidate set's dates as arrays: each candidate's own day (an ordinal, NO_DAY without occurred_at),
    and every period its content names as (owner position, first day, last day)."""

    own: np.ndarray
    owner: np.ndarray
    first: np.ndarray
    last: np.ndarray


NO_DAY = -1  # below every ordinal


def dated_spans(candidates: CandidateSet, texts: DatedTexts = DATED_TEXTS) -> DatedSpans:
    """The set's `DatedSpans`, worked out once and kept with it (a held set reads them without the per-memory
    cache: PerText.of_set); start-up works them out for the sets it prepares (Retrieval.warm_up), as a first
    recall naming a month in a 1,000-memory bucket spent ~15 ms reading them."""

    def compute(pool: CandidateSet) -> DatedSpans:
        found = texts.of_set(pool)
        owner = [i for i, (_, named) in enumerate(found) for _ in named]
        named_days = [span for _, named in found for span in named]
        days = np.array(named_days, dtype=np.int64).reshape(-1, 2)
        return DatedSpans(
            np.fromiter((NO_DAY if own is None else own for own, _ in found), dtype=np.int64, count=len(found)),
            np.array(owner, dtype=np.intp),
            days[:, 0],
            days[:, 1],
        )

    return candidates.memo("dated spans", compute)


# --- dates as lexical terms ------------------------------------------------------------------------------

# The days and weeks a memory's content names are terms of its lexical document (`day20230507`, `week2023w19`:
# lexical.DATE_TERM), so a memory telling of a day in other words ("last Monday") matches a query naming it.
DATE_TERM_WEIGHT = 1.0
DATE_TERM_DAYS = 7  # the days of one named period that become terms (a weekend is two)


def _day_term(day: date) -> str:
    return f"day{day:%Y%m%d}"


def _week_term(day: date) -> str:
    year, week, _ = day.isocalendar()
    return f"week{year:04d}w{week:02d}"


def _days(period: Period) -> list[date]:
    return [period.first + timedelta(days=n) for n in range(min((period.last - period.first).days + 1, DATE_TERM_DAYS))]


def period_terms(period: Period) -> list[str]:
    """The terms of a memory naming `period`: a day's day and week, a week's week; nothing for a month or
    longer."""
    if period.granularity == "day":
        days = _days(period)
        return list(dict.fromkeys([*map(_day_term, days), *map(_week_term, days)]))
    if period.granularity == "week":
        return [_week_term(period.first + (period.last - period.first) // 2)]
    return []


def date_terms(content: str, occurred_at: str | None) -> list[str]:
    """The date terms of a memory's lexical document: those of the days and weeks its content names (at most
    MAX_PERIODS of them, from its first MAX_TEXT_CHARS characters: `periods` bounds the work)."""
    named = periods(content, _anchor(occurred_at))
    return list(dict.fromkeys(term for period in named for term in period_terms(period)))


def query_date_terms(asked: Sequence[Period]) -> dict[str, float]:
    """The date terms a query looks for, with their weights: a day's, or a week's, at DATE_TERM_WEIGHT
    shared by the period's terms (a weekend's two days half each)."""
    out: dict[str, float] = {}
    for period in asked:
        if period.granularity == "day":
            terms = [_day_term(day) for day in _days(period)]
        elif period.granularity == "week":
            terms = [_week_term(period.first + (period.last - period.first) // 2)]
        else:
            continue
        for term in terms:
            out[term] = out.get(term, 0.0) + DATE_TERM_WEIGHT / len(terms)
    return out
