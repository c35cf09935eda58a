import numpy as np

from memory_server.ranking.languages import STOP_WORDS
from memory_server.ranking.lexical import BM25Corpus, analyze, analyzed_text, term_weights


def test_lowercases_and_drops_stop_words():
    assert analyze("The cat and THE dog") == ["cat", "dog"]
    assert all(t not in STOP_WORDS for t in analyze("what did you do with them after that"))


def test_stems_match_across_forms():
    assert analyze("running") == analyze("runs") == analyze("run")
    assert analyze("adoption agencies")[1] == analyze("agency")[0]


def test_contraction_fragments_and_unicode_words():
    assert analyze("I don't know") == ["know"]
    assert analyze("Café München") == ["café", "münchen"]


def test_month_may_is_kept_content_words_kept():
    assert "may" in analyze("8 May 2023")
    assert analyze("fire") and analyze("system")  # content words some stop lists drop


def test_analyzed_text_space_joined():
    assert analyzed_text("Painting sunsets") == "paint sunset"


def test_bm25_prefers_rarer_terms():
    docs = [analyze(t) for t in ["cat dog", "cat bee", "cat ant", "cat fox", "owl dog", "owl emu"]]
    c = BM25Corpus(docs)
    assert c.idf("dog") > c.idf("cat")
    s = c.score(analyze("cat dog"))
    assert s[0] == s.max()
    assert s[4] > s[1]  # the rarer term alone beats the common one alone


def test_bm25_zero_for_no_match_and_unknown_terms():
    c = BM25Corpus([analyze("apple"), analyze("banana")])
    s = c.score(analyze("cherry"))
    assert np.all(s == 0)


def test_bm25_length_normalisation():
    c = BM25Corpus([["paint"], ["paint"] + [f"x{i}" for i in range(20)]], b=0.75)
    s = c.score(["paint"])
    assert s[0] > s[1]


def test_bm25_weighted_documents():
    own = analyze("went hiking")
    ctx = analyze("mountain trip")
    docs = [term_weights([(own, 1.0), (ctx, 0.5)]), term_weights([(ctx, 1.0)])]
    c = BM25Corpus(docs)
    s = c.score(analyze("mountain"))
    assert s[1] > s[0] > 0  # context terms count, but less than a document's own terms


def test_bm25_scores_matches_corpus_with_context():
    from memory_server.ranking.lexical import bm25_scores

    texts = ["went hiking in the mountains", "amazing view", "bought a new bike", "bike ride to the lake", "ok"]
    docs = [analyze(t) for t in texts]
    prev = np.array([-1, 0, 1, 2, 3])
    nxt = np.array([1, 2, 3, 4, -1])
    ctx = [(prev, 0.5), (nxt, 0.25)]
    q = analyze("mountain bike lake bike")
    fast = bm25_scores(q, docs, k1=0.9, b=0.5, context=ctx)
    wdocs = [
        term_weights([(docs[i], 1.0)] + [(docs[ix[i]], w) for ix, w in ctx if ix[i] >= 0]) for i in range(len(docs))
    ]
    slow = BM25Corpus(wdocs, k1=0.9, b=0.5).score(q)
    np.testing.assert_allclose(fast, slow, rtol=1e-12)
    np.testing.assert_allclose(bm25_scores(q, docs), BM25Corpus(docs).score(q), rtol=1e-12)


def test_bm25_plus_delta_gives_matching_documents_a_floor():
    from memory_server.ranking.lexical import bm25_scores

    docs = [["paint"], ["paint"] + [f"x{i}" for i in range(40)], ["sunset"], ["lake"]]
    plain = BM25Corpus(docs, b=1.0)
    plus = BM25Corpus(docs, b=1.0, delta=0.5)
    s0, s1 = plain.score(["paint"]), plus.score(["paint"])
    idf = plain.idf("paint")
    np.testing.assert_allclose(s1[:2] - s0[:2], 0.5 * idf)  # every matching document gets idf * delta more
    assert s1[2] == s1[3] == 0  # non-matching documents get nothing
    assert s1[1] >= 0.5 * idf
    np.testing.assert_allclose(bm25_scores(["paint"], docs, b=1.0, delta=0.5), s1, rtol=1e-12)


def test_bigrams_skip_stop_words():
    from memory_server.ranking.lexical import bigrams

    assert bigrams(analyze("joined a support group")) == [("join", "support"), ("support", "group")]
    assert bigrams(["a"]) == [] and bigrams([]) == []


def test_bigram_scores_prefer_the_phrase():
    from memory_server.ranking.lexical import bigram_bm25_scores

    docs = [analyze(t) for t in ["the support group met", "the group needed support", "support", "cooking dinner"]]
    s = bigram_bm25_scores(analyze("support group"), docs)
    assert s[0] > 0 and s[1] == s[2] == s[3] == 0
    assert not bigram_bm25_scores(analyze("support"), docs).any()  # one-term query: no pairs


def test_bigram_scores_match_bm25_over_bigram_documents_with_context():
    from memory_server.ranking.lexical import bigram_bm25_scores, bigrams, bm25_scores

    texts = ["support group on friday", "group support", "the support group again", "painting class", "support group"]
    docs = [analyze(t) for t in texts]
    prev = np.array([-1, 0, 1, 2, 3])
    ctx = [(prev, 0.5)]
    q = analyze("support group painting class")
    fast = bigram_bm25_scores(q, docs, k1=0.6, b=0.5, delta=0.5, context=ctx)
    slow = bm25_scores(bigrams(q), [bigrams(d) for d in docs], k1=0.6, b=0.5, delta=0.5, context=ctx)
    np.testing.assert_allclose(fast, slow, rtol=1e-12)
    assert fast[1] > 0  # no phrase of its own, but its previous entry's counts at half weight
