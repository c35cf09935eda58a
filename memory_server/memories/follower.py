"""A server's own embedded index kept in step with an authority other servers write too.

Several replicas on one PostgreSQL each hold a Qdrant Edge index of their own. The outbox cannot serve them
(`memories.indexed` says whether *an* index has a row, not which), so each replica follows the authority's
change feed instead: every insert, change and deletion of a memory, numbered in commit order. A replica
applies the changes after the last one its index holds — after each of its own writes (so it reads its own
writes at once) and every FOLLOW_INTERVAL_S (so it sees the others' within about that long).

How far the index got is kept beside it (`follow.json`: the authority's identity, the model, the last change
applied and when it was made), written only after the index is flushed, so it never claims more than the index
holds; applying a change twice is harmless. A missing or foreign state file, a new index, a feed pruned past
that point, or an authority that no longer has that change as it was (a PostgreSQL failover to a standby
that had not received it: the number is behind, or was given to a later change) means a rebuild from the
whole authority.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
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


@dataclass(frozen=True)
class FollowState:
    authority: str
    model: str
    mark: int
    mark_at: float | None = None  # when change `mark` was made (None: not known, after a rebuild)


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
        self.mark = 0
        self.mark_at: float | None = None
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
        self.mark = state.mark if usable and state is not None else 0
        self.mark_at = state.mark_at if usable and state is not None else None

    def lag(self) -> int:
        """Changes of the authority this index does not hold yet (all of them before a rebuild)."""
        newest = self.store.change_mark()
        return newest if self.needs_rebuild else max(0, newest - self.mark)

    # The write path's IndexSync: after each commit, apply everything up to it (this server's write
    # included). The commit stands whatever the index does; a failure is retried by the follow loop.
    def written(self, ids: Sequence[int]) -> None:
        self._catch_up_after_commit()

    def deleted(self, ids: Sequence[int]) -> None:
        self._catch_up_after_commit()

    def _catch_up_after_commit(self) -> None:
        if self.needs_rebuild:  # a rebuild under way (minutes, when the model changed) applies it afterwards
            return
        try:
            self.catch_up()
        except Exception as exc:
            self._throttle.log(
                logging.WARNING,
                "index follow",
                "the index could not apply the latest changes (retried in the background): %s",
                exc,
                exc_info=not isinstance(exc, IndexUnavailable),
            )

    def catch_up(self) -> int:
        """Apply the changes after the last one applied (or rebuild); returns how many memories changed."""
        with self._lock:
            if self.needs_rebuild:
                return self._rebuild()
            done = 0
            while True:
                page = self.store.changes(self.mark, CHANGES_PAGE)
                if page.truncated:
                    log.warning("the change feed no longer reaches change %d: rebuilding the index", self.mark)
                    return done + self._rebuild()
                if self.mark_at is not None and page.after_at is not None and page.after_at != self.mark_at:
                    log.warning(
                        "the authority's change %d is not the one this index applied (a failover lost "
                        "changes): rebuilding the index",
                        self.mark,
                    )
                    return done + self._rebuild()
                if page.deleted:
                    self.outbox.index.delete(page.deleted)
                rows = self.store.index_rows(page.changed) if page.changed else []
                self._apply(rows)
                done += len(page.changed) + len(page.deleted)
                if page.mark != self.mark:
                    self._advance(page.mark, page.mark_at)
                if not page.more:
                    return done

    def rebuild(self) -> int:
        with self._lock:
            return self._rebuild()

    def _rebuild(self) -> int:
        # The mark is taken first: a change committed while the rows are read is applied again afterwards.
        mark = self.store.change_mark()
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
        self._advance(mark, None)
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

    def _advance(self, mark: int, mark_at: float | None) -> None:
        self.outbox.index.flush()  # the state may claim only what the index holds on disk
        self.mark, self.mark_at = mark, mark_at
        _write(self.state_path, FollowState(self.authority, self.outbox.embedder.name, mark, mark_at))


def read_state(path: Path) -> FollowState | None:
    """The state beside an index, or None when missing or unreadable."""
    try:
        raw = json.loads(path.read_text())
        at = raw.get("mark_at")
        return FollowState(
            authority=str(raw["authority"]),
            model=str(raw["model"]),
            mark=int(raw["mark"]),
            mark_at=None if at is None else float(at),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing, or torn by a power cut: a rebuild puts it right


def _write(path: Path, state: FollowState) -> None:
    # No fsync: a state older than the index only means changes applied twice, which is harmless.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(state)))
    os.replace(tmp, path)
