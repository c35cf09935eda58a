import numpy as np

from memory_server.ranking import fusion as retrieval
from memory_server.ranking.candidate_set import Candidate
from memory_server.ranking.fusion import document_text, format_date, rank


def unit(*xs):
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def cand(i, content, vec, conv=None, seq=None, occurred_at="2023-05-08T13:56:00Z"):
    return Candidate(
        id=i,
        text=document_text(content, occurred_at),
        vector=unit(*vec),
        occurred_at=occurred_at,
        conversation_id=conv,
        seq=seq,
    )


FILLER = ["weather was nice", "bought groceries", "watched a film", "fixed the bike", "cooked pasta", "read a novel"]


def fillers(start, conv=None, seq0=None, n=6):
    return [
        cand(start + k, FILLER[k % len(FILLER)], (0, 0, 1, 0.1 * k), conv, None if seq0 is None else seq0 + k)
        for k in range(n)
    ]


def ids(hits):
    return [c.id for c, _ in hits]


def test_document_text_renders_date():
    assert format_date("2023-05-08T13:56:00Z") == "8 May 2023"
    assert format_date("2023-05-08T23:30:00-02:00") == "8 May 2023"  # the date in the timestamp's offset
    assert document_text("A: hi", "2023-05-08T13:56:00Z") == "[8 May 2023] A: hi"
    assert document_text("A: hi", None) == "A: hi"
    assert document_text("A: hi", "not a date") == "A: hi"


def test_date_in_text_lets_a_date_query_match():
    cands = [
        cand(1, "went to the lake", (1, 0, 0, 0), occurred_at="2023-05-08T10:00:00Z"),
        cand(2, "went to the lake", (1, 0, 0, 0), occurred_at="2022-11-02T10:00:00Z"),
    ] + fillers(10)
    hits = rank("lake in May 2023", unit(1, 0, 0, 0), cands, limit=3)
    assert ids(hits)[0] == 1


def test_fusion_puts_doc_strong_on_both_sides_first():
    q = unit(1, 0, 0, 0)
    cands = [
        cand(1, "pottery class with clay", (0.2, 1, 0, 0)),  # lexical only
        cand(2, "something unrelated", (1, 0.05, 0, 0)),  # dense only
        cand(3, "pottery class today", (1, 0.1, 0, 0)),  # both
    ] + fillers(10)
    hits = rank("pottery class", q, cands, limit=3)
    assert ids(hits)[0] == 3
    assert set(ids(hits)) == {1, 2, 3}


def test_scores_in_unit_interval_and_monotone():
    cands = [cand(1, "pottery class", (1, 0, 0, 0))] + fillers(10)
    hits = rank("pottery", unit(1, 0, 0, 0), cands, limit=5)
    scores = [s for _, s in hits]
    assert all(0.0 < s < 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > 0.5


def test_limit_and_empty():
    assert rank("x", unit(1, 0, 0, 0), [], limit=10) == []
    cands = fillers(0)
    assert len(rank("x", unit(1, 0, 0, 0), cands, limit=2)) == 2
    assert rank("x", unit(1, 0, 0, 0), cands, limit=0) == []


def test_neighbour_context_lifts_entry_but_direct_match_stays_first():
    # conversation: a question about a hiking trip, then a short answer with no matching words.
    conv = [
        cand(1, "B: how was the hiking trip to the mountains?", (1, 0, 0, 0), "c1", 0),
        cand(2, "A: amazing, the view was worth every step", (0, 0.2, 1, 0), "c1", 1),
    ]
    # an unrelated entry of another conversation, listed first and slightly closer on the dense side
    other = [cand(3, "A: amazing, the soup was worth the wait", (0.05, 0.2, 1, 0), "c2", 0)]
    cands = other + conv + fillers(10, "c3", 0)
    hits = rank("hiking trip mountains", unit(1, 0, 0, 0), cands, limit=4)
    order = ids(hits)
    assert order[0] == 1  # the direct match
    assert order.index(2) < order.index(3)  # the answer is lifted by its matching neighbour


def test_neighbour_blend_needs_same_conversation():
    cands = [
        cand(1, "tennis tournament final", (1, 0, 0, 0), "c1", 5),
        cand(2, "ok sure", (0.05, 1, 0, 0), "c2", 6),  # adjacent seq but another conversation
        cand(3, "ok sure", (0, 1, 0, 0), "c1", 6),
    ] + fillers(10)
    order = ids(rank("tennis tournament", unit(1, 0, 0, 0), cands, limit=3))
    assert order.index(3) < order.index(2)


def test_works_without_provenance_and_with_pre_analysed_terms():
    from memory_server.ranking.lexical import analyze

    cands = [cand(1, "salsa dancing lessons", (0, 1, 0, 0)), cand(2, "stamp collecting", (0, 0, 1, 0))]
    cands += fillers(10)
    pre = [Candidate(c.id, c.text, c.vector, c.occurred_at, None, None, terms=tuple(analyze(c.text))) for c in cands]
    a = rank("dancing", unit(1, 0, 0, 0), cands, limit=5)
    b = rank("dancing", unit(1, 0, 0, 0), pre, limit=5)
    assert ids(a)[0] == 1 and ids(a) == ids(b)


def test_constants_are_named():
    assert 0 < retrieval.W_LEXICAL < 1
    assert retrieval.LEXICAL_CONTEXT_WEIGHTS and retrieval.NEIGHBOUR_SCORE_WEIGHTS


def test_neighbour_tests_depend_on_neighbour_context(monkeypatch):
    """Sanity: without neighbour context the lifted entry is not lifted (the tests above are not vacuous)."""
    monkeypatch.setattr(retrieval, "NEIGHBOUR_SCORE_WEIGHTS", {})
    monkeypatch.setattr(retrieval, "LEXICAL_CONTEXT_WEIGHTS", {})
    cands = [
        cand(3, "A: amazing, the soup was worth the wait", (0.05, 0.2, 1, 0), "c2", 0),
        cand(1, "B: how was the hiking trip to the mountains?", (1, 0, 0, 0), "c1", 0),
        cand(2, "A: amazing, the view was worth every step", (0, 0.2, 1, 0), "c1", 1),
    ] + fillers(10, "c3", 0)
    order = ids(rank("hiking trip mountains", unit(1, 0, 0, 0), cands, limit=4))
    assert order.index(3) < order.index(2)


def test_phrase_match_outranks_the_same_words_scattered(monkeypatch):
    v = (1, 0, 0, 0)
    cands = [
        cand(1, "the group was a big support today", v),  # same words, not adjacent; listed first
        cand(2, "the support group was big today", v),
    ] + fillers(10)
    assert ids(rank("support group", unit(1, 0, 0, 0), cands, limit=2)) == [2, 1]
    monkeypatch.setattr(retrieval, "BIGRAM_WEIGHT", 0.0)
    assert ids(rank("support group", unit(1, 0, 0, 0), cands, limit=2)) == [1, 2]  # unigrams alone tie


def test_length_prior_prefers_substantive_entries_on_a_tie(monkeypatch):
    v = (0, 1, 0, 0)
    cands = [
        cand(1, "ok", v),  # a one-word reply, listed first
        cand(2, "we spent the weekend repainting the old garden fence", v),
    ] + fillers(10)
    q = unit(0, 1, 0, 0)  # no lexical match: the dense side ties the two
    assert ids(rank("anything new", q, cands, limit=2)) == [2, 1]
    monkeypatch.setattr(retrieval, "LENGTH_PRIOR_WEIGHT", 0.0)
    assert ids(rank("anything new", q, cands, limit=2)) == [1, 2]  # without the prior: candidate order


def test_round2_constants_are_small():
    assert 0 < retrieval.BM25_DELTA <= 1
    assert 0 < retrieval.BIGRAM_WEIGHT < 1
    assert 0 < retrieval.LENGTH_PRIOR_WEIGHT < retrieval.W_LEXICAL


def test_a_query_whose_words_but_names_occur_nowhere_leans_on_the_dense_side(monkeypatch):
    cands = [
        cand(1, "David fixed the bike", (1, 0, 0, 0)),
        cand(2, "David's brother Tom visits on Sundays", (0, 1, 0, 0)),
        *fillers(10),
    ]
    docs = retrieval.CandidateSet(cands).documents
    family, bike = "Who is in David's family?", "Who fixed David's bike?"
    assert share(family, docs) == 0  # only the name occurs
    assert share(bike, docs) > 0
    q = unit(0, 1, 0, 0)

    def fused(query, **weights):
        return retrieval.fused_scores(query, q, cands, **weights)

    monkeypatch.setattr(retrieval, "DISAGREE_FACTOR", 1.0)  # that rule is tested below
    monkeypatch.setattr(retrieval, "DISAGREE_COMMON_FACTOR", 1.0)
    gated = dict(w_lexical=retrieval.NAME_ONLY_W_LEXICAL, length_prior=retrieval.NAME_ONLY_LENGTH_PRIOR)
    assert np.array_equal(fused(family), fused(family, **gated))
    assert not np.array_equal(fused(family), fused(family, w_lexical=retrieval.W_LEXICAL))
    assert np.array_equal(fused(bike), fused(bike, w_lexical=retrieval.W_LEXICAL))


def test_in_such_a_query_a_name_most_candidates_hold_weighs_nothing_lexically(monkeypatch):
    # Ana's own memories: most name her, the first-person one does not, and none says "pets"
    cands = [
        cand(1, "I adopted a greyhound called Luna", (1, 0.3, 0, 0)),
        cand(2, "Ana's dentist is Dr. Silva", (1, 0.35, 0, 0)),
        cand(3, "Ana works as a nurse", (0.2, 1, 0, 0)),
        cand(4, "Ana flew to Kyoto in May", (0, 1, 0.2, 0)),
        cand(5, "Ana takes her coffee black", (0, 1, 0, 0.2)),
        cand(6, "Ana — gym: Tuesdays", (0, 1, 0.3, 0.3)),
        *fillers(10, n=4),
    ]
    docs = retrieval.CandidateSet(cands).documents
    pets, kyoto = "Does Ana have any pets?", "Which city did Ana visit, Kyoto?"
    assert share(pets, docs) == 0
    assert retrieval.without_common_names(pets, retrieval.analyze_query(pets), docs) == ["pet"]
    # a name few candidates hold still counts
    assert "kyoto" in retrieval.without_common_names(kyoto, retrieval.analyze_query(kyoto), docs)
    q = unit(1, 0, 0, 0)
    assert ids(rank(pets, q, cands, limit=1)) == [1]
    monkeypatch.setattr(retrieval, "COMMON_NAME_SHARE", 1.0)  # the name counted: its short memories rise
    assert ids(rank(pets, q, cands, limit=1)) == [2]


def test_when_the_sides_disagree_the_fusion_leans_on_the_side_whose_best_stands_out():
    # the dense side puts 1 far above the rest; the lexical side prefers 2, which says "coffee" twice
    cands = [
        cand(1, "a flat white every morning", (1, 0, 0, 0)),
        cand(2, "coffee coffee machine broke", (0.3, 1, 0, 0)),
        cand(3, "the coffee in the office is bad", (0, 0, 1, 0.5)),
        *fillers(10),
    ]
    query, q = "What coffee does Ana drink?", unit(1, 0, 0, 0)
    docs = retrieval.CandidateSet(cands).documents
    assert share(query, docs) == 2 / len(cands)

    def fused(**weights):
        return retrieval.fused_scores(query, q, cands, **weights)

    lowered = retrieval.W_LEXICAL * retrieval.DISAGREE_FACTOR
    assert np.array_equal(fused(), fused(w_lexical=lowered))
    assert not np.array_equal(fused(), fused(w_lexical=retrieval.W_LEXICAL))
    assert ids(rank(query, q, cands, limit=1)) == [1]
    assert 0 < retrieval.DISAGREE_COMMON_FACTOR < retrieval.DISAGREE_FACTOR < 1
    # the rule itself: which side is first, by how much, and how many candidates hold the query's words
    dense = np.array([3.0, 1.0, 0.0, -1.0])
    lexical = np.array([1.0, 2.0, 0.0, -1.0])
    assert retrieval.disagreement_factor(dense, lexical, 0.2) == retrieval.DISAGREE_FACTOR
    assert retrieval.disagreement_factor(dense, lexical, 0.9) == retrieval.DISAGREE_COMMON_FACTOR
    assert retrieval.disagreement_factor(dense, dense, 0.9) == 1.0  # the sides agree
    assert retrieval.disagreement_factor(lexical, dense, 0.9) == 1.0  # the lexical side's best stands out
    close = np.array([2.1, 1.0, 0.0, -1.0])  # the dense side's best above the lexical's, by less than the ratio
    assert retrieval.disagreement_factor(close, lexical, 0.2) == 1.0
    assert retrieval.disagreement_factor(close, lexical, 0.9) == retrieval.DISAGREE_COMMON_FACTOR


def share(query, docs):
    return retrieval.content_term_share(retrieval.content_terms(query, retrieval.analyze_query(query)), docs)


def test_a_query_in_another_language_than_the_memories_leans_on_the_dense_side(monkeypatch):
    cands = [
        cand(1, "Caroline went to the LGBTQ support group yesterday", (1, 0, 0, 0)),
        cand(2, "The group hiked to the lake", (0, 1, 0, 0)),
        *fillers(10),
    ]
    docs = retrieval.CandidateSet(cands).documents
    spanish = "¿Cuándo fue Caroline al grupo de apoyo LGBTQ?"
    terms = retrieval.content_terms(spanish, retrieval.analyze_query(spanish))
    assert retrieval.content_term_coverage(terms, docs) < retrieval.COVERAGE_FULL  # "lgbtq" alone occurs
    english = "When did Caroline go to the LGBTQ support group?"
    assert (
        retrieval.content_term_coverage(retrieval.content_terms(english, retrieval.analyze_query(english)), docs)
        >= retrieval.COVERAGE_FULL
    )
    q = unit(1, 0.8, 0, 0)
    monkeypatch.setattr(retrieval, "DISAGREE_FACTOR", 1.0)
    monkeypatch.setattr(retrieval, "DISAGREE_COMMON_FACTOR", 1.0)
    full = retrieval.fused_scores(spanish, q, cands, w_lexical=retrieval.W_LEXICAL)
    # The memories are English, the question Spanish: the lexical weight is at most CROSS_LINGUAL_W_LEXICAL.
    pool = retrieval.CandidateSet(cands)
    assert retrieval.other_language(spanish, pool, pool.cosines(q))
    assert not retrieval.other_language(english, pool, pool.cosines(q))
    leaning = retrieval.fused_scores(spanish, q, cands, w_lexical=retrieval.CROSS_LINGUAL_W_LEXICAL)
    assert np.array_equal(retrieval.fused_scores(spanish, q, cands), leaning)
    monkeypatch.setattr(retrieval, "CROSS_LINGUAL_W_LEXICAL", 1.0)  # the coverage alone
    assert not np.array_equal(retrieval.fused_scores(spanish, q, cands), full)
    monkeypatch.setattr(retrieval, "COVERAGE_FULL", 0.0)
    assert np.array_equal(retrieval.fused_scores(spanish, q, cands), full)
