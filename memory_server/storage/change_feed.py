"""The change feed of memories, numbered per site, read the same way on both backends.

Each site's changes are numbered 1, 2, ... in commit order by the site's own counter row
(`memory_change_counters`), so no row is written by every site's writes and a reader follows each site from
where it left it. `{m}` stands for the backend's parameter mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory_server.storage.records import ChangePage, collapse_changes

ALL_MARKS = "SELECT site_id, seq FROM memory_change_counters"
# The sites with a change kept since a time: a cheap look at what changed lately (memory_changes_by_time).
RECENT_MARKS = (
    "SELECT c.site_id, c.seq FROM memory_change_counters c"
    " WHERE c.site_id IN (SELECT site_id FROM memory_changes WHERE changed_at >= {m})"
)
SITE_MARK = "SELECT seq FROM memory_change_counters WHERE site_id = {m}"
TOTAL_MARK = "SELECT coalesce(sum(seq), 0) FROM memory_change_counters"
PAGE = (
    "SELECT seq, id, deleted, changed_at FROM memory_changes WHERE site_id = {m} AND seq > {m} ORDER BY seq LIMIT {m}"
)
FIRST = "SELECT min(seq) FROM memory_changes WHERE site_id = {m}"
MADE_AT = "SELECT changed_at FROM memory_changes WHERE site_id = {m} AND seq = {m}"


def sql(text: str, mark: str) -> str:
    return text.replace("{m}", mark)


def change_page(rows: Sequence[Sequence[Any]], first: Any, newest: Any, at: Any, after: int, limit: int) -> ChangePage:
    """A site's page of changes after `after` from the rows read in one snapshot: the page's (seq, id,
    deleted, changed_at) rows, the site's oldest kept and newest change numbers, and when change `after` was
    made. A numbering behind `after` means the store lost changes a reader had seen (a failover to a lagging
    standby); changes after `after` pruned mean the same to the reader: only a rebuild catches up."""
    mark = int(newest) if newest is not None else 0
    truncated = (after < mark and (first is None or int(first) > after + 1)) or after > mark
    return collapse_changes(
        [(int(r[0]), int(r[1]), bool(r[2]), float(r[3])) for r in rows],
        after,
        limit,
        truncated,
        None if at is None else float(at),
    )
