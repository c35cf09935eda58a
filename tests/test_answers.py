"""The kind of answer a query asks for (memory_server/ranking/answers.py): the rules, and the boost through a real
server on both storage backends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memory_server.ranking.answers import MAX_FRACTION, NAME, NUMBER_KIND, TIME, answer_boost, asked_kinds, read_kinds
from memory_server.ranking.candidate_set import Candidate, CandidateSet
from memory_server.ranking.fusion import document_text

from tests.conftest import make_settings, serve

backends = pytest.mark.backends
AT = "2023-05-08T10:00:00Z"


@pytest.mark.parametrize(
    ("query", "kinds"),
    [
        ("When did Caroline go to the support group?", ["time"]),
        ("How long has Nate had his turtles?", ["time"]),
        ("Which month did they move?", ["time"]),
        ("How many days did the trip last?", ["time", "number"]),
        ("How many children does Melanie have?", ["number"]),
        ("How often does Joanna run?", ["number"]),
        ("Who gave Nate the game?", ["name"]),
        ("Where did Joanna grow up?", ["name"]),
        ("What book did Melanie read?", ["name"]),
        ("Which sci-fi movie did they watch?", ["name"]),
        ("What is the name of her dog?", ["name"]),
        ("Why did Caroline start painting?", []),
        ("what does she like about hiking", []),
    ],
)
def test_the_kind_a_query_asks_for(query: str, kinds: list[str]) -> None:
    assert [kind.name for kind in asked_kinds(query)] == kinds


@pytest.mark.parametrize(
    ("content", "time", "number", "names"),
    [
        ("Nate: I went there yesterday!", True, False, ()),
        ("Nate: We moved in May 2022.", True, True, ("May",)),
        ("Joanna: Been doing it for a few weeks", True, True, ()),
        ("Joanna: I have three kids", False, True, ()),
        ("Joanna: I loved reading Dune by Frank Herbert. It was great.", False, False, ("Dune", "Frank", "Herbert")),
        ("Melanie: Hey Caroline! So good. Thanks again", False, False, ("Caroline",)),  # sentence starts skipped
        ("The cafe opened", False, False, ()),
    ],
)
def test_what_a_memory_holds(content: str, time: bool, number: bool, names: tuple[str, ...]) -> None:
    assert read_kinds(document_text(content, AT), AT) == (time, number, names)


def _pool(contents: list[str]) -> CandidateSet:
    return CandidateSet(
        [Candidate(id=i, text=document_text(c, AT), vector=np.zeros(2), occurred_at=AT) for i, c in enumerate(contents)]
    )


def test_the_boost_goes_to_the_memories_holding_the_kind_while_they_are_few() -> None:
    chatter = [f"Nate: that sounds fun {n}" if n % 2 else f"Joanna: oh nice {n}" for n in range(8)]
    pool = _pool(["Nate: I went to the lake last week", "Joanna: I read Dune", *chatter])
    fused = np.zeros(len(pool))
    assert np.allclose(answer_boost(fused, [TIME], pool)[:3], [TIME.weight, 0, 0])
    assert np.allclose(answer_boost(fused, [NAME], pool)[:3], [0, NAME.weight, 0])
    assert np.allclose(answer_boost(fused, [NUMBER_KIND], pool), 0)  # nobody holds one
    crowded = _pool([f"Nate: I went out last week with friend {n}" for n in range(9)] + ["Joanna: nice"])
    assert 0.9 > MAX_FRACTION
    assert np.allclose(answer_boost(np.zeros(10), [TIME], crowded), 0)  # most hold a time: nothing singled out


# The memory that says when shares few words with the question; the others match its words better.
TURNS = [
    "Caroline: The LGBTQ support group was so powerful, I loved hearing everyone's stories.",
    "Caroline: The support group meets on Tuesdays near the library, people are lovely there.",
    "Caroline: I went there yesterday and I felt so accepted.",
    "Melanie: That support group sounds wonderful, Caroline!",
    "Melanie: Painting is my way to relax after work.",
    "Melanie: The kids love the beach, we swim a lot.",
    "Caroline: Counseling is what I want to do for a living.",
    "Melanie: Pottery class is my new thing, I made a bowl.",
    "Caroline: My friends gave me a necklace for support.",
    "Melanie: We camped near the mountains, the stars were amazing.",
]


@backends
def test_a_when_question_ranks_the_memory_that_tells_the_time_higher(settings: Any, embedder: Any) -> None:
    question = "When did Caroline go to the LGBTQ support group?"
    places = {}
    for on in (False, True):
        with serve(make_settings(settings.data_dir / str(on), recall_answers=on), embedder) as server:
            for n, content in enumerate(TURNS):
                server.save(content, occurred_at=f"2023-05-08T10:{n:02d}:00Z")
            places[on] = server.recalled(question).index(TURNS[2])
    assert places[True] < places[False]
