"""The PostgreSQL schema can be distributed by `site_id` as it stands (docs/operations.md, "Past one machine"):
every table of a site's data has the site in every unique key and foreign key, and what a memory operation
asks of those tables is about one site. Shown on one server, without a cluster."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memory_server.memories.validation import Filters, read_scope
from memory_server.services import Services, open_services

from tests.conftest import make_settings

# How docs/operations.md places each table on a cluster: a new table must be placed too.
DISTRIBUTED = {
    "memories",
    "memories_fts",
    "memory_lexicon",
    "memory_words",
    "memory_changes",
    "memory_change_counters",
    "conversations",
    "log_items",
    "append_keys",
    "index_deletions",
}
REFERENCE = {"sites", "meta", "memory_words_backfill"}
COORDINATOR = {
    "tokens",
    "console_sessions",
    "oauth_clients",
    "oauth_requests",
    "oauth_codes",
    "oauth_grants",
    "oauth_tokens",
    "schema_migrations",
}
MEMORY_TABLES = re.compile(r"\b(memories|memories_fts|memory_lexicon|memory_words|memory_changes)\b")
# What the memory operations may still ask of the memory tables by id alone: nothing.
BY_ID_ALONE: list[re.Pattern[str]] = []


def catalog(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [tuple(row) for row in conn.execute(sql).fetchall()]


def test_every_key_of_a_sites_tables_leads_with_the_site(tmp_path: Path, postgres_url: str) -> None:
    services = open_services(make_settings(tmp_path / "data", database_url=postgres_url))
    services.close()
    tables = {name for (name,) in catalog(postgres_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert tables == DISTRIBUTED | REFERENCE | COORDINATOR
    columns = catalog(
        postgres_url,
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'",
    )
    assert {table for table, column in columns if column == "site_id"} >= DISTRIBUTED
    keys = catalog(
        postgres_url,
        "SELECT c.relname, con.conname, con.contype, array_agg(a.attname::text ORDER BY a.attnum)"
        " FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(con.conkey)"
        " WHERE con.contype IN ('p', 'u', 'f') AND c.relnamespace = 'public'::regnamespace GROUP BY 1, 2, 3",
    )
    unique = catalog(
        postgres_url,
        "SELECT c.relname, i.relname, array_agg(a.attname::text) FROM pg_index x"
        " JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(x.indkey)"
        " WHERE x.indisunique AND c.relnamespace = 'public'::regnamespace GROUP BY 1, 2",
    )
    without = [(t, name) for t, name, _, cols in keys if t in DISTRIBUTED and "site_id" not in cols]
    without += [(t, name) for t, name, cols in unique if t in DISTRIBUTED and "site_id" not in cols]
    assert without == []


@pytest.fixture
def services(tmp_path: Path, postgres_url: str, embedder: Any) -> Iterator[Services]:
    services = open_services(make_settings(tmp_path / "data", database_url=postgres_url))
    services.load_memories(embedder=embedder)
    try:
        yield services
    finally:
        services.close()


def test_a_memory_operation_asks_about_one_site(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every statement a memory operation sends about the memory tables names the site (a statement reading
    several sites' rows would be sent to every worker of a cluster)."""
    principal = services.local_principal("acme")
    services.local_principal("other")
    writes = services.loaded_memories().writes
    retrieval = services.loaded_memories().retrieval
    sent: list[str] = []
    caller = threading.get_ident()
    execute = psycopg.Cursor.execute

    def recording(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == caller:
            sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    first = writes.remember(principal, writes.validate(content="The spare routers are on shelf 14."))
    assert first.reference is not None
    writes.remember_many(
        principal.site_id,
        [writes.validate(content=f"Note {n} about the routers and the boiler.") for n in range(5)],
    )
    scope = read_scope(principal, Filters())
    retrieval.recall(scope, "where are the routers?", 5)
    retrieval.search(scope, "boiler", 5, 0.0)
    writes.update(principal, first.reference, {"content": "The spare routers moved to shelf 15."})
    writes.remember(
        principal, writes.validate(content="The routers are now in the basement.", supersedes=first.reference)
    )
    writes.forget(principal, first.reference)
    monkeypatch.undo()
    about_memories = [q for q in sent if MEMORY_TABLES.search(q)]
    assert about_memories
    unscoped = [q for q in about_memories if "site_id" not in q and not any(p.match(q) for p in BY_ID_ALONE)]
    assert unscoped == [], "\n".join(unscoped)
