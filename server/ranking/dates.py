"""What recall does with the calendar dates texts name (server/ranking/periods.py reads them): the boost for
memories dated where a query points, the dated prefetch's windows, the days a memory is about in the vector
index, and the dates as lexical terms.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import numpy as np

from server.ranking.candidate_set import Candidate, CandidateSet
from server.ranking.fusion import format_date, parse_rfc3339
from server.ranking.per_text import SIZE, PerText
from server.ranking.periods import Period, periods

# --- ranking: a soft boost for memories dated where the query points ------------------------------------

# A memory gains DATE_BOOST z units when a date its content names (resolved against its occurred_at:
# "yesterday", "last Friday") falls in a window around a period the query names, or, for a day or a week,
# when its own occurred_at does. The window opens DATE_BEFORE_DAYS before the period and closes
# DATE_AFTER_DAYS after it, since what happened is often told a few days later. Its own date is not used for
# a month or longer: "who was her manager in March 2024?" is answered by what was written before March as
# much as in it (bench/evolving.py "as of" questions with time windows, top-1: 0.561 with the own date left
# out of coarse periods, 0.470 with it). Through the benchmarks (docs/benchmarks.md), R@5 / R@10: LoCoMo dev 0.723 /
# 0.805 -> 0.725 / 0.807 (temporal 0.865 / 0.912 -> 0.871 / 0.925); profiles event_by_date 0.747 / 0.824 ->
# 0.824 / 0.901, relative_date 0.879 / 0.939 -> 0.970 / 1.000. Chosen with offline harnesses of the three
# datasets (the same candidates, production ranking without query expansion), R@5 / R@10:
#   LoCoMo dev (84 of 760 questions name a date): 0.725 / 0.792 -> 0.727 / 0.795 (temporal 0.852 / 0.893 ->
#                                                 0.865 / 0.899); boost 0.5: 0.726 / 0.792, 1.5: 0.723 / 0.792
#   profiles, event_by_date (91 questions):       0.736 / 0.813 -> 0.802 / 0.890; relative_date 0.879 / 0.939
#                                                 -> 0.970 / 1.000; overall 0.814 / 0.864 -> 0.827 / 0.876
#   profiles with the own date only:              event_by_date unchanged (its dates are in the content)
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
    return (anchor.toordinal() if anchor is not None else None,
            tuple((p.first.toordinal(), p.last.toordinal()) for p in named))


class DatedTexts(PerText[Spans]):
    """The periods each candidate's text names, resolved once per text and kept (server/ranking/per_text.py)."""

    def __init__(self, size: int = SIZE) -> None:
        super().__init__(read_spans, size)

    def spans(self, row_id: int, text: str, occurred_at: str | None) -> Spans:
        return self.of(row_id, text, occurred_at)


def content_of(text: str, occurred_at: str | None) -> str:
    """The candidate's text without the '[8 May 2023] ' date prefix document_text gave it."""
    date_text = format_date(occurred_at)
    prefix = f"[{date_text}] " if date_text else None
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


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
    return [(epoch_day(p.first - timedelta(days=DATE_BEFORE_DAYS)), epoch_day(p.last + timedelta(days=DATE_AFTER_DAYS)))
            for p in fine]


# At most this many days per memory in the vector index, so a text naming many dates cannot blow up its
# point (its up to MAX_PERIODS weeks would be 112 days). What the days cost a write, measured on 10,000
# texts of bench/perf.py's corpus (one day each, their own): 23 us to read (as read_spans; ~110 us for a
# text naming three relative dates), 17 bytes more payload (113 -> 130 as JSON), 20-30 us more an embedded
# index upsert (122 -> 151 and 154 -> 174 us a point in two runs, its range index).
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


def date_boost(fused: np.ndarray, asked: Sequence[Period], candidates: Sequence[Candidate],
               texts: DatedTexts = DATED_TEXTS) -> np.ndarray:
    """`fused` with DATE_BOOST added for every candidate dated inside a window around a period in `asked`
    (see DATE_BOOST for which of its dates count)."""
    if not asked:
        return fused
    out = np.asarray(fused, dtype=np.float64).copy()
    out[dated_inside(asked, candidates, texts)] += DATE_BOOST
    return out


def dated_inside(asked: Sequence[Period], candidates: Sequence[Candidate],
                 texts: DatedTexts = DATED_TEXTS) -> np.ndarray:
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
# "after Q3 2024", "between 2022 and 2023").
RANGE_WORDS = re.compile(r"\b(?:since|after|before|until|till|between)\b", re.IGNORECASE)


def as_of_end(query: str) -> float | None:
    """The end (seconds since the epoch, UTC) of the latest month or longer period `query` names with its
    year: what a question about the state of things then ("who was her manager in March 2024?") is answered
    by was written before it (ranking/recency.py, as_of_first). None when it names none, or only as the
    bound of a range."""
    if RANGE_WORDS.search(query):
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
        return DatedSpans(np.fromiter((NO_DAY if own is None else own for own, _ in found), dtype=np.int64,
                                      count=len(found)),
                          np.array(owner, dtype=np.intp), days[:, 0], days[:, 1])
    return candidates.memo("dated spans", compute)



# --- dates as lexical terms ------------------------------------------------------------------------------

# The days and weeks a memory's content names, resolved against its occurred_at as the boost resolves them
# ("yesterday", "last Friday", "on 2023-05-08", "last week"), are terms of its lexical document, written when
# it is saved: `day20230507` for each day, `week2023w19` for each ISO week (server/ranking/lexical.py,
# DATE_TERM). A query naming a day or a week looks for the same terms, each at DATE_TERM_WEIGHT of a query
# term (shared among a period's terms), so the memory that told of the day in other words ("last Monday",
# "8/5") matches it lexically as well as through DATE_BOOST, weighted by how rare that day is. The terms are
# not counted in a document's length nor paired with its words (server/ranking/term_arrays.py).
# Measured in-process (bench/offline.py, 2026-12-03), R@1 / R@5 / R@10 or top-1:
#   profiles event_by_date 0.505 / 0.824 / 0.901 -> 0.582 / 0.835 / 0.901, relative_date 0.697 / 0.970 /
#   1.000 -> 0.788 / 0.970 / 1.000, overall 0.701 / 0.842 / 0.887 -> 0.716 / 0.844 / 0.887, no category lower;
#   LoCoMo dev R@5 / R@10 unchanged in every category (0.767 / 0.836); evolving unchanged in every mode.
# Measured and not kept: months, quarters and years as terms too (`month202405`): profiles event_by_date 0.670
#   / 0.868 / 0.912, but evolving past top-1 with windows and links 0.609 -> 0.594 ("as of March 2024" is
#   answered by what was written before March, and the month's term lifts what names March); the memory's own
#   day as a term too: LoCoMo R@5 0.767 -> 0.765; the terms counted in the document's length: profiles
#   attribute R@1 0.644 -> 0.628, single fact 0.972 -> 0.965, evolving "changed in" 0.440 -> 0.420; a
#   query's terms at half weight: profiles event_by_date R@1 0.626 -> 0.593 (with months).
DATE_TERM_WEIGHT = 1.0
DATE_TERM_DAYS = 7  # the days of one named period that become terms (a weekend is two)


def _day_term(day: date) -> str:
    return f"day{day:%Y%m%d}"


def _week_term(day: date) -> str:
    year, week, _ = day.isocalendar()
    return f"week{year:04d}w{week:02d}"


def _days(period: Period) -> list[date]:
    return [period.first + timedelta(days=n) for n in range(min((period.last - period.first).days + 1,
                                                                DATE_TERM_DAYS))]


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
