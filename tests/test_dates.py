"""Dates named in text (memory_server/ranking/dates.py) and the recall boost they give, the latter through a real
server on both storage backends."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import numpy as np
import pytest

from memory_server.ranking.candidate_set import Candidate, CandidateSet
from memory_server.ranking.dates import (
    DATE_BOOST,
    MAX_MEMORY_DAYS,
    DatedTexts,
    as_of_end,
    date_boost,
    date_terms,
    epoch_day,
    memory_days,
    prefetch_windows,
    query_date_terms,
)
from memory_server.ranking.fusion import document_text
from memory_server.ranking.periods import MAX_PERIODS, MAX_TEXT_CHARS, Period, periods, query_periods

from tests.conftest import serve

ANCHOR = date(2023, 5, 8)  # a Monday

# The boost test runs a real server on each storage backend; the parser tests are pure.
backends = pytest.mark.backends


def spans(text: str, anchor: date | None = ANCHOR) -> list[tuple[str, str, str]]:
    return [(p.first.isoformat(), p.last.isoformat(), p.granularity) for p in periods(text, anchor)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What was Sam doing on Dec 4, 2023?", [("2023-12-04", "2023-12-04", "day")]),
        ("Drift offsite: Seville, the 16th of November 2023", [("2023-11-16", "2023-11-16", "day")]),
        ("released 2023-12-04", [("2023-12-04", "2023-12-04", "day")]),
        ("At 10:30 on 4th December 2023", [("2023-12-04", "2023-12-04", "day")]),
        ("Who was Maria's manager in March 2024?", [("2024-03-01", "2024-03-31", "month")]),
        ("as of 2024-05", [("2024-05-01", "2024-05-31", "month")]),
        ("in Sept. of 2022", [("2022-09-01", "2022-09-30", "month")]),
        ("in Q2 2024", [("2024-04-01", "2024-06-30", "quarter")]),
        ("during the fourth quarter of 2023", [("2023-10-01", "2023-12-31", "quarter")]),
        ("winter 2023", [("2023-12-01", "2024-02-29", "season")]),
        ("what happened in 2021", [("2021-01-01", "2021-12-31", "year")]),
        ("What did Kenji do in October '22?", [("2022-10-01", "2022-10-31", "month")]),
        ("Daft Punk tribute band @ Tempodrom — Sept ’22", [("2022-09-01", "2022-09-30", "month")]),
        ("on 3 May '23", [("2023-05-03", "2023-05-03", "day")]),
        ("in the summer of '99", [("1999-06-01", "1999-08-31", "season")]),
        ("Q2 '24", [("2024-04-01", "2024-06-30", "quarter")]),
    ],
)
def test_absolute_dates_need_no_anchor(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert spans(text, None) == expected
    assert spans(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went to the support group yesterday", [("2023-05-07", "2023-05-07", "day")]),
        ("we met last Friday", [("2023-05-05", "2023-05-05", "day")]),
        ("see you next Monday", [("2023-05-15", "2023-05-15", "day")]),
        ("three weeks ago", [("2023-04-14", "2023-04-20", "week")]),
        ("2 days ago", [("2023-05-06", "2023-05-06", "day")]),
        ("a few months ago", [("2023-02-01", "2023-02-28", "month")]),
        ("next month", [("2023-06-01", "2023-06-30", "month")]),
        ("last year", [("2022-01-01", "2022-12-31", "year")]),
        ("last week", [("2023-05-01", "2023-05-07", "week")]),
        ("on May 7", [("2023-05-07", "2023-05-07", "day")]),
        ("on Dec 20", [("2022-12-20", "2022-12-20", "day")]),  # over a month ahead: last year's
        ("since June", [("2022-06-01", "2022-06-30", "month")]),
        ("last spring", [("2022-03-01", "2022-05-31", "season")]),
    ],
)
def test_relative_dates_are_resolved_against_the_anchor(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert spans(text) == expected
    assert spans(text, None) == []  # nothing to resolve them against


# The same families in Spanish and Portuguese (memory_server/ranking/time_words.py), against ANCHOR (Monday 8 May
# 2023) where they are relative.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Spanish
        ("¿Quién lideraba Atlas en marzo de 2025?", [("2025-03-01", "2025-03-31", "month")]),
        ("en septiembre del 2024", [("2024-09-01", "2024-09-30", "month")]),
        ("el 4 de diciembre de 2023", [("2023-12-04", "2023-12-04", "day")]),
        ("el 1º de mayo de 2024", [("2024-05-01", "2024-05-01", "day")]),
        ("el segundo trimestre de 2024", [("2024-04-01", "2024-06-30", "quarter")]),
        ("el verano de 2023", [("2023-06-01", "2023-08-31", "season")]),
        ("lo que pasó en 2021", [("2021-01-01", "2021-12-31", "year")]),
        ("desde marzo", [("2023-03-01", "2023-03-31", "month")]),
        ("en junio", [("2022-06-01", "2022-06-30", "month")]),
        ("hace dos semanas", [("2023-04-21", "2023-04-27", "week")]),
        ("hace 3 días", [("2023-05-05", "2023-05-05", "day")]),
        ("hace un mes", [("2023-04-01", "2023-04-30", "month")]),
        ("el año pasado", [("2022-01-01", "2022-12-31", "year")]),
        ("la semana pasada", [("2023-05-01", "2023-05-07", "week")]),
        ("la próxima semana", [("2023-05-15", "2023-05-21", "week")]),
        ("el mes que viene", [("2023-06-01", "2023-06-30", "month")]),
        ("el viernes pasado", [("2023-05-05", "2023-05-05", "day")]),
        ("el fin de semana pasado", [("2023-05-06", "2023-05-07", "day")]),
        ("ayer", [("2023-05-07", "2023-05-07", "day")]),
        ("anteayer", [("2023-05-06", "2023-05-06", "day")]),
        ("HOY", [("2023-05-08", "2023-05-08", "day")]),
        # Portuguese
        ("Quem era o gestor da Ana em maio de 2024?", [("2024-05-01", "2024-05-31", "month")]),
        ("em março de 2025", [("2025-03-01", "2025-03-31", "month")]),
        ("4 de dezembro de 2023", [("2023-12-04", "2023-12-04", "day")]),
        ("o 3º trimestre de 2024", [("2024-07-01", "2024-09-30", "quarter")]),
        ("no verão de 2023", [("2023-06-01", "2023-08-31", "season")]),
        ("até 2024", [("2024-01-01", "2024-12-31", "year")]),
        ("desde fevereiro", [("2023-02-01", "2023-02-28", "month")]),
        ("há duas semanas", [("2023-04-21", "2023-04-27", "week")]),
        ("três meses atrás", [("2023-02-01", "2023-02-28", "month")]),
        ("no ano passado", [("2022-01-01", "2022-12-31", "year")]),
        ("na semana passada", [("2023-05-01", "2023-05-07", "week")]),
        ("o mês que vem", [("2023-06-01", "2023-06-30", "month")]),
        ("na próxima sexta-feira", [("2023-05-12", "2023-05-12", "day")]),
        ("ontem", [("2023-05-07", "2023-05-07", "day")]),
        ("amanhã", [("2023-05-09", "2023-05-09", "day")]),
    ],
)
def test_spanish_and_portuguese_dates(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert spans(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "esta segunda versão",  # an ordinal, not a Monday
        "ayer por la mañana",  # the morning, not tomorrow
        "dos semanas de vacaciones",  # no "hace": a length, not a time
        "marco de referencia",  # "marco" is no month
    ],
)
def test_spanish_and_portuguese_words_that_are_not_dates(text: str) -> None:
    assert [p for p in spans(text) if p != ("2023-05-07", "2023-05-07", "day")] == []


def test_an_accent_typed_apart_from_its_letter_is_read() -> None:
    decomposed = "em marc\u0327o de 2025"  # c + combining cedilla
    assert spans(decomposed, None) == [("2025-03-01", "2025-03-31", "month")]
    assert spans("hace tres di\u0301as") == [("2023-05-05", "2023-05-05", "day")]


@pytest.mark.parametrize(
    ("anchor", "expected"),
    [
        (date(2025, 12, 5), ("2025-06-01", "2025-08-31")),  # after the summer: the one just past
        (date(2025, 7, 20), ("2024-06-01", "2024-08-31")),  # in it: the year before's
        (date(2025, 3, 1), ("2024-06-01", "2024-08-31")),
    ],
)
def test_last_season_is_the_latest_one_over(anchor: date, expected: tuple[str, str]) -> None:
    assert spans("Back from Zanzibar: went last summer", anchor) == [(*expected, "season")]
    assert spans("last winter", date(2024, 1, 15)) == [("2022-12-01", "2023-02-28", "season")]
    assert spans("last winter", date(2024, 4, 1)) == [("2023-12-01", "2024-02-29", "season")]


@pytest.mark.parametrize(
    "text",
    [
        "I have 2023 reasons",
        "this may be wrong",
        "you may want to march on",
        "version 2.0.1 at 10:30",
        "04/05/2024",
        "",
        "room 1999b",
        "the 2020s",
        "rock'n'roll of the '90s",
        "it's '22-ish",
    ],
)
def test_text_that_names_no_date(text: str) -> None:
    assert spans(text) == []


def test_each_part_of_the_text_is_read_once() -> None:
    # "4 December 2023" is a day; the month and the year inside it are not periods of their own.
    assert spans("On 4 December 2023, then in January 2024 and yesterday") == [
        ("2023-12-04", "2023-12-04", "day"),
        ("2024-01-01", "2024-01-31", "month"),
        ("2023-05-07", "2023-05-07", "day"),
    ]


def test_one_text_reads_a_bounded_number_of_dates_from_its_start() -> None:
    assert len(periods("4 December 2023, " * 6000)) == MAX_PERIODS
    late = "x" * MAX_TEXT_CHARS + " on 4 December 2023"
    assert periods(late) == [] and periods(late[MAX_TEXT_CHARS:]) != []


@pytest.mark.parametrize("anchor", [date.min, date(1, 1, 1), date(1900, 1, 1), date(2100, 12, 31), date.max])
@pytest.mark.parametrize(
    "text",
    [
        "99999999999 days ago",
        "999999 weeks ago",
        "99999999 months ago",
        "9999 years ago",
        "tomorrow",
        "yesterday",
        "next month",
        "next week",
        "next Monday",
        "next weekend",
        "next winter",
        "last spring",
        "on Dec 31",
        "in May",
        "in 2100",
        "Q4 2199",
        "31 December 2100",
        "2199-12-31",
    ],
)
def test_dates_off_the_calendar_are_skipped_never_raised(text: str, anchor: date) -> None:
    for period in periods(text, anchor):
        assert 1900 <= period.first.year and period.last.year <= 2100


def test_a_query_resolves_relative_dates_against_today() -> None:
    assert query_periods("what did we decide last week?", date(2026, 12, 1)) == [
        Period(date(2026, 11, 23), date(2026, 11, 29), "week")
    ]


def candidate(i: int, content: str, occurred_at: str) -> Candidate:
    return Candidate(
        id=i, text=document_text(content, occurred_at), vector=np.zeros(2, dtype=np.float32), occurred_at=occurred_at
    )


def test_the_boost_goes_to_memories_dated_in_the_window_by_their_day_or_their_content() -> None:
    candidates = [
        candidate(0, "Went hiking with Sam.", "2023-12-05T09:00:00Z"),  # its own day, inside
        candidate(1, "Told you: I ran a race last Monday.", "2023-12-13T09:00:00Z"),  # Dec 11, inside
        candidate(2, "Back from the trip of 2 December 2023.", "2024-02-01T09:00:00Z"),  # Dec 2: before the window
        candidate(3, "Went hiking with Sam.", "2023-12-20T09:00:00Z"),  # Dec 20: after it
        candidate(4, "Nothing dated here.", "2023-12-04T12:00:00Z"),  # the named day itself
    ]
    fused = np.zeros(5)
    boosted = date_boost(fused, periods("What was Sam doing on Dec 4, 2023?"), candidates, DatedTexts())
    assert list(boosted) == [DATE_BOOST, DATE_BOOST, 0.0, 0.0, DATE_BOOST] and not fused.any()
    assert date_boost(fused, [], candidates) is fused


def test_a_month_or_longer_goes_by_the_dates_a_memory_names_not_by_when_it_was_written() -> None:
    candidates = [
        candidate(0, "Maria reports to Jonas Berg.", "2024-03-12T09:00:00Z"),  # written in March: no boost
        candidate(1, "In March 2024 the team moved to Lisbon.", "2024-06-01T09:00:00Z"),  # names March
        candidate(2, "The offsite was last month.", "2024-04-03T09:00:00Z"),  # March, resolved
    ]
    boosted = date_boost(np.zeros(3), periods("Who was Maria's manager in March 2024?"), candidates, DatedTexts())
    assert list(boosted) == [0.0, DATE_BOOST, DATE_BOOST]


def test_a_held_set_keeps_its_dates_itself_and_boosts_as_any_set() -> None:
    rows = [
        candidate(0, "Went hiking with Sam.", "2023-12-05T09:00:00Z"),
        candidate(1, "Told you: I ran a race last Monday.", "2023-12-13T09:00:00Z"),
        candidate(2, "Nothing dated here.", "2023-06-04T12:00:00Z"),
    ]
    texts = DatedTexts()
    held = CandidateSet.of_rows([tuple(c) for c in rows], lasting=True)  # type: ignore[misc]
    asked = periods("What was Sam doing on Dec 4, 2023?")
    assert list(date_boost(np.zeros(3), asked, held, texts)) == [DATE_BOOST, DATE_BOOST, 0.0]
    assert not texts._found  # read by the set itself, not cached per memory
    again = date_boost(np.zeros(3), asked, rows, texts)  # a set made anew per recall goes through the cache
    assert list(again) == [DATE_BOOST, DATE_BOOST, 0.0] and len(texts._found) == 3


def test_the_cache_follows_a_changed_text() -> None:
    texts = DatedTexts()
    before = texts.spans(7, document_text("the launch was yesterday", "2024-03-10T00:00:00Z"), "2024-03-10T00:00:00Z")
    after = texts.spans(7, document_text("no date now", "2024-03-10T00:00:00Z"), "2024-03-10T00:00:00Z")
    day = date(2024, 3, 10).toordinal()
    assert before == (day, ((day - 1, day - 1),)) and after == (day, ())


# --- through a real server --------------------------------------------------------------------------------

# The memory of December 5 says nothing the questions say but its date; the others match their words, and
# their dates read much like the one asked for (a year earlier, a week before, two weeks after). Among other
# people's memories, as in a real store: four alone are too few for any spread of scores to mean anything.
OTHERS = [
    ("Maria moved to Lisbon for a new job.", "2023-06-02T09:00:00Z"),
    ("The team chose PostgreSQL for the billing service.", "2023-03-14T11:00:00Z"),
    ("Priya adopted a cat called Miso.", "2023-08-21T16:00:00Z"),
    ("The quarterly review is on the first Monday of the month.", "2023-01-09T08:00:00Z"),
    ("Tom prefers tea to coffee in the morning.", "2023-10-30T07:00:00Z"),
    ("The office wifi password changes every ninety days.", "2023-05-17T12:00:00Z"),
]
SAM = [
    ("Sam was doing his taxes all weekend.", "2022-12-04T10:00:00Z"),
    ("Sam went hiking near the lake with his colleagues.", "2023-12-05T18:00:00Z"),
    ("Sam is doing a pottery course on Thursdays.", "2023-11-27T08:00:00Z"),
    ("Sam was doing overtime at work.", "2023-12-20T07:30:00Z"),
]


@backends
def test_a_query_with_a_date_off_the_calendar_is_answered(settings: Any, embedder: Any) -> None:
    with serve(settings, embedder) as server:
        server.save("The last day of the calendar.", occurred_at="9999-12-31T00:00:00Z")
        for question in ("what happened 99999999999 days ago?", "and the day after tomorrow?", "in Q4 2199"):
            assert server.recalled(question, 4) == ["The last day of the calendar."]


@backends
@pytest.mark.parametrize(
    "question",
    [
        "What was Sam doing on Dec 4, 2023?",
        "What was Sam doing on 4 December 2023?",
        "What was Sam doing on 2023-12-04?",
        "¿Qué hacía Sam el 4 de diciembre de 2023?",
        "O que o Sam estava fazendo em 4 de dezembro de 2023?",
    ],
)
def test_recall_ranks_the_memory_of_the_named_date_first(settings: Any, embedder: Any, question: str) -> None:
    with serve(settings, embedder) as server:
        for content, when in [*OTHERS, *SAM]:
            server.save(content, occurred_at=when)
        assert server.recalled(question, 4)[0] == SAM[1][0]


def test_the_days_and_weeks_a_query_names_are_prefetch_windows_months_are_not() -> None:
    assert prefetch_windows(periods("What was Sam doing on Dec 4, 2023?")) == [
        (epoch_day(date(2023, 12, 3)), epoch_day(date(2023, 12, 14)))
    ]
    assert prefetch_windows(periods("Who was Maria's manager in March 2024?")) == []
    assert len(prefetch_windows(periods("on 1 May 2023, 2 May 2023 or 3 May 2023"))) == 2  # bounded


def days(*isoformats: str) -> list[int]:
    return [epoch_day(date.fromisoformat(day)) for day in isoformats]


def test_a_memory_is_about_its_own_day_and_the_days_and_weeks_its_content_names() -> None:
    written = "2024-03-10T18:30:00Z"  # a Sunday
    assert memory_days("The cat slept all day.", written) == days("2024-03-10")
    assert epoch_day(date(1970, 1, 2)) == 1  # whole days since the epoch
    # Relative to its own date, as the boost reads them; a week gives its seven days.
    assert memory_days("Yesterday we shipped the release.", written) == days("2024-03-09", "2024-03-10")
    assert memory_days("Last Friday, and on 2 January 2024.", written) == days("2024-01-02", "2024-03-08", "2024-03-10")
    assert memory_days("We moved last week.", written) == days(
        "2024-02-26", "2024-02-27", "2024-02-28", "2024-02-29", "2024-03-01", "2024-03-02", "2024-03-03", "2024-03-10"
    )
    # A month or longer is too coarse to name a day.
    assert memory_days("In March 2024, and in 2023, and last month.", written) == days("2024-03-10")
    # However many weeks a text names, a bounded number of days.
    many = " ".join(f"{n} weeks ago." for n in range(2, 18))
    assert len(memory_days(many, written)) == MAX_MEMORY_DAYS


# --- dates as lexical terms ------------------------------------------------------------------------------


def test_a_memory_holds_the_terms_of_the_days_and_weeks_its_content_names() -> None:
    at = "2024-05-09T10:00:00Z"  # a Thursday
    assert date_terms("Went to the climbing gym yesterday.", at) == ["day20240508", "week2024w19"]
    assert date_terms("We met on 2023-12-31 and again last week.", at) == ["day20231231", "week2023w52", "week2024w18"]
    assert date_terms("Over last weekend.", at) == ["day20240504", "day20240505", "week2024w18"]
    # a month or longer is no term (too coarse: see DATE_TERM_WEIGHT); nor is the memory's own day
    assert date_terms("Moved to Porto in March 2024.", at) == []
    assert date_terms("Nothing dated here.", at) == []
    assert date_terms("Yesterday, no anchor.", None) == []


def test_every_date_term_is_what_the_lexical_side_takes_for_one() -> None:
    from memory_server.ranking.lexical import is_date_term

    text = "on 2024-05-08, 1 January 1900, 31 December 2099, yesterday, two weeks ago"
    terms = date_terms(text, "2024-05-09T00:00:00Z")
    assert terms and all(is_date_term(t) for t in terms)
    assert not any(is_date_term(t) for t in ("day", "day1", "days20240508", "week2024", "2024w19", "weekday"))


def test_dates_at_the_edge_of_the_calendar_and_huge_texts_give_bounded_terms() -> None:
    assert date_terms("tomorrow and next week", "9999-12-31T23:59:59Z") == []
    assert date_terms("yesterday", "0001-01-01T00:00:00Z") == []
    huge = "On 2024-05-08 we met. " * 10_000
    assert date_terms(huge, "2024-05-09T00:00:00Z") == ["day20240508", "week2024w19"]
    many = " ".join(f"on 2024-05-{d:02d}" for d in range(1, 29))
    assert len(date_terms(many, "2024-05-09T00:00:00Z")) <= 2 * MAX_PERIODS


def test_a_query_looks_for_the_day_or_week_it_names() -> None:
    today = date(2024, 5, 9)
    assert query_date_terms(query_periods("What did Ana do on 8 May 2024?", today)) == {"day20240508": 1.0}
    assert query_date_terms(query_periods("what happened last week", today)) == {"week2024w18": 1.0}
    assert query_date_terms(query_periods("plans for last weekend", today)) == {"day20240504": 0.5, "day20240505": 0.5}
    assert query_date_terms(query_periods("Who led Atlas in March 2024?", today)) == {}
    assert query_date_terms([]) == {}


def test_the_end_of_the_period_a_question_asks_about() -> None:
    def end(query: str) -> str | None:
        seconds = as_of_end(query)
        return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()

    assert end("Who was Maria's manager in March 2024?") == "2024-04-01T00:00:00+00:00"
    assert end("Which team was Ivo on in Q3 2024?") == "2024-10-01T00:00:00+00:00"
    assert end("What did we run in the winter of '23?") == "2024-03-01T00:00:00+00:00"
    assert end("Who led Atlas in 2023 and in 2025?") == "2026-01-01T00:00:00+00:00"  # the latest
    for query in (
        "What did we decide on 8 May 2024?",  # a day: the date boost's
        "Who led Atlas last year?",
        "Who led Atlas in June?",  # relative to today
        "What changed since March 2024?",
        "Who led Atlas before 2024?",  # bounds of a range
        "Who was her manager between 2022 and 2023?",
        "Who leads Atlas?",
        "¿Qué cambió desde marzo de 2024?",
        "¿Quién lideraba Atlas antes de 2024?",
        "Quem liderava o Atlas até 2024?",
        "¿Quién lideraba Atlas el año pasado?",
    ):
        assert end(query) is None, query
    assert end("¿Quién era el responsable de Ana en marzo de 2025?") == "2025-04-01T00:00:00+00:00"
    assert end("Quem era o gestor da Ana em maio de 2024?") == "2024-06-01T00:00:00+00:00"
    assert end("¿Qué fase tenía Atlas en el segundo trimestre de 2024?") == "2024-07-01T00:00:00+00:00"
