"""A question's landmark ("before Emacs") weighs less on the lexical side (memory_server/ranking/landmarks.py)."""

from __future__ import annotations

import numpy as np

from memory_server.ranking.candidate_set import Candidate
from memory_server.ranking.fusion import fused_scores
from memory_server.ranking.landmarks import LANDMARK_WEIGHT, landmark_terms, without_landmarks
from memory_server.ranking.lexical import analyze_query


def test_the_words_after_before_are_a_landmark_unless_they_name_a_date() -> None:
    assert landmark_terms("Which editor did Bianca use before Emacs?") == ["emac"]
    # "becoming" is a stop word
    assert landmark_terms("What was Elena's role before becoming Tech Lead?") == ["tech", "lead"]
    assert landmark_terms("Where was Tim in the week before 16 November 2023?") == []
    assert landmark_terms("What did Maria do the day before yesterday?") == []
    assert landmark_terms("Who leads Atlas now?") == []
    assert landmark_terms("before") == [] and landmark_terms("x before " + "z " * 10_000)[:2] == ["z", "z"]


def test_spanish_and_portuguese_landmarks() -> None:
    assert "emacs" in landmark_terms("¿Qué editor usaba Bianca antes de Emacs?")
    assert {"beatriz", "roch"} <= set(landmark_terms("Quem liderava o Atlas antes da Beatriz Rocha?"))
    assert {"mia", "chen"} <= set(landmark_terms("¿Quién lideraba Atlas antes del cambio a Mia Chen?"))
    assert "emacs" in landmark_terms("Qual editor a Bianca usava ANTES DO Emacs?")
    assert landmark_terms("¿Dónde estaba Tim antes de marzo de 2024?") == []  # a date, not a landmark
    assert landmark_terms("¿Qué hizo María antes de ayer?") == []
    assert landmark_terms("O que a Ana fez antes de ontem?") == []
    assert landmark_terms("¿Quién lidera Atlas ahora?") == []


def test_a_landmark_holds_the_question_s_own_terms_for_its_words() -> None:
    # analysed in the question's language too, so that the question's terms for them lose their weight
    for query, words in (
        ("¿Qué editor usaba Bianca antes de pasarse a Emacs?", "pasarse a Emacs"),
        ("Qual editor a Bianca usava antes do Emacs?", "Emacs"),
        ("Which editor did Bianca use before Emacs?", "Emacs"),
    ):
        asked = set(analyze_query(query))
        assert asked & set(analyze_query(words, ("es", "pt", "en"))) <= set(landmark_terms(query)), query


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
