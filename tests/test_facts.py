"""Memories stating one fact (memory_server/ranking/facts.py): an older value ranks below the newest statement of
its fact without a `supersedes` link, and copies fold into one hit, on every backend."""

from __future__ import annotations

from typing import Any

import httpx2
import numpy as np
import pytest

from memory_server.ranking.candidate_set import Candidate
from memory_server.ranking.facts import DAY, copies_of, is_copy, names, older_statements, same_fact
from memory_server.ranking.recency import newest_of_fact_first

from tests.conftest import LiveServer

pytestmark = pytest.mark.backends


def rest(server: LiveServer, method: str, path: str, **kwargs: Any) -> Any:
    response = httpx2.request(method, f"{server.base}{path}", auth=server.basic, timeout=60, **kwargs)
    assert response.status_code < 300, response.text
    return response.json()


def test_names_are_the_words_that_carry_a_subject_or_a_value() -> None:
    found = names("[8 May 2024] Org chart: Kofi Asante reports to Pedro Silva.")
    assert found.sure == {"kofi", "asante", "pedro", "silva"} and found.all == found.sure | {"org"}
    assert names("checkout-web runs in eu-west-1.").sure == {"checkout-web", "eu-west-1"}
    assert names("Las conversaciones del proyecto Juniper van en #juniper-eng.").sure == {"juniper", "#juniper-eng"}
    assert names("A escala de plantão da equipe Billing fica no incident.io.").sure == {"billing", "incident.io"}
    assert names("we should write more tests").all == frozenset()


def test_one_fact_needs_close_meaning_and_the_same_names() -> None:
    tom, grace = names("Tom Berg reports to Mia Chen."), names("Grace Kim reports to Mia Chen.")
    asked = frozenset({"tom", "berg"})
    assert same_fact(0.9, tom, names("Org chart: Tom Berg now reports to Jonas Weber."), asked)
    # The query names Tom: a memory about Grace with Tom's manager is another fact.
    assert not same_fact(0.9, tom, grace, asked)
    assert not same_fact(0.5, tom, tom)
    assert not same_fact(0.9, tom, names("We moved to Lisbon."))
    again = names("Org chart: Tom Berg reports to Mia Chen.")
    assert is_copy(0.85, tom, again) and is_copy(0.85, again, tom)
    assert not is_copy(0.85, tom, grace) and not is_copy(0.7, tom, again)
    nothing = names("we should write more tests")
    assert not is_copy(0.99, nothing, nothing)  # nothing named: nothing to tell them apart by


def test_copies_fold_into_the_first_of_them() -> None:
    a = np.array([1.0, 0.0], dtype=np.float32)
    b = np.array([0.999, 0.045], dtype=np.float32) / np.linalg.norm([0.999, 0.045])
    c = np.array([0.0, 1.0], dtype=np.float32)
    texts = ["Tom Berg reports to Mia Chen.", "Org chart: Tom Berg reports to Mia Chen.", "Tom Berg lives in Lisbon."]
    assert copies_of(range(3), np.stack([a, b, c]), [names(t) for t in texts]) == {1: 0}
    other = ["Tom Berg reports to Mia Chen.", "Grace Kim reports to Mia Chen.", "Tom Berg lives in Lisbon."]
    assert copies_of(range(3), np.stack([a, b, c]), [names(t) for t in other]) == {}


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


MANAGER = "Who is Hugo Marsh's manager?"


def candidates_of(rows: list[tuple[str, np.ndarray, str]]) -> list[Candidate]:
    """(text, vector, occurred_at) rows as candidates, numbered in order."""
    return [Candidate(id=n, text=t, vector=v, occurred_at=w) for n, (t, v, w) in enumerate(rows)]


def order(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.argsort(-scores, kind="stable")]


def test_the_newest_of_the_best_facts_memories_goes_first_by_day() -> None:
    texts = [
        ("Hugo Marsh's manager is Lena Eklund.", unit(1, 0, 0), "2024-05-16T10:00:00Z"),
        ("Hugo Marsh's new manager is Ingrid Lund.", unit(1, 0.2, 0), "2024-08-31T10:00:00Z"),
        # Close, as relevant, newer, but about his desk: it holds no "manager", ranks well below and is not as
        # close as FACT_VERY_CLOSE, so it stays put.
        ("Hugo Marsh's desk is in the Madrid office.", unit(1, 0, 0.7), "2025-07-07T10:00:00Z"),
    ]
    candidates = candidates_of(texts)
    fused = np.array([3.0, 2.5, 1.5])
    adjusted = newest_of_fact_first(fused, MANAGER, unit(1, 0.05, 0.3), candidates)
    assert order(adjusted) == [1, 0, 2]
    assert adjusted[2] == fused[2]
    # Saved the same day (an import, one conversation): not versions of each other, nothing moves.
    same_day = [c._replace(occurred_at="2024-05-16T10:00:00Z") for c in candidates]
    assert list(newest_of_fact_first(fused, MANAGER, unit(1, 0.05, 0.3), same_day)) == [3.0, 2.5, 1.5]


def test_a_newer_value_worded_without_the_querys_words_joins_its_fact_when_very_close() -> None:
    texts = [
        ("Hugo Marsh's manager is Lena Eklund.", unit(1, 0, 0), "2024-05-16T10:00:00Z"),
        # No "manager", and well below on the fused score: only its closeness says it is the same fact.
        ("Hugo Marsh now reports to Ingrid Lund.", unit(1, 0.3, 0.1), "2024-08-31T10:00:00Z"),
        # Newer too, about as close, but less relevant to the question: another attribute, it stays put.
        ("Hugo Marsh's desk is in the Madrid office.", unit(1, 0, 0.5), "2025-07-07T10:00:00Z"),
    ]
    fused = np.array([3.0, 1.5, 1.4])
    adjusted = newest_of_fact_first(fused, MANAGER, unit(1, 0.3, -0.1), candidates_of(texts))
    assert order(adjusted) == [1, 0, 2]
    assert adjusted[2] == fused[2]


def test_an_older_statement_of_a_fact_a_newer_hit_states_goes_below() -> None:
    texts = [
        "Reorg: Tom Berg now reports to Jonas Weber.",
        "Tom Berg lives in Lisbon.",
        "Org chart: Tom Berg reports to Maria Lopez.",
        "Grace Kim reports to Maria Lopez.",
    ]
    found = [names(t) for t in texts]
    vectors = np.stack([unit(1, 0, 0), unit(1, 0, 0.6), unit(1, 0.3, 0), unit(1, 0.3, 0.01)])
    days = [400 * DAY, 10 * DAY, 0.0, 0.0]
    # The older manager is as close to the newer one as a restatement and names Tom: below. Grace's manager is
    # as close but names neither Tom nor Jonas; Tom's home names Tom but says another thing.
    assert older_statements(vectors, found, days) == {2}
    # Written within a day of it: not told apart by time. Nothing above it: nothing moves.
    assert older_statements(vectors, found, [0.5 * DAY, 10 * DAY, 0.0, 0.0]) == set()
    assert older_statements(vectors[2:], found[2:], days[2:]) == set()


MEMORIES = [
    ("Tom Berg's manager is Maria Lopez.", "2024-02-05T10:00:00Z"),
    ("Org chart: Tom Berg reports to Maria Lopez.", "2024-02-20T10:00:00Z"),
    ("Tom Berg lives in Lisbon.", "2024-03-01T10:00:00Z"),
    ("Reorg: Tom Berg now reports to Jonas Weber.", "2025-06-10T10:00:00Z"),
    ("Grace Kim reports to Maria Lopez.", "2025-07-01T10:00:00Z"),
]


def test_the_newest_statement_of_a_fact_comes_first_and_copies_fold(live: LiveServer) -> None:
    refs = [
        rest(live, "POST", "/v1/memories", json={"content": c, "occurred_at": w, "bucket": "org"})["reference"]
        for c, w in MEMORIES
    ]

    def recall(query: str, limit: int = 5) -> list[dict[str, Any]]:
        return list(rest(live, "POST", "/v1/recall", json={"query": query, "limit": limit, "bucket": "org"})["results"])

    # No word for the present and no link: the update still answers first, the older value stays below it.
    hits = recall("Who does Tom Berg report to?")
    shown = [h["reference"] for h in hits]
    assert shown[0] == refs[3], [h["content"] for h in hits]
    # The two wordings of the older value are one hit, which lists the other; Tom's home is still there.
    older = [h for h in hits if h["reference"] in (refs[0], refs[1])]
    assert len(older) == 1 and older[0]["copies"] == [refs[1] if older[0]["reference"] == refs[0] else refs[0]]
    assert refs[2] in shown
    # Grace's manager is another fact, though it names the same person: Grace's own question gets it first.
    assert recall("Who does Grace Kim report to?")[0]["reference"] == refs[4]
    # A question about the past is answered by what was the case then.
    then = recall("Who did Tom Berg report to in March 2024?")[0]
    assert then["reference"] in (refs[0], refs[1])


def test_an_overview_shows_distinct_facts_before_an_older_restatement(live: LiveServer) -> None:
    said = [
        ("Tom Berg's manager is Maria Lopez.", "2024-02-05T10:00:00Z"),
        ("Tom Berg lives in Lisbon.", "2024-03-01T10:00:00Z"),
        ("Tom Berg's manager is Maria Lopez (Payments).", "2025-06-10T10:00:00Z"),
        ("Tom Berg's desk is in the Madrid office.", "2024-04-01T10:00:00Z"),
    ]
    refs = [
        rest(live, "POST", "/v1/memories", json={"content": c, "occurred_at": w, "bucket": "overview"})["reference"]
        for c, w in said
    ]
    body = {"query": "What do we know about Tom Berg?", "limit": 3, "bucket": "overview"}
    shown = [h["reference"] for h in rest(live, "POST", "/v1/recall", json=body)["results"]]
    assert sorted(shown) == sorted(refs[1:]), shown
    # Asked about then, the older statement is still there to find.
    body["query"] = "What did we know about Tom Berg's manager in February 2024?"
    assert refs[0] in [h["reference"] for h in rest(live, "POST", "/v1/recall", json=body)["results"]]


def test_remember_answers_with_the_memories_that_already_say_it(live: LiveServer) -> None:
    def remember(content: str, **filing: Any) -> dict[str, Any]:
        return dict(rest(live, "POST", "/v1/memories", json={"content": content, **filing}))

    first = remember("Tom Berg's manager is Maria Lopez.", bucket="org")
    assert first["similar"] == []
    again = remember("Org chart: Tom Berg reports to Maria Lopez.", bucket="org")
    assert [s["reference"] for s in again["similar"]] == [first["reference"]]
    assert 0 < again["similar"][0]["score"] <= 1.2
    # Another value, another person, another bucket: not the same thing.
    assert remember("Reorg: Tom Berg now reports to Jonas Weber.", bucket="org")["similar"] == []
    assert remember("Grace Kim reports to Maria Lopez.", bucket="org")["similar"] == []
    assert remember("Org chart: Tom Berg reports to Maria Lopez!", bucket="elsewhere")["similar"] == []
    # Both memories are kept: the copy is a memory of its own, listed, exported and recalled as one hit.
    assert rest(live, "GET", f"/v1/memories/{again['reference']}")["content"].startswith("Org chart")
