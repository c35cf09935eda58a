"""Changing a deployment's embedding model: every memory embedded again, in the background.

The vector index records the model it was built with. When the configured model is another, start-up
empties the index for the new model, marks every memory for indexing and writes a marker beside the index
(`reembedding.json`: from, to, how many). The outbox (or, on replicas, the follower's rebuild) then embeds
the memories again a batch at a time, storing each new vector with its memory so that another replica's
index reuses it. Until the index holds every memory again, recall ranks by words alone over all memories and
search_memory looks among those already embedded again, and both say so in their answer. The marker is
removed when nothing is left, so a restart in between carries on where it was.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger("memory_server.memories")

MARKER_FILE = "reembedding.json"
COUNT_EVERY_S = 1.0


@dataclass(frozen=True)
class Marker:
    source: str  # the model the index was built with
    target: str  # the configured model
    total: int  # memories to embed again, when it began
    started: float  # epoch seconds


@dataclass(frozen=True)
class Progress:
    source: str
    target: str
    total: int
    remaining: int
    seconds: float

    def notice(self) -> str:
        done = max(0, self.total - self.remaining)
        return (
            f"memories are being embedded again with {self.target} ({done:,} of {self.total:,} done): "
            "recall ranks by words alone and search_memory sees only the memories done so far"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "from": self.source,
            "to": self.target,
            "total": self.total,
            "done": max(0, self.total - self.remaining),
            "seconds": round(self.seconds, 1),
        }


class Reembedding:
    """The marker and what is left; `remaining()` counts the memories not back in the index yet."""

    def __init__(self, directory: Path, remaining: Callable[[], int]) -> None:
        self.path = directory / MARKER_FILE
        self._remaining = remaining
        self._lock = threading.Lock()
        self._counted = (float("-inf"), 0)
        self.marker = read_marker(self.path)

    @property
    def active(self) -> bool:
        return self.marker is not None

    def begin(self, source: str, target: str, total: int) -> None:
        with self._lock:
            self.marker = Marker(source, target, total, time.time())
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(asdict(self.marker)))
            os.replace(tmp, self.path)
        log.warning(
            "the vector index was built with %s and the configured model is %s: embedding %d memories "
            "again in the background; recall ranks by words alone until it is done",
            source,
            target,
            total,
        )

    def resume(self, target: str) -> None:
        """At start-up: a marker for another target (the model changed again meanwhile) is begun anew by the
        caller; one for this target carries on."""
        if self.marker is not None and self.marker.target != target:
            self.finish(quiet=True)

    def progress(self) -> Progress | None:
        marker = self.marker
        if marker is None:
            return None
        return Progress(
            marker.source, marker.target, marker.total, min(marker.total, self._left()), time.time() - marker.started
        )

    def notice(self) -> str | None:
        progress = self.progress()
        return progress.notice() if progress is not None else None

    def _left(self) -> int:
        """The remaining count, read at most once a second (every answer states it while this lasts)."""
        now = time.monotonic()
        if now - self._counted[0] >= COUNT_EVERY_S:
            self._counted = (now, self._remaining())
        return self._counted[1]

    def check_done(self) -> bool:
        """Remove the marker once nothing is left; True when it was removed now."""
        if self.marker is None or self._remaining() > 0:
            return False
        self.finish()
        return True

    def finish(self, *, quiet: bool = False) -> None:
        with self._lock:
            marker, self.marker = self.marker, None
            self.path.unlink(missing_ok=True)
        if marker is not None and not quiet:
            log.info(
                "embedded %d memories again with %s in %.0f s",
                marker.total,
                marker.target,
                time.time() - marker.started,
            )


def read_marker(path: Path) -> Marker | None:
    try:
        raw = json.loads(path.read_text())
        return Marker(
            source=str(raw["source"]), target=str(raw["target"]), total=int(raw["total"]), started=float(raw["started"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
