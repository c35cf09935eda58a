"""Lexical side of recall: the text analyzer and an in-memory BM25 scorer.

`analyze(text)` is the one analyzer used everywhere text is matched by words: it detects the text's language
(memory_server/ranking/languages.py), lowercases, splits into words, drops that language's stop words and stems with
its Snowball stemmer (PyStemmer); runs of a script written without spaces (Chinese, Japanese, Korean, Thai, Lao,
Burmese, Khmer) become overlapping pairs of characters.
The server stores the analysed form of each memory (space-joined, see `analyzed_text`) in an SQLite FTS5
column with the plain `unicode61` tokenizer, so FTS5 candidate generation and the Python scorer see the
same terms; nothing is downloaded at run time (the stop-word list lives in this module).

`BM25Corpus` scores a query against a small candidate set held in memory (the whole visible set when it
is a few thousand memories or fewer, otherwise the union of FTS5 and vector-index candidates).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TypeVar

import numpy as np
import Stemmer

from memory_server.ranking.languages import (
    DEFAULT,
    FUNCTION_WORDS,
    STEMMERS,
    UNSPACED_RUN,
    WORD,
    detect,
    folded,
    query_languages,
)

# What BM25 counts: a term, a pair of adjacent terms, or either as an integer id (memory_server/ranking/term_arrays.py).
Item = TypeVar("Item", str, tuple[str, str], int)
Doc = TypeVar("Doc")

_STEMMERS = {language: Stemmer.Stemmer(algorithm) for language, algorithm in STEMMERS.items()}


@lru_cache(maxsize=65536)
def stem(token: str, language: str = DEFAULT) -> str:
    """`token` (lowercase) stemmed by its language's Snowball stemmer; as it is for a language without one."""
    stemmer = _STEMMERS.get(language)
    return stemmer.stemWord(token) if stemmer is not None else token


def stop_words(language: str) -> frozenset[str]:
    return FUNCTION_WORDS.get(language, frozenset())


def analyze(text: str, language: str | None = None) -> list[str]:
    """The terms of `text` in order, repeats kept (term frequency matters to BM25): its words lowercased,
    without stop words, stemmed; a run of Chinese, Japanese, Korean, Thai, Lao, Burmese or Khmer as its pairs of
    characters.
    `language`: the text's language code when known (else detected)."""
    return _terms(text, (language or detect(text),))


def analyze_query(query: str, languages: tuple[str, ...] | None = None) -> list[str]:
    """`analyze` for a query, which may say too little to tell its language: each word is then stemmed in
    each language it may be in (`languages`, by default languages.query_languages), a stem given once."""
    return _terms(query, languages or query_languages(query))


def _terms(text: str, languages: tuple[str, ...]) -> list[str]:
    stops = [stop_words(language) for language in languages]
    terms: list[str] = []
    for word in WORD.findall(folded(text)):
        if UNSPACED_RUN.match(word):
            terms += [word[i : i + 2] for i in range(len(word) - 1)] if len(word) > 1 else [word]
        elif not any(word in stop for stop in stops):
            terms += dict.fromkeys(stem(word, language) for language in languages)
    return terms


# The date terms a memory's lexical document also holds (memory_server/ranking/dates.py, `date_terms`): one for each
# day (`day20230507`) and ISO week (`week2023w19`) its content names. They match the same terms of a query
# naming that day or week, but are no words of the text: not counted in its length, not paired with its words.
DATE_TERM = re.compile(r"day\d{8}|week\d{4}w\d{2}")


def is_date_term(term: object) -> bool:
    """Whether `term` is a date term (anything else, e.g. a pair of terms counted as one item, is not)."""
    return isinstance(term, str) and DATE_TERM.fullmatch(term) is not None


def words_only(terms: Sequence[str]) -> list[str]:
    """A document's analysed terms without its date terms."""
    return [t for t in terms if not is_date_term(t)]


def analyzed_text(text: str, language: str | None = None) -> str:
    """The analysed terms joined by spaces: what goes in the FTS5 column (tokenizer `unicode61`)."""
    return " ".join(analyze(text, language))


# Generic BM25 defaults (Lucene's). recall's ranking passes its own tuned values (memory_server.ranking.fusion
# BM25_K1 / BM25_B; measurements: docs/ranking.md).
K1 = 1.2
B = 0.75


class BM25Corpus:
    """BM25 (Lucene-style idf, always positive) over a fixed list of analysed documents.

    Build once per candidate set: `BM25Corpus([analyze(t) for t in texts])`; `score(analyze(query))`
    returns one non-negative float per document (0 where no query term occurs), in document order.
    Repeated query terms count once per occurrence (a term said twice in the query weighs double).
    """

    def __init__(
        self,
        docs: Sequence[Sequence[str] | Mapping[str, float]],
        *,
        k1: float = K1,
        b: float = B,
        delta: float = 0.0,
    ) -> None:
        """`docs`: per document either its analysed terms, or a term -> (possibly fractional) frequency
        mapping (e.g. a document's own terms plus down-weighted context terms, see `term_weights`).
        Document length is the sum of the frequencies. `delta` > 0 gives BM25+ (see `bm25_scores`)."""
        self.k1 = float(k1)
        self.delta = float(delta)
        self.b = float(b)
        self.n_docs = len(docs)
        postings: dict[str, tuple[list[int], list[float]]] = {}
        lengths = np.zeros(self.n_docs, dtype=np.float64)
        for i, doc in enumerate(docs):
            tfs = doc if isinstance(doc, Mapping) else Counter(doc)
            total = 0.0
            for term, tf in tfs.items():
                if tf <= 0:
                    continue
                total += tf
                entry = postings.get(term)
                if entry is None:
                    postings[term] = ([i], [tf])
                else:
                    entry[0].append(i)
                    entry[1].append(tf)
            lengths[i] = total
        self.doc_len = lengths
        self.avgdl = float(lengths.mean()) if self.n_docs and lengths.sum() > 0 else 1.0
        self._postings = {
            t: (np.asarray(ix, dtype=np.intp), np.asarray(tf, dtype=np.float64)) for t, (ix, tf) in postings.items()
        }
        # Per-document length normaliser k1 * (1 - b + b * dl / avgdl).
        self._norm = self.k1 * (1.0 - self.b + self.b * lengths / self.avgdl)

    def idf(self, term: str) -> float:
        """Lucene BM25 idf: ln(1 + (N - df + 0.5) / (df + 0.5)); 0 for a term in no document."""
        p = self._postings.get(term)
        if p is None:
            return 0.0
        df = len(p[0])
        return math.log(1.0 + (self.n_docs - df + 0.5) / (df + 0.5))

    def score(self, query_terms: Iterable[str]) -> np.ndarray:
        scores = np.zeros(self.n_docs, dtype=np.float64)
        for term, qtf in Counter(query_terms).items():
            p = self._postings.get(term)
            if p is None:
                continue
            ix, tf = p
            w = self.idf(term) * qtf
            scores[ix] += w * (tf * (self.k1 + 1.0) / (tf + self._norm[ix]) + self.delta)
        return scores


def term_weights(weighted_docs: Iterable[tuple[Sequence[str], float]]) -> dict[str, float]:
    """Merge analysed term lists with weights into one term -> frequency mapping for `BM25Corpus`:
    e.g. [(own_terms, 1.0), (previous_entry_terms, 0.5)]."""
    out: dict[str, float] = {}
    for terms, w in weighted_docs:
        if w <= 0:
            continue
        for t in terms:
            out[t] = out.get(t, 0.0) + w
    return out


def bm25_core(
    query_items: Mapping[Item, float],
    count: Callable[[Item], np.ndarray | None],
    lengths: np.ndarray,
    *,
    k1: float,
    b: float,
    delta: float,
    context: Sequence[tuple[np.ndarray, float]],
) -> np.ndarray:
    """Shared BM25 loop: `count(item)` -> per-document own frequency of a query item (None = nowhere)."""
    n = len(lengths)

    def with_context(x: np.ndarray) -> np.ndarray:
        out = x.copy()
        for idx, w in context:
            present = idx >= 0
            out[present] += w * x[idx[present]]
        return out

    dl = with_context(lengths)
    avgdl = float(dl.mean()) if dl.sum() > 0 else 1.0
    norm = k1 * (1.0 - b + b * dl / avgdl)
    scores = np.zeros(n, dtype=np.float64)
    for item, qtf in query_items.items():
        own = count(item)
        if own is None or not own.any():
            continue
        tf = with_context(own)
        df = int(np.count_nonzero(tf > 0))
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        # BM25+ (Lv & Zhai 2011): a document containing the term gets at least idf * delta, however long
        # it is -- long (or context-expanded) documents are not pushed below short ones that lack the term.
        scores += qtf * idf * np.where(tf > 0, tf * (k1 + 1.0) / (tf + norm) + delta, 0.0)
    return scores


def bm25_scores(
    query_terms: Sequence[str],
    docs: Sequence[Sequence[str]],
    *,
    k1: float = K1,
    b: float = B,
    delta: float = 0.0,
    context: Sequence[tuple[np.ndarray, float]] = (),
    extra_terms: Mapping[str, float] | None = None,
) -> np.ndarray:
    """BM25 of a query against each document, computed only for the query's terms (no index is built,
    so it is cheap to call per query over a candidate set of a few thousand).

    `extra_terms`: term -> weight added to the query's own term counts (query expansion), so an added
    term at weight 0.3 counts 0.3 of a query term.

    `context`: (index array, weight) pairs; document i's term frequencies are its own counts plus
    weight x the counts of document index[i] (index -1 = none), and its length likewise. The result is
    identical to `BM25Corpus([term_weights([(docs[i], 1)] + [(docs[idx[i]], w) ...])]).score(query_terms)`.
    `delta` > 0 gives BM25+ (every matching document gets at least idf * delta per query term).
    A document's length counts its words, not its date terms (DATE_TERM).
    """
    n = len(docs)
    if n == 0:
        return np.zeros(0)
    lengths = np.fromiter((len(words_only(d)) for d in docs), dtype=np.float64, count=n)

    query_items: dict[str, float] = dict(Counter(query_terms))
    for term, weight in (extra_terms or {}).items():
        query_items[term] = query_items.get(term, 0.0) + weight
    found = _occurrences(docs, query_items)

    def count(term: str) -> np.ndarray | None:
        where = found.get(term)
        if not where:
            return None
        return np.bincount(np.asarray(where, dtype=np.intp), minlength=n).astype(np.float64)

    return bm25_core(query_items, count, lengths, k1=k1, b=b, delta=delta, context=context)


def _occurrences(docs: Sequence[Sequence[Doc]], terms: Iterable[Doc]) -> dict[Doc, list[int]]:
    """term -> index of the document of each of its occurrences (repeated for repeated terms), for the
    given terms only: one pass over every document's terms, instead of one scan of every document per term."""
    wanted = set(terms)
    found: dict[Doc, list[int]] = {}
    for i, d in enumerate(docs):
        for term in d:
            if term in wanted:
                found.setdefault(term, []).append(i)
    return found


def bigrams(terms: Sequence[str]) -> list[tuple[str, str]]:
    """Adjacent pairs of analysed terms (stop words already removed, so 'support group' and
    'support a group' both give ('support', 'group'))."""
    return list(zip(terms, terms[1:], strict=False))  # each term with the next


def bigram_bm25_scores(
    query_terms: Sequence[str],
    docs: Sequence[Sequence[str]],
    *,
    k1: float = K1,
    b: float = B,
    delta: float = 0.0,
    context: Sequence[tuple[np.ndarray, float]] = (),
) -> np.ndarray:
    """BM25 where the 'terms' are adjacent analysed-term pairs (a phrase / proximity signal): the query's
    bigrams scored against each document's bigrams (pairs holding a date term left out), with the same `context`
    and `delta` semantics as `bm25_scores` (document length = its number of bigrams). Identical to
    `bm25_scores(bigrams(query_terms), [bigrams(d) for d in docs], ...)`, but only the documents holding
    both words of a query pair are scanned."""
    n = len(docs)
    pairs = Counter(pair for pair in bigrams(query_terms) if not (is_date_term(pair[0]) or is_date_term(pair[1])))
    if n == 0 or not pairs:
        return np.zeros(n)
    lengths = np.fromiter((max(len(words_only(d)) - 1, 0) for d in docs), dtype=np.float64, count=n)

    holding = _occurrences(docs, (first for first, _ in pairs))

    def count(pair: tuple[str, str]) -> np.ndarray | None:
        first, second = pair
        out = None
        for i in dict.fromkeys(holding.get(first, ())):  # the documents holding the pair's first term
            d = docs[i]
            if second in d:
                # Visit the occurrences of `first` only (index() scans in C) rather than every adjacent pair.
                k, j, last = 0, -1, len(d) - 1
                for _ in range(d.count(first)):
                    j = d.index(first, j + 1)
                    if j < last and d[j + 1] == second:
                        k += 1
                if k:
                    if out is None:
                        out = np.zeros(n, dtype=np.float64)
                    out[i] = k
        return out

    return bm25_core(pairs, count, lengths, k1=k1, b=b, delta=delta, context=context)


def prefetch_terms(doc_freqs: Mapping[str, int], budget: int) -> list[str]:
    """The terms of a query (with their document frequencies) a bounded FTS5 prefetch searches: the rarest,
    taken while their postings add up to at most `budget`, sorted by (frequency, term) so the choice is
    deterministic. Terms in no document are dropped.

    Why: FTS5's bm25() scores every row matching any OR'ed term, so one common term makes a lexical
    prefetch cost grow with the corpus. Common terms carry little idf; rows matching only them are reached
    through the dense prefetch and the neighbours of what it finds."""
    selective: list[str] = []
    total = 0
    for term, df in sorted(doc_freqs.items(), key=lambda item: (item[1], item[0])):
        if df <= 0:
            continue
        if total + df > budget:
            break
        selective.append(term)
        total += df
    return selective


def fts_phrase(term: str) -> str:
    """An analysed term as an FTS5 string literal (terms are \\w+ runs, so a quote cannot occur; doubled
    anyway, as FTS5 escapes it)."""
    return '"' + term.replace('"', '""') + '"'
