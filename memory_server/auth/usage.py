"""When each token and OAuth grant was last used, for the people who manage them (the console's Access page,
`token list`). Recorded off the request path, on a thread of its own, and at most once a minute per
credential and server: a busy agent costs one small write a minute, never a write per request, and a
request never waits for one."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from memory_server.storage.protocols import OAuthStore, SiteStore
from memory_server.timestamps import now_rfc3339

log = logging.getLogger("memory_server.auth")

RECORD_EVERY_S = 60.0  # how stale a shown "last used" may be
TRACKED = 10_000  # credentials remembered as recorded recently (past it, the memory starts again)
TOKEN, GRANT = "token", "grant"


class UsageLog:
    def __init__(self, sites: SiteStore, oauth: OAuthStore | None) -> None:
        self._sites = sites
        self._oauth = oauth
        self._recorded: dict[tuple[str, str], float] = {}  # (kind, id) -> monotonic time of the last write
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage")
        self._closed = False

    def token_used(self, token_id: str) -> None:
        self._used(TOKEN, token_id)

    def grant_used(self, grant_id: str) -> None:
        self._used(GRANT, grant_id)

    def _used(self, kind: str, credential: str) -> None:
        """Never blocks: called on the event loop by a sign-in settled there."""
        now = time.monotonic()
        key = (kind, credential)
        with self._lock:
            last = self._recorded.get(key)
            if self._closed or (last is not None and now - last < RECORD_EVERY_S):
                return
            if len(self._recorded) >= TRACKED:
                self._recorded.clear()
            self._recorded[key] = now
            self._writer.submit(self._write, key, now_rfc3339())  # under the lock: never after close()

    def _write(self, key: tuple[str, str], at: str) -> None:
        kind, credential = key
        try:
            if kind == TOKEN:
                self._sites.mark_token_used(credential, at)
            elif self._oauth is not None:
                self._oauth.mark_grant_used(credential, at)
        except Exception as exc:  # a busy or closing store: the next use records it
            log.debug("could not record the use of %s %s: %s", kind, credential, exc)
            with self._lock:
                self._recorded.pop(key, None)

    def close(self) -> None:
        """Write what is pending, then take no more (before the store closes)."""
        with self._lock:
            self._closed = True
        self._writer.shutdown(wait=True)
