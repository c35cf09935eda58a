"""Recall ranking: pure functions, no I/O.

The server calls `document_text(content, occurred_at)` when a memory is remembered; that string is what
gets embedded (the stored vector) and what is analysed for the lexical index (`lexical.analyzed_text`).
At recall time it loads the visible candidate set (the whole visible set when it is up to a few thousand
memories; otherwise the union of FTS5 and vector-index candidates), wraps each memory in a `Candidate`,
and calls `rank(query, query_vector, candidates, limit=...)`.

Ranking (constants below, measured on LoCoMo dev, categories 1-4, see bench/locomo_explore.py):
  1. dense: cosine of the query vector with each candidate's stored vector;
  2. lexical: BM25+ over the candidates' analysed text (stemmed, stop words dropped), where each
     candidate's lexical document also holds its conversation neighbours' terms at a fraction of a count
     (LEXICAL_CONTEXT_WEIGHTS; neighbours = same provenance conversation_id, seq +- 1, 2), plus
     BIGRAM_WEIGHT x the same BM25+ over adjacent analysed-term pairs (a phrase signal); the query's
     terms are expanded with near-synonyms found among the candidates' words by the embedding model
     (server/ranking/expansion.py), each counted at a fraction of a query term;
  3. both are z-scored over the candidate set and mixed with weight W_LEXICAL (less when the query's words
     but names occur nowhere, or when the sides put different candidates first and the dense side's best
     stands out more: NAME_ONLY_W_LEXICAL, DISAGREE_DENSE_RATIO), and a small length prior
     (LENGTH_PRIOR_WEIGHT x z-scored log term count: one-word replies are rarely what is asked for) is added;
  4. neighbour score blending: each candidate adds NEIGHBOUR_SCORE_WEIGHTS x its neighbours' fused
     scores, so a turn whose neighbours match rises, while the entry itself is what is returned;
  5. the result is mapped through a logistic to (0, 1).
The candidate set is scored as a whole: normalisation statistics and BM25 idf are over the candidates.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache

import numpy as np

from server.ranking.candidate_set import ID, OCCURRED_AT, TEXT, Candidate, CandidateSet
from server.ranking.languages import detect, query_languages
from server.ranking.lexical import analyze_query, is_date_term
from server.ranking.per_text import PerText
from server.ranking.term_arrays import TERM_IDS, CandidateDocuments

# --- tuned constants (LoCoMo dev, categories 1-4, 760 questions; effects are R@10 deltas measured in
# bench/locomo_explore.py, see the report there; figures before the 'round 2' block are from round 1,
# i.e. without BM25_DELTA / BIGRAM_WEIGHT / LENGTH_PRIOR_WEIGHT) ---

# Weight of the lexical side in the z-score fusion; dense gets 1 - W_LEXICAL. z-score fusion instead of
# reciprocal-rank fusion: +0.07 on plain fusion (RRF 0.623 -> 0.696), +0.03 in the full ranking
# (0.760 -> 0.790); 0.3-0.5 within 0.01. Without the dense side 0.747, without the lexical side 0.554.
W_LEXICAL = 0.4

# BM25 parameters for the lexical side. BM25 alone: b 0.75 -> 0.5 +0.009 (short turns want less length
# normalisation), k1 flat in 0.6-2.0. In the full ranking vs k1 1.2 b 0.75: R@10 +0.002 (k1 0.6 b 0.5
# chosen by 3 of 5 leave-one-conversation-out folds).
BM25_K1 = 0.6
BM25_B = 0.5

# Lexical context: a memory's lexical document is its own analysed text (weight 1) plus the terms of the
# entries of the same conversation at seq offsets +-1 and +-2, each counted at this fraction of a term.
# BM25 alone 0.641 -> 0.72 (previous entry alone); full ranking without it 0.755 -> with it 0.790
# (R@5 0.665 -> 0.701).
LEXICAL_CONTEXT_WEIGHTS: dict[int, float] = {-2: 0.5, -1: 0.5, 1: 0.5, 2: 0.5}

# Neighbour score blending on the fused z-score: F'(i) = F(i) + sum_o w_o * F(i + o) over same-conversation
# entries (absent neighbours count as an average candidate, 0). Full ranking without it 0.777 -> 0.790
# (R@5 unchanged 0.701); on plain fusion 0.696 -> 0.750. Both neighbour components off: 0.699.
# Round 2, with BM25_DELTA / BIGRAM_WEIGHT / LENGTH_PRIOR_WEIGHT below: R@5 / R@10 without the blend
# 0.711 / 0.794, +-1 at 0.1 / 0.15 / 0.2 / 0.25 -> 0.724/0.792, 0.721/0.794, 0.719/0.791, 0.725/0.792; kept
# at 0.25 (every LOCO fold picks it; it trades cat-1 R@10 0.462 -> 0.436 for R@5 +0.014).
# Measured and not kept (2026-12-03, bench/offline.py, production ranking, LoCoMo dev R@5 / R@10 against 0.767 /
# 0.836): scoring provenance groups (same conversation_id and day, i.e. a session) and adding w x the group's
# score to each member's, before the speaker, answer and date boosts or after them. Group score the best
# member's, log-sum-exp of the members', the best other member's, or the mean of the best three, at w 0.1 /
# 0.25 / 0.5: every one lower, best 0.765 / 0.834 (best member, after the boosts, w 0.1); at 0.25 0.757-0.759
# / 0.826-0.831, at 0.5 0.747-0.759 / 0.821-0.829, multi-hop R@10 0.569 -> 0.48-0.55 (a strong session lifts
# its chatter over the other sessions' evidence). Profiles and evolving memories have no provenance: unchanged.
NEIGHBOUR_SCORE_WEIGHTS: dict[int, float] = {-2: 0.125, -1: 0.25, 1: 0.25, 2: 0.125}

# --- round 2 (bench/locomo_explore.py --only round2). Baseline = the round-1 ranking, R@5 0.701 R@10 0.790.
# The three below together: R@5 0.725 R@10 0.792, identical in leave-one-conversation-out cross-validation
# (every fold picks these values from a 81-point grid of delta x bigram x length prior x W_LEXICAL).
# Tried and dropped (no gain or a loss; the same script reproduces each): query-adaptive fusion weight
# (idf- or spread-based, -0.001..-0.06), RM3 lexical feedback (-0.002..-0.02), z over the top-N only,
# rank/z mixes, idf powers, binary query tf, date-token field weight, session boosts, second-pass blends,
# similarity-gated neighbour blending, stop-word-free query embedding mixed into the dense side.

# BM25+ lower bound: a candidate containing a query term gets at least idf x BM25_DELTA for it, so that
# long (context-expanded) documents are not pushed under short ones lacking the term. Alone: R@5 +0.007
# (0.701 -> 0.708), R@10 +0.001; 0.25-1.0 all within 0.003.
BM25_DELTA = 0.5

# Bigram (adjacent analysed-term pair) BM25+ added to the unigram BM25 before z-scoring, with the same
# neighbour context. Alone R@5 +0.007..+0.010, R@10 -0.001..-0.002; with the other two: R@5 0.712 -> 0.725.
BIGRAM_WEIGHT = 0.25

# Length prior: + LENGTH_PRIOR_WEIGHT x z(log(1 + number of analysed terms)) on the fused score (before
# the neighbour blend). Alone R@5 +0.007, R@10 +0.003 at 0.2; 0.3 -0.009, 0.5 -0.019 R@10 vs 0.2.
LENGTH_PRIOR_WEIGHT = 0.2


# When none of the query's content words (its terms but for capitalised names) occurs in any candidate, the
# lexical side scores on the names (and expansions) alone: z-scored, that nearly flat signal lifts the short
# memories holding the name ("Who is in David's family?" with "famili" nowhere). Such a query is fused with
# less lexical weight and length prior. Profiles (bench/profiles.py, offline and through the server) R@1 / R@5
# / R@10: category 0.465 / 0.579 / 0.685 -> 0.525 / 0.589 / 0.692 (dense alone 0.515 / 0.593 / 0.697),
# attribute 0.606 / 0.789 / 0.839 -> 0.644 / 0.806 / 0.850, preference 0.743 / 0.882 / 0.914 -> 0.750 /
# 0.895 / 0.921, overall 0.681 / 0.832 / 0.882 -> 0.701 / 0.842 / 0.887, none lower; it fires on 76 of 99
# category questions, 10 of 760 LoCoMo questions (figures identical) and no evolving one. A weight of 0.15
# (every leave-one-bucket-out fold's pick) brings category to within 0.002 of dense but costs single-fact
# R@1 0.972 -> 0.957; a gate on a small share of candidates instead of none costs LoCoMo 0.767 / 0.836 ->
# 0.762 / 0.831; counting the query's expansions (server/ranking/expansion.py) as its words keeps less of the
# gain (category 0.465 / 0.591 / 0.687, overall 0.688 / 0.835 / 0.886, through the server).
# The category gap left (0.589 / 0.692 against dense 0.593 / 0.697 at R@5 / R@10) closed at R@5 with the
# disagreement rule below (0.593), and at every k when a class noun the question asks instances of came to
# reach them in query expansion (0.545 / 0.598 / 0.702: CLASS_MIN_SIMILARITY in server/ranking/expansion.py;
# the same lower threshold for every word no candidate uses lost elsewhere, figures beside
# EXPANSION_MIN_SIMILARITY).
NAME_ONLY_W_LEXICAL = 0.25
NAME_ONLY_LENGTH_PRIOR = 0.1

# When the two sides put different candidates first, the side whose best candidate stands further above the
# rest of the set (in its own z units) is the one to follow: the lexical weight (W_LEXICAL, or
# NAME_ONLY_W_LEXICAL) is multiplied by DISAGREE_FACTOR when the dense side's best z exceeds
# DISAGREE_DENSE_RATIO x the lexical side's best z, and by DISAGREE_COMMON_FACTOR when the dense side's best is
# merely above the lexical side's while more than DISAGREE_COMMON_SHARE of the candidates hold a query word
# other than a name (then the lexical side separates little: every version of a fact names its subject and
# attribute). Measured 2026-12-03 with bench/offline.py (production ranking, against the figures without it):
# profiles category R@1 / R@5 / R@10 0.525 / 0.589 / 0.692 -> 0.525 / 0.593 / 0.692 (dense alone 0.589-0.593 /
# 0.697 at R@5 / R@10); evolving "as of" top-1 with links, windows and recency 0.626 -> 0.641 (dense alone
# 0.641); every other LoCoMo, profiles and evolving category and mode unchanged (LoCoMo 0.767 / 0.837,
# temporal R@10 0.946); confirmed through bench/locomo.py, bench/profiles.py and bench/evolving.py the same day,
# where evolving "as of" with time windows and no links (a mode bench/offline.py does not run) also rose, 0.561
# -> 0.571 (past 0.611 -> 0.616), and nothing else moved.
# The ratio rule fires on 2 of 760 LoCoMo questions, 92 of 696 profiles questions and 2-5 of 649 evolving ones;
# the common-word rule on no LoCoMo or profiles question, 3 evolving ones without time windows and 14 with them
# (a window's candidate set is small). Both gains are one question each. From a grid: factor 0.75 at ratios
# 1.1-1.5, 0.25-0.5 at shares 0.3-0.7 give the same figures; a factor of 0.5 or less under the ratio rule costs
# LoCoMo open-domain R@10 0.502 -> 0.496, the common-word rule at a ratio of 1.1 or more keeps only the profiles
# gain (evolving "as of" 0.636), and at 1.0 for both rules evolving current top-1 with links and no recency
# falls 0.496 -> 0.491. Measured and not kept (none closed a gap without a loss): the lexical weight scaled by
# the share of the query's idf mass the best lexical candidate holds (below 0.2-0.7: x 0-0.75; above 0.8-1.0:
# x 1.25-1.5), by the share of candidates holding a query word alone (x 0-0.75 below 2-50% or above 30-50%),
# and by which side's top-1 / top-2 z gap is larger (gap ratio 1.5-4, x 0-0.75 / x 1-2). No weight brought
# evolving "as of" without links and windows to the lexical side alone (0.354): lexical weight x 0 / 0.5 / 1 /
# 1.25 / 2 gave 0.278 / 0.323 / 0.313 / 0.328 / 0.318; reading the period the question names as the time it
# asks about did (0.520: server/ranking/recency.py, as_of_first). A single lower lexical weight cannot close
# the category gap either: at 0.1 category reaches 0.603 / 0.697 but its R@1 falls to 0.495 and LoCoMo to
# 0.686 / 0.768.
DISAGREE_DENSE_RATIO = 1.2
DISAGREE_FACTOR = 0.75
DISAGREE_COMMON_SHARE = 0.4
DISAGREE_COMMON_FACTOR = 0.5

# The lexical weight falls in proportion when less than this share of the query's content terms occurs in any
# candidate: a question asked in another language than the memories matches their words only by chance.
COVERAGE_FULL = 0.5

# When most of the dense side's best candidates are written in another language than the query, the lexical
# side matches only names, numbers and borrowed words: the fusion leans on the dense side, which reads across
# languages. LANGUAGE_TOP: how many of the dense side's best are looked at.
CROSS_LINGUAL_W_LEXICAL = 0.1
LANGUAGE_TOP = 10
LANGUAGES: PerText[str] = PerText(lambda text, occurred_at: detect(text))

_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b([A-Z][a-z]+)")  # capitalised, not starting the text or a sentence


def content_terms(query: str, query_terms: Sequence[str]) -> list[str]:
    """The query's distinct terms other than names and date terms."""
    languages = query_languages(query)
    names = {term for word in _NAME.findall(query.strip()) for term in analyze_query(word, languages)}
    return [term for term in dict.fromkeys(query_terms) if term not in names and not is_date_term(term)]


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
    """What the lexical weight is multiplied by for this candidate set (1, DISAGREE_FACTOR or
    DISAGREE_COMMON_FACTOR; see DISAGREE_DENSE_RATIO)."""
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


def parse_rfc3339(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, AttributeError):
        return None


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
    """The text embedded and lexically indexed for a memory: '[8 May 2023] <content>'.

    Date in the text for both sides: full ranking 0.768 -> 0.790 R@10 (prefix beat suffix and a
    weekday form by ~0.005 in fusion).
    Without a usable occurred_at it is the content alone.
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
    k1: float = BM25_K1,
    b: float = BM25_B,
    delta: float | None = None,
    bigram_weight: float | None = None,
    length_prior: float | None = None,
    expansion: Mapping[str, float] | None = None,
) -> np.ndarray:
    """The raw ranking score per candidate (candidate order), in z units over the candidate set:
    0 = an average candidate, higher is better. `rank` maps it to (0, 1).
    `expansion`: extra lexical query terms with weights (server/ranking/expansion.py), unigram side only."""
    lexical_context = LEXICAL_CONTEXT_WEIGHTS if lexical_context is None else lexical_context
    neighbour_weights = NEIGHBOUR_SCORE_WEIGHTS if neighbour_weights is None else neighbour_weights
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
    lex = docs.bm25(query_terms, k1=k1, b=b, delta=delta, context=context, extra_terms=expansion)
    if bigram_weight:
        lex = lex + bigram_weight * docs.bigram_bm25(query_terms, k1=k1, b=b, delta=delta, context=context)
    dense_z, lexical_z = _zscore(dense), _zscore(lex)
    if w_lexical is None:
        terms = content_terms(query, query_terms)
        share = content_term_share(terms, docs)
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
    scores before they are ordered (server/ranking/recency.py).

    score = logistic(fused z-score): 0.5 is an average member of this candidate set, ~0.95 is about
    3 standard deviations above it. It is monotone in the ranking and relative to the candidate set,
    so compare scores within one call, not across calls. Ties keep candidate order.
    """
    pool = CandidateSet.of(candidates)
    return [(pool[i], score) for i, score in ranked_positions(query, query_vector, pool, limit=limit,
                                                              expansion=expansion, adjust=adjust)]


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
