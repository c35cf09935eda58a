"""Who a query means (memory_server/ranking/speakers.py): the rules, and the boost through a real server on both
storage backends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memory_server.ranking.candidate_set import Candidate, CandidateSet
from memory_server.ranking.fusion import document_text
from memory_server.ranking.speakers import SPEAKER_BOOST, asked_speaker, speaker_boost, speaker_of, speakers

from tests.conftest import serve

backends = pytest.mark.backends


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("Nate: Been playing it for a month", "Nate"),
        ("[8 May 2023] Joanna: Thanks!", "Joanna"),
        ("Mary Ann Smith: hello", "Mary Ann Smith"),
        ("O'Brien: on my way", "O'Brien"),
        ("nate: lowercase is not a name", None),
        ("The plan: ship on Friday", None),  # two words, the second not capitalised
        ("Nate:no space after the colon", None),
        ("Nate said: hi", None),
        ("", None),
    ],
)
def test_a_label_is_a_capitalised_name_and_a_colon_at_the_start(text: str, label: str | None) -> None:
    assert speaker_of(text) == label


LABELS = ["Nate", "Joanna", "Nate", "Joanna", "Note", None]


@pytest.mark.parametrize(
    ("query", "who"),
    [
        ("What game has Nate been playing?", "Nate"),
        ("what game has nate's sister played?", "Nate"),  # any case, a whole word
        ("What did Joanna tell Nate about the film?", "Joanna"),  # the first named
        ("What do Nate and Joanna both like?", None),
        ("Which films did Joanna or Nate see?", None),
        ("Did both of Nate's brothers go?", "Nate"),  # "both" matters only when two are named
        ("What is Natesh doing?", None),  # not a whole word
        ("Read the note about the film", None),  # a label heading one memory is no speaker
        ("What game is popular?", None),
    ],
)
def test_the_speaker_asked_about(query: str, who: str | None) -> None:
    assert asked_speaker(query, LABELS) == who


def _pool(texts: list[str]) -> CandidateSet:
    return CandidateSet(
        [
            Candidate(id=i, text=document_text(t, "2023-05-08T10:00:00Z"), vector=np.zeros(2))
            for i, t in enumerate(texts)
        ]
    )


def test_the_boost_goes_to_the_named_speakers_memories_only() -> None:
    pool = _pool(
        [
            "Nate: I bought a game",
            "Joanna: Nate, how is the game?",
            "Nate: Playing every night",
            "Joanna: cool",
            "We met at the cafe",
        ]
    )
    assert speakers(pool) == ["Nate", "Joanna", "Nate", "Joanna", None]
    fused = np.array([0.1, 2.0, -0.3, 0.0, 0.4])
    who = asked_speaker("What game has Nate been playing?", speakers(pool))
    boosted = speaker_boost(fused, who, pool)
    assert np.allclose(boosted - fused, [SPEAKER_BOOST, 0, SPEAKER_BOOST, 0, 0])
    assert speaker_boost(fused, asked_speaker("What games are there?", speakers(pool)), pool) is fused


# Joanna's question names Nate and the game; Nate's answer says neither. Without the boost her turn is first.
TURNS = [
    "Joanna: Nate, how is that new video game you bought going?",
    "Nate: Been playing it every night for a month, I love the story.",
    "Joanna: I finished my screenplay draft last week.",
    "Nate: My turtles are doing great too.",
]


@backends
@pytest.mark.parametrize(("on", "first"), [(True, TURNS[1]), (False, TURNS[0])])
def test_recall_ranks_the_named_speakers_turn_first(settings: Any, embedder: Any, on: bool, first: str) -> None:
    with serve(settings.model_copy(update={"recall_speakers": on}), embedder) as server:
        for n, content in enumerate(TURNS):
            server.save(content, occurred_at=f"2023-05-08T10:0{n}:00Z")
        assert server.recalled("How long has Nate been playing the video game?", 4)[0] == first
