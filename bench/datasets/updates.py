"""Facts remembered over months in three languages, repeated in other words and updated without links: the
dataset of bench/updates.py, generated from templates and a seed.

Subjects are people, services, projects and teams, each written about in one language (English, Spanish or
Portuguese). Each has two facts that change (a person's manager and office, a service's region and staging
database, a project's lead and phase, a team's standup time and on-call tool: 2-4 versions, months apart
between 2024 and 2026) and one that never does (a person's home city, a service's production database, a
project's Slack channel, a team's CI). Every version is remembered 1-3 times in other words, days to weeks
apart; an update never carries `supersedes`. A person's home city looks like their office and a service's
production database like its staging one: a distinct fact that an update must not hide.

Questions, in the subject's language:
- current: a changing fact's value now, asked plainly ("Who leads the Atlas project?") or with a word for the
  present ("... now?", "¿... ahora?", "... atualmente?"); the gold is every memory of the last version;
- stable: a fact that never changed, asked both ways; the gold is every memory of it;
- past: the value during a month inside one older version's validity ("in March 2025", "en marzo de 2025",
  "em maio de 2024"); the gold is every memory of that version;
- overview: "What do we know about X?" ("¿Qué sabemos de X?", "O que sabemos sobre X?"): the subject's current
  facts.

Guarantees (tests/test_bench_datasets.py checks them): the same seed gives the same dataset, every content is
unique, a fact's versions have distinct values and are at least MIN_GAP_DAYS apart, a version's repeats come
before the next version, and a past question's month lies wholly between its version and the next.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from typing import Any

from bench.datasets.common import at, months_between, rfc3339

DEFAULT_SEED = 11
BUCKET = "updates"
LANGUAGES = ("en", "es", "pt")
LANGUAGE_WEIGHTS = (2, 1, 1)
FIRST_DAY = date(2024, 1, 8)
LAST_DAY = date(2026, 10, 30)
MIN_GAP_DAYS = 95
MAX_GAP_DAYS = 230
SUBJECTS = {"person": 20, "service": 10, "project": 10, "team": 10}

MONTH_NAMES = {
    "en": "January February March April May June July August September October November December".split(),
    "es": "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre".split(),
    "pt": "janeiro fevereiro março abril maio junho julho agosto setembro outubro novembro dezembro".split(),
}
PEOPLE = {
    "en": "Maria Lopez|Tom Berg|Priya Shah|Grace Kim|Liam Walsh|Nadia Karimi|Oscar Novak|Tara Dunn|Wes Frost|"
    "Zoe Hart|Emil Brandt|Isla Reid|Hugo Marsh|Greta Lang|Felix Pike|Anouk Bakker|Kofi Asante|Ivan Orlov",
    "es": "Lucía Romero|Javier Ruiz|Carmen Ortega|Diego Alvarez|Sofía Navarro|Pablo Herrera|Elena Castillo|"
    "Andrés Molina|Valeria Ríos|Mateo Vargas|Paula Medina|Hugo Serrano",
    "pt": "João Pereira|Ana Ferraz|Beatriz Rocha|Rafael Duarte|Mariana Costa|Tiago Mendes|Camila Nunes|"
    "Bruno Almeida|Larissa Freitas|Gustavo Barros|Helena Teixeira|Caio Moura",
}
COLLEAGUES = (
    "Mia Chen|Jonas Weber|Aisha Okafor|Kenji Tanaka|Rosa Costa|Samir Haddad|Ingrid Lund|Pedro Silva|"
    "Yara Nasser|Victor Moreau|Julia Keller|Marco Conti|Noor Qureshi|Stefan Vogel|Lena Eklund|Carlos Mendes"
).split("|")
SERVICES = (
    "billing-api search-indexer auth-gateway notifier ledger-core checkout-web media-transcoder "
    "reporting-etl inventory-sync profile-api pricing-engine fraud-scorer"
).split()
PROJECTS = "Atlas Borealis Cobalt Dynamo Ember Falcon Granite Helios Juniper Kestrel Lumen Meridian".split()
TEAMS = "Payments Search Platform Mobile Growth Security Identity Observability Checkout Billing".split()
# How a subject is named in a sentence: (English, English possessive, Spanish, Portuguese); {n} is its name.
FORMS = {
    "person": ("{n}", "{n}'s", "{n}", "{n}"),
    "service": ("{n}", "{n}'s", "el servicio {n}", "o serviço {n}"),
    "project": ("the {n} project", "the {n} project's", "el proyecto {n}", "o projeto {n}"),
    "team": ("the {n} team", "the {n} team's", "el equipo {n}", "a equipe {n}"),
}

CITIES = "Madrid|Toronto|São Paulo|Barcelona|Montevideo|Chicago|Boston|Austin|Santiago|Valencia".split("|")
REGIONS = "eu-central-1 us-east-1 eu-west-1 sa-east-1 us-west-2 ap-southeast-2".split()
POSTGRES = ("13", "14", "15", "16", "17")
PHASES = {
    "en": ("discovery", "prototype", "private beta", "public beta", "general availability"),
    "es": ("descubrimiento", "prototipo", "beta privada", "beta pública", "disponibilidad general"),
    "pt": ("descoberta", "protótipo", "beta fechado", "beta público", "disponibilidade geral"),
}
STANDUPS = ("8:45", "9:00", "9:30", "10:00", "10:15", "11:00")
ONCALL = ("PagerDuty", "Opsgenie", "incident.io", "Grafana OnCall", "Rootly", "Squadcast")
CI = ("GitHub Actions", "GitLab CI", "Buildkite", "Jenkins", "CircleCI", "Drone")


def _t(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split("|"))


@dataclass(frozen=True)
class Phrasing:
    """One language's templates for one fact: statements, updates, questions. {s} the subject, {p} its English
    possessive, {v} the value, {when} a month and its year."""

    state: tuple[str, ...]
    update: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    ask_now: tuple[str, ...] = ()
    ask_then: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fact:
    name: str
    kind: str
    changes: bool
    phrasing: dict[str, Phrasing]
    ordered: bool = False  # versions follow the order of the values (upgrades, phases)


FACTS: tuple[Fact, ...] = (
    Fact(
        "manager",
        "person",
        True,
        {
            "en": Phrasing(
                _t("{p} manager is {v}. | {s} reports to {v}. | Org chart: {s} reports to {v}."),
                _t("{s} now reports to {v}. | Reorg: {s} moved under {v}. | {p} new manager is {v}."),
                _t("Who is {p} manager? | Who does {s} report to?"),
                _t("Who is {p} manager now? | Who does {s} report to currently?"),
                _t("Who was {p} manager in {when}? | Who did {s} report to in {when}?"),
            ),
            "es": Phrasing(
                _t("El responsable directo de {s} es {v}. | {s} reporta a {v}. | Organigrama: {s} depende de {v}."),
                _t(
                    "{s} ahora reporta a {v}. | Reorganización: {s} pasa a depender de {v}. | "
                    "{v} es el nuevo responsable de {s}."
                ),
                _t("¿Quién es el responsable de {s}? | ¿A quién reporta {s}?"),
                _t("¿Quién es el responsable de {s} ahora? | ¿A quién reporta {s} actualmente?"),
                _t("¿Quién era el responsable de {s} en {when}? | ¿A quién reportaba {s} en {when}?"),
            ),
            "pt": Phrasing(
                _t("O gestor de {s} é {v}. | {s} se reporta a {v}. | Organograma: {s} responde a {v}."),
                _t(
                    "{s} agora se reporta a {v}. | Reorganização: {s} passou para a equipe de {v}. | "
                    "O novo gestor de {s} é {v}."
                ),
                _t("Quem é o gestor de {s}? | A quem {s} se reporta?"),
                _t("Quem é o gestor de {s} agora? | A quem {s} se reporta atualmente?"),
                _t("Quem era o gestor de {s} em {when}? | A quem {s} se reportava em {when}?"),
            ),
        },
    ),
    Fact(
        "office",
        "person",
        True,
        {
            "en": Phrasing(
                _t("{s} works from the {v} office. | {p} desk is in the {v} office. | {s} is based in our {v} office."),
                _t("{s} moved to the {v} office. | {s} relocated to the {v} office. | {p} office is now {v}."),
                _t("Which office does {s} work from? | Where is {p} office?"),
                _t("Which office does {s} work from now? | Where is {p} office these days?"),
                _t("Which office did {s} work from in {when}? | Where was {p} office in {when}?"),
            ),
            "es": Phrasing(
                _t(
                    "{s} trabaja en la oficina de {v}. | El puesto de {s} está en la oficina de {v}. | "
                    "{s} está asignado a la oficina de {v}."
                ),
                _t(
                    "{s} se mudó a la oficina de {v}. | {s} se trasladó a la oficina de {v}. | "
                    "La oficina de {s} pasa a ser {v}."
                ),
                _t("¿En qué oficina trabaja {s}? | ¿Dónde está la oficina de {s}?"),
                _t("¿En qué oficina trabaja {s} ahora? | ¿Dónde está la oficina de {s} actualmente?"),
                _t("¿En qué oficina trabajaba {s} en {when}? | ¿Dónde estaba la oficina de {s} en {when}?"),
            ),
            "pt": Phrasing(
                _t(
                    "{s} trabalha no escritório de {v}. | A mesa de {s} fica no escritório de {v}. | "
                    "{s} está lotado no escritório de {v}."
                ),
                _t(
                    "{s} mudou para o escritório de {v}. | {s} foi transferido para o escritório de {v}. | "
                    "O escritório de {s} passou a ser {v}."
                ),
                _t("Em qual escritório {s} trabalha? | Onde fica o escritório de {s}?"),
                _t("Em qual escritório {s} trabalha agora? | Onde fica o escritório de {s} atualmente?"),
                _t("Em qual escritório {s} trabalhava em {when}? | Onde ficava o escritório de {s} em {when}?"),
            ),
        },
    ),
    Fact(
        "home",
        "person",
        False,
        {
            "en": Phrasing(
                _t("{s} lives in {v}. | {p} home is in {v}. | {s} has a house in {v}."),
                ask=_t("Where does {s} live? | Which city is {p} home in?"),
                ask_now=_t("Where does {s} live now? | Which city is {p} home in these days?"),
            ),
            "es": Phrasing(
                _t("{s} vive en {v}. | La casa de {s} está en {v}. | {s} tiene su casa en {v}."),
                ask=_t("¿Dónde vive {s}? | ¿En qué ciudad vive {s}?"),
                ask_now=_t("¿Dónde vive {s} ahora? | ¿En qué ciudad vive {s} hoy en día?"),
            ),
            "pt": Phrasing(
                _t("{s} mora em {v}. | A casa de {s} fica em {v}. | {s} tem casa em {v}."),
                ask=_t("Onde {s} mora? | Em que cidade {s} mora?"),
                ask_now=_t("Onde {s} mora agora? | Em que cidade {s} mora hoje em dia?"),
            ),
        },
    ),
    Fact(
        "region",
        "service",
        True,
        {
            "en": Phrasing(
                _t("{s} runs in {v}. | We host {s} in {v}. | {s} is deployed to the {v} region."),
                _t("{s} now runs in {v}. | Migration done: {s} moved to {v}. | {s} was redeployed to {v}."),
                _t("Which region does {s} run in? | Where is {s} hosted?"),
                _t("Which region does {s} run in now? | Where is {s} hosted currently?"),
                _t("Which region did {s} run in in {when}? | Where was {s} hosted in {when}?"),
            ),
            "es": Phrasing(
                _t("{s} corre en {v}. | Alojamos {s} en {v}. | {s} está desplegado en la región {v}."),
                _t(
                    "{s} ahora corre en {v}. | Migración terminada: {s} se movió a {v}. | "
                    "{s} se volvió a desplegar en {v}."
                ),
                _t("¿En qué región corre {s}? | ¿Dónde está alojado {s}?"),
                _t("¿En qué región corre {s} ahora? | ¿Dónde está alojado {s} actualmente?"),
                _t("¿En qué región corría {s} en {when}? | ¿Dónde estaba alojado {s} en {when}?"),
            ),
            "pt": Phrasing(
                _t("{s} roda em {v}. | Hospedamos {s} em {v}. | {s} está implantado na região {v}."),
                _t("{s} agora roda em {v}. | Migração concluída: {s} foi para {v}. | {s} foi reimplantado em {v}."),
                _t("Em qual região {s} roda? | Onde {s} está hospedado?"),
                _t("Em qual região {s} roda agora? | Onde {s} está hospedado atualmente?"),
                _t("Em qual região {s} rodava em {when}? | Onde {s} estava hospedado em {when}?"),
            ),
        },
    ),
    Fact(
        "staging",
        "service",
        True,
        {
            "en": Phrasing(
                _t(
                    "{p} staging database runs Postgres {v}. | Staging for {s} is on Postgres {v}. | "
                    "The {s} staging DB is Postgres {v}."
                ),
                _t(
                    "{p} staging database was upgraded to Postgres {v}. | Staging for {s} moved to Postgres {v}. | "
                    "Upgrade note: {s} staging now on Postgres {v}."
                ),
                _t("Which Postgres version does {p} staging database run? | What Postgres is {s} staging on?"),
                _t(
                    "Which Postgres version does {p} staging database run now? | "
                    "What Postgres is {s} staging on at the moment?"
                ),
                _t(
                    "Which Postgres version did {p} staging database run in {when}? | "
                    "What Postgres was {s} staging on in {when}?"
                ),
            ),
            "es": Phrasing(
                _t(
                    "La base de datos de staging de {s} usa Postgres {v}. | El staging de {s} está en Postgres {v}. | "
                    "La BD de staging de {s} es Postgres {v}."
                ),
                _t(
                    "La base de datos de staging de {s} se actualizó a Postgres {v}. | "
                    "El staging de {s} pasó a Postgres {v}. | Nota de actualización: staging de {s} ya en Postgres {v}."
                ),
                _t(
                    "¿Qué versión de Postgres usa la base de datos de staging de {s}? | "
                    "¿En qué Postgres está el staging de {s}?"
                ),
                _t(
                    "¿Qué versión de Postgres usa ahora la base de datos de staging de {s}? | "
                    "¿En qué Postgres está el staging de {s} actualmente?"
                ),
                _t(
                    "¿Qué versión de Postgres usaba la base de datos de staging de {s} en {when}? | "
                    "¿En qué Postgres estaba el staging de {s} en {when}?"
                ),
            ),
            "pt": Phrasing(
                _t(
                    "O banco de dados de staging de {s} usa Postgres {v}. | O staging de {s} está no Postgres {v}. | "
                    "O BD de staging de {s} é Postgres {v}."
                ),
                _t(
                    "O banco de dados de staging de {s} foi atualizado para Postgres {v}. | "
                    "O staging de {s} passou para o Postgres {v}. | Nota de atualização: staging de {s} já no Postgres {v}."
                ),
                _t("Qual versão do Postgres o banco de staging de {s} usa? | Em qual Postgres está o staging de {s}?"),
                _t(
                    "Qual versão do Postgres o banco de staging de {s} usa agora? | "
                    "Em qual Postgres está o staging de {s} atualmente?"
                ),
                _t(
                    "Qual versão do Postgres o banco de staging de {s} usava em {when}? | "
                    "Em qual Postgres estava o staging de {s} em {when}?"
                ),
            ),
        },
        ordered=True,
    ),
    Fact(
        "production",
        "service",
        False,
        {
            "en": Phrasing(
                _t(
                    "{p} production database runs Postgres {v}. | Production for {s} is on Postgres {v}. | "
                    "The {s} production DB is Postgres {v}."
                ),
                ask=_t(
                    "Which Postgres version does {p} production database run? | What Postgres is {s} production on?"
                ),
                ask_now=_t(
                    "Which Postgres version does {p} production database run now? | "
                    "What Postgres is {s} production on at the moment?"
                ),
            ),
            "es": Phrasing(
                _t(
                    "La base de datos de producción de {s} usa Postgres {v}. | "
                    "La producción de {s} está en Postgres {v}. | La BD de producción de {s} es Postgres {v}."
                ),
                ask=_t(
                    "¿Qué versión de Postgres usa la base de datos de producción de {s}? | "
                    "¿En qué Postgres está la producción de {s}?"
                ),
                ask_now=_t(
                    "¿Qué versión de Postgres usa ahora la base de datos de producción de {s}? | "
                    "¿En qué Postgres está la producción de {s} actualmente?"
                ),
            ),
            "pt": Phrasing(
                _t(
                    "O banco de dados de produção de {s} usa Postgres {v}. | A produção de {s} está no Postgres {v}. | "
                    "O BD de produção de {s} é Postgres {v}."
                ),
                ask=_t(
                    "Qual versão do Postgres o banco de produção de {s} usa? | Em qual Postgres está a produção de {s}?"
                ),
                ask_now=_t(
                    "Qual versão do Postgres o banco de produção de {s} usa agora? | "
                    "Em qual Postgres está a produção de {s} atualmente?"
                ),
            ),
        },
    ),
    Fact(
        "lead",
        "project",
        True,
        {
            "en": Phrasing(
                _t("{s} is led by {v}. | {v} leads {s}. | Project lead for {s}: {v}."),
                _t("{v} took over as lead of {s}. | New lead for {s}: {v}. | {s} is now led by {v}."),
                _t("Who leads {s}? | Who is the lead of {s}?"),
                _t("Who leads {s} now? | Who is the current lead of {s}?"),
                _t("Who led {s} in {when}? | Who was the lead of {s} in {when}?"),
            ),
            "es": Phrasing(
                _t("{s} está liderado por {v}. | {v} lidera {s}. | Líder de {s}: {v}."),
                _t("{v} asumió el liderazgo de {s}. | Nuevo líder de {s}: {v}. | {s} ahora lo lidera {v}."),
                _t("¿Quién lidera {s}? | ¿Quién es el líder de {s}?"),
                _t("¿Quién lidera {s} ahora? | ¿Quién es el líder actual de {s}?"),
                _t("¿Quién lideraba {s} en {when}? | ¿Quién era el líder de {s} en {when}?"),
            ),
            "pt": Phrasing(
                _t("{s} é liderado por {v}. | {v} lidera {s}. | Líder de {s}: {v}."),
                _t("{v} assumiu a liderança de {s}. | Novo líder de {s}: {v}. | {s} agora é liderado por {v}."),
                _t("Quem lidera {s}? | Quem é o líder de {s}?"),
                _t("Quem lidera {s} agora? | Quem é o líder atual de {s}?"),
                _t("Quem liderava {s} em {when}? | Quem era o líder de {s} em {when}?"),
            ),
        },
    ),
    Fact(
        "phase",
        "project",
        True,
        {
            "en": Phrasing(
                _t("{s} is in the {v} phase. | Status of {s}: {v}. | {s} is at the {v} stage."),
                _t("{s} moved to {v}. | {s} has entered {v}. | Milestone: {s} reached {v}."),
                _t("What phase is {s} in? | What is the status of {s}?"),
                _t("What phase is {s} in now? | What is the current status of {s}?"),
                _t("What phase was {s} in in {when}? | What was the status of {s} in {when}?"),
            ),
            "es": Phrasing(
                _t("{s} está en fase de {v}. | Estado de {s}: {v}. | {s} se encuentra en la etapa de {v}."),
                _t("{s} pasó a {v}. | {s} entró en {v}. | Hito: {s} llegó a {v}."),
                _t("¿En qué fase está {s}? | ¿Cuál es el estado de {s}?"),
                _t("¿En qué fase está {s} ahora? | ¿Cuál es el estado actual de {s}?"),
                _t("¿En qué fase estaba {s} en {when}? | ¿Cuál era el estado de {s} en {when}?"),
            ),
            "pt": Phrasing(
                _t("{s} está na fase de {v}. | Status de {s}: {v}. | {s} se encontra na etapa de {v}."),
                _t("{s} passou para {v}. | {s} entrou em {v}. | Etapa concluída: {s} chegou a {v}."),
                _t("Em que fase está {s}? | Qual é o status de {s}?"),
                _t("Em que fase está {s} agora? | Qual é o status atual de {s}?"),
                _t("Em que fase estava {s} em {when}? | Qual era o status de {s} em {when}?"),
            ),
        },
        ordered=True,
    ),
    Fact(
        "channel",
        "project",
        False,
        {
            "en": Phrasing(
                _t("Discussion for {s} happens in {v}. | {p} Slack channel is {v}. | Use {v} for questions about {s}."),
                ask=_t("Which Slack channel does {s} use? | Where do we discuss {s}?"),
                ask_now=_t("Which Slack channel does {s} use now? | Where do we discuss {s} these days?"),
            ),
            "es": Phrasing(
                _t(
                    "Las conversaciones de {s} van en {v}. | El canal de Slack de {s} es {v}. | Usa {v} para dudas de {s}."
                ),
                ask=_t("¿Qué canal de Slack usa {s}? | ¿Dónde se habla de {s}?"),
                ask_now=_t("¿Qué canal de Slack usa {s} ahora? | ¿Dónde se habla de {s} hoy en día?"),
            ),
            "pt": Phrasing(
                _t(
                    "As conversas de {s} acontecem em {v}. | O canal do Slack de {s} é {v}. | Use {v} para dúvidas de {s}."
                ),
                ask=_t("Qual canal do Slack {s} usa? | Onde discutimos {s}?"),
                ask_now=_t("Qual canal do Slack {s} usa agora? | Onde discutimos {s} hoje em dia?"),
            ),
        },
    ),
    Fact(
        "standup",
        "team",
        True,
        {
            "en": Phrasing(
                _t("{p} standup is at {v}. | {s} holds its daily standup at {v}. | Daily sync for {s}: {v}."),
                _t(
                    "{s} moved its standup to {v}. | {p} standup is now at {v}. | Schedule change: {s} stands up at {v}."
                ),
                _t("What time is {p} standup? | When does {s} hold its standup?"),
                _t("What time is {p} standup now? | When does {s} hold its standup these days?"),
                _t("What time was {p} standup in {when}? | When did {s} hold its standup in {when}?"),
            ),
            "es": Phrasing(
                _t(
                    "La daily de {s} es a las {v}. | {s} hace su reunión diaria a las {v}. | Sincronización diaria de {s}: {v}."
                ),
                _t(
                    "{s} movió su daily a las {v}. | La daily de {s} ahora es a las {v}. | "
                    "Cambio de horario: {s} hace la daily a las {v}."
                ),
                _t("¿A qué hora es la daily de {s}? | ¿Cuándo hace {s} su reunión diaria?"),
                _t("¿A qué hora es la daily de {s} ahora? | ¿Cuándo hace {s} su reunión diaria actualmente?"),
                _t("¿A qué hora era la daily de {s} en {when}? | ¿Cuándo hacía {s} su reunión diaria en {when}?"),
            ),
            "pt": Phrasing(
                _t("A daily de {s} é às {v}. | {s} faz a reunião diária às {v}. | Sincronização diária de {s}: {v}."),
                _t(
                    "{s} mudou a daily para as {v}. | A daily de {s} agora é às {v}. | "
                    "Mudança de horário: {s} faz a daily às {v}."
                ),
                _t("Que horas é a daily de {s}? | Quando {s} faz a reunião diária?"),
                _t("Que horas é a daily de {s} agora? | Quando {s} faz a reunião diária atualmente?"),
                _t("Que horas era a daily de {s} em {when}? | Quando {s} fazia a reunião diária em {when}?"),
            ),
        },
    ),
    Fact(
        "oncall",
        "team",
        True,
        {
            "en": Phrasing(
                _t(
                    "{s} uses {v} for on-call. | On-call paging for {s} goes through {v}. | {p} on-call rotation lives in {v}."
                ),
                _t(
                    "{s} switched its on-call to {v}. | {s} moved on-call paging to {v}. | {p} on-call tool is now {v}."
                ),
                _t("Which on-call tool does {s} use? | What does {s} use for paging?"),
                _t("Which on-call tool does {s} use now? | What does {s} use for paging at the moment?"),
                _t("Which on-call tool did {s} use in {when}? | What did {s} use for paging in {when}?"),
            ),
            "es": Phrasing(
                _t(
                    "{s} usa {v} para las guardias. | Los avisos de guardia de {s} pasan por {v}. | "
                    "La rotación de guardia de {s} está en {v}."
                ),
                _t(
                    "{s} cambió sus guardias a {v}. | {s} movió los avisos de guardia a {v}. | "
                    "La herramienta de guardia de {s} ahora es {v}."
                ),
                _t("¿Qué herramienta de guardia usa {s}? | ¿Qué usa {s} para los avisos de guardia?"),
                _t("¿Qué herramienta de guardia usa {s} ahora? | ¿Qué usa {s} para los avisos de guardia actualmente?"),
                _t(
                    "¿Qué herramienta de guardia usaba {s} en {when}? | "
                    "¿Qué usaba {s} para los avisos de guardia en {when}?"
                ),
            ),
            "pt": Phrasing(
                _t(
                    "{s} usa {v} para o plantão. | Os alertas de plantão de {s} passam pelo {v}. | "
                    "A escala de plantão de {s} fica no {v}."
                ),
                _t(
                    "{s} trocou o plantão para o {v}. | {s} levou os alertas de plantão para o {v}. | "
                    "A ferramenta de plantão de {s} agora é o {v}."
                ),
                _t("Qual ferramenta de plantão {s} usa? | O que {s} usa para os alertas de plantão?"),
                _t("Qual ferramenta de plantão {s} usa agora? | O que {s} usa para os alertas de plantão atualmente?"),
                _t(
                    "Qual ferramenta de plantão {s} usava em {when}? | "
                    "O que {s} usava para os alertas de plantão em {when}?"
                ),
            ),
        },
    ),
    Fact(
        "ci",
        "team",
        False,
        {
            "en": Phrasing(
                _t("{s} runs CI on {v}. | {p} pipelines are on {v}. | CI for {s}: {v}."),
                ask=_t("Which CI does {s} use? | Where do {p} pipelines run?"),
                ask_now=_t("Which CI does {s} use now? | Where do {p} pipelines run these days?"),
            ),
            "es": Phrasing(
                _t("{s} ejecuta su CI en {v}. | Los pipelines de {s} están en {v}. | CI de {s}: {v}."),
                ask=_t("¿Qué CI usa {s}? | ¿Dónde corren los pipelines de {s}?"),
                ask_now=_t("¿Qué CI usa {s} ahora? | ¿Dónde corren los pipelines de {s} hoy en día?"),
            ),
            "pt": Phrasing(
                _t("{s} roda a CI no {v}. | Os pipelines de {s} ficam no {v}. | CI de {s}: {v}."),
                ask=_t("Qual CI {s} usa? | Onde rodam os pipelines de {s}?"),
                ask_now=_t("Qual CI {s} usa agora? | Onde rodam os pipelines de {s} hoje em dia?"),
            ),
        },
    ),
)
LOOK_ALIKES = {"home": "office", "production": "staging"}  # a fact that never changes -> the one it looks like
OVERVIEW = {
    "en": _t("What do we know about {s}? | Tell me everything about {s}. | Summary of {s}"),
    "es": _t("¿Qué sabemos de {s}? | Cuéntame todo sobre {s}. | Resumen de {s}"),
    "pt": _t("O que sabemos sobre {s}? | Me conte tudo sobre {s}. | Resumo de {s}"),
}


@dataclass
class Memory:
    key: str
    content: str
    occurred_at: str
    subject: str
    fact: str  # "<subject>/<fact name>"
    version: int  # 0-based

    def remember_body(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "type": "fact",
            "bucket": BUCKET,
            "occurred_at": self.occurred_at,
            "metadata": {"key": self.key},
        }


@dataclass
class Question:
    id: str
    text: str
    kind: str  # current, stable, past, overview
    language: str
    subject: str
    fact: str | None  # None for an overview
    cue: bool  # asks with a word for the present
    version: int | None = None  # past: the version valid in the month asked about


@dataclass
class FactRecord:
    id: str
    subject: str
    name: str
    changes: bool
    values: list[str]
    dates: list[date]
    keys: list[list[str]]  # per version, the keys of its memories


@dataclass
class Dataset:
    seed: int
    memories: list[Memory]
    questions: list[Question]
    facts: list[FactRecord]

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "memories": [asdict(m) for m in self.memories],
            "questions": [asdict(q) for q in self.questions],
            "facts": [{**asdict(f), "dates": [d.isoformat() for d in f.dates]} for f in self.facts],
        }


@dataclass(frozen=True)
class Subject:
    id: str
    kind: str
    name: str
    language: str

    def forms(self) -> dict[str, str]:
        english, possessive, spanish, portuguese = FORMS[self.kind]
        chosen = {"en": english, "es": spanish, "pt": portuguese}[self.language]
        return {"s": chosen.format(n=self.name), "p": possessive.format(n=self.name)}


# Spanish and Portuguese contract a preposition with the article a subject's form starts with.
_CONTRACTIONS = {
    "es": ((r"\bde el\b", "del"), (r"\ba el\b", "al")),
    "pt": (
        (r"\bde o\b", "do"),
        (r"\bde a\b", "da"),
        (r"\bem o\b", "no"),
        (r"\bem a\b", "na"),
        (r"\bpor o\b", "pelo"),
        (r"\bpor a\b", "pela"),
    ),
}


def _render(template: str, subject: Subject, **extra: str) -> str:
    text = template.format(**subject.forms(), **extra)
    for pattern, replacement in _CONTRACTIONS.get(subject.language, ()):
        text = re.sub(pattern, replacement, text)
    if subject.kind == "service" and text.startswith(subject.name):
        return text  # "billing-api runs in ...": a service's name as written
    return text[:1].upper() + text[1:]


def _subjects(rng: random.Random) -> list[Subject]:
    languages = rng.choices(LANGUAGES, weights=LANGUAGE_WEIGHTS, k=sum(SUBJECTS.values()))
    pools = {kind: list(names) for kind, names in (("service", SERVICES), ("project", PROJECTS), ("team", TEAMS))}
    people = {lang: PEOPLE[lang].split("|") for lang in LANGUAGES}
    for pool in (*pools.values(), *people.values()):
        rng.shuffle(pool)
    out: list[Subject] = []
    for kind, n in SUBJECTS.items():
        for i in range(n):
            language = languages[len(out)]
            name = people[language].pop() if kind == "person" else pools[kind][i]
            out.append(Subject(f"{kind}:{i}", kind, name, language))
    return out


def _values(rng: random.Random, fact: Fact, subject: Subject, n: int, avoid: set[str]) -> list[str]:
    options: list[str] = {
        "manager": COLLEAGUES,
        "lead": COLLEAGUES,
        "office": CITIES,
        "home": CITIES,
        "region": REGIONS,
        "staging": list(POSTGRES),
        "production": list(POSTGRES),
        "phase": list(PHASES[subject.language]),
        "channel": [f"#{subject.name.lower()}-{suffix}" for suffix in ("dev", "team", "eng", "core")],
        "standup": list(STANDUPS),
        "oncall": list(ONCALL),
        "ci": list(CI),
    }[fact.name]
    free = [v for v in options if v not in avoid]
    if fact.ordered:
        start = rng.randrange(len(free) - n + 1)
        return free[start : start + n]
    return rng.sample(free, n)


def _version_dates(rng: random.Random, n: int) -> list[date]:
    first = FIRST_DAY + timedelta(days=rng.randrange(0, 240))
    days = [first]
    for _ in range(n - 1):
        days.append(days[-1] + timedelta(days=rng.randint(MIN_GAP_DAYS, MAX_GAP_DAYS)))
    return days if days[-1] <= LAST_DAY else _version_dates(rng, n)


def _mention_days(rng: random.Random, start: date, until: date, n: int) -> list[date]:
    """The first mention on `start`, then n - 1 repeats 4-60 days apart, each before `until`."""
    days = [start]
    for _ in range(n - 1):
        later = days[-1] + timedelta(days=rng.randint(4, 60))
        if later >= until:
            break
        days.append(later)
    return days


def _when(language: str, year: int, month: int) -> str:
    name = MONTH_NAMES[language][month - 1]
    return f"{name} {year}" if language == "en" else f"{name} de {year}"


def generate(seed: int = DEFAULT_SEED) -> Dataset:
    rng = random.Random(seed)
    subjects = _subjects(rng)
    facts: list[FactRecord] = []
    mentions: list[tuple[date, int, Memory]] = []
    for subject in subjects:
        used: set[str] = set()
        for fact in (f for f in FACTS if f.kind == subject.kind):
            phrasing = fact.phrasing[subject.language]
            n = rng.choices((2, 3, 4), weights=(40, 40, 20))[0] if fact.changes else 1
            values = _values(rng, fact, subject, n, used if fact.name in ("home", "office") else set())
            used.update(values)
            dates = _version_dates(rng, n) if fact.changes else [FIRST_DAY + timedelta(days=rng.randrange(0, 900))]
            record = FactRecord(f"{subject.id}/{fact.name}", subject.id, fact.name, fact.changes, values, dates, [])
            for version, (value, day) in enumerate(zip(values, dates, strict=True)):
                until = dates[version + 1] if version + 1 < n else LAST_DAY + timedelta(days=30)
                days = _mention_days(rng, day, until, rng.choices((1, 2, 3), weights=(35, 40, 25))[0])
                wordings = rng.sample(phrasing.state, len(phrasing.state))
                if version > 0:  # an update is first told as one, then restated plainly
                    wordings = [rng.choice(phrasing.update), *wordings]
                keys = []
                for k, mention in enumerate(days):
                    key = f"{record.id}/v{version}/m{k}"
                    content = _render(wordings[k], subject, v=value)
                    moment = rfc3339(at(mention, rng.randint(8, 18), rng.randrange(60)))
                    mentions.append(
                        (mention, len(mentions), Memory(key, content, moment, subject.id, record.id, version))
                    )
                    keys.append(key)
                record.keys.append(keys)
            facts.append(record)
    memories = [m for _, _, m in sorted(mentions, key=lambda x: (x[2].occurred_at, x[1]))]
    return Dataset(seed, memories, _questions(rng, subjects, facts), facts)


def _questions(rng: random.Random, subjects: list[Subject], facts: list[FactRecord]) -> list[Question]:
    by_subject = {s.id: s for s in subjects}
    phrasings = {f.name: f.phrasing for f in FACTS}
    out: list[Question] = []

    def add(text: str, kind: str, subject: Subject, fact: str | None, cue: bool, version: int | None = None) -> None:
        out.append(Question(f"q{len(out)}", text, kind, subject.language, subject.id, fact, cue, version))

    for record in facts:
        subject = by_subject[record.subject]
        phrasing = phrasings[record.name][subject.language]
        kind = "current" if record.changes else "stable"
        add(_render(rng.choice(phrasing.ask), subject), kind, subject, record.id, False)
        add(_render(rng.choice(phrasing.ask_now), subject), kind, subject, record.id, True)
        for version in range(len(record.values) - 1):
            months = months_between(record.dates[version], record.dates[version + 1])
            if months:
                year, month = rng.choice(months)
                when = _when(subject.language, year, month)
                add(
                    _render(rng.choice(phrasing.ask_then), subject, when=when),
                    "past",
                    subject,
                    record.id,
                    False,
                    version,
                )
    for subject in subjects:
        add(_render(rng.choice(OVERVIEW[subject.language]), subject), "overview", subject, None, False)
    return out
