"""The time words of each language (memory_server/ranking/time_words.py): written as the analysis folds text,
and read where recall reads them: words asking for the present (memory_server/ranking/recency.py)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from memory_server.ranking import time_words
from memory_server.ranking.languages import folded
from memory_server.ranking.recency import asks_for_recent


@pytest.mark.parametrize("table", time_words.LANGUAGES)
def test_every_word_is_written_folded(table: time_words.TimeWords) -> None:
    for field in fields(table):
        for phrase in getattr(table, field.name):
            assert phrase == folded(phrase) == " ".join(phrase.split()), (field.name, phrase)


@pytest.mark.parametrize("table", time_words.LANGUAGES)
def test_every_language_names_every_month_weekday_and_season(table: time_words.TimeWords) -> None:
    assert set(table.months.values()) == set(range(1, 13))
    assert set(table.weekdays.values()) == set(range(7))
    assert set(table.seasons.values()) == set(time_words.SEASON_MONTHS)
    assert set(table.units.values()) == {"day", "week", "month", "year"}


@pytest.mark.parametrize(
    "query",
    [
        # English
        "who leads atlas now?",
        "our current deploy day",
        "the LATEST decision on auth",
        "what is Maria working on these days",
        # Spanish
        "¿Quién lidera Atlas ahora?",
        "¿En qué oficina trabaja Lucía actualmente?",
        "¿Dónde vive Pablo hoy en día?",
        "¿Cuál es el estado actual del proyecto?",
        "¿Sigue usando PagerDuty a día de hoy?",
        "¿Quién es el responsable en este momento?",
        # Portuguese
        "Quem lidera o Atlas agora?",
        "Onde fica o escritório da Ana atualmente?",
        "Em que cidade ele mora hoje em dia?",
        "qual é o estado atual?",
        "Quem é o gestor dela no momento?",
        "Quem lidera o projeto Atlas ATUALMENTE?",
    ],
)
def test_words_asking_for_the_present_in_each_language(query: str) -> None:
    assert asks_for_recent(query)


@pytest.mark.parametrize(
    "query",
    [
        "who leads atlas?",
        "knowledge of the currency exchange",
        "¿Quién lidera Atlas?",
        "¿Quién lideraba Atlas en marzo de 2025?",
        "Quem liderava o Atlas em maio de 2024?",
        "O que sabemos sobre o projeto Atlas?",
    ],
)
def test_questions_that_do_not_ask_for_the_present(query: str) -> None:
    assert not asks_for_recent(query)


def test_a_recency_word_typed_with_a_combining_accent_is_read() -> None:
    assert asks_for_recent("¿Dónde vive hoy en di\u0301a?")
