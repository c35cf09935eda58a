"""A question's landmark ("before Emacs") weighs less on the lexical side (memory_server/ranking/landmarks.py)."""

from __future__ import annotations

import numpy as np

from memory_server.ranking.candidate_set import Candidate
from memory_server.ranking.fusion import fused_scores
from memory_server.ranking.landmarks import LANDMARK_WEIGHT, landmark_terms, without_landmarks


def test_the_words_after_before_are_a_landmark_unless_they_name_a_date() -> None:
    assert landmark_terms("Which editor did Bianca use before Emacs?") == ["emac"]
    # "becoming" is a stop word
    assert landmark_terms("What was Elena's role before becoming Tech Lead?") == ["tech", "lead"]
    assert landmark_terms("Where was Tim in the week before 16 November 2023?") == []
    assert landmark_terms("What did Maria do the day before yesterday?") == []
    assert landmark_terms("Who leads Atlas now?") == []
    assert landmark_terms("before") == [] and landmark_terms("x before " + "z " * 10_000)[:2] == ["z", "z"]


def test_a_landmark_term_counts_its_weight_beside_the_other_extra_terms() -> None:
    extra = without_landmarks("Which editor did Bianca use before Emacs?", {"pycharm": 0.3})
    assert extra == {"pycharm": 0.3, "emac": LANDMARK_WEIGHT - 1.0}
    assert without_landmarks("Who leads Atlas now?", {"lead": 0.2}) == {"lead": 0.2}


def test_the_memory_naming_the_landmark_no_longer_wins_on_its_words() -> None:
    texts = [
        "Oscar Reyes uses Emacs as the main editor.",
        "Bianca's editor these days: PyCharm, with a dark theme.",
        "Ana moved to the Berlin office.",
        "Tom uses a standing desk.",
        "The Atlas deploy is on Tuesday.",
    ]
    flat = np.zeros(8, dtype=np.float32)  # every memory as near in meaning: the lexical side decides
    candidates = [Candidate(i, text, np.eye(8, dtype=np.float32)[i]) for i, text in enumerate(texts)]
    query = "Which editor did Bianca use before switching to Emacs?"
    plain = fused_scores(query, flat, candidates, expansion={})
    landmarked = fused_scores(query, flat, candidates, expansion=without_landmarks(query, {}))
    assert int(np.argmax(plain)) == 0 and int(np.argmax(landmarked)) == 1
