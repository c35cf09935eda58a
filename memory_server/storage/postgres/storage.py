"""The PostgreSQL authority: one database shared by any number of servers, its stores, its own operations."""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout

from memory_server.storage.backends import POSTGRES
from memory_server.storage.postgres.candidates import PostgresCandidateStore
from memory_server.storage.postgres.database import RETRY_BUDGET_S, Database, connect
from memory_server.storage.postgres.errors import first_line, postgres_failure, refusal_on_connect, unreachable
from memory_server.storage.postgres.logs import PostgresLogStore
from memory_server.storage.postgres.memories import PostgresMemoryStore
from memory_server.storage.postgres.oauth import PostgresOAuthStore
from memory_server.storage.postgres.outbox import PostgresOutboxStore
from memory_server.storage.postgres.schema import migrate
from memory_server.storage.postgres.sites import PostgresSiteStore
from memory_server.storage.postgres.snapshot import PostgresSnapshot
from memory_server.storage.postgres.words import PostgresWordStore

PROBE = "SELECT current_setting('synchronous_commit'), pg_is_in_recovery(), current_setting('transaction_read_only')"


def open_database(url: str) -> None:
    """Bring the schema up to date (safe while other servers do the same: see schema.migrate)."""
    try:
        conn = connect(url)
    except psycopg.Error as exc:
        raise unreachable(exc, 0) from exc
    try:
        migrate(conn)
    except psycopg.Error as exc:
        raise (postgres_failure(exc) or exc) from exc
    finally:
        conn.close()


class PostgresStorage:
    backend = POSTGRES
    # PostgreSQL checks its own pages (checksums, WAL): there is no file-level check to defer.
    integrity_unchecked = False

    def __init__(self, url: str, *, retry_budget_s: float = RETRY_BUDGET_S) -> None:
        self.url = url
        open_database(url)
        self._db = Database(url, retry_budget_s=retry_budget_s)
        self.health = self._db.health
        self.logs = PostgresLogStore(self._db)
        self.sites = PostgresSiteStore(self._db)
        self.oauth = PostgresOAuthStore(self._db)
        self.memories = PostgresMemoryStore(self._db)
        self.outbox = PostgresOutboxStore(self._db)
        self.candidates = PostgresCandidateStore(self._db)
        self.words = PostgresWordStore(self._db)
        row = self._db.read(lambda conn: conn.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone())
        self.identity = str(row[0]) if row else ""

    def check_integrity(self) -> str | None:
        """A cheap sanity read of every table the server needs; PostgreSQL verifies pages as it reads them."""
        self._db.read(
            lambda conn: conn.execute(
                "SELECT (SELECT count(*) FROM sites), (SELECT count(*) FROM memory_lexicon)"
            ).fetchone()
        )
        return None

    def snapshot(self, site: str | None) -> PostgresSnapshot:
        return PostgresSnapshot(self.url, site=site)

    def probe(self) -> list[str]:
        """The database answers, on a writable primary, with durable commits; no write failed for lack of
        space and no damaged page was met since."""
        reasons: list[str] = []
        try:
            row = self._db.read(lambda conn: conn.execute(PROBE).fetchone())
        except Exception as exc:
            refused = refusal_on_connect(self.url) if isinstance(exc.__cause__, PoolTimeout) else None
            reasons.append(f"postgres: {first_line(refused or exc)}")
        else:
            if row is not None and row[0] != "on":
                reasons.append(f"postgres: synchronous_commit is {row[0]}, so acknowledged writes could be lost")
            if row is not None and (row[1] or row[2] == "on"):
                reasons.append("postgres: the database is read-only (a standby, or default_transaction_read_only)")
        return reasons + self.health.problems()

    def close(self) -> None:
        self._db.close()
