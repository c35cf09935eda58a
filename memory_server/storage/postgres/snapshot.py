"""A consistent read-only view of the whole database (or one site), for export.

One REPEATABLE READ, READ ONLY transaction on a connection of its own: every read sees the database as it
was at the first one, while servers go on appending. Memories come in creation (id) order; then each
conversation's items in seq order, conversations in order of last activity, as on SQLite (one being deleted
is left out, with its items). Rows are streamed
through server-side cursors, so an export of any size holds a page at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import IsolationLevel
from psycopg.rows import TupleRow

from memory_server.errors import NotFound, Unavailable
from memory_server.storage.memory_rows import EXPORTED_COLUMNS, EXPORTED_FIELDS, exported
from memory_server.storage.postgres.errors import postgres_failure, unreachable
from memory_server.storage.postgres.schema import schema_version
from memory_server.storage.records import RawItem
from memory_server.timestamps import now_rfc3339

PAGE = 1000


class PostgresSnapshot:
    def __init__(self, url: str, *, site: str | None = None) -> None:
        try:
            self._conn: psycopg.Connection[TupleRow] = psycopg.connect(url, connect_timeout=10)
        except psycopg.Error as exc:
            raise unreachable(exc, 0) from exc
        try:
            self._conn.isolation_level = IsolationLevel.REPEATABLE_READ
            self._conn.read_only = True
            self._conn.deferrable = True
            self._at = now_rfc3339()  # memories expired by then are left out, as every read leaves them out
            if schema_version(self._conn) is None:
                raise NotFound("this PostgreSQL database has no memory-server data: is MEMORY_DATABASE_URL right?")
            self._site_id: int | None = None
            if site is not None:
                row = self._conn.execute("SELECT id FROM sites WHERE name = %s", [site]).fetchone()
                if row is None:
                    raise NotFound(f"no site named {site!r}")
                self._site_id = int(row[0])
            self.counts = self._counts()
        except psycopg.Error as exc:
            self.close()
            raise _failure(exc) from exc
        except BaseException:
            self.close()
            raise

    def _where(self, alias: str, *, memories: bool = False, site_key: str = "site_id") -> tuple[str, list[Any]]:
        clauses: list[str] = [f"{alias}.{site_key} = %s"] if self._site_id is not None else []
        args: list[Any] = [self._site_id] if self._site_id is not None else []
        if memories:  # indexed turns are not exported: an import indexes its log items again
            clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > %s) AND {alias}.kind = 'memory'")
            args.append(self._at)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), args

    def _counts(self) -> dict[str, int]:
        """What the export holds: conversations being deleted, and their items, are left out."""
        counts = {name: self._count(name) for name in ("memories", "conversations", "log_items")}
        where, args = self._where("c")
        marked = " AND c.deleting" if where else " WHERE c.deleting"
        row = self._conn.execute(
            "SELECT count(*), coalesce(sum((SELECT count(*) FROM log_items t WHERE t.site_id = c.site_id"
            f" AND t.conversation_id = c.conversation_id)), 0) FROM conversations c{where}{marked}",
            args,
        ).fetchone()
        if row is not None:
            counts["conversations"] -= int(row[0])
            counts["log_items"] -= int(row[1])
        return counts

    def _count(self, table: str) -> int:
        where, args = self._where("t", memories=table == "memories")
        row = self._conn.execute(f"SELECT count(*) FROM {table} t{where}", args).fetchone()
        return int(row[0]) if row else 0

    def memories(self) -> Iterator[dict[str, Any]]:
        """Each memory's public fields and its site's name, in creation order."""
        where, args = self._where("m", memories=True)
        sql = f"SELECT {EXPORTED_COLUMNS} FROM memories m JOIN sites s ON s.id = m.site_id{where} ORDER BY m.id"
        for row in self._stream("memories", sql, args):
            yield exported(dict(zip(("site", *EXPORTED_FIELDS), row, strict=True)))

    def indexing_sites(self) -> list[str]:
        """The names of the sites that index their logs."""
        where, args = self._where("s", site_key="id")
        try:
            rows = self._conn.execute(
                f"SELECT s.name FROM sites s{where}{' AND' if where else ' WHERE'} s.index_logs ORDER BY s.name", args
            ).fetchall()
        except psycopg.Error as exc:
            raise _failure(exc) from exc
        return [str(row[0]) for row in rows]

    def conversation_choices(self) -> list[tuple[str, str, bool | None, str | None]]:
        where, args = self._where("c")
        try:
            rows = self._conn.execute(
                "SELECT s.name, c.conversation_id, c.index_choice, c.bucket FROM conversations c JOIN sites s"
                f" ON s.id = c.site_id{where}{' AND' if where else ' WHERE'} NOT c.deleting"
                " AND (c.index_choice IS NOT NULL OR c.bucket IS NOT NULL) ORDER BY c.site_id, c.conversation_id",
                args,
            ).fetchall()
        except psycopg.Error as exc:
            raise _failure(exc) from exc
        return [(str(r[0]), str(r[1]), r[2], None if r[3] is None else str(r[3])) for r in rows]

    def log_items(self) -> Iterator[tuple[str, str, RawItem]]:
        """(site, conversation_id, (seq, recorded_at, payload text as stored)) per item."""
        where, args = self._where("c")
        try:
            conversations = self._conn.execute(
                "SELECT c.site_id, s.name, c.conversation_id FROM conversations c JOIN sites s ON s.id = c.site_id"
                f"{where}{' AND' if where else ' WHERE'} NOT c.deleting"
                " ORDER BY c.site_id, c.last_activity_us, c.conversation_id",
                args,
            ).fetchall()
        except psycopg.Error as exc:
            raise _failure(exc) from exc
        for site_id, site, conversation_id in conversations:
            for seq, recorded_at, payload in self._stream(
                "log_items",
                "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = %s"
                " AND conversation_id = %s ORDER BY seq",
                [site_id, conversation_id],
            ):
                yield str(site), str(conversation_id), (int(seq), str(recorded_at), str(payload))

    def _stream(self, name: str, sql: str, args: list[Any]) -> Iterator[tuple[Any, ...]]:
        try:
            with self._conn.cursor(name=f"export_{name}") as cursor:
                cursor.itersize = PAGE
                cursor.execute(sql, args)
                yield from cursor
        except psycopg.Error as exc:
            raise _failure(exc) from exc

    def close(self) -> None:
        if not self._conn.closed:
            try:
                self._conn.rollback()
            except psycopg.Error:
                pass  # the connection is gone; nothing was written
            self._conn.close()


def _failure(exc: psycopg.Error) -> Exception:
    return postgres_failure(exc) or Unavailable(f"PostgreSQL failed the export: {exc}")
