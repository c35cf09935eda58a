"""Semantic query-term expansion: each query word adds the candidates' words the bundled model places
next to it, as extra lexical query terms at a fraction of a term.

BM25 only matches words that are literally shared, so "career" never finds "job" and "hobbies" never finds
"painting". The embedding model knows those words are close. For every content word of the query, the
words of the candidate set (`vocabulary_words` of each candidate's text) are compared with it by the
cosine of their single-word embeddings; the EXPANSION_NEIGHBOURS nearest with a cosine of at least
EXPANSION_MIN_SIMILARITY each add their stem to the lexical query with weight EXPANSION_WEIGHT x cosine.
Only words present in the candidates are considered, so an expansion always matches something, and the
pool is what the caller may see anyway. A class noun the question asks instances of ("Which instruments does
David play?") that no candidate uses reaches further, to CLASS_MIN_SIMILARITY: its instances ("cello") are
what the memories name.

Measurements: docs/ranking.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from memory_server.embeddings.similarity import IDENTITY, Scale
from memory_server.ranking.languages import MARKS, STOP_WORDS
from memory_server.ranking.lexical import stem

# Cosine between single-word embeddings above which a candidate word counts as a near-synonym.
EXPANSION_MIN_SIMILARITY = 0.6
# The threshold for a class noun the question asks instances of ("which instruments", "any pets") that no
# candidate uses: the memories name the instances ("cello"), further from the class than a synonym is.
CLASS_MIN_SIMILARITY = 0.5
# The two words after "which", "what" or "any", of which the plural nouns are the class ("which musical
# instruments", "any pets").
CLASS_NOUN = re.compile(r"\b(?:which|what|any)\s+([a-z]+)(?:\s+([a-z]+))?", re.IGNORECASE)
NOT_CLASSES = frozenset({"types", "kinds", "sorts", "things"})
# How many of the nearest candidate words each query word may add (words sharing its stem are skipped).
EXPANSION_NEIGHBOURS = 3
# An added term counts EXPANSION_WEIGHT x cosine of a query term.
EXPANSION_WEIGHT = 0.5

# Letters only: numbers, dates and ids have no useful neighbours in an embedding space.
_LETTERS = re.compile(f"[^\\W\\d_](?:[^\\W\\d_]|[{MARKS}])*")
_MIN_LENGTH = 3


def vocabulary_words(text: str) -> list[str]:
    """The distinct content words of `text` that take part in expansion: lowercase, letters only, at
    least three letters, not stop words. In order of first appearance."""
    words = (w for w in _LETTERS.findall(text.lower()) if len(w) >= _MIN_LENGTH and w not in STOP_WORDS)
    return list(dict.fromkeys(words))


def expansion_terms(
    query: str,
    query_terms: Iterable[str],
    query_vectors: Mapping[str, np.ndarray],
    pool_stems: Sequence[str],
    pool_vectors: np.ndarray,
    *,
    min_similarity: float = EXPANSION_MIN_SIMILARITY,
    neighbours: int = EXPANSION_NEIGHBOURS,
    weight: float = EXPANSION_WEIGHT,
    scale: Scale = IDENTITY,
) -> dict[str, float]:
    """Stem -> weight of the terms to add to the lexical query (never one of `query_terms`).

    query_terms: the analysed query (`lexical.analyze(query)`); its stems are never added again.
    query_vectors: word -> unit embedding of the word alone, for the query's words (`vocabulary_words`);
      a word without a vector does not expand.
    pool_stems / pool_vectors: the candidates' words (`vocabulary_words` of their texts) as their stems
      and the unit embeddings of the words alone, row for row: the only terms that can be added.
    scale: the model's word cosines on the reference scale the thresholds and weights are stated on.
    """
    words = [w for w in vocabulary_words(query) if w in query_vectors]
    if weight <= 0 or neighbours <= 0 or not words or len(pool_stems) == 0:
        return {}
    queries = np.stack([np.asarray(query_vectors[w], dtype=np.float32) for w in words])
    similarity = scale.of(np.asarray(pool_vectors, dtype=np.float32) @ queries.T)  # pool x query words
    count = min(neighbours, len(pool_stems))
    taken = set(query_terms)
    classes = unused_classes(query, pool_stems)
    added: dict[str, float] = {}
    for column, word in enumerate(words):
        scores = similarity[:, column]
        nearest = np.argpartition(-scores, count - 1)[:count]
        own = stem(word)
        floor = min(min_similarity, CLASS_MIN_SIMILARITY) if word in classes else min_similarity
        for j in nearest[np.argsort(-scores[nearest], kind="stable")]:
            score = float(scores[j])
            if score < floor:
                break
            candidate = pool_stems[j]
            if candidate == own or candidate in taken:
                continue
            taken.add(candidate)
            added[candidate] = weight * score
    return added


def unused_classes(query: str, pool_stems: Sequence[str]) -> set[str]:
    """The class nouns `query` asks instances of (see CLASS_MIN_SIMILARITY) that no candidate word shares a
    stem with."""
    named = {
        word.lower()
        for m in CLASS_NOUN.finditer(query)
        for word in m.groups(default="")
        if len(word) > 3 and word.lower().endswith("s") and word.lower() not in STOP_WORDS
    } - NOT_CLASSES
    if not named:
        return set()
    used = set(pool_stems)
    return {word for word in named if stem(word) not in used}
