"""Profiles and events: the dataset of bench/profiles.py, generated from templates and a seed.

Ten entities, seven people and three projects, each with its own bucket (`p-<name>`): a person's bucket is
what their own assistant keeps about them, so a first-person memory ("I moved to Porto in 2022") is
unambiguous there, and every question is asked within the entity's bucket. About 32 memories per entity,
one `remember` each, of types fact, event, preference and note, in three styles chosen at random:

- first person ("I moved to Porto in 2022.", "We ship Atlas on Tuesdays."),
- third person ("Ana moved to Porto in 2022."),
- terse notes ("Ana — Porto — since 2022").

Dates come in many formats (2023-05-08, May 8th, 2023, 8 May 2023, 8/5/23 for a day-first writer and 5/8/23
for a month-first one, 08.05.2023, May '23, 2023-05), or relative to the memory's `occurred_at` ("today",
"yesterday", "last month", "last spring"), where only `occurred_at` says when it happened.

Question categories (gold: one or more memories, computed from the structured facts behind them):
- attribute: an attribute of the entity, named but not valued ("Where does Ana live?", "Who is my dentist?");
- single_fact: a fact looked up by a cue it contains ("When did Ana go to Kyoto?");
- event_by_date: what happened on a day or in a month, the date written differently from the memory;
- relative_date: the same for events dated only relative to `occurred_at` ("yesterday", "last spring");
- category: a category whose instances the memories name without the category word ("Does Ana have any
  pets?" -> "my dog Rex", "Miso, her cat");
- preference: a likes/dislikes/habits question ("How does Ana take her coffee?").

Ambiguity rules: a date question's gold is every dated memory whose date lies wholly inside the question's
period; a question is dropped when another memory's date, as precise as the question's or more, overlaps the
period without lying inside it. Cue values (destinations, bands, courses...) are unique within an entity, and
every content is unique.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from typing import Any

from bench.datasets.common import MONTHS, MONTHS_SHORT, at, month_end, ordinal, rfc3339

DEFAULT_SEED = 11
N_PEOPLE = 7
N_PROJECTS = 3
EVENT_FIRST = date(2021, 3, 1)
EVENT_LAST = date(2025, 10, 31)
GRANULARITY = {"day": 0, "month": 1, "season": 2, "year": 3}
SEASONS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11)}

PEOPLE = (
    ("Ana", "Ferreira", "she", "dmy"),
    ("Tom", "Becker", "he", "dmy"),
    ("Priya", "Nair", "she", "dmy"),
    ("Marcus", "Green", "he", "mdy"),
    ("Sofia", "Rossi", "she", "dmy"),
    ("Kenji", "Watanabe", "he", "mdy"),
    ("Lena", "Novak", "she", "dmy"),
    ("David", "Okoro", "he", "mdy"),
    ("Chloe", "Martin", "she", "mdy"),
    ("Ravi", "Menon", "he", "dmy"),
)
PROJECTS = ("Atlas", "Beacon", "Cinder", "Drift", "Ember")


def _t(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split("|"))


# Value pools; every entity draws distinct values so that no cue repeats within a bucket.
POOLS: dict[str, tuple[str, ...]] = {
    "city": _t("Porto | Lyon | Leipzig | Valencia | Ghent | Gothenburg | Bologna | Kraków | Edinburgh | Utrecht"),
    "town": _t("Braga | Aarhus | Coimbra | Pune | Tampere | Graz | Cork | Salzburg | Kochi | Trieste"),
    "title_employer": _t(
        "nurse at Hospital Santa Maria | data analyst at Northwind | primary school teacher at "
        "Escola da Ponte | mechanical engineer at Vestas | UX designer at Figment | pharmacist at "
        "Boots | backend developer at Mollie | architect at Snøhetta | sous-chef at Bistro Lune | "
        "physiotherapist at FitClinic"
    ),
    "degree": _t(
        "a BSc in Biology from the University of Porto | an MSc in Statistics from KU Leuven | a BA in "
        "History from Trinity College Dublin | a BEng in Mechanical Engineering from TU Delft | an MA in "
        "Design from the Royal College of Art | a BSc in Pharmacy from King's College London | a BSc in "
        "Computer Science from ETH Zurich | a BArch from the Oslo School of Architecture"
    ),
    "partner": _t("João | Mira | Daniel | Yusuf | Clara | Ingrid | Mateo | Hannah | Omar | Elif"),
    "kid": _t(
        "Leo:son | Maya:daughter | Noah:son | Iris:daughter | Theo:son | Alma:daughter | Felix:son | "
        "Nina:daughter | Oscar:son | Lila:daughter"
    ),
    "pet": _t(
        "dog:Rex:border collie | cat:Miso:tabby | dog:Biscuit:beagle | parrot:Kiwi:grey parrot | "
        "rabbit:Clover:lop-eared rabbit | cat:Pepper:Siamese | tortoise:Sheldon:Greek tortoise | "
        "dog:Luna:greyhound | cat:Nori:black cat | hamster:Peanut:Syrian hamster"
    ),
    "instrument": _t("cello | bass guitar | piano | ukulele | drums | violin | saxophone | accordion"),
    "sport": _t(
        "bouldering:I go bouldering at the Klimmhal twice a week | padel:I play padel on Tuesday evenings | "
        "swimming:I swim 2 km before work on Mondays | cycling:I do a long bike ride every Sunday | "
        "yoga:I do yoga at home most mornings | tennis:I play tennis with my neighbour on Saturdays | "
        "rowing:I row on the river with a club on Thursdays | judo:I train judo twice a week"
    ),
    "language": _t(
        "Portuguese, English and some French | German, English and Turkish | Hindi, Malayalam and "
        "English | English and Spanish | Italian, English and a bit of Japanese | Japanese and English | "
        "Czech, Slovak and English | Yoruba, English and French"
    ),
    "allergy": _t("penicillin | peanuts | shellfish | birch pollen | latex | sesame"),
    "diet": _t("vegetarian | vegan | pescatarian | gluten-free"),
    "vehicle": _t(
        "a 2015 VW Golf | a cargo bike | a Tesla Model 3 | a Vespa scooter | a 2009 Toyota Corolla | "
        "an electric Brompton | a Fiat Panda | a Honda CB500 motorbike"
    ),
    "dentist": _t(
        "Dr. Silva at Clínica Sorriso | Dr. Hoffmann in the old town | Dr. Mehta at SmileCare | "
        "Dr. Brooks on Elm Street | Dr. Conti at Studio Dentistico | Dr. Sato at Bright Dental | "
        "Dr. Novotná at DentaPlus | Dr. Adeyemi at Parkside Dental"
    ),
    "coffee": _t(
        "a flat white with oat milk | a double espresso, no sugar | an iced latte | black filter coffee | "
        "a cortado | a cappuccino with cinnamon"
    ),
    "music": _t("jazz | 80s synth-pop | bossa nova | techno | classical piano | indie folk | afrobeat | metal"),
    "cuisine": _t("Japanese | Ethiopian | Lebanese | Peruvian | Sichuan | Georgian | Vietnamese | Mexican"),
    "seat": _t("an aisle seat | a window seat"),
    "reading": _t("science fiction | crime novels | history books | poetry | graphic novels | biographies"),
    "rhythm": _t("a morning person who does deep work before 10am | a night owl who works best after 9pm"),
    "contact": _t(
        "voice notes rather than calls | email rather than chat | a text message first, never a "
        "surprise call | a short video call rather than long threads"
    ),
    "holiday": _t(
        "hiking holidays in the mountains | city breaks with lots of museums | lazy beach holidays | "
        "camping with a tent | long train journeys"
    ),
    "dislike": _t("cilantro | olives | mushrooms | very spicy food | raw onion | blue cheese"),
    "film": _t("Spirited Away | The Grand Budapest Hotel | Amélie | Parasite | Arrival | Cinema Paradiso"),
    "dest": _t(
        "Kyoto | Lima | Reykjavík | Marrakesh | Hanoi | Cape Town | Oaxaca | Tbilisi | Queenstown | "
        "Istanbul | Cartagena | Seoul | Zanzibar | Lofoten"
    ),
    "trip_detail": _t(
        "the food was incredible | we hiked for three days | it rained most of the week | we "
        "rented a tiny car | we stayed with friends | the trains were perfect | we took a "
        "cooking class"
    ),
    "race": _t(
        "Lisbon half marathon:1:52 | Berlin 10K:48:10 | Porto marathon:4:05 | Valencia half marathon:1:47 | "
        "city 5K fun run:26:30 | Amsterdam 10K:51:02 | Rotterdam marathon:3:58"
    ),
    "band": _t(
        "Radiohead | Khruangbin | Arctic Monkeys | Rosalía | Bon Iver | Daft Punk tribute band | "
        "Snarky Puppy | Florence + the Machine"
    ),
    "venue": _t("the Coliseu | Paradiso | Tempodrom | the O2 | Primavera Sound | the Roundhouse"),
    "surgery": _t("knee surgery | wisdom tooth surgery | an appendectomy | shoulder surgery | laser eye surgery"),
    "weeks": _t("two | three | four | six"),
    "conf": _t(
        "PyCon Portugal | KubeCon Europe | a local meetup | JSConf | the regional nursing congress | Design Week"
    ),
    "talk_topic": _t(
        "burnout prevention | accessible forms | zero-downtime migrations | hospital logistics | "
        "teaching with games | sustainable packaging"
    ),
    "course": _t(
        "a pottery course | a sourdough baking class | a first-aid course | a scuba certification | "
        "a photography workshop | a Spanish immersion week | a woodworking course"
    ),
    "org": _t(
        "the city food bank | a beach clean-up | the animal shelter | a coding workshop for kids | the community garden"
    ),
    "guests": _t("six | eight | ten | twelve"),
    "dish": _t("a huge paella | homemade ramen | a lasagne | tacos al pastor | a Sunday roast | bobotie"),
    "airport": _t("Heathrow | Schiphol | Frankfurt airport | JFK | Lisbon airport | Changi"),
}
PROJECT_POOLS: dict[str, tuple[str, ...]] = {
    "language": _t("Go | Rust | TypeScript | Kotlin | Elixir"),
    "database": _t("PostgreSQL 16 | MySQL 8 | MongoDB | ClickHouse | SQLite with Litestream"),
    "hosting": _t(
        "AWS in eu-west-1 | Google Cloud in europe-west4 | Hetzner in Falkenstein | Fly.io | Azure in West Europe"
    ),
    "license": _t("Apache-2.0 | MIT | AGPL-3.0 | BSD-3-Clause | proprietary, internal only"),
    "lead": _t("Jonas Berg | Aisha Okafor | Hiro Sato | Grace Kim | Samir Haddad"),
    "designer": _t("Mei Chen | Oscar Nilsson | Rosa Costa | Tara Fischer | Umar Malik"),
    "slo": _t(
        "99.9% monthly availability | 99.95% of requests under 300 ms | 99.5% availability during business "
        "hours | 99.99% for the write path"
    ),
    "sync": _t("Tuesdays at 10:00 | Mondays at 14:00 | Thursdays at 16:30 | Wednesdays at 9:30"),
    "docs": _t("the Notion space | docs/ in the repo | the Confluence wiki | a Google Drive folder"),
    "vendor": _t(
        "payments:Stripe handles card payments | sms:Twilio sends the SMS codes | auth:Auth0 handles "
        "sign-in | errors:Sentry collects the errors | email:Postmark sends the transactional email | "
        "search:Algolia powers the search box | maps:Mapbox draws the maps"
    ),
    "customer": _t(
        "Globex | Initech | Umbrella Health | Stark Logistics | Wayne Foods | Acme Retail | "
        "Tyrell Energy | Soylent Labs | Hooli Travel"
    ),
    "customer_use": _t(
        "uses it for invoicing | runs its warehouse scans through it | uses it for patient "
        "scheduling | pipes all its delivery tracking through it | uses it for supplier orders"
    ),
    "release": _t("v1.0 | v1.2 | v1.5 | v2.0 | v2.1 | v3.0"),
    "highlight": _t(
        "the new onboarding flow | offline mode | bulk export | single sign-on | dark mode | a "
        "rewritten sync engine | audit logs"
    ),
    "cause": _t(
        "an expired TLS certificate | a runaway cron job | a bad DNS change | a full disk on the primary "
        "database | a leaked API key that had to be rotated | a memory leak in the worker pool"
    ),
    "duration": _t("40 minutes | two hours | six hours | 15 minutes | most of a day"),
    "ci_move": _t("Jenkins to GitHub Actions | CircleCI to Buildkite | Travis CI to GitLab CI"),
    "offsite": _t("Porto | Tallinn | Seville | Bergen | Ljubljana"),
    "hire": _t("Noor Ibrahim | Felix Lang | Esme Walsh | Bruno Rocha | Chiara Conti"),
    "audit": _t("its SOC 2 Type II audit | the ISO 27001 audit | an external penetration test | the GDPR review"),
}

# A preference-like rule for projects: (content in three styles, third-person questions, first-person questions)
PROJECT_RULES = (
    (
        "squash",
        "We squash-merge every pull request on {p}. | {p} squash-merges every pull request. | {p} — merges: "
        "squash only",
        "How are pull requests merged on {p}? | What merge strategy does {p} use?",
        "How do we merge pull requests on {p}?",
    ),
    (
        "friday",
        "We never deploy {p} on Fridays. | {p} has a no-deploys-on-Friday rule. | {p} — no Friday deploys",
        "Can {p} be deployed on a Friday? | What is {p}'s rule about Friday deploys?",
        "Are we allowed to deploy {p} on Fridays?",
    ),
    (
        "adr",
        "We write an ADR for every architecture decision on {p}. | {p} records each architecture decision as "
        "an ADR. | {p} — decisions: one ADR each",
        "How are architecture decisions recorded on {p}?",
        "Where do we write down architecture decisions for {p}?",
    ),
    (
        "flags",
        "We prefer feature flags over long-lived branches on {p}. | {p} prefers feature flags to long-lived "
        "branches. | {p} — branching: trunk + feature flags",
        "What is {p}'s branching policy?",
        "Do we use long-lived branches on {p}?",
    ),
    (
        "style",
        "Our {p} code style is ruff with a line length of 100. | {p} uses ruff with a 100-character line "
        "length. | {p} — style: ruff, line length 100",
        "What code style does {p} follow?",
        "Which formatter settings do we use on {p}?",
    ),
    (
        "reviewers",
        "Anything touching billing in {p} needs two reviewers. | {p} requires two reviewers on billing "
        "changes. | {p} — billing changes: 2 reviewers",
        "How many reviewers does a billing change in {p} need?",
        "How many people must review our billing changes in {p}?",
    ),
    (
        "tests",
        "We keep the {p} test suite under five minutes. | {p}'s test suite must run in under five minutes. | "
        "{p} — CI budget: tests < 5 min",
        "How long may {p}'s test suite take?",
        "What is our time budget for the {p} tests?",
    ),
)


@dataclass
class Memory:
    key: str
    entity: str
    bucket: str
    content: str
    type: str
    occurred_at: str
    style: str  # first, third, terse
    attribute: str | None = None
    categories: tuple[str, ...] = ()
    period: tuple[str, str, str] | None = None  # (first day, last day, granularity) of what it tells about
    dating: str | None = None  # explicit | relative | occurred_at, for dated memories

    def remember_body(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "type": self.type,
            "bucket": self.bucket,
            "occurred_at": self.occurred_at,
            "metadata": {"key": self.key},
        }

    def span(self) -> tuple[date, date, int] | None:
        if not self.period:
            return None
        return date.fromisoformat(self.period[0]), date.fromisoformat(self.period[1]), GRANULARITY[self.period[2]]


@dataclass
class Question:
    id: str
    entity: str
    bucket: str
    text: str
    category: str
    gold: list[str]
    period: tuple[str, str, str] | None = None  # for date questions


@dataclass
class Dataset:
    seed: int
    memories: list[Memory]
    questions: list[Question]
    entities: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "entities": self.entities,
            "memories": [asdict(m) for m in self.memories],
            "questions": [asdict(q) for q in self.questions],
        }


# --- dates ---------------------------------------------------------------------------------------------


def day_formats(day: date, locale: str) -> dict[str, str]:
    """Every way a day is written here; numeric forms follow the writer's locale (dmy or mdy)."""
    month, short = MONTHS[day.month - 1], MONTHS_SHORT[day.month - 1]
    formats = {
        "iso": day.isoformat(),
        "us_long": f"{month} {day.day}, {day.year}",
        "us_ordinal": f"{month} {ordinal(day.day)}, {day.year}",
        "eu_long": f"{day.day} {month} {day.year}",
        "eu_ordinal": f"the {ordinal(day.day)} of {month} {day.year}",
        "short": f"{day.day} {short} {day.year}" if locale == "dmy" else f"{short} {day.day}, {day.year}",
        "numeric": (
            f"{day.day}/{day.month}/{day.year % 100:02d}"
            if locale == "dmy"
            else f"{day.month}/{day.day}/{day.year % 100:02d}"
        ),
    }
    if locale == "dmy":
        formats["dotted"] = f"{day.day:02d}.{day.month:02d}.{day.year}"
    return formats


def day_text(rng: random.Random, day: date, locale: str, *, exclude: str | None = None) -> tuple[str, str]:
    """(format name, text) for a calendar day in one of the formats, never the format `exclude`."""
    formats = day_formats(day, locale)
    name = rng.choice([n for n in formats if n != exclude])
    return name, formats[name]


def month_formats(year: int, month: int) -> dict[str, str]:
    return {
        "long": f"{MONTHS[month - 1]} {year}",
        "apostrophe": f"{MONTHS[month - 1]} '{year % 100:02d}",
        "iso": f"{year}-{month:02d}",
        "short": f"{MONTHS_SHORT[month - 1]} {year}",
    }


def month_text(rng: random.Random, year: int, month: int, *, exclude: str | None = None) -> tuple[str, str]:
    formats = month_formats(year, month)
    name = rng.choice([n for n in formats if n != exclude])
    return name, formats[name]


def season_of(day: date) -> str | None:
    for name, (first, last) in SEASONS.items():
        if first <= day.month <= last:
            return name
    return None


# --- generation ----------------------------------------------------------------------------------------


class Builder:
    """Accumulates one entity's memories; knows how to phrase dates and pick unique pool values."""

    def __init__(
        self,
        rng: random.Random,
        entity: str,
        bucket: str,
        *,
        name: str,
        full: str,
        pronoun: str,
        locale: str,
        voice: str,
    ) -> None:
        self.rng, self.entity, self.bucket = rng, entity, bucket
        self.name, self.full, self.locale, self.voice = name, full, locale, voice
        self.he = pronoun
        self.his = {"she": "her", "he": "his"}.get(pronoun, "their")
        self.memories: list[Memory] = []
        self.questions: list[tuple[str, str, list[str], tuple[str, str, str] | None]] = []  # + date period
        self.used: dict[str, set[str]] = {}
        self.event_months: set[tuple[int, int]] = set()

    def pick(self, pool: str, pools: dict[str, tuple[str, ...]] = POOLS) -> str:
        """A value of `pool` this entity has not used yet (cues never repeat within a bucket)."""
        used = self.used.setdefault(pool, set())
        value = self.rng.choice([v for v in pools[pool] if v not in used])
        used.add(value)
        return value

    def style(self) -> str:
        return self.rng.choices(("first", "third", "terse"), weights=(4, 4, 2))[0]

    def told_at(self, after: date, *, max_days: int = 500) -> date:
        """When the user told the assistant about something that happened on `after` (later, before 2026)."""
        last = min(date(2025, 12, 20), after + timedelta(days=max_days))
        return after + timedelta(days=self.rng.randint(1, max(1, (last - after).days)))

    def add(self, key: str, content: str, type_: str, told: date, style: str, **extra: Any) -> Memory:
        content = content[:1].upper() + content[1:]
        memory = Memory(
            f"{self.entity}/{key}",
            self.entity,
            self.bucket,
            content,
            type_,
            rfc3339(at(told, self.rng.randint(7, 21), self.rng.randrange(60))),
            style,
            **extra,
        )
        self.memories.append(memory)
        return memory

    def ask(self, category: str, text: str, gold: list[Memory]) -> None:
        text = text[:1].upper() + text[1:]
        self.questions.append((category, text, [m.key for m in gold], None))

    def ask_about(self, category: str, third: str, first: str, gold: list[Memory], *, both: bool = True) -> None:
        """One question in the third person and, if `both`, one in the first ("Where do I live?")."""
        forms = [self.rng.choice(_t(third)).format(n=self.name, his=self.his, he=self.he)]
        if both and first:
            forms.append(self.rng.choice(_t(first)).format(n=self.name, his=self.his, he=self.he))
        for text in forms:
            self.ask(category, text, gold)

    def event_day(self) -> date:
        """A day between 2021 and 2025 in a month no other event of this entity uses."""
        while True:
            day = EVENT_FIRST + timedelta(days=self.rng.randrange((EVENT_LAST - EVENT_FIRST).days))
            if (day.year, day.month) not in self.event_months:
                self.event_months.add((day.year, day.month))
                return day

    def dated(self, day: date, *, allow_relative: bool = True) -> dict[str, Any]:
        """How an event on `day` is dated in its memory: the phrase, the period it implies, when it was told."""
        rng = self.rng
        roll = rng.random()
        if allow_relative and roll < 0.35:
            kind = rng.choice(("today", "yesterday", "last_month", "last_season"))
            if kind == "today":
                return {
                    "when": rng.choice(("today", "this morning", "earlier today")),
                    "bare": "today",
                    "period": (day, day, "day"),
                    "told": day,
                    "dating": "occurred_at",
                }
            if kind == "yesterday":
                return {
                    "when": "yesterday",
                    "bare": "yesterday",
                    "period": (day, day, "day"),
                    "told": day + timedelta(days=1),
                    "dating": "relative",
                }
            if kind == "last_month":
                y, m = (day.year + 1, 1) if day.month == 12 else (day.year, day.month + 1)
                told = date(y, m, rng.randint(3, 25))
                return {
                    "when": "last month",
                    "bare": "last month",
                    "period": (date(day.year, day.month, 1), month_end(day.year, day.month), "month"),
                    "told": told,
                    "dating": "relative",
                }
            season = season_of(day)
            if season:
                first, last = SEASONS[season]
                # told after the season and before the next one of the same name starts
                told = month_end(day.year, last) + timedelta(days=rng.randint(20, 120))
                return {
                    "when": f"last {season}",
                    "bare": f"last {season}",
                    "period": (date(day.year, first, 1), month_end(day.year, last), "season"),
                    "told": told,
                    "dating": "relative",
                }
        if roll < 0.8:
            fmt, text = day_text(rng, day, self.locale)
            told = day if rng.random() < 0.3 else self.told_at(day)
            return {
                "when": f"on {text}",
                "bare": text,
                "period": (day, day, "day"),
                "told": told,
                "dating": "explicit",
                "format": fmt,
            }
        fmt, text = month_text(rng, day.year, day.month)
        return {
            "when": f"in {text}",
            "bare": text,
            "period": (date(day.year, day.month, 1), month_end(day.year, day.month), "month"),
            "told": self.told_at(month_end(day.year, day.month)),
            "dating": "explicit",
            "format": fmt,
        }

    def event(
        self,
        key: str,
        templates: dict[str, str],
        values: dict[str, str],
        *,
        categories: tuple[str, ...] = (),
        type_: str = "event",
        allow_relative: bool = True,
        day: date | None = None,
    ) -> Memory:
        day = day or self.event_day()
        d = self.dated(day, allow_relative=allow_relative)
        style = self.style()
        text = self.rng.choice(_t(templates[style])).format(
            n=self.name, his=self.his, he=self.he, when=d["when"], bare=d["bare"], **values
        )
        start, end, granularity = d["period"]
        return self.add(
            key,
            text,
            type_,
            d["told"],
            style,
            categories=categories,
            period=(start.isoformat(), end.isoformat(), granularity),
            dating=d["dating"],
        )

    def fact(
        self,
        key: str,
        templates: dict[str, str],
        values: dict[str, str],
        *,
        type_: str = "fact",
        told: date | None = None,
        categories: tuple[str, ...] = (),
        attribute: str | None = None,
        period: tuple[date, date, str] | None = None,
    ) -> Memory:
        style = self.style()
        text = self.rng.choice(_t(templates[style])).format(n=self.name, his=self.his, he=self.he, **values)
        if told is None and period is not None:
            told = self.told_at(max(period[1], date(2021, 6, 1)), max_days=1200)  # told after it happened
        elif told is None:
            told = date(2022, 1, 10) + timedelta(days=self.rng.randrange(1400))
        return self.add(
            key,
            text,
            type_,
            told,
            style,
            categories=categories,
            attribute=attribute,
            period=(period[0].isoformat(), period[1].isoformat(), period[2]) if period else None,
            dating="explicit" if period else None,
        )


def _styles(first: str, third: str, terse: str) -> dict[str, str]:
    return {"first": first, "third": third, "terse": terse}


def _person(rng: random.Random, person: tuple[str, str, str, str]) -> Builder:
    first_name, last, pronoun, locale = person
    b = Builder(
        rng,
        f"person:{first_name.lower()}",
        f"p-{first_name.lower()}",
        name=first_name,
        full=f"{first_name} {last}",
        pronoun=pronoun,
        locale=locale,
        voice="I",
    )
    n, F = first_name, _styles
    year = rng.randint(2016, 2023)
    city = b.pick("city")
    home = b.fact(
        "home",
        F(
            f"I moved to {{city}} in {year}. | I've been living in {{city}} since {year}.",
            f"{{n}} moved to {{city}} in {year}. | {{n}} lives in {{city}}, since {year}.",
            f"{{n}} — {{city}} — since {year} | Home: {{city}} ({{n}}, since {year})",
        ),
        {"city": city},
        attribute="home",
        period=(date(year, 1, 1), date(year, 12, 31), "year"),
    )
    b.ask_about(
        "attribute",
        "Where does {n} live? | Which city is {n} based in? | What city does {n} call home?",
        "Where do I live? | Which city am I living in?",
        [home],
    )
    b.ask_about(
        "single_fact",
        f"When did {{n}} move to {city}? | How long has {{n}} lived in {city}?",
        f"When did I move to {city}?",
        [home],
        both=False,
    )
    town = b.pick("town")
    hometown = b.fact(
        "hometown",
        F(
            "I grew up in {town}. | I'm originally from {town}.",
            "{n} grew up in {town}. | {n} is originally from {town}.",
            "{n}: hometown {town} | Hometown — {town}",
        ),
        {"town": town},
        attribute="hometown",
    )
    b.ask_about(
        "attribute",
        "Where did {n} grow up? | Where is {n} originally from?",
        "Where did I grow up? | What's my hometown?",
        [hometown],
    )
    job = b.pick("title_employer")
    title, employer = job.split(" at ")
    started = b.event_day()
    m_fmt, m_text = month_text(rng, started.year, started.month)
    work = b.fact(
        "job",
        F(
            f"I work as {{a}} {{title}} at {{employer}}; I started in {m_text}. | I'm {{a}} {{title}} at "
            f"{{employer}} (since {m_text}).",
            f"{{n}} works as {{a}} {{title}} at {{employer}}, since {m_text}. | {{n}} has been {{a}} "
            f"{{title}} at {{employer}} since {m_text}.",
            f"{{n}} — {{title}}, {{employer}} — started {m_text} | Job: {{title}} @ {{employer}} (from {m_text})",
        ),
        {"title": title, "employer": employer, "a": "an" if title[0] in "aeiou" else "a"},
        attribute="job",
        period=(date(started.year, started.month, 1), month_end(started.year, started.month), "month"),
    )
    b.ask_about(
        "attribute",
        "What does {n} do for a living? | What's {n}'s job? | Where does {n} work?",
        "What do I do for work? | Where do I work?",
        [work],
    )
    b.ask_about(
        "single_fact",
        f"When did {{n}} start working at {employer}?",
        f"When did I join {employer}?",
        [work],
        both=rng.random() < 0.5,
    )
    degree = b.pick("degree")
    grad = rng.randint(2008, 2019)
    study = b.fact(
        "education",
        F(
            f"I have {{degree}} ({grad}). | I graduated in {grad} with {{degree}}.",
            f"{{n}} has {{degree}}, class of {grad}. | {{n}} graduated in {grad} with {{degree}}.",
            f"{{n}} — education: {{degree}}, {grad}",
        ),
        {"degree": degree},
        attribute="education",
        period=(date(grad, 1, 1), date(grad, 12, 31), "year"),
    )
    b.ask_about(
        "attribute",
        "Where did {n} study? | What degree does {n} have?",
        "What did I study at university? | Which university did I go to?",
        [study],
    )
    partner = b.pick("partner")
    together = rng.randint(2010, 2020)
    family: list[Memory] = []
    family.append(
        b.fact(
            "partner",
            F(
                f"My partner is {{partner}}; we've been together since {together}. | "
                f"I married {{partner}} in {together}.",
                f"{{n}}'s partner is {{partner}} (together since {together}). | {{n}} married "
                f"{{partner}} in {together}.",
                f"{{n}} — partner: {{partner}} (since {together})",
            ),
            {"partner": partner},
            attribute="partner",
            categories=("family",),
            period=(date(together, 1, 1), date(together, 12, 31), "year"),
        )
    )
    b.ask_about(
        "attribute",
        "Who is {n}'s partner? | What's the name of {n}'s partner?",
        "What's my partner's name? | Who am I married to?",
        [family[-1]],
    )
    for k in range(rng.choice((0, 1, 1, 2))):
        kid, word = b.pick("kid").split(":")
        born = rng.randint(2012, 2022)
        family.append(
            b.fact(
                f"kid{k}",
                F(
                    f"My {word} {{kid}} was born in {born}. | {{kid}}, my {word}, was born in {born}.",
                    f"{{n}}'s {word} {{kid}} was born in {born}. | {{n}} has a {word}, {{kid}}, born {born}.",
                    f"{{n}} — {word} {{kid}}, b. {born}",
                ),
                {"kid": kid},
                categories=("family",),
                period=(date(born, 1, 1), date(born, 12, 31), "year"),
            )
        )
        b.ask_about(
            "single_fact",
            f"When was {{n}}'s {word} {kid} born?",
            f"What year was {kid} born?",
            [family[-1]],
            both=False,
        )
    pets = []
    for k in range(rng.choice((1, 1, 2))):
        species, pet, breed = b.pick("pet").split(":")
        adopted = rng.randint(2015, 2024)
        pets.append(
            b.fact(
                f"pet{k}",
                F(
                    f"My {species} {{pet}} is a {breed}; we adopted {{pet}} in {adopted}. | "
                    f"{{pet}}, my {breed}, has been with me since {adopted}.",
                    f"{{n}} has a {breed} called {{pet}}, adopted in {adopted}. | {{pet}} is "
                    f"{{n}}'s {breed} ({adopted}).",
                    f"{{n}} — {species}: {{pet}} ({breed}, since {adopted})",
                ),
                {"pet": pet},
                categories=("pets",),
                period=(date(adopted, 1, 1), date(adopted, 12, 31), "year"),
            )
        )
        b.ask_about(
            "single_fact",
            f"What kind of animal is {pet}? | What breed is {pet}?",
            f"When did I get {pet}?",
            [pets[-1]],
            both=rng.random() < 0.5,
        )
    instruments = []
    for k in range(rng.choice((0, 1, 1, 2))):
        instrument = b.pick("instrument")
        instruments.append(
            b.fact(
                f"instrument{k}",
                F(
                    "I've been learning the {i} for a couple of years. | I play the {i} in a small band.",
                    "{n} plays the {i}. | {n} has been taking {i} lessons.",
                    "{n} — plays {i}",
                ),
                {"i": instrument},
                categories=("music",),
            )
        )
    sports = []
    for k in range(rng.choice((1, 2))):
        sport, sentence = b.pick("sport").split(":")
        third = (
            sentence.replace("I go", f"{n} goes")
            .replace("I play", f"{n} plays")
            .replace("I swim", f"{n} swims")
            .replace("I do", f"{n} does")
            .replace("I row", f"{n} rows")
            .replace("I train", f"{n} trains")
            .replace("my neighbour", f"{b.his} neighbour")
        )
        sports.append(
            b.fact(f"sport{k}", F(sentence + ".", third + ".", f"{{n}} — {sport}"), {}, categories=("sports",))
        )
    languages = b.fact(
        "languages",
        F("I speak {l}. | My languages: {l}.", "{n} speaks {l}.", "{n} — languages: {l}"),
        {"l": b.pick("language")},
        attribute="languages",
    )
    b.ask_about("attribute", "Which languages does {n} speak?", "What languages do I speak?", [languages])
    allergy = b.fact(
        "allergy",
        F(
            "I'm allergic to {a}. | Heads-up: I have an allergy to {a}.",
            "{n} is allergic to {a}.",
            "{n} — allergy: {a}",
        ),
        {"a": b.pick("allergy")},
        attribute="allergy",
        categories=("health",),
    )
    b.ask_about(
        "attribute", "What is {n} allergic to? | Does {n} have any allergies?", "What am I allergic to?", [allergy]
    )
    if rng.random() < 0.7:
        since = rng.randint(2012, 2022)
        diet = b.fact(
            "diet",
            F(
                f"I've been {{d}} since {since}. | I eat {{d}}.",
                f"{{n}} has been {{d}} since {since}.",
                "{n} — diet: {d}",
            ),
            {"d": b.pick("diet")},
            type_="preference",
            attribute="diet",
        )
        b.ask_about(
            "preference",
            "What diet does {n} follow? | Does {n} have dietary restrictions?",
            "What do I eat, diet-wise?",
            [diet],
            both=rng.random() < 0.5,
        )
    vehicles = []
    for k in range(rng.choice((1, 1, 2))):
        vehicle = b.pick("vehicle")
        ride = any(word in vehicle for word in ("bike", "scooter", "Brompton"))
        vehicles.append(
            b.fact(
                f"vehicle{k}",
                F(
                    "I get around on {v}. | I ride {v} everywhere." if ride else "I drive {v}. | My car is {v}.",
                    "{n} gets around on {v}." if ride else "{n} drives {v}.",
                    "{n} — wheels: {v}",
                ),
                {"v": vehicle},
                categories=("vehicles",),
            )
        )
    dentist = b.fact(
        "dentist",
        F("My dentist is {d}.", "{n}'s dentist is {d}.", "{n} — dentist: {d}"),
        {"d": b.pick("dentist")},
        attribute="dentist",
    )
    b.ask_about("attribute", "Who is {n}'s dentist?", "Who's my dentist? | Which dentist do I go to?", [dentist])
    birth = date(rng.randint(1975, 2000), rng.randint(1, 12), rng.randint(1, 28))
    _, birth_text = day_text(rng, birth, locale)
    birthday = b.fact(
        "birthday",
        F(
            f"I was born on {birth_text}. | My birthday: {birth_text}.",
            f"{{n}} was born on {birth_text}.",
            f"{{n}} — DOB {birth_text}",
        ),
        {},
        attribute="birthday",
        period=(birth, birth, "day"),
    )
    b.ask_about("attribute", "When is {n}'s birthday? | When was {n} born?", "When is my birthday?", [birthday])

    # preferences
    prefs = [
        (
            "coffee",
            "I always order {v}. | My usual coffee is {v}.",
            "{n}'s usual coffee is {v}. | {n} drinks {v}.",
            "{n} — coffee: {v}",
            "How does {n} take coffee? | What is {n}'s usual coffee order?",
            "What's my usual coffee order?",
        ),
        (
            "music",
            "I mostly listen to {v}. | {V} is my favourite music.",
            "{n} mostly listens to {v}.",
            "{n} — music: {v}",
            "What music does {n} like? | What kind of music does {n} listen to?",
            "What kind of music do I like?",
        ),
        (
            "cuisine",
            "{V} food is my favourite. | My favourite cuisine is {v}.",
            "{n}'s favourite cuisine is {v}.",
            "{n} — favourite food: {v}",
            "What is {n}'s favourite cuisine? | What kind of food does {n} love?",
            "What's my favourite kind of food?",
        ),
        (
            "seat",
            "On flights I always want {v}. | Book me {v} when I fly.",
            "{n} always wants {v} on flights.",
            "{n} — flights: {v}",
            "Window or aisle: what seat does {n} want on flights?",
            "Which seat should you book for me on a plane?",
        ),
        (
            "reading",
            "I read mostly {v}. | I love {v}.",
            "{n} reads mostly {v}.",
            "{n} — reads {v}",
            "What does {n} like to read? | What kind of books does {n} enjoy?",
            "What books do I like?",
        ),
        (
            "rhythm",
            "I'm {v}. | Honestly, I'm {v}.",
            "{n} is {v}.",
            "{n} — {v}",
            "Is {n} a morning person or a night owl? | When is {n} most productive?",
            "When do I work best?",
        ),
        (
            "contact",
            "Reach me by {v}. | I prefer {v}.",
            "{n} prefers {v}.",
            "{n} — contact: {v}",
            "How does {n} prefer to be contacted?",
            "How should people get in touch with me?",
        ),
        (
            "holiday",
            "My kind of holiday: {v}. | I love {v}.",
            "{n} loves {v}.",
            "{n} — holidays: {v}",
            "What kind of holidays does {n} enjoy?",
            "What sort of holiday do I like?",
        ),
        (
            "dislike",
            "I can't stand {v}. | Please no {v} for me.",
            "{n} can't stand {v}.",
            "{n} — dislikes {v}",
            "What food does {n} dislike? | Is there a food {n} hates?",
            "Which food do I not like?",
        ),
        (
            "film",
            "My favourite film is {v}. | {V} is my all-time favourite film.",
            "{n}'s favourite film is {v}.",
            "{n} — favourite film: {v}",
            "What is {n}'s favourite film?",
            "What's my favourite movie?",
        ),
    ]
    for key, first, third, terse, q3, q1 in rng.sample(prefs, rng.randint(7, 9)):
        value = b.pick(key)
        memory = b.fact(
            key,
            F(first, third, terse),
            {"v": value, "V": value[:1].upper() + value[1:]},
            type_="preference",
            attribute=key,
        )
        b.ask_about("preference", q3, q1, [memory])

    # events
    kinds = ["race", "concert", "surgery", "talk", "course", "volunteer", "parents", "dinner", "passport", "driving"]
    chosen = ["trip"] * rng.randint(2, 3) + rng.sample(kinds, rng.randint(6, 7))
    events: dict[str, list[Memory]] = {}
    for k, kind in enumerate(chosen):
        memory = _person_event(b, kind, k, town)
        events.setdefault(kind, []).append(memory)
        if kind == "parents":
            family.append(memory)
    health = [allergy] + events.get("surgery", [])
    sports += events.get("race", [])

    # categories: the memories name instances, the question the category
    b.ask_about(
        "category",
        "Does {n} have any pets? | What pets does {n} have? | Tell me about {n}'s animals.",
        "What pets do I have? | Do I have any animals at home?",
        pets,
    )
    if instruments:
        b.ask_about(
            "category",
            "Which musical instruments does {n} play? | Does {n} play an instrument?",
            "Which instruments do I play?",
            instruments,
        )
    b.ask_about("category", "What sports is {n} into? | How does {n} keep fit?", "What do I do for exercise?", sports)
    b.ask_about(
        "category",
        "Where has {n} travelled? | Which places has {n} visited on holiday?",
        "Where have I been on trips?",
        events["trip"],
    )
    b.ask_about(
        "category",
        "Who is in {n}'s family? | Tell me about {n}'s family.",
        "Who's in my family?",
        family,
        both=rng.random() < 0.5,
    )
    b.ask_about(
        "category",
        "Does {n} have any health issues to know about? | What medical history does {n} have?",
        "What health things should you keep in mind about me?",
        health,
        both=False,
    )
    b.ask_about(
        "category",
        "What vehicles does {n} have? | How does {n} get around?",
        "What do I get around with?",
        vehicles,
        both=False,
    )
    return b


def _person_event(b: Builder, kind: str, k: int, town: str) -> Memory:
    F = _styles
    rng = b.rng
    if kind == "trip":
        dest, detail = b.pick("dest"), b.pick("trip_detail")
        m = b.event(
            f"trip{k}",
            F(
                "I went to {dest} {when}; {detail}. | Back from {dest}: went {when} and {detail}.",
                "{n} flew to {dest} {when}. | {n} spent a week in {dest} {when}.",
                "{n} — trip: {dest} — {bare}",
            ),
            {"dest": dest, "detail": detail},
            categories=("travel",),
        )
        b.ask_about(
            "single_fact",
            f"When did {{n}} go to {dest}? | When was {{n}}'s trip to {dest}?",
            f"When was I in {dest}?",
            [m],
            both=False,
        )
        return m
    if kind == "race":
        race, time_ = b.pick("race").split(":", 1)
        m = b.event(
            "race",
            F(
                "I ran the {race} {when} and finished in {t}. | Finished the {race} in {t} {when}!",
                "{n} ran the {race} {when}, finishing in {t}.",
                "{n} — {race} — {bare} — {t}",
            ),
            {"race": race, "t": time_},
            categories=("sports",),
        )
        b.ask_about(
            "single_fact",
            f"When did {{n}} run the {race}? | What was {{n}}'s time in the {race}?",
            f"What was my finishing time at the {race}?",
            [m],
            both=rng.random() < 0.5,
        )
        return m
    if kind == "concert":
        band, venue = b.pick("band"), b.pick("venue")
        m = b.event(
            "concert",
            F(
                "I saw {band} live at {venue} {when}. | {band} at {venue} {when}: amazing show.",
                "{n} went to the {band} concert at {venue} {when}.",
                "{n} — {band} @ {venue} — {bare}",
            ),
            {"band": band, "venue": venue},
        )
        b.ask_about(
            "single_fact",
            f"When did {{n}} see {band} live? | Where did {{n}} see {band}?",
            f"Where did I see {band} play?",
            [m],
            both=False,
        )
        return m
    if kind == "surgery":
        what, weeks = b.pick("surgery"), b.pick("weeks")
        m = b.event(
            "surgery",
            F(
                "I had {what} {when}; recovery took {w} weeks.",
                "{n} had {what} {when} and needed {w} weeks to recover.",
                "{n} — {what} — {bare} ({w} wks recovery)",
            ),
            {"what": what, "w": weeks},
            categories=("health",),
        )
        b.ask_about(
            "single_fact",
            f"When did {{n}} have {what}?",
            f"How long did I take to recover from {what}?",
            [m],
            both=rng.random() < 0.5,
        )
        return m
    if kind == "talk":
        conf, topic = b.pick("conf"), b.pick("talk_topic")
        m = b.event(
            "talk",
            F(
                "I gave a talk on {topic} at {conf} {when}.",
                "{n} spoke about {topic} at {conf} {when}.",
                "{n} — talk @ {conf}: {topic} — {bare}",
            ),
            {"conf": conf, "topic": topic},
        )
        b.ask_about(
            "single_fact",
            f"What did {{n}} talk about at {conf}?",
            f"When did I speak at {conf}?",
            [m],
            both=rng.random() < 0.5,
        )
        return m
    if kind == "course":
        course = b.pick("course")
        m = b.event(
            "course",
            F(
                "I finished {course} {when}. | Completed {course} {when}.",
                "{n} completed {course} {when}.",
                "{n} — {course} done — {bare}",
            ),
            {"course": course},
        )
        b.ask_about(
            "single_fact", f"When did {{n}} complete {course}?", f"When did I finish {course}?", [m], both=False
        )
        return m
    if kind == "volunteer":
        org = b.pick("org")
        m = b.event(
            "volunteer",
            F(
                "I volunteered at {org} {when}.",
                "{n} volunteered at {org} {when}.",
                "{n} — volunteering: {org} — {bare}",
            ),
            {"org": org},
        )
        b.ask_about(
            "single_fact", f"When did {{n}} volunteer at {org}?", f"When did I help out at {org}?", [m], both=False
        )
        return m
    if kind == "parents":
        m = b.event(
            "parents",
            F(
                "My parents came to visit from {town} {when}.",
                "{n}'s parents visited from {town} {when}.",
                "{n} — parents visiting from {town} — {bare}",
            ),
            {"town": town},
            categories=("family",),
        )
        b.ask_about(
            "single_fact", "When did {n}'s parents come to visit?", "When did my parents visit me?", [m], both=False
        )
        return m
    if kind == "dinner":
        guests, dish = b.pick("guests"), b.pick("dish")
        m = b.event(
            "dinner",
            F(
                "I hosted dinner for {g} friends {when} and made {dish}.",
                "{n} hosted a dinner party for {g} friends {when}; {he} made {dish}.",
                "{n} — dinner party, {g} guests, {dish} — {bare}",
            ),
            {"g": guests, "dish": dish},
        )
        b.ask_about(
            "single_fact",
            "What did {n} cook for the dinner party? | How many friends came to {n}'s dinner party?",
            "What did I make for my dinner party?",
            [m],
            both=rng.random() < 0.5,
        )
        return m
    if kind == "passport":
        airport = b.pick("airport")
        m = b.event(
            "passport",
            F(
                "I lost my passport at {a} {when}; the replacement took ten days.",
                "{n} lost {his} passport at {a} {when}.",
                "{n} — passport lost @ {a} — {bare}",
            ),
            {"a": airport},
        )
        b.ask_about(
            "single_fact",
            "Where did {n} lose the passport? | When did {n} lose the passport?",
            "Where did I lose my passport?",
            [m],
            both=False,
        )
        return m
    m = b.event(
        "driving",
        F(
            "I passed my driving test {when}! | Driving test passed {when}, first try.",
            "{n} passed {his} driving test {when}.",
            "{n} — driving test passed — {bare}",
        ),
        {},
    )
    b.ask_about(
        "single_fact", "When did {n} pass the driving test?", "When did I pass my driving test?", [m], both=False
    )
    return m


def _project(rng: random.Random, name: str) -> Builder:
    b = Builder(
        rng,
        f"project:{name.lower()}",
        f"p-{name.lower()}",
        name=name,
        full=name,
        pronoun="it",
        locale=rng.choice(("dmy", "mdy")),
        voice="we",
    )
    F, P = _styles, PROJECT_POOLS

    def pick(pool: str) -> str:
        return b.pick(pool, P)

    attrs = [
        (
            "language",
            "We write {n} in {v}. | {n}'s backend is {v}; we picked it for the tooling.",
            "{n} is written in {v}.",
            "{n} — lang: {v}",
            "What language is {n} written in?",
            "Which programming language do we use for {n}?",
        ),
        (
            "database",
            "We store {n}'s data in {v}. | Our {n} database is {v}.",
            "{n} runs on {v}.",
            "{n} — DB: {v}",
            "Which database does {n} use?",
            "What database are we using for {n}?",
        ),
        (
            "hosting",
            "We host {n} on {v}. | {n} is deployed by us to {v}.",
            "{n} is hosted on {v}.",
            "{n} — hosting: {v}",
            "Where is {n} hosted? | Which cloud does {n} run on?",
            "Where do we deploy {n}?",
        ),
        (
            "license",
            "We release {n} under {v}. | Our licence for {n}: {v}.",
            "{n} is licensed {v}.",
            "{n} — license: {v}",
            "What license does {n} use?",
            "Under which licence do we publish {n}?",
        ),
        (
            "lead",
            "{v} leads {n} for us. | Our tech lead on {n} is {v}.",
            "{v} is the tech lead of {n}.",
            "{n} — lead: {v}",
            "Who leads {n}? | Who is the tech lead of {n}?",
            "Who's our lead on {n}?",
        ),
        (
            "designer",
            "{v} does our {n} design work. | Our designer on {n} is {v}.",
            "{v} designs {n}.",
            "{n} — design: {v}",
            "Who is the designer on {n}?",
            "Who designs our {n} screens?",
        ),
        (
            "slo",
            "We promise {v} for {n}. | Our {n} SLO: {v}.",
            "{n}'s SLO is {v}.",
            "{n} — SLO: {v}",
            "What is {n}'s SLO? | What availability target does {n} have?",
            "What uptime do we promise for {n}?",
        ),
        (
            "sync",
            "Our {n} weekly sync is on {v}. | We meet about {n} every week, {v}.",
            "The {n} weekly sync is on {v}.",
            "{n} — weekly sync: {v}",
            "When is the {n} weekly sync?",
            "When do we have our {n} sync?",
        ),
        (
            "docs",
            "We keep {n}'s documentation in {v}. | Our {n} docs live in {v}.",
            "{n}'s docs live in {v}.",
            "{n} — docs: {v}",
            "Where is {n}'s documentation?",
            "Where do we keep the {n} docs?",
        ),
    ]
    for key, first, third, terse, q3, q1 in attrs:
        memory = b.fact(key, F(first, third, terse), {"v": pick(key)}, attribute=key)
        b.ask_about("attribute", q3, q1, [memory])
    vendors = []
    for k in range(rng.randint(2, 3)):
        _, sentence = pick("vendor").split(":")
        vendors.append(
            b.fact(
                f"vendor{k}",
                F("For {n}, " + sentence + ".", "In {n}, " + sentence + ".", "{n} — " + sentence),
                {},
                categories=("vendors",),
            )
        )
    customers = []
    for k in range(2):
        customer, use = pick("customer"), re.sub(r"\bit\b", "{n}", pick("customer_use"))
        customers.append(
            b.fact(
                f"customer{k}",
                F(
                    f"{customer} {use}; our biggest account after the pilot."
                    if k == 0
                    else f"{customer} {use}; they renewed with us last year.",
                    f"{customer} {use}.",
                    f"{{n}} — account: {customer}",
                ),
                {},
                categories=("customers",),
            )
        )
    b.ask_about(
        "category",
        "Which third-party services does {n} depend on? | What external vendors does {n} use?",
        "Which outside providers do we rely on for {n}?",
        vendors,
    )
    for key, styles, q3, q1 in rng.sample(PROJECT_RULES, rng.randint(5, 6)):
        first, third, terse = [s.replace("{p}", "{n}") for s in _t(styles)]
        memory = b.fact(key, F(first, third, terse), {}, type_="preference", attribute=key)
        b.ask_about("preference", q3.replace("{p}", "{n}"), q1.replace("{p}", "{n}"), [memory])

    releases, incidents = [], []
    count = rng.randint(2, 3)
    versions = sorted(pick("release") for _ in range(count))
    days = sorted(b.event_day() for _ in range(count))  # versions ship in order
    for k, (version, day) in enumerate(zip(versions, days, strict=False)):
        highlight = pick("highlight")
        releases.append(
            b.event(
                f"release{k}",
                F(
                    "We shipped {n} {v} {when}, with {h}.",
                    "{n} {v} was released {when} with {h}.",
                    "{n} {v} — released {bare} — {h}",
                ),
                {"v": version, "h": highlight},
                categories=("releases",),
                day=day,
            )
        )
        b.ask_about(
            "single_fact",
            f"When was {{n}} {version} released? | What did {{n}} {version} ship with?",
            f"When did we ship {version} of {{n}}?",
            [releases[-1]],
            both=rng.random() < 0.5,
        )
    for k in range(rng.randint(2, 3)):
        cause, duration = pick("cause"), pick("duration")
        incidents.append(
            b.event(
                f"incident{k}",
                F(
                    "{n} was down for {d} {when} because of {c}.",
                    "{n} had an outage of {d} {when}, caused by {c}.",
                    "{n} — outage {bare} — {d} — cause: {c}",
                ),
                {"d": duration, "c": cause},
                categories=("incidents",),
            )
        )
        b.ask_about(
            "single_fact",
            f"When did {{n}} go down because of {cause}?",
            f"How long were we down when {cause} took {{n}} out?",
            [incidents[-1]],
            both=rng.random() < 0.5,
        )
    customer, use = pick("customer"), pick("customer_use")
    onboarding = b.event(
        "onboarding",
        F(
            f"We onboarded {customer} onto {{n}} {{when}}; it {use.split(' ', 1)[1]}.",
            f"{customer} was onboarded onto {{n}} {{when}}.",
            f"{{n}} — onboarding: {customer} — {{bare}}",
        ),
        {},
        categories=("customers",),
    )
    customers.append(onboarding)
    b.ask_about(
        "single_fact",
        f"When was {customer} onboarded onto {{n}}?",
        f"When did we onboard {customer}?",
        [onboarding],
        both=False,
    )
    kickoff = b.event(
        "kickoff",
        F("We kicked off {n} {when}.", "{n} kicked off {when}.", "{n} — kickoff {bare}"),
        {},
        allow_relative=False,
    )
    b.ask_about(
        "single_fact",
        "When did {n} kick off? | When did work on {n} start?",
        "When did we start {n}?",
        [kickoff],
        both=False,
    )
    move = pick("ci_move")
    old, new = move.split(" to ")
    ci = b.event(
        "ci",
        F(
            "We moved {n}'s CI from {old} to {new} {when}.",
            "{n} moved its CI from {old} to {new} {when}.",
            "{n} — CI: {old} → {new} — {bare}",
        ),
        {"old": old, "new": new},
    )
    b.ask_about("single_fact", f"When did {{n}} move its CI to {new}?", f"When did we leave {old}?", [ci], both=False)
    city = pick("offsite")
    offsite = b.event(
        "offsite",
        F(
            "Our {n} team offsite was in {c} {when}.",
            "The {n} team had its offsite in {c} {when}.",
            "{n} — offsite: {c} — {bare}",
        ),
        {"c": city},
    )
    b.ask_about(
        "single_fact", "Where was the {n} team offsite?", "Where did we go for the {n} offsite?", [offsite], both=False
    )
    person = pick("hire")
    hire = b.event(
        "hire",
        F(
            f"{person} joined our {{n}} team {{when}}.",
            f"{person} joined the {{n}} team {{when}}.",
            f"{{n}} — new hire: {person} — {{bare}}",
        ),
        {},
    )
    b.ask_about(
        "single_fact", f"When did {person} join {{n}}?", f"When did {person} join us on {{n}}?", [hire], both=False
    )
    audit = pick("audit")
    passed = b.event(
        "audit", F("We passed {a} for {n} {when}.", "{n} passed {a} {when}.", "{n} — passed {a} — {bare}"), {"a": audit}
    )
    b.ask_about("single_fact", f"When did {{n}} pass {audit}?", "", [passed], both=False)

    b.ask_about(
        "category",
        "Who are {n}'s customers? | Which companies use {n}?",
        "Which customers do we have on {n}?",
        customers,
    )
    b.ask_about(
        "category",
        "What incidents has {n} had? | Has {n} had any outages?",
        "What outages have we had on {n}?",
        incidents,
    )
    b.ask_about(
        "category",
        "Which versions of {n} have shipped? | What releases has {n} had?",
        "What have we released on {n} so far?",
        releases,
        both=False,
    )
    return b


# --- date questions ------------------------------------------------------------------------------------


def _date_questions(b: Builder) -> None:
    """Event-by-date and relative-date questions, with their gold computed from every dated memory."""
    rng = b.rng
    dated = [m for m in b.memories if m.period and m.attribute != "birthday"]
    asked: set[tuple[str, str]] = set()
    person = b.voice == "I"
    for memory in dated:
        if memory.categories == ("family",) and memory.period and memory.period[2] == "year":
            continue
        start, end, granularity = memory.span()  # type: ignore[misc]
        if granularity == GRANULARITY["year"]:
            continue  # "what happened in 2019" has too many answers to be a fair lookup
        if (memory.period[0], memory.period[1]) in asked:  # type: ignore[index]
            continue
        asked.add((memory.period[0], memory.period[1]))  # type: ignore[index]
        gold, clash = [], False
        for other in dated:
            o_start, o_end, o_gran = other.span()  # type: ignore[misc]
            if start <= o_start and o_end <= end:
                gold.append(other)
            elif o_start <= end and start <= o_end and o_gran <= granularity:
                clash = True  # as precise as the question, overlapping it, not inside it: ambiguous
        if clash:
            continue
        period = memory.period[2]  # type: ignore[index]
        if period == "day":
            used = None
            if memory.dating == "explicit":  # phrase the question's date differently from the memory's
                used = next(
                    (name for name, text in day_formats(start, b.locale).items() if text in memory.content), None
                )
            _, when = day_text(rng, start, b.locale, exclude=used)
            when = f"on {when}"
        elif period == "month":
            used = next(
                (name for name, text in month_formats(start.year, start.month).items() if text in memory.content), None
            )
            _, when = month_text(rng, start.year, start.month, exclude=used)
            when = f"in {when}"
        else:
            season = season_of(start)
            when = rng.choice((f"in {season} {start.year}", f"in the {season} of {start.year}"))
        category = "relative_date" if any(m.dating in ("relative", "occurred_at") for m in gold) else "event_by_date"
        if person:
            third = rng.choice(("What did {n} do {w}?", "What happened to {n} {w}?", "What was {n} up to {w}?"))
            first = rng.choice(("What did I do {w}?", "What happened {w}?"))
        else:
            third = rng.choice(("What happened with {n} {w}?", "What was going on with {n} {w}?"))
            first = rng.choice(("What did we do on {n} {w}?", "What happened on {n} {w}?"))
        for template in [third, first] if rng.random() < 0.35 else [rng.choice((third, first))]:
            text = template.format(n=b.name, w=when)
            b.questions.append((category, text[:1].upper() + text[1:], [m.key for m in gold], memory.period))


def generate(seed: int = DEFAULT_SEED) -> Dataset:
    rng = random.Random(seed)
    people = rng.sample(PEOPLE, N_PEOPLE)
    projects = rng.sample(PROJECTS, N_PROJECTS)
    builders = [_person(rng, p) for p in people]
    builders += [_project(rng, name) for name in projects]
    memories: list[Memory] = []
    questions: list[Question] = []
    for b in builders:
        _date_questions(b)
        memories += b.memories
        for i, (category, text, gold, period) in enumerate(b.questions):
            questions.append(Question(f"{b.entity}/q{i}", b.entity, b.bucket, text, category, gold, period))
    memories.sort(key=lambda m: (m.occurred_at, m.key))
    return Dataset(seed, memories, questions, [b.entity for b in builders])


CATEGORIES = ("attribute", "single_fact", "event_by_date", "relative_date", "category", "preference")

__all__ = ["CATEGORIES", "DEFAULT_SEED", "Dataset", "Memory", "Question", "generate"]
