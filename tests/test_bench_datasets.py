"""The generators of bench/evolving.py and bench/profiles.py: deterministic, the promised sizes, consistent gold.

No server: these check the datasets alone (a few tenths of a second).
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import date, timedelta

import pytest

from bench.datasets import evolving, profiles, updates
from bench.datasets.common import month_end


@pytest.fixture(scope="module")
def evo() -> evolving.Dataset:
    return evolving.generate()


@pytest.fixture(scope="module")
def prof() -> profiles.Dataset:
    return profiles.generate()


def day(timestamp: str) -> date:
    return date.fromisoformat(timestamp[:10])


# --- evolving ------------------------------------------------------------------------------------------


def test_evolving_is_deterministic_for_a_seed() -> None:
    assert evolving.generate(3).to_dict() == evolving.generate(3).to_dict()
    assert evolving.generate(3).to_dict() != evolving.generate(4).to_dict()


def test_evolving_sizes(evo: evolving.Dataset) -> None:
    assert len(evo.slots) >= 200
    assert all(2 <= len(s.values) <= 4 for s in evo.slots)
    assert {len(s.values) for s in evo.slots} == {2, 3, 4}
    kinds = Counter(s.subject.split(":")[0] for s in evo.slots)
    assert set(kinds) == {"person", "project", "service", "team"}
    distractors = [m for m in evo.memories if m.slot is None]
    assert len(distractors) >= 100
    assert len(evo.memories) == sum(len(s.values) for s in evo.slots) + len(distractors)
    subkinds = Counter(q.subkind for q in evo.questions)
    assert subkinds["current"] == len(evo.slots)
    assert min(subkinds["as_of"], subkinds["before"], subkinds["changed_in"]) >= 40


def test_evolving_versions_are_months_apart_in_2024_and_2025(evo: evolving.Dataset) -> None:
    memories = {m.key: m for m in evo.memories}
    for slot in evo.slots:
        assert len(set(slot.values)) == len(slot.values), slot.id
        assert all(date(2024, 1, 1) <= d <= date(2025, 12, 31) for d in slot.dates)
        assert all((b - a).days >= evolving.MIN_GAP_DAYS for a, b in zip(slot.dates, slot.dates[1:], strict=False))
        for k, (key, value, when) in enumerate(zip(slot.keys, slot.values, slot.dates, strict=False), start=1):
            memory = memories[key]
            assert (memory.slot, memory.version, day(memory.occurred_at)) == (slot.id, k, when)
            assert value in memory.content


def test_evolving_half_of_the_updates_link_to_the_previous_version(evo: evolving.Dataset) -> None:
    updates = [m for m in evo.memories if m.version and m.version > 1]
    linked = [m for m in updates if m.supersedes]
    assert len(linked) == len(updates) // 2
    assert not any(m.supersedes for m in evo.memories if not (m.version and m.version > 1))
    for m in linked:
        assert m.supersedes == f"{m.slot}#v{m.version - 1}"
    position = {m.key: i for i, m in enumerate(evo.memories)}
    assert all(position[m.supersedes] < position[m.key] for m in linked)  # saved before what replaces it


def test_evolving_contents_and_names_are_unambiguous(evo: evolving.Dataset) -> None:
    assert len({m.content for m in evo.memories}) == len(evo.memories)
    assert len({m.key for m in evo.memories}) == len(evo.memories)
    firsts = [name.split()[0] for name in evolving.FIRST_NAMES]
    assert len(set(firsts)) == len(firsts)
    assert len({(s.subject, s.attr) for s in evo.slots}) == len(evo.slots)
    # a distractor never states a value of its subject's slots
    values = {}
    for s in evo.slots:
        values.setdefault(s.subject, set()).update(s.values)
    for m in evo.memories:
        if m.slot is None:
            assert not any(re.search(rf"\b{re.escape(v)}\b", m.content) for v in values.get(m.subject, ())), m.content


def test_evolving_every_gold_answers_its_question(evo: evolving.Dataset) -> None:
    memories = {m.key: m for m in evo.memories}
    slots = {s.id: s for s in evo.slots}
    texts = Counter(q.text for q in evo.questions)
    for q in evo.questions:
        assert texts[q.text] == 1, q.text
        slot, gold = slots[q.slot], memories[q.gold]
        assert gold.slot == q.slot
        k = slot.keys.index(q.gold)
        if q.kind == "current":
            assert k == len(slot.keys) - 1 and not q.window
            continue
        assert k < len(slot.keys) - 1  # a past value, not the current one
        after, before = evolving.period_of(q)
        assert before is not None
        assert day(gold.occurred_at) < before and (after is None or after <= day(gold.occurred_at))
        # within the window the gold is the latest version of the slot: what held at the named time
        assert slot.dates[k + 1] >= before
        if q.subkind == "changed_in":
            assert after is not None and (before - after).days <= 31
            assert sum(after <= d < before for d in slot.dates) == 1
        if q.subkind == "as_of":
            assert after is None and before > slot.dates[k] + timedelta(days=28)
        if q.subkind == "before":
            assert slot.values[k + 1] in q.text and before == slot.dates[k + 1]


# --- updates -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upd() -> updates.Dataset:
    return updates.generate()


def test_updates_is_deterministic_for_a_seed() -> None:
    assert updates.generate(3).to_dict() == updates.generate(3).to_dict()
    assert updates.generate(3).to_dict() != updates.generate(4).to_dict()


def test_updates_sizes_and_languages(upd: updates.Dataset) -> None:
    kinds = Counter((q.kind, q.language) for q in upd.questions)
    for language in updates.LANGUAGES:
        assert kinds["past", language] >= 20 and kinds["current", language] >= 20, language
        assert kinds["stable", language] >= 10 and kinds["overview", language] >= 5, language
    assert sum(not f.changes for f in upd.facts) == len({f.subject for f in upd.facts})  # one stable fact each
    repeated = [keys for f in upd.facts for keys in f.keys if len(keys) > 1]
    assert len(repeated) >= len(upd.facts) // 2  # many versions are remembered more than once
    assert len(upd.memories) == sum(len(keys) for f in upd.facts for keys in f.keys)


def test_updates_versions_repeats_and_contents(upd: updates.Dataset) -> None:
    memories = {m.key: m for m in upd.memories}
    assert len({m.content for m in upd.memories}) == len(upd.memories)
    assert [m.occurred_at for m in upd.memories] == sorted(m.occurred_at for m in upd.memories)
    for f in upd.facts:
        assert len(set(f.values)) == len(f.values) and (len(f.values) > 1) == f.changes, f.id
        assert all((b - a).days >= updates.MIN_GAP_DAYS for a, b in zip(f.dates, f.dates[1:], strict=False))
        for version, keys in enumerate(f.keys):
            said = [memories[k] for k in keys]
            assert len({m.content for m in said}) == len(said)  # a repeat is said in other words
            assert all(f.values[version] in m.content and m.version == version and m.fact == f.id for m in said)
            assert day(said[0].occurred_at) == f.dates[version]
            if version + 1 < len(f.dates):  # every repeat before the next version
                assert all(day(m.occurred_at) < f.dates[version + 1] for m in said)


def test_updates_past_questions_name_a_month_inside_their_version(upd: updates.Dataset) -> None:
    facts = {f.id: f for f in upd.facts}
    names = {lang: [n.lower() for n in months] for lang, months in updates.MONTH_NAMES.items()}
    for q in (q for q in upd.questions if q.kind == "past"):
        assert q.fact is not None and q.version is not None
        f = facts[q.fact]
        found = re.search(r"(\w+)(?: de)? (20\d\d)", q.text)
        assert found is not None and found[1].lower() in names[q.language], q.text
        first = date(int(found[2]), names[q.language].index(found[1].lower()) + 1, 1)
        assert f.dates[q.version] < first and f.dates[q.version + 1] > month_end(first.year, first.month), q.text


def test_updates_questions_ask_in_the_subject_s_language(upd: updates.Dataset) -> None:
    cues = {
        "en": r"\b(now|currently|these days|at the moment|current)\b",
        "es": r"\b(ahora|actualmente|hoy en día|actual)\b",
    }
    cues["pt"] = r"\b(agora|atualmente|hoje em dia|atual)\b"
    for q in upd.questions:
        if q.kind in ("current", "stable"):
            assert bool(re.search(cues[q.language], q.text, re.IGNORECASE)) == q.cue, q.text


# --- profiles ------------------------------------------------------------------------------------------


def test_profiles_is_deterministic_for_a_seed() -> None:
    assert profiles.generate(5).to_dict() == profiles.generate(5).to_dict()
    assert profiles.generate(5).to_dict() != profiles.generate(6).to_dict()


def test_profiles_sizes(prof: profiles.Dataset) -> None:
    assert len(prof.memories) >= 300
    assert len(prof.questions) >= 600
    assert len(prof.entities) == 10
    assert Counter(e.split(":")[0] for e in prof.entities) == {"person": 7, "project": 3}
    per_category = Counter(q.category for q in prof.questions)
    assert set(per_category) == set(profiles.CATEGORIES)
    assert min(per_category.values()) >= 25
    assert {m.type for m in prof.memories} == {"fact", "event", "preference"}
    assert set(Counter(m.style for m in prof.memories)) == {"first", "third", "terse"}
    assert {m.dating for m in prof.memories if m.dating} == {"explicit", "relative", "occurred_at"}


def test_profiles_dates_come_in_many_formats(prof: profiles.Dataset) -> None:
    patterns = {
        "iso": r"\b20\d\d-\d\d-\d\d\b",
        "numeric": r"\b\d{1,2}/\d{1,2}/\d\d\b",
        "dotted": r"\b\d\d\.\d\d\.20\d\d\b",
        "ordinal": r"\b\d{1,2}(st|nd|rd|th)\b",
        "apostrophe": r"[A-Z][a-z]+ '\d\d\b",
        "month-iso": r"\b20\d\d-\d\d\b",
        "relative": r"\b(yesterday|today|last month|last (spring|summer|autumn))\b",
    }
    for name, pattern in patterns.items():
        assert sum(bool(re.search(pattern, m.content)) for m in prof.memories) >= 2, name


def test_profiles_every_gold_exists_in_the_question_bucket(prof: profiles.Dataset) -> None:
    memories = {m.key: m for m in prof.memories}
    assert len(memories) == len(prof.memories)
    for q in prof.questions:
        assert q.gold and len(set(q.gold)) == len(q.gold), q.id
        assert all(memories[g].bucket == q.bucket for g in q.gold), q.id
    by_bucket: dict[str, Counter[str]] = {}
    for m in prof.memories:
        by_bucket.setdefault(m.bucket, Counter())[m.content] += 1
    assert all(n == 1 for counter in by_bucket.values() for n in counter.values())  # no twin memories
    asked: dict[tuple[str, str], set[str]] = {}
    for q in prof.questions:
        asked.setdefault((q.bucket, q.text), set()).update(q.gold)
    for q in prof.questions:  # the same question twice in a bucket has the same answer
        assert asked[(q.bucket, q.text)] == set(q.gold), q.text


def test_profiles_date_questions_have_every_answer_and_no_ambiguous_one(prof: profiles.Dataset) -> None:
    dated = {}
    for m in prof.memories:
        if m.period and m.attribute != "birthday":
            dated.setdefault(m.bucket, []).append(m)
    date_questions = [q for q in prof.questions if q.category in ("event_by_date", "relative_date")]
    assert len(date_questions) >= 80
    for q in date_questions:
        assert q.period is not None
        start, end, granularity = date.fromisoformat(q.period[0]), date.fromisoformat(q.period[1]), q.period[2]
        inside = set()
        for m in dated[q.bucket]:
            s, e, g = m.span()  # type: ignore[misc]
            if start <= s and e <= end:
                inside.add(m.key)
            else:  # overlapping without being inside: only if less precise than the question
                assert not (s <= end and start <= e and g <= profiles.GRANULARITY[granularity]), (q.text, m.content)
        assert set(q.gold) == inside, q.text


def test_profiles_relative_dates_resolve_from_occurred_at(prof: profiles.Dataset) -> None:
    for m in prof.memories:
        if m.dating in ("relative", "occurred_at"):
            told, (start, end, _) = day(m.occurred_at), m.span()  # type: ignore[misc]
            if "yesterday" in m.content:
                assert told == start + timedelta(days=1) == end + timedelta(days=1)
            elif m.dating == "occurred_at":
                assert told == start == end
            elif "last month" in m.content:
                assert start.day == 1 and (told.replace(day=1) - timedelta(days=1)).replace(day=1) == start
            else:
                assert end < told < end + timedelta(days=180) and "last " in m.content
        elif m.period:
            assert day(m.occurred_at) >= date.fromisoformat(m.period[0])  # never told before it happened


def test_profiles_category_questions_name_the_category_not_the_instance(prof: profiles.Dataset) -> None:
    memories = {m.key: m for m in prof.memories}
    words = {"pets": "pet", "music": "instrument", "vehicles": "vehicle", "travel": "travel"}
    for q in prof.questions:
        if q.category != "category":
            continue
        tags = {t for g in q.gold for t in memories[g].categories}
        assert len(tags) >= 1
        for tag in tags & set(words):
            assert not any(words[tag] in memories[g].content.lower() for g in q.gold if tag in memories[g].categories)
        # the gold is every memory of the bucket in that category
        tag = Counter(t for g in q.gold for t in memories[g].categories).most_common(1)[0][0]
        assert set(q.gold) == {m.key for m in prof.memories if m.bucket == q.bucket and tag in m.categories}, q.text
