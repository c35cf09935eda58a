"""Facts that change over time: the dataset of bench/evolving.py, generated from templates and a seed.

Subjects are people, projects, services and teams. Each subject gets a few *slots* (an attribute that
changes: Maria's manager, the Atlas project's lead, billing-api's staging database version, the Payments
team's standup time, ...) and each slot 2-4 *versions*, months apart between January 2024 and December
2025. Every version is one memory, phrased from one of several templates (first versions state the fact,
later ones read as updates: "now reports to", "moved to", "was upgraded to"), dated by `occurred_at`. Half of
the updates (chosen by the seed) carry `supersedes` = the previous version. Distractors are other facts about
the same subjects (birthdays, incidents, offsites, "asked their manager for feedback") that answer nothing.

Questions (each with exactly one gold memory):
- current: the slot's latest value ("Who does Maria report to now?");
- past, of three kinds, each with the time window a caller would pass as `occurred_after`/`occurred_before`:
  - as_of: the value during a month or quarter that lies wholly inside one version's validity ("Who was
    Maria's manager in March 2024?"); window: occurred_before = the end of that period;
  - changed_in: the version recorded in a given month ("Who became Maria's manager in May 2024?");
    window: that month;
  - before: the version before a named value ("Who was Maria's manager before Jonas Berg?");
    window: occurred_before = the date the named value was recorded.

Guarantees (tests/test_bench_datasets.py checks them): the values of a slot are distinct, every content is
unique, no subject name is another's, a slot's versions are at least 92 days apart (so a past question's
period never contains a change), and the same seed gives the same dataset.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from typing import Any, TypedDict

from bench.datasets.common import MONTHS, MONTHS_SHORT, at, month_end, month_start, months_between, next_month, rfc3339

DEFAULT_SEED = 7
BUCKET = "evolving"
FIRST_DAY = date(2024, 1, 3)
LAST_DAY = date(2025, 12, 19)
MIN_GAP_DAYS = 92
MAX_GAP_DAYS = 200

FIRST_NAMES = (
    "Maria Tom Priya Jonas Aisha Kenji Sofia Lukas Amara Diego Elena Farid Grace Hiro Ingrid Javier Keiko Liam "
    "Mei Nadia Oscar Pavel Quinn Rosa Samir Tara Umar Vera Wes Yara Zane Bianca Carlos Dalia Emil Fatima Gabe "
    "Hana Ivan Julia Kofi Lena Marco Noor Olga Pedro Rania Stefan Tess Ulla Victor Wanda Xavier Yusuf Zoe Anouk "
    "Bruno Chiara Dmitri Esme Felix Greta Hugo Isla"
).split()
LAST_NAMES = (
    "Lopez Berg Shah Ito Okafor Tanaka Reyes Weber Mensah Alvarez Petrova Haddad Kim Sato Lund Ruiz Mori Walsh "
    "Chen Karimi Nilsson Novak Byrne Costa Aziz Fischer Malik Horvat Dunn Ibrahim Frost Greco Mendes Saleh Brandt "
    "Diallo Park Moreau Sokolov Keller Asante Vogel Romano Qureshi Ivanova Silva Nasser Jansen Hart Eklund Marsh "
    "Wilde Duarte Yilmaz Hughes Bakker Rocha Conti Orlov Pike Lang Baptiste Reid Ferraz"
).split()
PROJECTS = (
    "Atlas Borealis Cobalt Dynamo Ember Falcon Granite Helios Juniper Kestrel Lumen Meridian Nimbus "
    "Orion Pelican Quartz Sequoia Tundra"
).split()
SERVICES = (
    "billing-api search-indexer auth-gateway notifier ledger-core checkout-web "
    "media-transcoder reporting-etl inventory-sync profile-api pricing-engine fraud-scorer"
).split()
TEAMS = ("Payments Search Platform Mobile Data Growth Security Identity Observability Checkout").split()

N_PEOPLE, N_PROJECTS, N_SERVICES, N_TEAMS = 32, 14, 12, 9
SLOTS_PER_KIND = {"person": (3, 4), "project": (3, 4), "service": (3, 3), "team": (3, 4)}
VERSION_WEIGHTS = {2: 35, 3: 40, 4: 25}


@dataclass(frozen=True)
class Attr:
    """One attribute that changes, with the phrasings of its memories and questions.

    Placeholders: {name}/{poss} the subject (and its possessive), {v} the value, {when} a period,
    {next} the value that replaced the one asked about.
    """

    name: str
    kind: str
    type: str
    values: tuple[str, ...]
    first: tuple[str, ...]
    update: tuple[str, ...]
    current: tuple[str, ...]
    as_of: tuple[str, ...]
    changed: tuple[str, ...]
    before: tuple[str, ...]
    ordered: bool = False  # versions follow the order of `values` (upgrades, phases)
    people_values: bool = False  # values are colleagues' names


def _t(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split("|"))


ATTRS: tuple[Attr, ...] = (
    # --- people ---------------------------------------------------------------------------------------
    Attr(
        "manager",
        "person",
        "fact",
        (),
        people_values=True,
        first=_t(
            "{poss} manager is {v}. | {name} reports to {v}. | Org chart: {name} reports to {v}. | "
            "{poss} line manager: {v}."
        ),
        update=_t(
            "{name} now reports to {v}. | Reorg: {name} moves under {v} starting this month. | "
            "{poss} new manager is {v}. | Heads-up: {name} has switched managers and is in {v}'s org now. | "
            "Update on {name}: the line manager changed, it's {v} from now on."
        ),
        current=_t(
            "Who is {poss} manager now? | Who does {name} report to at the moment? | {poss} current "
            "manager | Who's {poss} boss these days? | Which manager does {name} currently report to?"
        ),
        as_of=_t(
            "Who was {poss} manager in {when}? | In {when}, who did {name} report to? | {poss} manager as of {when}"
        ),
        changed=_t("Who became {poss} manager in {when}? | Whom did {name} start reporting to in {when}?"),
        before=_t("Who was {poss} manager before {next}? | Before reporting to {next}, who was {poss} manager?"),
    ),
    Attr(
        "coffee",
        "person",
        "preference",
        ("oat milk", "soy milk", "almond milk", "whole milk", "skimmed milk", "lactose-free milk", "coconut milk"),
        first=_t(
            "{name} takes coffee with {v}. | Coffee order for {name}: a flat white with {v}. | {name} likes "
            "{v} in coffee."
        ),
        update=_t(
            "{name} now prefers {v} in coffee. | {name} switched to {v} for coffee. | Note for the coffee "
            "run: {name} wants {v} now."
        ),
        current=_t(
            "What milk does {name} want in coffee now? | How does {name} take coffee these days? | "
            "{poss} current coffee order"
        ),
        as_of=_t("What milk did {name} take in coffee in {when}? | In {when}, how did {name} take coffee?"),
        changed=_t(
            "What did {name} switch to for coffee in {when}? | Which milk did {name} start asking for in {when}?"
        ),
        before=_t("What milk did {name} take in coffee before switching to {next}?"),
    ),
    Attr(
        "editor",
        "person",
        "preference",
        ("VS Code", "Neovim", "Emacs", "IntelliJ IDEA", "Zed", "Sublime Text", "Helix", "PyCharm"),
        first=_t("{name} codes in {v}. | {poss} editor of choice is {v}. | {name} uses {v} as the main editor."),
        update=_t(
            "{name} moved over to {v} for day-to-day coding. | {name} now does all editing in {v}. | "
            "{poss} editor these days: {v}."
        ),
        current=_t(
            "Which editor does {name} use now? | {poss} current code editor | What does {name} code in at the moment?"
        ),
        as_of=_t("Which editor was {name} using in {when}? | What did {name} code in during {when}?"),
        changed=_t("Which editor did {name} move to in {when}?"),
        before=_t("Which editor did {name} use before {next}?"),
    ),
    Attr(
        "office",
        "person",
        "fact",
        (
            "Lisbon",
            "Berlin",
            "Toronto",
            "Austin",
            "Singapore",
            "Dublin",
            "Warsaw",
            "Nairobi",
            "Madrid",
            "Amsterdam",
            "Seoul",
            "Melbourne",
            "Boston",
            "Montreal",
        ),
        first=_t("{name} works out of the {v} office. | {name} is based in {v}. | {poss} home office: {v}."),
        update=_t(
            "{name} relocated to the {v} office. | {name} has moved to {v} and works from the office there "
            "now. | {name} transferred to {v}."
        ),
        current=_t(
            "Which office is {name} based in now? | Where does {name} work from these days? | "
            "{poss} current office location"
        ),
        as_of=_t("Where was {name} based in {when}? | Which office did {name} work out of in {when}?"),
        changed=_t("Where did {name} relocate to in {when}?"),
        before=_t("Which office was {name} in before moving to {next}?"),
    ),
    Attr(
        "role",
        "person",
        "fact",
        (
            "Software Engineer",
            "Senior Software Engineer",
            "Staff Engineer",
            "Principal Engineer",
            "Tech Lead",
            "Engineering Manager",
            "Senior Engineering Manager",
            "Director of Engineering",
        ),
        ordered=True,
        first=_t("{name} is {a} {v}. | {poss} title is {v}. | {name} works here as {a} {v}."),
        update=_t("{name} was promoted to {v}. | {poss} new title: {v}. | {name} took on the {v} role."),
        current=_t("What is {poss} job title now? | What role does {name} have at the moment? | {poss} current title"),
        as_of=_t("What was {poss} title in {when}? | What role did {name} hold in {when}?"),
        changed=_t("What role did {name} take on in {when}? | What was {name} promoted to in {when}?"),
        before=_t("What was {poss} role before becoming {next}?"),
    ),
    Attr(
        "team",
        "person",
        "fact",
        ("Payments", "Search", "Platform", "Mobile", "Data", "Growth", "Security", "Identity", "Observability"),
        first=_t("{name} is on the {v} team. | {name} works in {v}. | {poss} team: {v}."),
        update=_t(
            "{name} moved to the {v} team. | {name} has joined {v}. | {name} switched teams and is with {v} now."
        ),
        current=_t(
            "Which team is {name} on now? | What team does {name} currently work in? | {poss} team at the moment"
        ),
        as_of=_t("Which team was {name} on in {when}? | What team did {name} work in during {when}?"),
        changed=_t("Which team did {name} join in {when}?"),
        before=_t("Which team was {name} on before joining {next}?"),
    ),
    Attr(
        "diet",
        "person",
        "preference",
        ("vegetarian", "vegan", "pescatarian", "gluten-free", "dairy-free", "keto"),
        first=_t(
            "{name} is {v}; keep that in mind for team lunches. | Dietary note: {name} eats {v}. | "
            "Order {v} meals for {name}."
        ),
        update=_t("{name} has gone {v}. | {name} is {v} these days. | Lunch orders: {name} needs {v} options now."),
        current=_t(
            "What are {poss} dietary requirements now? | What should we order for {name} at team lunch these days?"
        ),
        as_of=_t("What was {poss} diet in {when}? | What did {name} eat in {when}?"),
        changed=_t("What diet did {name} switch to in {when}?"),
        before=_t("What did {name} eat before going {next}?"),
    ),
    Attr(
        "meetings",
        "person",
        "preference",
        (
            "before 11am",
            "after lunch",
            "after 3pm",
            "on Tuesdays and Thursdays only",
            "on Monday mornings",
            "in 25-minute slots",
        ),
        first=_t("{name} prefers meetings {v}. | Scheduling: book {name} {v}. | {name} likes to keep meetings {v}."),
        update=_t(
            "{name} now wants meetings {v}. | {name} changed the meeting preference: {v}. | Scheduling "
            "update: {name} asks for meetings {v}."
        ),
        current=_t(
            "When does {name} prefer to have meetings now? | {poss} current meeting preference | How "
            "should I book meetings with {name} these days?"
        ),
        as_of=_t("How did {name} like meetings booked in {when}?"),
        changed=_t("What meeting preference did {name} ask for in {when}?"),
        before=_t('What was {poss} meeting preference before "{next}"?'),
    ),
    # --- projects -------------------------------------------------------------------------------------
    Attr(
        "lead",
        "project",
        "fact",
        (),
        people_values=True,
        first=_t("{name} is led by {v}. | {v} leads {name}. | {name}: lead is {v}. | {v} is the tech lead on {name}."),
        update=_t(
            "{v} has taken over as lead of {name}. | New lead for {name}: {v}. | {name} is now run by {v}. | "
            "Leadership change on {name}: {v} leads it from now on."
        ),
        current=_t(
            "Who leads {name} at the moment? | Who is the current lead of {name}? | {name} lead now | Who "
            "runs {name} these days?"
        ),
        as_of=_t("Who led {name} in {when}? | Who was the lead of {name} in {when}?"),
        changed=_t("Who took over {name} in {when}?"),
        before=_t("Who led {name} before {next}?"),
    ),
    Attr(
        "datastore",
        "project",
        "decision",
        ("PostgreSQL", "MySQL", "MongoDB", "DynamoDB", "CockroachDB", "Cassandra", "SQLite", "ClickHouse"),
        first=_t(
            "{name} stores its data in {v}. | Decision: {name} uses {v} as its primary database. | "
            "{name} database: {v}."
        ),
        update=_t(
            "{name} migrated its primary database to {v}. | We moved {name} onto {v}. | Decision: {name} "
            "switches to {v} for storage."
        ),
        current=_t(
            "What database does {name} use now? | {poss} primary datastore at the moment | Which database "
            "is {name} on these days?"
        ),
        as_of=_t("What database did {name} use in {when}?"),
        changed=_t("Which database did {name} migrate to in {when}?"),
        before=_t("What did {name} use before the migration to {next}?"),
    ),
    Attr(
        "frontend",
        "project",
        "decision",
        ("React", "Vue", "Svelte", "Angular", "SolidJS", "htmx", "Elm"),
        first=_t(
            "{poss} frontend is built with {v}. | {name} UI: {v}. | Decision: the {name} web client is written in {v}."
        ),
        update=_t(
            "{name} rewrote its frontend in {v}. | Decision: {name} moves its UI to {v}. | The {name} "
            "frontend now runs on {v}."
        ),
        current=_t(
            "What frontend framework does {name} use now? | {name} UI framework currently | Which "
            "framework is {poss} frontend written in today?"
        ),
        as_of=_t("Which frontend framework did {name} use in {when}?"),
        changed=_t("Which framework did {name} move its UI to in {when}?"),
        before=_t("Which frontend framework did {name} use before {next}?"),
    ),
    Attr(
        "phase",
        "project",
        "fact",
        ("discovery", "design", "private beta", "public beta", "general availability", "maintenance mode"),
        ordered=True,
        first=_t("{name} is in {v}. | Status of {name}: {v}. | {name} has entered {v}."),
        update=_t("{name} moved into {v}. | {name} status update: now in {v}. | {name} is in {v} as of this week."),
        current=_t(
            "What phase is {name} in now? | {name} current status | What is the status of {name} at the moment?"
        ),
        as_of=_t("What was {poss} status in {when}? | Which phase was {name} in during {when}?"),
        changed=_t("What phase did {name} enter in {when}?"),
        before=_t("What phase was {name} in before {next}?"),
    ),
    Attr(
        "channel",
        "project",
        "fact",
        ("#{slug}-dev", "#{slug}-eng", "#{slug}-core", "#team-{slug}", "#{slug}-launch", "#proj-{slug}"),
        first=_t("{name} discussions happen in {v}. | Slack channel for {name}: {v}."),
        update=_t("{name} moved to a new Slack channel, {v}. | Use {v} for {name} from now on."),
        current=_t("Which Slack channel does {name} use now? | Where is {name} discussed on Slack these days?"),
        as_of=_t("Which Slack channel did {name} use in {when}?"),
        changed=_t("Which channel did {name} move to in {when}?"),
        before=_t("Which Slack channel did {name} use before {next}?"),
    ),
    Attr(
        "cloud",
        "project",
        "decision",
        ("AWS", "Google Cloud", "Azure", "Hetzner", "the on-prem cluster", "Fly.io"),
        first=_t("{name} is hosted on {v}. | {name} runs in {v}."),
        update=_t("{name} was migrated to {v}. | Decision: host {name} on {v} going forward."),
        current=_t("Where is {name} hosted now? | Which cloud does {name} run on at the moment?"),
        as_of=_t("Where was {name} hosted in {when}?"),
        changed=_t("Which cloud did {name} move to in {when}?"),
        before=_t("Where was {name} hosted before moving to {next}?"),
    ),
    # --- services -------------------------------------------------------------------------------------
    Attr(
        "staging_db",
        "service",
        "fact",
        ("Postgres 12", "Postgres 13", "Postgres 14", "Postgres 15", "Postgres 16", "Postgres 17"),
        ordered=True,
        first=_t(
            "The staging database for {name} runs {v}. | Staging DB for {name}: {v}. | {poss} staging "
            "environment is on {v}."
        ),
        update=_t(
            "{poss} staging database was upgraded to {v}. | Staging for {name} is now on {v}. | We bumped "
            "the {name} staging database to {v}."
        ),
        current=_t(
            "What version is {poss} staging database now? | current staging database version for {name} | "
            "Which Postgres does {name} staging run at the moment?"
        ),
        as_of=_t("Which Postgres version did {name} staging run in {when}?"),
        changed=_t("Which Postgres version was {name} staging upgraded to in {when}?"),
        before=_t("What did {name} staging run before the upgrade to {next}?"),
    ),
    Attr(
        "python",
        "service",
        "fact",
        ("Python 3.8", "Python 3.9", "Python 3.10", "Python 3.11", "Python 3.12", "Python 3.13"),
        ordered=True,
        first=_t("{name} runs on {v}. | {name} runtime: {v}."),
        update=_t("{name} was upgraded to {v}. | {name} now runs {v} in production."),
        current=_t("Which Python version does {name} run now? | {poss} current Python version"),
        as_of=_t("Which Python version did {name} run in {when}?"),
        changed=_t("Which Python version was {name} upgraded to in {when}?"),
        before=_t("Which Python version did {name} run before {next}?"),
    ),
    Attr(
        "kubernetes",
        "service",
        "fact",
        (
            "Kubernetes 1.26",
            "Kubernetes 1.27",
            "Kubernetes 1.28",
            "Kubernetes 1.29",
            "Kubernetes 1.30",
            "Kubernetes 1.31",
        ),
        ordered=True,
        first=_t("{poss} cluster runs {v}. | Cluster for {name}: {v}."),
        update=_t("{poss} cluster was upgraded to {v}. | The {name} cluster is on {v} now."),
        current=_t("Which Kubernetes version is {poss} cluster on now? | {name} cluster version currently"),
        as_of=_t("Which Kubernetes version did {poss} cluster run in {when}?"),
        changed=_t("Which Kubernetes version was the {name} cluster upgraded to in {when}?"),
        before=_t("Which Kubernetes version did {poss} cluster run before {next}?"),
    ),
    Attr(
        "region",
        "service",
        "decision",
        ("us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1", "ap-northeast-1"),
        first=_t("{name} is deployed in {v}. | Primary region for {name}: {v}."),
        update=_t("{name} moved its primary region to {v}. | Decision: {name} serves from {v} now."),
        current=_t("Which region is {name} deployed in now? | {poss} primary region currently"),
        as_of=_t("Which region was {name} deployed in during {when}?"),
        changed=_t("Which region did {name} move to in {when}?"),
        before=_t("Which region did {name} use before {next}?"),
    ),
    Attr(
        "retention",
        "service",
        "decision",
        ("7 days", "14 days", "30 days", "60 days", "90 days", "one year"),
        first=_t("{name} keeps logs for {v}. | Log retention for {name}: {v}."),
        update=_t("Log retention for {name} changed to {v}. | {name} now retains logs for {v}."),
        current=_t("How long does {name} keep logs now? | {poss} current log retention"),
        as_of=_t("How long did {name} keep logs in {when}?"),
        changed=_t("What was {poss} log retention changed to in {when}?"),
        before=_t("What was {poss} log retention before it became {next}?"),
    ),
    # --- teams ----------------------------------------------------------------------------------------
    Attr(
        "standup",
        "team",
        "decision",
        ("9:00", "9:15", "9:30", "9:45", "10:00", "10:30", "11:00"),
        first=_t("{poss} daily standup is at {v}. | {name} standup: {v} every weekday."),
        update=_t(
            "{poss} standup moved to {v}. | Heads-up: {name} standup is at {v} from now on. | Standup for "
            "{name} now starts at {v}."
        ),
        current=_t("What time is {poss} standup now? | When does {name} have standup these days?"),
        as_of=_t("What time was {poss} standup in {when}?"),
        changed=_t("What time did {poss} standup move to in {when}?"),
        before=_t("What time was {poss} standup before it moved to {next}?"),
    ),
    Attr(
        "ci",
        "team",
        "decision",
        ("Jenkins", "CircleCI", "GitHub Actions", "GitLab CI", "Buildkite", "TeamCity"),
        first=_t("{name} builds run on {v}. | CI for {name}: {v}."),
        update=_t("{name} migrated CI to {v}. | {name} switched its pipelines over to {v}."),
        current=_t("Which CI system does {name} use now? | {poss} current CI provider"),
        as_of=_t("Which CI did {name} use in {when}?"),
        changed=_t("Which CI system did {name} migrate to in {when}?"),
        before=_t("What did {name} use for CI before the migration to {next}?"),
    ),
    Attr(
        "sprint",
        "team",
        "decision",
        ("one week", "two weeks", "three weeks", "four weeks"),
        first=_t("Sprint length for {name}: {v}. | {poss} sprints last {v}."),
        update=_t("{name} moved to sprints of {v}. | Decision: {poss} sprints are {v} long from now on."),
        current=_t("How long are {poss} sprints now? | {poss} current sprint length"),
        as_of=_t("How long were {poss} sprints in {when}?"),
        changed=_t("What sprint length did {name} switch to in {when}?"),
        before=_t("How long were {poss} sprints before they became {next}?"),
    ),
    Attr(
        "oncall",
        "team",
        "decision",
        ("PagerDuty", "Opsgenie", "incident.io", "VictorOps", "Grafana OnCall"),
        first=_t("{name} pages on-call through {v}. | On-call tool for {name}: {v}."),
        update=_t("{name} moved its on-call paging to {v}. | {name} uses {v} for on-call now."),
        current=_t("Which on-call tool does {name} use now? | How does {name} page on-call these days?"),
        as_of=_t("Which on-call tool did {name} use in {when}?"),
        changed=_t("Which paging tool did {name} move to in {when}?"),
        before=_t("Which on-call tool did {name} use before {next}?"),
    ),
    Attr(
        "review",
        "team",
        "decision",
        (
            "one approval",
            "two approvals",
            "a code owner's approval",
            "two approvals including a code owner",
            "one approval and green end-to-end tests",
        ),
        first=_t("{name} merges need {v}. | Code review rule for {name}: {v}."),
        update=_t(
            "{name} changed its review rule: merges now need {v}. | From now on {name} pull requests require {v}."
        ),
        current=_t("What does a {name} pull request need to merge now? | {poss} current code review rule"),
        as_of=_t("What did {name} require to merge a pull request in {when}?"),
        changed=_t("What review rule did {name} adopt in {when}?"),
        before=_t("What did {name} merges need before the rule became {next}?"),
    ),
    Attr(
        "deploy_day",
        "team",
        "decision",
        ("Mondays", "Tuesdays", "Wednesdays", "Thursdays", "every weekday", "Tuesdays and Thursdays"),
        first=_t("{name} deploys on {v}. | Release day for {name}: {v}."),
        update=_t("{name} now deploys on {v}. | {poss} release day moved to {v}."),
        current=_t("When does {name} deploy now? | {poss} current release day"),
        as_of=_t("When did {name} deploy in {when}?"),
        changed=_t("What did {poss} release day move to in {when}?"),
        before=_t("When did {name} deploy before switching to {next}?"),
    ),
)

# Other facts about the same subjects: they mention the subject (and sometimes the attribute's noun: "manager",
# "standup", "staging database") but state no value of any slot.
DISTRACTORS = {
    "person": _t(
        "{name}'s birthday is on {day} {month}. | {name} speaks {lang} and {lang2}. | {name} is out of office from "
        "{day} to {day2} {month}. | {name} gave a talk on {topic} at the engineering offsite. | {name} asked for "
        "feedback on the promotion packet from their manager. | {name} is allergic to {allergen}. | {name} has a dog "
        "called {pet}. | {name} shared the editor config and dotfiles in #dev-tools. | {name} complained that the "
        "office coffee machine is broken again. | {name} is mentoring {n} interns this term. | {name} is running "
        "the {city} half marathon in {month}. | {name} wants to discuss career growth in the next 1:1. | {name} "
        "fixed the flaky {topic} tests. | {name} will be on parental leave from {month}."
    ),
    "project": _t(
        "The {name} demo for the customer went well; they asked for SSO. | The {name} retro is on {weekday}. | "
        "{name} had a P2 incident caused by an expired certificate. | {name} repository: github.com/acme/{slug}. | "
        "{name} OKR this quarter: cut p95 latency by {n}0%. | {name} needs a security review before the next "
        "milestone. | The {name} team is hiring {n} engineers. | {name} design doc is in the shared drive under "
        "RFC-{n}{n2}. | {name} budget review happens every quarter with finance. | Customer feedback on {name}: "
        "onboarding is too long."
    ),
    "service": _t(
        "{name} p99 latency was {n}{n2}0 ms last week. | {poss} staging database ran out of disk space on "
        "{weekday}; old snapshots were cleaned up. | {name} error rate spiked after the last deploy and was "
        "rolled back. | {name} owns the /v{n}/{topicslug} endpoints. | {name} dashboards live in Grafana under "
        "'{name} overview'. | The {name} runbook was updated after the {month} incident. | {name} has {n}{n2} open "
        "Dependabot alerts. | {name} load test reached {n}{n2}00 requests per second."
    ),
    "team": _t(
        "The {name} team offsite will be in {city} in {month}. | {poss} standup notes live in the team wiki. | "
        "The {name} team is hiring a senior engineer. | {poss} retro format is start/stop/continue. | {name} "
        "closed {n}{n2} bugs last sprint. | {name} is organising the {month} hack week. | {poss} on-call handbook "
        "was rewritten by the new hires. | {name} celebrated {n} years as a team in {month}."
    ),
}
FILL = {
    "lang": (
        "Portuguese",
        "Spanish",
        "German",
        "French",
        "Japanese",
        "Hindi",
        "Arabic",
        "Polish",
        "Swahili",
        "Korean",
        "Italian",
        "Dutch",
    ),
    "topic": (
        "observability",
        "feature flags",
        "load shedding",
        "schema migrations",
        "accessibility",
        "incident reviews",
        "property-based testing",
        "cost dashboards",
        "WebAssembly",
        "search relevance",
    ),
    "allergen": ("peanuts", "shellfish", "penicillin", "pollen", "latex", "sesame"),
    "pet": ("Rex", "Miso", "Biscuit", "Luna", "Pepper", "Nori", "Olive", "Mango"),
    "city": ("Porto", "Valencia", "Kraków", "Lyon", "Ghent", "Bologna", "Bergen", "Tallinn", "Seville", "Cork"),
    "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"),
    "topicslug": ("invoices", "refunds", "sessions", "exports", "webhooks", "reports", "uploads", "quotes"),
}
DISTRACTORS_PER_KIND = {"person": (2, 4), "project": (2, 4), "service": (2, 3), "team": (2, 3)}


@dataclass
class Memory:
    key: str
    content: str
    type: str
    occurred_at: str
    subject: str
    slot: str | None = None  # None for distractors
    version: int | None = None  # 1-based
    supersedes: str | None = None  # key of the previous version when this update links to it
    project: str | None = None
    team: str | None = None

    def remember_body(self, *, link: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "content": self.content,
            "type": self.type,
            "bucket": BUCKET,
            "occurred_at": self.occurred_at,
            "metadata": {"key": self.key},
        }
        if self.project:
            body["project"] = self.project
        if self.team:
            body["team"] = self.team
        if link:
            body["supersedes"] = link
        return body


class Window(TypedDict, total=False):
    """A past question's time window, under the names of recall's filters."""

    occurred_after: str
    occurred_before: str


@dataclass
class Question:
    id: str
    text: str
    kind: str  # "current" or "past"
    subkind: str  # current, as_of, changed_in, before
    slot: str
    gold: str  # memory key
    window: Window = field(default_factory=Window)  # past questions only


@dataclass
class Slot:
    id: str
    subject: str
    attr: str
    values: list[str]
    dates: list[date]
    keys: list[str]


@dataclass
class Dataset:
    seed: int
    memories: list[Memory]
    questions: list[Question]
    slots: list[Slot]

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "memories": [asdict(m) for m in self.memories],
            "questions": [asdict(q) for q in self.questions],
            "slots": [{**asdict(s), "dates": [d.isoformat() for d in s.dates]} for s in self.slots],
        }


@dataclass
class Subject:
    id: str
    kind: str
    forms: list[tuple[str, str]]  # (name, possessive)
    slug: str
    project: str | None = None
    team: str | None = None


def _possessive(name: str) -> str:
    return name + ("'" if name.endswith("s") else "'s")


# A subject form that carries its own article or noun ("the Atlas project", "the Payments team") in a template
# that has them too ("The {name} demo", "{name} team offsite") would read "The the Atlas project demo".
_DOUBLED = re.compile(r"\b(the|The|team|project|service) \1\b", re.IGNORECASE)


def _cap(text: str) -> str:
    head = text.split(" ", 1)[0]
    if "-" in head or head.startswith("#"):  # a service name or channel keeps its spelling
        return text
    return text[:1].upper() + text[1:]


def _subjects(rng: random.Random) -> tuple[list[Subject], list[str]]:
    firsts, lasts = list(FIRST_NAMES), list(LAST_NAMES)
    rng.shuffle(firsts)
    rng.shuffle(lasts)
    # every first name unique: "Maria" is never ambiguous
    people = [f"{first} {last}" for first, last in zip(firsts, lasts, strict=False)]
    subjects: list[Subject] = []
    for full in people[:N_PEOPLE]:
        first = full.split()[0]
        subjects.append(
            Subject(
                f"person:{first.lower()}",
                "person",
                [(full, _possessive(full)), (first, _possessive(first))],
                first.lower(),
            )
        )
    for name in rng.sample(PROJECTS, N_PROJECTS):
        slug = name.lower()
        subjects.append(
            Subject(
                f"project:{slug}",
                "project",
                [
                    (name, _possessive(name)),
                    (f"project {name}", f"project {name}'s"),
                    (f"the {name} project", f"the {name} project's"),
                ],
                slug,
                project=slug,
            )
        )
    for name in rng.sample(SERVICES, N_SERVICES):
        subjects.append(
            Subject(
                f"service:{name}",
                "service",
                [(name, f"{name}'s"), (f"the {name} service", f"the {name} service's")],
                name,
            )
        )
    for name in rng.sample(TEAMS, N_TEAMS):
        slug = name.lower()
        subjects.append(
            Subject(
                f"team:{slug}",
                "team",
                [(f"the {name} team", f"the {name} team's"), (name, _possessive(name))],
                slug,
                team=slug,
            )
        )
    return subjects, people


def _dates(rng: random.Random, n: int) -> list[date]:
    while True:
        start = FIRST_DAY + timedelta(days=rng.randrange(0, 180))
        out = [start]
        for _ in range(n - 1):
            out.append(out[-1] + timedelta(days=rng.randint(MIN_GAP_DAYS, MAX_GAP_DAYS)))
        if out[-1] <= LAST_DAY:
            return out


def _fill(rng: random.Random, template: str, subject: Subject, **extra: str) -> str:
    name, poss = rng.choice(subject.forms)
    values = {"name": name, "poss": poss, "slug": subject.slug, **extra}
    return _cap(_DOUBLED.sub(r"\1", template.format(**values)))


def _month_text(rng: random.Random, year: int, month: int) -> str:
    return rng.choice(
        (
            f"{MONTHS[month - 1]} {year}",
            f"{MONTHS_SHORT[month - 1]} {year}",
            f"{year}-{month:02d}",
            f"{MONTHS[month - 1]} of {year}",
        )
    )


def _quarter_text(rng: random.Random, year: int, quarter: int) -> str:
    ordinal = ("first", "second", "third", "fourth")[quarter - 1]
    return rng.choice((f"Q{quarter} {year}", f"the {ordinal} quarter of {year}"))


def _midnight(day: date) -> str:
    return rfc3339(at(day, 0, 0))


def generate(seed: int = DEFAULT_SEED) -> Dataset:
    rng = random.Random(seed)
    subjects, people = _subjects(rng)
    attrs_by_kind: dict[str, list[Attr]] = {}
    for attr in ATTRS:
        attrs_by_kind.setdefault(attr.kind, []).append(attr)

    memories: list[Memory] = []
    slots: list[Slot] = []
    contents: set[str] = set()

    def add(memory: Memory) -> bool:
        if memory.content in contents:
            return False
        contents.add(memory.content)
        memories.append(memory)
        return True

    for subject in subjects:
        low, high = SLOTS_PER_KIND[subject.kind]
        chosen = rng.sample(attrs_by_kind[subject.kind], rng.randint(low, high))
        for attr in chosen:
            n = rng.choices(list(VERSION_WEIGHTS), weights=list(VERSION_WEIGHTS.values()))[0]
            if attr.people_values:
                pool = [p for p in people if p.split()[0].lower() != subject.slug]
                values = rng.sample(pool, n)
            else:
                pool = [v.format(slug=subject.slug) for v in attr.values]
                picked = rng.sample(range(len(pool)), n)
                if attr.ordered:
                    picked.sort()
                values = [pool[i] for i in picked]
            dates = _dates(rng, n)
            slot_id = f"{subject.id}.{attr.name}"
            keys = []
            for k, (value, day) in enumerate(zip(values, dates, strict=False), start=1):
                key = f"{slot_id}#v{k}"
                templates = attr.first if k == 1 else attr.update
                while True:
                    content = _fill(
                        rng, rng.choice(templates), subject, v=value, a="an" if value[0].lower() in "aeiou" else "a"
                    )
                    memory = Memory(
                        key,
                        content,
                        attr.type,
                        rfc3339(at(day, rng.randint(8, 18), rng.randrange(60))),
                        subject.id,
                        slot_id,
                        k,
                        None,
                        subject.project,
                        subject.team,
                    )
                    if add(memory):
                        break
                keys.append(key)
            slots.append(Slot(slot_id, subject.id, attr.name, values, dates, keys))
        low, high = DISTRACTORS_PER_KIND[subject.kind]
        for j, template in enumerate(rng.sample(DISTRACTORS[subject.kind], rng.randint(low, high))):
            while True:
                extra = {key: rng.choice(pool) for key, pool in FILL.items()}
                extra.update(
                    lang2=rng.choice([x for x in FILL["lang"] if x != extra["lang"]]),
                    month=rng.choice(MONTHS),
                    day=str(rng.randint(1, 14)),
                    day2=str(rng.randint(15, 28)),
                    n=str(rng.randint(2, 9)),
                    n2=str(rng.randint(0, 9)),
                )
                day = FIRST_DAY + timedelta(days=rng.randrange((LAST_DAY - FIRST_DAY).days))
                memory = Memory(
                    f"{subject.id}.d{j}",
                    _fill(rng, template, subject, **extra),
                    rng.choice(("note", "fact", "event")),
                    rfc3339(at(day, rng.randint(8, 18), rng.randrange(60))),
                    subject.id,
                    project=subject.project,
                    team=subject.team,
                )
                if add(memory):
                    break

    # Half of the updates (versions 2+) link to the version they replace.
    updates = [(m, m.version) for m in memories if m.version and m.version > 1]
    rng.shuffle(updates)
    for memory, version in updates[: len(updates) // 2]:
        memory.supersedes = f"{memory.slot}#v{version - 1}"

    memories.sort(key=lambda m: (m.occurred_at, m.key))  # saved in the order things happened
    questions = _questions(rng, subjects, slots)
    return Dataset(seed, memories, questions, slots)


def _questions(rng: random.Random, subjects: list[Subject], slots: list[Slot]) -> list[Question]:
    by_id = {s.id: s for s in subjects}
    attrs = {a.name: a for a in ATTRS}
    questions: list[Question] = []
    for slot in slots:
        subject, attr = by_id[slot.subject], attrs[slot.attr]
        n = len(slot.values)
        questions.append(
            Question(
                f"{slot.id}:current",
                _fill(rng, rng.choice(attr.current), subject),
                "current",
                "current",
                slot.id,
                slot.keys[-1],
            )
        )
        for k in range(n - 1):  # every version but the latest gets one past question
            start, end = slot.dates[k], slot.dates[k + 1]
            kinds = ["as_of", "before"] + (["changed_in"] if k > 0 else [])
            kind = rng.choice(kinds)
            qid = f"{slot.id}:v{k + 1}:{kind}"
            window: Window
            if kind == "as_of":
                inside = months_between(start, end)
                quarters = [
                    (y, (m - 1) // 3 + 1)
                    for (y, m) in inside
                    if m % 3 == 1 and (y, m + 1) in inside and (y, m + 2) in inside
                ]
                if quarters and rng.random() < 0.3:
                    year, quarter = rng.choice(quarters)
                    when = _quarter_text(rng, year, quarter)
                    last_month = (year, quarter * 3)
                else:
                    last_month = rng.choice(inside)
                    when = _month_text(rng, *last_month)
                window = {"occurred_before": _midnight(month_start(*next_month(*last_month)))}
                text = _fill(rng, rng.choice(attr.as_of), subject, when=when)
            elif kind == "changed_in":
                y, m = start.year, start.month
                window = {
                    "occurred_after": _midnight(month_start(y, m)),
                    "occurred_before": _midnight(month_start(*next_month(y, m))),
                }
                text = _fill(rng, rng.choice(attr.changed), subject, when=_month_text(rng, y, m))
            else:
                window = {"occurred_before": _midnight(end)}
                text = _fill(rng, rng.choice(attr.before), subject, next=slot.values[k + 1])
            questions.append(Question(qid, text, "past", kind, slot.id, slot.keys[k], window))
    return questions


def period_of(question: Question) -> tuple[date | None, date | None]:
    """The window as dates (inclusive start, exclusive end), for checks."""
    after = question.window.get("occurred_after")
    before = question.window.get("occurred_before")
    return (date.fromisoformat(after[:10]) if after else None, date.fromisoformat(before[:10]) if before else None)


__all__ = [
    "ATTRS",
    "BUCKET",
    "DEFAULT_SEED",
    "Dataset",
    "Memory",
    "Question",
    "Slot",
    "Window",
    "generate",
    "month_end",
    "period_of",
]
