"""`memory-server export`: memories and conversation logs as JSON Lines.

The file: one JSON object per line, UTF-8.

    {"kind": "header", "version": 1, "exported_at", "model", "site", "counts": {...}}   (first line)
    {"kind": "site", "site", "index_logs": true}   (a site that indexes its logs)
    {"kind": "conversation", "site", "conversation_id", "index", "bucket"}   (its own indexing choice, bucket)
    {"kind": "memory", "site", "reference", "content", "type", "location", "project", "team", "bucket",
     "tags", "metadata", "provenance", "occurred_at", "created_at", "updated_at"
     [, "supersedes", "superseded_by", "valid_to"]}   (the bracketed fields only when set)
    {"kind": "log_item", "site", "conversation_id", "seq", "recorded_at", "payload"}

It is written from one consistent snapshot of the store (a server may go on appending meanwhile). It never
carries credentials (site secrets, tokens) nor vectors: an import embeds again. Nor the indexed turns of
conversation logs: a site record says the site indexes its logs (a conversation record, what a conversation
chose), and the items are indexed again once imported. Site and conversation records come first, then
memories, in creation order; then each conversation's items in seq order, conversations in order of last
activity, so that `list_conversations` orders them the same way after an import.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import IO, Any

from memory_server.storage.protocols import Snapshot
from memory_server.timestamps import now_rfc3339

FORMAT_VERSION = 1

# Characters JSON leaves raw inside strings but that str.splitlines() and many JSON Lines readers take as
# line breaks. Outside strings they cannot occur, so escaping them keeps every value and one record a line.
_LINE_SAFE = str.maketrans({"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def header(snapshot: Snapshot, *, site: str | None, model: str | None) -> dict[str, Any]:
    return {
        "kind": "header",
        "version": FORMAT_VERSION,
        "exported_at": now_rfc3339(),
        "model": model,
        "site": site,
        "counts": snapshot.counts,
    }


def total(snapshot: Snapshot) -> int:
    return snapshot.counts["memories"] + snapshot.counts["log_items"]


def settings_lines(snapshot: Snapshot) -> Iterator[str]:
    """The site records (the sites that index their logs) and the conversation records (a conversation's own
    indexing choice and bucket)."""
    for site in snapshot.indexing_sites():
        yield dumps({"kind": "site", "site": site, "index_logs": True})
    for site, conversation_id, index, bucket in snapshot.conversation_choices():
        yield dumps(
            {"kind": "conversation", "site": site, "conversation_id": conversation_id, "index": index, "bucket": bucket}
        )


def lines(snapshot: Snapshot) -> Iterator[str]:
    """Every memory and log item as one line of JSON (without the newline): memories, then log items."""
    for record in snapshot.memories():
        yield dumps({"kind": "memory", **record}).translate(_LINE_SAFE)
    for site, conversation_id, (seq, recorded_at, payload) in snapshot.log_items():
        head = dumps(
            {
                "kind": "log_item",
                "site": site,
                "conversation_id": conversation_id,
                "seq": seq,
                "recorded_at": recorded_at,
            }
        )
        # The stored text is already compact JSON (keys in their appended order): spliced in as is.
        yield f'{head[:-1]},"payload":{payload}}}'.translate(_LINE_SAFE)


def write_export(
    snapshot: Snapshot,
    out: IO[str],
    *,
    site: str | None,
    model: str | None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write the header, the site records and every memory and log item to `out`; return the number of
    memories and log items."""
    out.write(dumps(header(snapshot, site=site, model=model)) + "\n")
    for line in settings_lines(snapshot):
        out.write(line + "\n")
    written = 0
    for line in lines(snapshot):
        out.write(line + "\n")
        written += 1
        if progress is not None and written % 500 == 0:
            progress(500)
    if progress is not None:
        progress(written % 500)
    return written
