"""The lexical prefetch of one site ranked by that site's statistics alone, on either backend.

FTS5's bm25() (memory_server/storage/postgres/lexicon.py computes the same doubles) takes its row count, average
length and each phrase's rows over the whole table. Taken over the site's lexical rows instead, a site ranks
as it would alone in the store, whatever other sites hold: each backend reads the site's rows holding any
query phrase, and its row and token totals, and ranks them here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from memory_server.storage.postgres.lexicon import bm25_order, instances


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
