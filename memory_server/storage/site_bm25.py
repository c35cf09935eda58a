"""FTS5's bm25() in Python, and the lexical prefetch of one site ranked by that site's statistics alone.

SQLite ranks a prefetch with FTS5's `bm25()` (`unicode61 remove_diacritics 2` tokens of each memory's analysed
terms: memory_server/storage/fts5.py). `bm25_order` computes the same doubles: k1 1.2, b 0.75, idf ln((N - n +
0.5) / (n + 0.5)) raised to 1e-6 when not positive, each phrase's frequency its count of instances in the row,
terms summed in query order, ties in id order (FTS5 yields rowids ascending and SQLite's sorter keeps that
order), so PostgreSQL ranks as SQLite does. FTS5 takes N, the average length and each phrase's rows over the
whole table; taken over one site's lexical rows instead (`site_bm25_order`), a site ranks as it would alone in
the store, whatever other sites hold: each backend reads the site's rows holding any query phrase, and its row
and token totals, and ranks them here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

K1, B = 1.2, 0.75
MIN_IDF = 1e-6


def instances(tokens: Sequence[str], phrase: Sequence[str]) -> int:
    """How many times `phrase` (FTS5 tokens) occurs in `tokens`, as FTS5 counts a phrase's instances."""
    if not phrase:
        return 0
    if len(phrase) == 1:
        return tokens.count(phrase[0])
    width, wanted = len(phrase), list(phrase)
    return sum(1 for i in range(len(tokens) - width + 1) if list(tokens[i : i + width]) == wanted)


def idf(rows: int, hits: int) -> float:
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else MIN_IDF


def bm25(freqs: Sequence[int], idfs: Sequence[float], size: int, avgdl: float) -> float:
    """FTS5's score of one row (positive; bm25() returns its negation)."""
    score = 0.0
    for freq, weight in zip(freqs, idfs, strict=True):
        f = float(freq)
        score += weight * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * float(size) / avgdl)))
    return score


def bm25_order(
    rows: Mapping[int, Sequence[str]],
    phrases: Sequence[Sequence[str]],
    hits: Sequence[int],
    totals: tuple[int, int],
    limit: int,
) -> list[int]:
    """The ids of `rows` (id -> tokens) holding any phrase, best first by bm25(), at most `limit` (negative:
    all). `hits[i]`: how many rows of the whole table hold phrase i; `totals`: (rows, tokens) of the table."""
    count, tokens = totals
    if count <= 0:
        return []
    avgdl = float(tokens) / float(count)
    idfs = [idf(count, n) for n in hits]
    scored: list[tuple[float, int]] = []
    for row_id, row_tokens in rows.items():
        freqs = [instances(row_tokens, phrase) for phrase in phrases]
        if any(freqs):
            scored.append((-bm25(freqs, idfs, len(row_tokens), avgdl), row_id))
    scored.sort()
    return [row_id for _, row_id in (scored if limit < 0 else scored[:limit])]


class SiteRow(NamedTuple):
    """One of the site's lexical rows holding a query phrase: its FTS5 tokens, and whether the scope sees it
    (a row the scope does not see still counts in the site's statistics)."""

    id: int
    tokens: list[str]
    visible: bool


def site_bm25_order(
    rows: Sequence[SiteRow], phrases: Sequence[Sequence[str]], totals: tuple[int, int], limit: int
) -> list[int]:
    """The visible rows best first by bm25() over the site's statistics: `totals` its (rows, tokens), each
    phrase's rows counted among `rows`, which are all the site's rows holding any phrase."""
    hits = [sum(1 for row in rows if instances(row.tokens, phrase)) for phrase in phrases]
    return bm25_order({row.id: row.tokens for row in rows if row.visible}, phrases, hits, totals, limit)
