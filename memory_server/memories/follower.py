"""A server's own embedded index kept in step with an authority other servers write too.

Several replicas on one PostgreSQL each hold a Qdrant Edge index of their own. The outbox cannot serve them
(`memories.indexed` says whether *an* index has a row, not which), so each replica follows the authority's
change feed instead: every insert, change and deletion of a memory, numbered per site in commit order. A
replica applies each site's changes after the last one its index holds — after each of its own writes (so it
reads its own writes at once) and every FOLLOW_INTERVAL_S (so it sees the others' within about that long).
Which sites changed is asked of the changes made lately (since the last look, less CLOCK_SLACK_S for a
transaction committed a little after its change was numbered), and of every site's counter at start and
every SWEEP_S.

How far the index got is kept beside it (`follow.json`: the authority's identity, the model, the last change
applied of each site and when it was made), written only after the index is flushed, so it never claims more
than the index holds; applying a change twice is harmless. A missing or foreign state file, a new index, a
feed pruned past that point, or an authority that no longer has that change as it was (a PostgreSQL failover
to a standby that had not received it: the number is behind, or was given to a later change) means a rebuild
from the whole authority.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memory_server.index.base import IndexUnavailable, batched
from memory_server.logging_setup import Throttle
from memory_server.memories.outbox import Outbox
from memory_server.ranking.fusion import document_text
from memory_server.retrieval.vocabulary import WordVectors
from memory_server.storage.protocols import OutboxStore, WordStore
from memory_server.storage.records import IndexRow

log = logging.getLogger("memory_server.memories")

FOLLOW_FILE = "follow.json"
FOLLOW_INTERVAL_S = 0.5
CHANGES_PAGE = 500
REBUILD_PAGE = 1000
# Changes are kept this long: a replica away for longer rebuilds its index when it comes back.
CHANGE_RETENTION_S = 7 * 24 * 3600.0
# Every site's counter is read this often; in between, only the sites with changes made since the last look
# (less CLOCK_SLACK_S: a change is numbered a moment before its transaction commits).
SWEEP_S = 30.0
CLOCK_SLACK_S = 1.0


@dataclass(frozen=True)
class FollowState:
    authority: str
    model: str
    marks: dict[int, int] = field(default_factory=dict)  # site -> its last change applied
    # site -> when that change was made (absent: not known, after a rebuild)
    marks_at: dict[int, float] = field(default_factory=dict)

    @property
    def mark(self) -> int:
        """How many changes the index holds, of every site (each site's changes are numbered from 1)."""
        return sum(self.marks.values())


class IndexFollower:
    def __init__(
        self,
        outbox: Outbox,
        store: OutboxStore,
        words: WordVectors,
        word_store: WordStore,
        *,
        authority: str,
        state_path: Path,
    ) -> None:
        self.outbox = outbox
        self.store = store
        self.words = words
        self.word_store = word_store
        self.authority = authority
        self.state_path = state_path
        self.marks: dict[int, int] = {}
        self.marks_at: dict[int, float] = {}
        self.looked_at: float | None = None  # the store's clock at the last look at what changed
        self.swept = 0.0  # time.monotonic() of the last look at every site
        self.needs_rebuild = True
        self.rebuilt = 0  # memories the rebuild under way has put in the index
        self._lock = threading.Lock()  # one catch-up at a time: request threads and the follow loop
        self._throttle = Throttle(log)

    def start(self, *, new_index: bool) -> None:
        """Where to resume: the saved state if it belongs to this index, authority and model."""
        state = read_state(self.state_path)
        usable = (
            not new_index
            and state is not None
            and state.authority == self.authority
            and state.model == self.outbox.embedder.name
        )
        self.needs_rebuild = not usable
        self.marks = dict(state.marks) if usable and state is not None else {}
        self.marks_at = dict(state.marks_at) if usable and state is not None else {}
        self.looked_at = None

    @property
    def mark(self) -> int:
        """How many changes the index holds, of every site."""
        return sum(self.marks.values())

    def lag(self) -> int:
        """Changes of the authority this index does not hold yet (all of them before a rebuild)."""
        newest, _ = self.store.change_marks()
        if self.needs_rebuild:
            return sum(newest.values())
        return sum(max(0, seq - self.marks.get(site_id, 0)) for site_id, seq in newest.items())

    # The write path's IndexSync: after each commit, apply everything up to it (this server's write
    # included): the written memories' sites, or after a deletion every site changed lately. The commit
    # stands whatever the index does; a failure is retried by the follow loop.
    def written(self, ids: Sequence[int]) -> None:
        self._catch_up_after_commit(self.store.sites_of(ids) if ids else set())

    def deleted(self, ids: Sequence[int]) -> None:
        self._catch_up_after_commit(None)

    def _catch_up_after_commit(self, sites: set[int] | None) -> None:
        if self.needs_rebuild:  # a rebuild under way (minutes, when the model changed) applies it afterwards
            return
        try:
            self.catch_up(sites)
        except Exception as exc:
            self._throttle.log(
                logging.WARNING,
                "index follow",
                "the index could not apply the latest changes (retried in the background): %s",
                exc,
                exc_info=not isinstance(exc, IndexUnavailable),
            )

    def catch_up(self, sites: set[int] | None = None) -> int:
        """Apply the changes after the last one applied of each site (or rebuild): of `sites`, or of those
        changed lately; returns how many memories changed."""
        with self._lock:
            if self.needs_rebuild:
                return self._rebuild()
            clock = self.looked_at
            if sites is None:
                sweep = self.looked_at is None or time.monotonic() - self.swept >= SWEEP_S
                since = None if sweep or self.looked_at is None else self.looked_at - CLOCK_SLACK_S
                newest, clock = self.store.change_marks(since)
                if sweep:
                    self.swept = time.monotonic()
                sites = {site_id for site_id, seq in newest.items() if seq != self.marks.get(site_id, 0)}
            done, before = 0, dict(self.marks)
            for site_id in sorted(sites):
                applied = self._catch_up_site(site_id)
                if applied is None:
                    return done + self._rebuild()
                done += applied
            if self.marks != before:
                self._save()
            self.looked_at = clock
            return done

    def _catch_up_site(self, site_id: int) -> int | None:
        """Apply the site's changes after the last one applied; None when only a rebuild can catch up."""
        done = 0
        while True:
            mark = self.marks.get(site_id, 0)
            page = self.store.changes(site_id, mark, CHANGES_PAGE)
            if page.truncated:
                log.warning(
                    "the change feed no longer reaches change %d of site %d: rebuilding the index", mark, site_id
                )
                return None
            made_at = self.marks_at.get(site_id)
            if made_at is not None and page.after_at is not None and page.after_at != made_at:
                log.warning(
                    "the authority's change %d of site %d is not the one this index applied (a failover lost "
                    "changes): rebuilding the index",
                    mark,
                    site_id,
                )
                return None
            if page.deleted:
                self.outbox.index.delete(page.deleted)
            self._apply(self.store.index_rows(page.changed) if page.changed else [])
            done += len(page.changed) + len(page.deleted)
            self.marks[site_id] = page.mark
            if page.mark_at is not None:
                self.marks_at[site_id] = page.mark_at
            if not page.more:
                return done

    def rebuild(self) -> int:
        with self._lock:
            return self._rebuild()

    def _rebuild(self) -> int:
        # The marks are taken first: a change committed while the rows are read is applied again afterwards.
        marks, clock = self.store.change_marks()
        self.outbox.index.reset(self.outbox.expected())
        done, after = 0, 0
        self.rebuilt = 0
        while True:
            ids = self.store.ids_after(after, REBUILD_PAGE)
            if not ids:
                break
            for chunk in batched(ids, CHANGES_PAGE):
                self._apply(self.store.index_rows(chunk))
                self.rebuilt += len(chunk)
            done += len(ids)
            after = ids[-1]
        self.needs_rebuild = False
        self.marks, self.marks_at = marks, {}
        self.looked_at, self.swept = clock, time.monotonic()
        self._save()
        if done:
            log.info("built the index from the authority: %d memories", done)
        return done

    def _apply(self, rows: Sequence[IndexRow]) -> None:
        if not rows:
            return
        self.outbox.index.upsert(self.outbox.points(rows))
        self._learn_words(rows)

    def _learn_words(self, rows: Sequence[IndexRow]) -> None:
        """The words another server stored with these memories, for this server's query expansion."""
        by_site: dict[int, list[str]] = {}
        for row in rows:
            by_site.setdefault(row.site_id, []).append(document_text(row.content, row.occurred_at))
        for site_id, documents in by_site.items():
            unseen = self.words.unseen(site_id, documents)
            if unseen:
                self.words.add(site_id, self.word_store.vectors(site_id, unseen, self.outbox.embedder.name))

    def _save(self) -> None:
        self.outbox.index.flush()  # the state may claim only what the index holds on disk
        _write(self.state_path, FollowState(self.authority, self.outbox.embedder.name, self.marks, self.marks_at))


def read_state(path: Path) -> FollowState | None:
    """The state beside an index, or None when missing, unreadable, or of a feed numbered for the whole store."""
    try:
        raw = json.loads(path.read_text())
        return FollowState(
            authority=str(raw["authority"]),
            model=str(raw["model"]),
            marks={int(site_id): int(seq) for site_id, seq in raw["marks"].items()},
            marks_at={int(site_id): float(at) for site_id, at in raw["marks_at"].items()},
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing, or torn by a power cut: a rebuild puts it right


def _write(path: Path, state: FollowState) -> None:
    # No fsync: a state older than the index only means changes applied twice, which is harmless. `mark`,
    # every site's changes added up, is for a reader comparing it with the authority's total.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(
            {
                "authority": state.authority,
                "model": state.model,
                "mark": state.mark,
                "marks": {str(site_id): seq for site_id, seq in state.marks.items()},
                "marks_at": {str(site_id): at for site_id, at in state.marks_at.items()},
            }
        )
    )
    os.replace(tmp, path)
