"""The words for time recall reads, one table per language: English, Spanish and Portuguese (the languages of the
product's documents).

Each `TimeWords` holds one language's month and weekday names, small numbers, units, seasons, the words that
shift a period ("last", "pasado", "que vem"), the ones that name today and its neighbours ("yesterday", "ayer",
"ontem"), those that make a period a bound ("since", "desde", "até"), ask for the present ("now", "ahora",
"atualmente") or name a landmark ("before", "antes de"). memory_server/ranking/periods.py builds its patterns
from the union of the tables, memory_server/ranking/recency.py, dates.py and landmarks.py their word lists.

Every word is written lowercase and composed (NFC), as languages.folded leaves a text: lookups fold what was
matched the same way. Common spellings without their accents are listed beside the accented ones where they
mean nothing else ("proxima", "dias", "miercoles"); "marco" (março) and Spanish "ano" (año) are not, as they
do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

Value = TypeVar("Value")

# Seasons by their English names, as (first month, last month): what a season word of any language stands for.
# The northern hemisphere's (a Brazilian "verão" is December to February: not told apart).
SEASON_MONTHS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "winter": (12, 2)}


@dataclass(frozen=True)
class TimeWords:
    """One language's time words (see the module docstring); the comment of each field gives English examples."""

    months: Mapping[str, int]  # "march", "mar" -> 3
    weekdays: Mapping[str, int]  # "monday" -> 0 ... "sunday" -> 6
    numbers: Mapping[str, int]  # "two" -> 2, "a few" -> 3
    units: Mapping[str, str]  # "weeks" -> "week" (day, week, month, year)
    weekend: tuple[str, ...]  # "weekend"
    seasons: Mapping[str, str]  # "fall" -> "autumn" (a key of SEASON_MONTHS)
    relative_days: Mapping[str, int]  # "yesterday" -> -1, "this morning" -> 0
    ago_before: tuple[str, ...]  # before "N units" ("hace dos semanas"); English has none
    ago_after: tuple[str, ...]  # after "N units" ("two weeks ago")
    shift_before: Mapping[str, int]  # before a unit, weekday or season: "last" -1, "next" 1, "this" 0
    shift_after: Mapping[str, int]  # after one ("la semana pasada"); English has none
    month_alone: tuple[str, ...]  # before a month named without its year: "in", "since"
    year_words: tuple[str, ...]  # before a year named alone: "in 2023", "since 2021"
    of: tuple[str, ...]  # between a day, month, season or quarter and what follows: "the 4th of May"
    articles: tuple[str, ...]  # before a day or a quarter's ordinal: "the"
    day_suffixes: tuple[str, ...]  # after a day's number: "4th"
    ordinals: Mapping[str, int]  # a quarter's: "second" -> 2
    quarter: tuple[str, ...]  # "quarter"
    range_words: tuple[str, ...]  # a period after them bounds a range: "since 2021", "before Q3 2024"
    recent: tuple[str, ...]  # a question with one asks for the present state: "now", "currently"
    before: tuple[str, ...]  # what follows names a landmark unless it is a date: "before Emacs"


def _numbered(words: str, first: int = 1) -> dict[str, int]:
    """Space-separated names, numbered in order from `first`; alternatives of one name joined by '/'."""
    return {alt: n for n, name in enumerate(words.split(), start=first) for alt in name.split("/")}


ENGLISH = TimeWords(
    months=_numbered("january february march april may june july august september october november december")
    | _numbered("jan feb mar apr may jun jul aug sep/sept oct nov dec"),
    weekdays=_numbered("monday tuesday wednesday thursday friday saturday sunday", first=0),
    numbers={"a": 1, "an": 1, "a couple of": 2, "a few": 3, "several": 3}
    | _numbered("one two three four five six seven eight nine ten eleven twelve"),
    units={"day": "day", "days": "day", "week": "week", "weeks": "week"}
    | {"month": "month", "months": "month", "year": "year", "years": "year"},
    weekend=("weekend",),
    seasons={"spring": "spring", "summer": "summer", "autumn": "autumn", "fall": "autumn", "winter": "winter"},
    relative_days={
        "today": 0,
        "tonight": 0,
        "this morning": 0,
        "this afternoon": 0,
        "this evening": 0,
        "yesterday": -1,
        "the day before yesterday": -2,
        "tomorrow": 1,
    },
    ago_before=(),
    ago_after=("ago",),
    shift_before={"last": -1, "next": 1, "this": 0},
    shift_after={},
    month_alone=("in", "last", "this", "since", "during"),
    year_words=("in", "of", "since", "during", "by", "before", "after"),
    of=("of",),
    articles=("the",),
    day_suffixes=("st", "nd", "rd", "th"),
    ordinals={"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4},
    quarter=("quarter",),
    range_words=("since", "after", "before", "until", "till", "between"),
    recent=tuple(
        "now nowadays current currently latest recent recently today newest anymore still presently".split()
        + ["right now", "most recent", "these days", "at the moment", "at present", "up to date", "any more"]
    ),
    before=("before",),
)

SPANISH = TimeWords(
    months=_numbered(
        "enero febrero marzo abril mayo junio julio agosto septiembre/setiembre octubre noviembre diciembre"
    ),
    weekdays=_numbered("lunes martes miércoles/miercoles jueves viernes sábado/sabado domingo", first=0),
    numbers={"un": 1, "una": 1, "un par de": 2, "unos cuantos": 3, "unas cuantas": 3, "varios": 3, "varias": 3}
    | _numbered("uno dos tres cuatro cinco seis siete ocho nueve diez once doce"),
    units={"día": "day", "días": "day", "dia": "day", "dias": "day", "semana": "week", "semanas": "week"}
    | {"mes": "month", "meses": "month", "año": "year", "años": "year"},
    weekend=("fin de semana",),
    seasons={"primavera": "spring", "verano": "summer", "otoño": "autumn", "invierno": "winter"},
    # "mañana" alone is as often the morning ("ayer por la mañana") as tomorrow: only "pasado mañana" is read.
    relative_days={
        "hoy": 0,
        "esta mañana": 0,
        "esta tarde": 0,
        "esta noche": 0,
        "ayer": -1,
        "anteayer": -2,
        "antes de ayer": -2,
        "antier": -2,
        "pasado mañana": 2,
    },
    ago_before=("hace",),
    ago_after=("atrás",),
    shift_before={"próximo": 1, "próxima": 1, "proximo": 1, "proxima": 1, "este": 0, "esta": 0, "pasado": -1}
    | {"último": -1, "última": -1},
    shift_after={"pasado": -1, "pasada": -1, "que viene": 1, "próximo": 1, "próxima": 1},
    month_alone=("en", "desde", "durante", "este", "pasado", "en el mes de", "desde el mes de"),
    year_words=("en", "de", "del", "desde", "durante", "hasta"),
    of=("de", "del"),
    articles=("el",),
    day_suffixes=("º", "°"),
    ordinals={"primer": 1, "primero": 1, "segundo": 2, "tercer": 3, "tercero": 3, "cuarto": 4},
    quarter=("trimestre",),
    range_words=("desde", "después", "despues", "antes", "hasta", "entre", "a partir"),
    recent=tuple(
        "ahora actualmente actual actuales hoy últimamente ultimamente reciente recientes recientemente vigente".split()
        + "último última últimos últimas ultimo ultima todavía todavia aún".split()
        + ["hoy en día", "hoy día", "a día de hoy", "en este momento", "en la actualidad", "ya no", "más reciente"]
    ),
    before=("antes de", "antes del"),
)

PORTUGUESE = TimeWords(
    months=_numbered("janeiro fevereiro março abril maio junho julho agosto setembro outubro novembro dezembro"),
    # The short weekday names ("segunda", "quinta") are also ordinals ("esta segunda versão"): only the full ones.
    weekdays=_numbered(
        "segunda-feira terça-feira/terca-feira quarta-feira quinta-feira sexta-feira sábado/sabado domingo", first=0
    ),
    numbers={"um par de": 2, "alguns": 3, "algumas": 3, "vários": 3, "várias": 3}
    | _numbered("um/uma dois/duas três/tres quatro cinco seis sete oito nove dez onze doze"),
    units={"dia": "day", "dias": "day", "semana": "week", "semanas": "week"}
    | {"mês": "month", "mes": "month", "meses": "month", "ano": "year", "anos": "year"},
    weekend=("fim de semana", "fim-de-semana"),
    seasons={"primavera": "spring", "verão": "summer", "verao": "summer", "outono": "autumn", "inverno": "winter"},
    relative_days={
        "hoje": 0,
        "esta manhã": 0,
        "esta tarde": 0,
        "esta noite": 0,
        "ontem": -1,
        "anteontem": -2,
        "antes de ontem": -2,
        "amanhã": 1,
        "depois de amanhã": 2,
    },
    ago_before=("há", "faz"),
    ago_after=("atrás", "atras"),
    shift_before={"próximo": 1, "próxima": 1, "proximo": 1, "proxima": 1, "este": 0, "esta": 0}
    | {"neste": 0, "nesta": 0, "último": -1, "última": -1},
    shift_after={"passado": -1, "passada": -1, "que vem": 1, "próximo": 1, "próxima": 1},
    month_alone=("em", "desde", "durante", "neste", "no mês de", "no mes de"),
    year_words=("em", "de", "do", "desde", "durante", "até"),
    of=("de", "do"),
    articles=("o",),
    day_suffixes=("º", "°"),
    ordinals={"primeiro": 1, "segundo": 2, "terceiro": 3, "quarto": 4, "1º": 1, "2º": 2, "3º": 3, "4º": 4},
    quarter=("trimestre",),
    range_words=("desde", "depois", "antes", "até", "ate", "entre", "a partir"),
    recent=tuple(
        "agora atualmente atual atuais hoje ultimamente recente recentes recentemente vigente".split()
        + "último última últimos últimas ultimo ultima ainda".split()
        + ["hoje em dia", "neste momento", "no momento", "já não", "mais recente"]
    ),
    before=("antes de", "antes do", "antes da", "antes dos", "antes das"),
)

LANGUAGES = (ENGLISH, SPANISH, PORTUGUESE)


def words(field: str) -> list[str]:
    """Every language's words of one field (the keys of a mapping), without repeats."""
    out: dict[str, None] = {}
    for language in LANGUAGES:
        out.update(dict.fromkeys(getattr(language, field)))
    return list(out)


def merged(tables: Iterable[Mapping[str, Value]]) -> dict[str, Value]:
    """Several languages' mappings of one field as one (a word two languages share means the same in both)."""
    out: dict[str, Value] = {}
    for table in tables:
        out.update(table)
    return out


def alternation(phrases: Iterable[str]) -> str:
    """A regular expression matching any of `phrases` (spaces match any run of white space), written as a trie:
    Python's engine tries an alternation's branches one by one at every position, a trie's first letters once
    (the hints of periods.py run on every text). A phrase and a longer one it starts both match, the longer
    first."""
    trie: Trie = {}
    for phrase in set(phrases):
        node = trie
        for token in re.findall(r"\s+|\S", phrase):
            node = node.setdefault(" " if token.isspace() else token, {})
        node[""] = {}
    return "(?:" + _branches(trie) + ")"


Trie = dict[str, "Trie"]


def _branches(node: Trie) -> str:
    children = [(r"\s+" if k == " " else re.escape(k)) + _branches(child) for k, child in sorted(node.items()) if k]
    if not children:
        return ""
    group = children[0] if len(children) == 1 else "(?:" + "|".join(children) + ")"
    return f"(?:{group})?" if "" in node else group
