"""Recall ranking: pure functions, no I/O.

The server calls `document_text(content, occurred_at)` when a memory is remembered; that string is what
gets embedded (the stored vector) and what is analysed for the lexical index (`lexical.analyzed_text`).
At recall time it loads the visible candidate set (the whole visible set when it is up to a few thousand
memories; otherwise the union of FTS5 and vector-index candidates), wraps each memory in a `Candidate`,
and calls `rank(query, query_vector, candidates, limit=...)`.

Ranking (constants below; measurements: docs/ranking.md):
  1. dense: cosine of the query vector with each candidate's stored vector;
  2. lexical: BM25+ over the candidates' analysed text (stemmed, stop words dropped), where each
     candidate's lexical document also holds its conversation neighbours' terms at a fraction of a count
     (LEXICAL_CONTEXT_WEIGHTS; neighbours = same provenance conversation_id, seq +- 1, 2), plus
     BIGRAM_WEIGHT x the same BM25+ over adjacent analysed-term pairs (a phrase signal); the query's
     terms are expanded with near-synonyms found among the candidates' words by the embedding model
     (memory_server/ranking/expansion.py), each counted at a fraction of a query term;
  3. both are z-scored over the candidate set and mixed with weight W_LEXICAL (less when the query's words
     but names occur nowhere, when few of its content terms do or the dense side's best are in another
     language, or when the sides put different candidates first and the dense side's best stands out more:
     NAME_ONLY_W_LEXICAL, COVERAGE_FULL, CROSS_LINGUAL_W_LEXICAL, DISAGREE_DENSE_RATIO), and a small length prior
     (LENGTH_PRIOR_WEIGHT x z-scored log term count: one-word replies are rarely what is asked for) is added;
  4. neighbour score blending: each candidate adds NEIGHBOUR_SCORE_WEIGHTS x its neighbours' fused
     scores, so a turn whose neighbours match rises, while the entry itself is what is returned;
  5. the result is mapped through a logistic to (0, 1).
The candidate set is scored as a whole: normalisation statistics and BM25 idf are over the candidates.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

import numpy as np

from memory_server.ranking.candidate_set import ID, OCCURRED_AT, TEXT, Candidate, CandidateSet
from memory_server.ranking.languages import detect, query_languages
from memory_server.ranking.lexical import analyze_query, is_date_term
from memory_server.ranking.per_text import PerText
from memory_server.ranking.term_arrays import TERM_IDS, CandidateDocuments
from memory_server.timestamps import parse_rfc3339

# Weight of the lexical side in the z-score fusion; dense gets 1 - W_LEXICAL.
W_LEXICAL = 0.4

# BM25 parameters for the lexical side: short turns want less length normalisation than Lucene's 0.75.
BM25_K1 = 0.6
BM25_B = 0.5

# Lexical context: a memory's lexical document is its own analysed text (weight 1) plus the terms of the
# entries of the same conversation at seq offsets +-1 and +-2, each counted at this fraction of a term.
LEXICAL_CONTEXT_WEIGHTS: dict[int, float] = {-2: 0.5, -1: 0.5, 1: 0.5, 2: 0.5}

# Neighbour score blending on the fused z-score: F'(i) = F(i) + sum_o w_o * F(i + o) over same-conversation
# entries (absent neighbours count as an average candidate, 0).
NEIGHBOUR_SCORE_WEIGHTS: dict[int, float] = {-2: 0.125, -1: 0.25, 1: 0.25, 2: 0.125}

# BM25+ lower bound: a candidate containing a query term gets at least idf x BM25_DELTA for it, so that
# long (context-expanded) documents are not pushed under short ones lacking the term.
BM25_DELTA = 0.5

# Bigram (adjacent analysed-term pair) BM25+ added to the unigram BM25 before z-scoring, with the same
# neighbour context: a phrase signal.
BIGRAM_WEIGHT = 0.25

# Length prior: + LENGTH_PRIOR_WEIGHT x z(log(1 + number of analysed terms)) on the fused score (before
# the neighbour blend): one-word replies are rarely what is asked for.
LENGTH_PRIOR_WEIGHT = 0.2

# When none of the query's content words (its terms but for names) occurs in any candidate, the lexical side
# scores on names alone, a nearly flat signal that lifts short memories: such a query leans on the dense side.
NAME_ONLY_W_LEXICAL = 0.25
NAME_ONLY_LENGTH_PRIOR = 0.1
# In such a query, a name more than this share of the candidates hold (whose memories they all are) weighs
# nothing lexically: it cannot tell them apart, and z-scored, its flat signal would count like a selective one.
COMMON_NAME_SHARE = 0.4

# When the two sides put different candidates first, follow the side whose best stands further above the rest
# (see `disagreement_factor`); with a query word most candidates hold, the lexical side separates little.
DISAGREE_DENSE_RATIO = 1.2
DISAGREE_FACTOR = 0.75
DISAGREE_COMMON_SHARE = 0.4
DISAGREE_COMMON_FACTOR = 0.5

# The lexical weight falls in proportion when less than this share of the query's content terms occurs in any
# candidate: a question asked in another language than the memories matches their words only by chance.
COVERAGE_FULL = 0.5

# When most of the dense side's LANGUAGE_TOP best are in another language than the query, the lexical side
# matches only names, numbers and borrowed words: the fusion leans on the dense side, which reads across them.
CROSS_LINGUAL_W_LEXICAL = 0.1
LANGUAGE_TOP = 10
LANGUAGES: PerText[str] = PerText(lambda text, occurred_at: detect(text))

_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b([A-Z][a-z]+)")  # capitalised, not starting the text or a sentence


def name_terms(query: str) -> set[str]:
    """The terms of the query's names: capitalised words within a sentence."""
    languages = query_languages(query)
    return {term for word in _NAME.findall(query.strip()) for term in analyze_query(word, languages)}


def content_terms(query: str, query_terms: Sequence[str]) -> list[str]:
    """The query's distinct terms other than names and date terms."""
    names = name_terms(query)
    return [term for term in dict.fromkeys(query_terms) if term not in names and not is_date_term(term)]


def without_common_names(query: str, query_terms: Sequence[str], docs: CandidateDocuments) -> list[str]:
    """`query_terms` without the names that more than COMMON_NAME_SHARE of the candidates' own texts hold."""
    common = {term for term in name_terms(query) if content_term_share([term], docs) > COMMON_NAME_SHARE}
    return [term for term in query_terms if term not in common]


def content_term_share(terms: Sequence[str], docs: CandidateDocuments) -> float:
    """The share of the candidates whose own text holds one of `terms` (0 when none does)."""
    ids = [tid for term in terms if (tid := TERM_IDS.get(term)) is not None]
    n = len(docs.term_counts)
    if not ids or not n:
        return 0.0
    held = np.isin(docs.terms.ids, np.asarray(ids, dtype=docs.terms.ids.dtype))
    return len(np.unique(docs.terms.owner[held])) / n


def other_language(query: str, pool: CandidateSet, dense: np.ndarray) -> bool:
    """Whether most of the dense side's LANGUAGE_TOP best candidates are in none of the query's languages."""
    if not len(dense):
        return False
    asked = set(query_languages(query))
    top = np.argsort(-dense, kind="stable")[:LANGUAGE_TOP]
    ids, texts, times = pool.column(ID), pool.column(TEXT), pool.column(OCCURRED_AT)
    other = sum(LANGUAGES.of(ids[i], texts[i], times[i]) not in asked for i in top)
    return other * 2 > len(top)


def content_term_coverage(terms: Sequence[str], docs: CandidateDocuments) -> float:
    """The share of `terms` some candidate's own text holds (1 for a query with none): low when the query is
    in another language than the memories, whose words it then matches only by chance."""
    if not terms:
        return 1.0
    ids = {tid for term in terms if (tid := TERM_IDS.get(term)) is not None}
    if not ids:
        return 0.0
    found = np.unique(docs.terms.ids[np.isin(docs.terms.ids, np.fromiter(ids, dtype=docs.terms.ids.dtype))])
    return len(found) / len(terms)


def disagreement_factor(dense_z: np.ndarray, lexical_z: np.ndarray, share: float) -> float:
    """What the lexical weight is multiplied by for this candidate set: 1 when both sides put the same
    candidate first; DISAGREE_COMMON_FACTOR when the dense side's best z is above the lexical side's and more
    than DISAGREE_COMMON_SHARE of the candidates hold a content term (`share`); DISAGREE_FACTOR when the
    dense side's best z exceeds DISAGREE_DENSE_RATIO x the lexical side's."""
    if len(dense_z) < 2:
        return 1.0
    top_dense, top_lexical = int(np.argmax(dense_z)), int(np.argmax(lexical_z))
    if top_dense == top_lexical:
        return 1.0
    dense_best, lexical_best = float(dense_z[top_dense]), float(lexical_z[top_lexical])
    if share > DISAGREE_COMMON_SHARE and dense_best > lexical_best:
        return DISAGREE_COMMON_FACTOR
    if dense_best > DISAGREE_DENSE_RATIO * lexical_best:
        return DISAGREE_FACTOR
    return 1.0


@lru_cache(maxsize=4096)  # called per candidate on every recall; memories share few distinct timestamps
def format_date(occurred_at: str | None) -> str | None:
    """RFC3339 -> '8 May 2023' (the calendar date in the timestamp's own offset); None if unparseable."""
    if not occurred_at:
        return None
    dt = parse_rfc3339(occurred_at)
    if dt is None:
        return None
    return f"{dt.day} {dt:%B} {dt.year}"


def document_text(content: str, occurred_at: str | None) -> str:
    """The text embedded and lexically indexed for a memory: '[8 May 2023] <content>' (the date helps both
    sides). Without a usable occurred_at it is the content alone.
    """
    date = format_date(occurred_at)
    return f"[{date}] {content}" if date else content


def _zscore(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    sd = float(x.std())
    if not sd > 1e-12:
        return np.zeros_like(x)
    scores: np.ndarray = (x - x.mean()) / sd
    return scores


def blend_neighbours(scores: np.ndarray, neighbours: dict[int, np.ndarray], weights: dict[int, float]) -> np.ndarray:
    """scores(i) + sum_o weights[o] * scores(neighbour at offset o); an absent neighbour adds 0."""
    out = np.asarray(scores, dtype=np.float64).copy()
    for off, w in weights.items():
        idx = neighbours.get(off)
        if idx is None or not w:
            continue
        present = idx >= 0
        out[present] += w * scores[idx[present]]
    return out


def fused_scores(
    query: str,
    query_vector: np.ndarray,
    candidates: Sequence[Candidate],
    *,
    w_lexical: float | None = None,
    lexical_context: dict[int, float] | None = None,
    neighbour_weights: dict[int, float] | None = None,
    k1: float | None = None,
    b: float | None = None,
    delta: float | None = None,
    bigram_weight: float | None = None,
    length_prior: float | None = None,
    expansion: Mapping[str, float] | None = None,
) -> np.ndarray:
    """The raw ranking score per candidate (candidate order), in z units over the candidate set:
    0 = an average candidate, higher is better. `rank` maps it to (0, 1).
    `expansion`: extra lexical query terms with weights (memory_server/ranking/expansion.py), unigram side only."""
    lexical_context = LEXICAL_CONTEXT_WEIGHTS if lexical_context is None else lexical_context
    neighbour_weights = NEIGHBOUR_SCORE_WEIGHTS if neighbour_weights is None else neighbour_weights
    k1 = BM25_K1 if k1 is None else k1
    b = BM25_B if b is None else b
    delta = BM25_DELTA if delta is None else delta
    bigram_weight = BIGRAM_WEIGHT if bigram_weight is None else bigram_weight
    length_prior = LENGTH_PRIOR_WEIGHT if length_prior is None else length_prior
    n = len(candidates)
    if n == 0:
        return np.zeros(0)
    pool = CandidateSet.of(candidates)
    dense = pool.cosines(query_vector)
    neighbours = pool.neighbours([*lexical_context, *neighbour_weights])
    docs = pool.documents
    context = [(neighbours[off], w) for off, w in lexical_context.items() if w]
    query_terms = analyze_query(query)
    if w_lexical is None:
        terms = content_terms(query, query_terms)
        share = content_term_share(terms, docs)
        if not share:
            query_terms = without_common_names(query, query_terms, docs)
    lex = docs.bm25(query_terms, k1=k1, b=b, delta=delta, context=context, extra_terms=expansion)
    if bigram_weight:
        lex = lex + bigram_weight * docs.bigram_bm25(query_terms, k1=k1, b=b, delta=delta, context=context)
    dense_z, lexical_z = _zscore(dense), _zscore(lex)
    if w_lexical is None:
        w_lexical = W_LEXICAL
        if not share:
            w_lexical, length_prior = NAME_ONLY_W_LEXICAL, min(length_prior, NAME_ONLY_LENGTH_PRIOR)
        elif COVERAGE_FULL:
            w_lexical *= min(1.0, content_term_coverage(terms, docs) / COVERAGE_FULL)
        if other_language(query, pool, dense):
            w_lexical = min(w_lexical, CROSS_LINGUAL_W_LEXICAL)
        w_lexical *= disagreement_factor(dense_z, lexical_z, share)
    fused = (1.0 - w_lexical) * dense_z + w_lexical * lexical_z
    if length_prior:
        fused = fused + length_prior * _zscore(np.log1p(docs.term_counts))
    return blend_neighbours(fused, neighbours, neighbour_weights)


def rank(
    query: str,
    query_vector: np.ndarray,
    candidates: Sequence[Candidate],
    *,
    limit: int,
    expansion: Mapping[str, float] | None = None,
    adjust: Callable[[np.ndarray], np.ndarray] | None = None,
) -> list[tuple[Candidate, float]]:
    """Best `limit` candidates, best first, each with a score in (0, 1). `adjust` may change the fused
    scores before they are ordered (memory_server/ranking/recency.py).

    score = logistic(fused z-score): 0.5 is an average member of this candidate set, ~0.95 is about
    3 standard deviations above it. It is monotone in the ranking and relative to the candidate set,
    so compare scores within one call, not across calls. Ties keep candidate order.
    """
    pool = CandidateSet.of(candidates)
    return [
        (pool[i], score)
        for i, score in ranked_positions(query, query_vector, pool, limit=limit, expansion=expansion, adjust=adjust)
    ]


def ranked_positions(
    query: str,
    query_vector: np.ndarray,
    candidates: CandidateSet,
    *,
    limit: int,
    expansion: Mapping[str, float] | None = None,
    adjust: Callable[[np.ndarray], np.ndarray] | None = None,
) -> list[tuple[int, float]]:
    """`rank` as (position in `candidates`, score): no Candidate is made."""
    if limit <= 0 or not len(candidates):
        return []
    f = fused_scores(query, query_vector, candidates, expansion=expansion)
    if adjust is not None:
        f = adjust(f)
    order = np.argsort(-f, kind="stable")[:limit]
    with np.errstate(over="ignore"):  # a score far below the rest is 0
        scores = 1.0 / (1.0 + np.exp(-f[order]))
    return list(zip(order.tolist(), scores.tolist(), strict=True))
