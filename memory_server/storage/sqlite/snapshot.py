"""A consistent read-only view of the whole database (or one site), for export.

The snapshot is fixed by the first read inside BEGIN (WAL: writers go on, the snapshot keeps seeing the
database as it was). Memories come in creation order; then each conversation's items in seq order,
conversations in order of last activity, so that listing them after an import orders them the same way.
A conversation being deleted is left out, with its items.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memory_server.errors import NotFound
from memory_server.storage.memory_rows import EXPORTED_COLUMNS, exported
from memory_server.storage.records import RawItem
from memory_server.storage.sqlite.connection import connect, naming_damage
from memory_server.timestamps import now_rfc3339


class SqliteSnapshot:
    def __init__(self, db_path: Path, *, site: str | None = None) -> None:
        if not db_path.is_file():
            raise NotFound(f"no database at {db_path}: is --data-dir right?")
        self._path = db_path
        with naming_damage(db_path):
            self._conn = connect(db_path, readonly=True)
        try:
            self._begin(site)
        except BaseException:
            self.close()
            raise

    def _begin(self, site: str | None) -> None:
        with naming_damage(self._path):
            self._conn.execute("BEGIN")
            self._at = now_rfc3339()  # memories expired by then are left out, as every read leaves them out
            self._site_id: int | None = None
            if site is not None:
                row = self._conn.execute("SELECT id FROM sites WHERE name = ?", (site,)).fetchone()
                if row is None:
                    raise NotFound(f"no site named {site!r}")
                self._site_id = int(row[0])
            self.counts = self._counts()

    def _where(self, alias: str, *, memories: bool = False, site_key: str = "site_id") -> tuple[str, tuple[Any, ...]]:
        clauses: list[str] = [f"{alias}.{site_key} = ?"] if self._site_id is not None else []
        args: list[Any] = [self._site_id] if self._site_id is not None else []
        if memories:  # indexed turns are not exported: an import indexes its log items again
            clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?) AND {alias}.kind = 'memory'")
            args.append(self._at)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)

    def _counts(self) -> dict[str, int]:
        """What the export holds: conversations being deleted, and their items, are left out."""
        counts = {name: self._count(name) for name in ("memories", "conversations", "log_items")}
        where, args = self._where("c")
        marked = " AND c.deleting = 1" if where else " WHERE c.deleting = 1"
        hidden, hidden_items = self._conn.execute(
            "SELECT count(*), coalesce(sum((SELECT count(*) FROM log_items t WHERE t.site_id = c.site_id"
            f" AND t.conversation_id = c.conversation_id)), 0) FROM conversations c{where}{marked}",
            args,
        ).fetchone()
        counts["conversations"] -= int(hidden)
        counts["log_items"] -= int(hidden_items)
        return counts

    def _count(self, table: str) -> int:
        where, args = self._where("t", memories=table == "memories")
        return int(self._conn.execute(f"SELECT count(*) FROM {table} t{where}", args).fetchone()[0])

    def memories(self) -> Iterator[dict[str, Any]]:
        """Each memory's public fields and its site's name, in creation order."""
        where, args = self._where("m", memories=True)
        with naming_damage(self._path):
            yield from self._memories(where, args)

    def _memories(self, where: str, args: tuple[Any, ...]) -> Iterator[dict[str, Any]]:
        for row in self._conn.execute(
            f"SELECT {EXPORTED_COLUMNS} FROM memories m JOIN sites s ON s.id = m.site_id{where} ORDER BY m.id", args
        ):
            yield exported(dict(row))

    def indexing_sites(self) -> list[str]:
        """The names of the sites that index their logs."""
        where, args = self._where("s", site_key="id")
        with naming_damage(self._path):
            rows = self._conn.execute(
                f"SELECT s.name FROM sites s{where}{' AND' if where else ' WHERE'} s.index_logs = 1 ORDER BY s.name",
                args,
            ).fetchall()
        return [str(row[0]) for row in rows]

    def conversation_choices(self) -> list[tuple[str, str, bool | None, str | None]]:
        where, args = self._where("c")
        with naming_damage(self._path):
            rows = self._conn.execute(
                "SELECT s.name, c.conversation_id, c.index_choice, c.bucket FROM conversations c JOIN sites s"
                f" ON s.id = c.site_id{where}{' AND' if where else ' WHERE'} c.deleting = 0"
                " AND (c.index_choice IS NOT NULL OR c.bucket IS NOT NULL) ORDER BY c.site_id, c.conversation_id",
                args,
            ).fetchall()
        return [(str(r[0]), str(r[1]), None if r[2] is None else bool(r[2]), r[3]) for r in rows]

    def log_items(self) -> Iterator[tuple[str, str, RawItem]]:
        """(site, conversation_id, (seq, recorded_at, payload text as stored)) per item."""
        with naming_damage(self._path):
            yield from self._log_items()

    def _log_items(self) -> Iterator[tuple[str, str, RawItem]]:
        where, args = self._where("c")
        conversations = self._conn.execute(
            "SELECT c.site_id, s.name, c.conversation_id FROM conversations c JOIN sites s ON s.id = c.site_id"
            f"{where}{' AND' if where else ' WHERE'} c.deleting = 0"
            " ORDER BY c.site_id, c.last_activity_us, c.conversation_id",
            args,
        ).fetchall()
        for site_id, site, conversation_id in conversations:
            for seq, recorded_at, payload in self._conn.execute(
                "SELECT seq, recorded_at, payload FROM log_items WHERE site_id = ? AND conversation_id = ?"
                " ORDER BY seq",
                (site_id, conversation_id),
            ):
                yield site, conversation_id, (seq, recorded_at, payload)

    def close(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        finally:
            self._conn.close()
