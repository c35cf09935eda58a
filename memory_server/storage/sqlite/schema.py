"""The SQLite schema, as numbered steps applied in order (tracked in `PRAGMA user_version`)."""

from __future__ import annotations

import sqlite3

from memory_server.storage.fts5 import fts_tokens

# Tables holding a site's data, emptied when the site is deleted.
SITE_TABLES = [
    "tokens",
    "conversations",
    "log_items",
    "append_keys",
    "memories",
    "memory_words",
    "console_sessions",
    "memory_lexicon",
]

SCHEMA = [
    # 1: sites, tokens, conversation logs
    """
    CREATE TABLE sites (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a recreated name gets a fresh tenant
        name TEXT NOT NULL UNIQUE,
        secret_hash TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        site_id INTEGER NOT NULL REFERENCES sites(id) ON DELETE CASCADE,
        token_hash TEXT NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        teams TEXT,
        projects TEXT,
        buckets TEXT,
        created_at TEXT NOT NULL,
        revoked_at TEXT
    );
    CREATE TABLE conversations (
        site_id INTEGER NOT NULL,
        conversation_id TEXT NOT NULL,
        item_count INTEGER NOT NULL,
        first_recorded_at TEXT NOT NULL,
        last_recorded_at TEXT NOT NULL,
        last_activity_us INTEGER NOT NULL,
        PRIMARY KEY (site_id, conversation_id)
    ) WITHOUT ROWID;
    CREATE INDEX conversations_by_activity
        ON conversations (site_id, last_activity_us DESC, conversation_id DESC);
    CREATE TABLE log_items (
        site_id INTEGER NOT NULL,
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        recorded_at TEXT NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY (site_id, conversation_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE append_keys (
        site_id INTEGER NOT NULL,
        conversation_id TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        count INTEGER NOT NULL,
        recorded_at TEXT NOT NULL,
        PRIMARY KEY (site_id, conversation_id, idempotency_key)
    ) WITHOUT ROWID;
    """,
    # 2: saved memories, their lexical index, and the outbox of index deletions
    """
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY,                -- the point id in the vector index
        reference TEXT NOT NULL UNIQUE,
        site_id INTEGER NOT NULL,
        content TEXT NOT NULL,
        type TEXT NOT NULL,
        location TEXT,
        project TEXT,
        team TEXT,
        bucket TEXT NOT NULL,
        tags TEXT NOT NULL,                    -- JSON list
        metadata TEXT NOT NULL,                -- JSON object
        provenance TEXT NOT NULL,              -- JSON object
        occurred_at TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        dedup_key TEXT NOT NULL,
        conversation_id TEXT,                  -- from provenance: neighbours give context when ranking
        conversation_seq INTEGER,
        vector BLOB,                           -- float32 embedding of the document text
        vector_model TEXT,
        indexed INTEGER NOT NULL DEFAULT 0,    -- the outbox: 0 until the vector index has the point
        UNIQUE (site_id, dedup_key)
    );
    CREATE INDEX memories_unindexed ON memories (id) WHERE indexed = 0;
    CREATE INDEX memories_by_bucket ON memories (site_id, bucket);
    CREATE INDEX memories_by_conversation ON memories (site_id, conversation_id, conversation_seq);
    CREATE VIRTUAL TABLE memories_fts USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 2');
    CREATE TABLE index_deletions (id INTEGER PRIMARY KEY);  -- forgotten rows the index may still hold
    CREATE TRIGGER memories_deleted AFTER DELETE ON memories BEGIN
        DELETE FROM memories_fts WHERE rowid = old.id;
        INSERT OR IGNORE INTO index_deletions (id) VALUES (old.id);
    END;
    """,
    # 3: single-word embeddings of each site's vocabulary, for query expansion (memory_server/retrieval/vocabulary.py)
    """
    CREATE TABLE memory_words (
        site_id INTEGER NOT NULL,
        word TEXT NOT NULL,
        model TEXT NOT NULL,                   -- vectors of another model are ignored and re-embedded
        vector BLOB NOT NULL,                  -- float32 embedding of the word alone
        PRIMARY KEY (site_id, word)
    ) WITHOUT ROWID;
    CREATE TABLE memory_words_backfill (       -- one row: memories up to through_id have words from model
        id INTEGER PRIMARY KEY CHECK (id = 1),
        model TEXT NOT NULL,
        through_id INTEGER NOT NULL
    );
    """,
    # 4: the authority's identity, and the change feed of memories (what a replica's own index follows).
    # AUTOINCREMENT numbers changes in commit order (one writer at a time) and never reuses a number.
    # Only what the index holds counts as a change, so marking a row indexed is none.
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    INSERT INTO meta (key, value) VALUES ('identity', lower(hex(randomblob(16))));
    CREATE TABLE memory_changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id INTEGER NOT NULL,
        deleted INTEGER NOT NULL,
        changed_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)  -- unix seconds
    );
    CREATE INDEX memory_changes_by_time ON memory_changes (changed_at);
    CREATE TRIGGER memories_change_insert AFTER INSERT ON memories BEGIN
        INSERT INTO memory_changes (id, deleted) VALUES (new.id, 0);
    END;
    CREATE TRIGGER memories_change_update AFTER UPDATE OF content, type, location, project, team, bucket, tags,
        metadata, provenance, occurred_at, vector, vector_model ON memories BEGIN
        INSERT INTO memory_changes (id, deleted) VALUES (new.id, 0);
    END;
    CREATE TRIGGER memories_change_delete AFTER DELETE ON memories BEGIN
        INSERT INTO memory_changes (id, deleted) VALUES (old.id, 1);
    END;
    """,
    # 5: OAuth 2.1 (memory_server/api/oauth): registered clients, authorization requests waiting on the consent page,
    # codes, grants and their tokens. Every secret is stored as its SHA-256 digest; times are unix seconds.
    # A site's codes, grants and tokens go with it (the trigger: this step leaves SITE_TABLES alone).
    """
    CREATE TABLE oauth_clients (
        client_id TEXT PRIMARY KEY,
        secret_hash TEXT,                      -- NULL: a public client
        client_name TEXT,
        metadata TEXT NOT NULL,                -- JSON: the registered metadata, without the secret
        created_at REAL NOT NULL
    );
    CREATE TABLE oauth_requests (
        request_hash TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        params TEXT NOT NULL,                  -- JSON: the validated authorization request
        csrf_hash TEXT,
        expires_at REAL NOT NULL
    );
    CREATE INDEX oauth_requests_by_expiry ON oauth_requests (expires_at);
    CREATE TABLE oauth_codes (
        code_hash TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        site_id INTEGER NOT NULL,
        scopes TEXT NOT NULL,                  -- JSON lists; bounds NULL when unbounded
        teams TEXT,
        projects TEXT,
        buckets TEXT,
        resource TEXT NOT NULL,
        code_challenge TEXT NOT NULL,
        redirect_uri TEXT NOT NULL,
        redirect_uri_explicit INTEGER NOT NULL,
        expires_at REAL NOT NULL,
        grant_id TEXT                          -- set when exchanged: a used code
    );
    CREATE INDEX oauth_codes_by_expiry ON oauth_codes (expires_at);
    CREATE INDEX oauth_codes_by_site ON oauth_codes (site_id);
    CREATE TABLE oauth_grants (
        id TEXT PRIMARY KEY,
        site_id INTEGER NOT NULL,
        client_id TEXT NOT NULL,
        scopes TEXT NOT NULL,
        teams TEXT,
        projects TEXT,
        buckets TEXT,
        resource TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at REAL NOT NULL,              -- when its current refresh token expires
        revoked_at TEXT
    );
    CREATE INDEX oauth_grants_by_site ON oauth_grants (site_id);
    CREATE TABLE oauth_tokens (
        token_hash TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        kind TEXT NOT NULL,                    -- access or refresh
        scopes TEXT NOT NULL,
        expires_at REAL NOT NULL,
        rotated INTEGER NOT NULL DEFAULT 0     -- a refresh token already exchanged
    );
    CREATE INDEX oauth_tokens_by_grant ON oauth_tokens (grant_id);
    CREATE TRIGGER oauth_site_deleted AFTER DELETE ON sites BEGIN
        DELETE FROM oauth_tokens WHERE grant_id IN (SELECT id FROM oauth_grants WHERE site_id = old.id);
        DELETE FROM oauth_grants WHERE site_id = old.id;
        DELETE FROM oauth_codes WHERE site_id = old.id;
    END;
    """,
    # 6: signed-in console sessions, kept in the authority so that every replica on it knows them; only a
    # hash of the session id is stored. Saved memories by creation day (the console's status chart).
    """
    CREATE TABLE console_sessions (
        id_hash TEXT PRIMARY KEY,
        site_id INTEGER NOT NULL,
        site TEXT NOT NULL,
        kind TEXT NOT NULL,                    -- basic or bearer
        credential TEXT NOT NULL,              -- digest of the site's secret hash, or the token's hash
        created_at REAL NOT NULL,              -- unix seconds
        seen_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX console_sessions_by_seen ON console_sessions (seen_at);
    CREATE INDEX memories_by_created ON memories (site_id, created_at);
    """,
    # 7: log deletion: a conversation marked `deleting` is hidden from every read and purged in small steps
    # (memory_server/storage/deletion.py); a site's log retention; memories found by the conversation their
    # provenance names (the links a deletion clears; the listing's provenance_conversation_id filter)
    """
    ALTER TABLE conversations ADD COLUMN deleting INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX conversations_deleting ON conversations (site_id, conversation_id) WHERE deleting = 1;
    ALTER TABLE sites ADD COLUMN log_retention_days INTEGER;  -- NULL: logs are kept until deleted
    CREATE INDEX memories_by_provenance_conversation
        ON memories (site_id, json_extract(provenance, '$.conversation_id'));
    """,
    # 8: time windows (occurred_after / occurred_before) read a site's memories by occurred_at
    """
    CREATE INDEX memories_by_occurrence ON memories (site_id, occurred_at);
    """,
    # 9: memories that supersede others. The links are references (they survive export and import); the
    # change feed also counts a change of the links the index holds (valid_to is in its payload).
    """
    ALTER TABLE memories ADD COLUMN supersedes TEXT;      -- the memory this one replaced
    ALTER TABLE memories ADD COLUMN superseded_by TEXT;   -- the memory that replaced this one
    ALTER TABLE memories ADD COLUMN valid_to TEXT;        -- when: the successor's occurred_at
    DROP TRIGGER memories_change_update;
    CREATE TRIGGER memories_change_update AFTER UPDATE OF content, type, location, project, team, bucket, tags,
        metadata, provenance, occurred_at, vector, vector_model, superseded_by, valid_to ON memories BEGIN
        INSERT INTO memory_changes (id, deleted) VALUES (new.id, 0);
    END;
    """,
    # 10: memories that expire: never returned from expires_at on, then purged (oldest expiry first)
    """
    ALTER TABLE memories ADD COLUMN expires_at TEXT;      -- normalised RFC3339, or NULL: never
    CREATE INDEX memories_expiring ON memories (expires_at) WHERE expires_at IS NOT NULL;
    DROP TRIGGER memories_change_update;
    CREATE TRIGGER memories_change_update AFTER UPDATE OF content, type, location, project, team, bucket, tags,
        metadata, provenance, occurred_at, vector, vector_model, superseded_by, valid_to, expires_at ON memories
    BEGIN
        INSERT INTO memory_changes (id, deleted) VALUES (new.id, 0);
    END;
    """,
    # 11: recall's list of what a scope sees (memory_server/storage/sqlite/candidates.py `load`) read from an index
    # holding every column it tests, rather than from the rows, which are ~2 KB each with their vector: a
    # bucket of 1,000 of 100k memories in 0.4 ms instead of 1.3 ms mapped and 1.7 ms unmapped.
    """
    CREATE INDEX memories_candidates ON memories (site_id, bucket, vector_model, team, project, type, expires_at,
        superseded_by, valid_to, occurred_at, updated_at) WHERE vector IS NOT NULL;
    """,
    # 12: the lexical prefetch (candidates.py `best_by_terms`) tests each FTS5 match against the scope by id:
    # from an index keyed by id holding every column the scope tests, rather than from the ~2 KB rows (966
    # matches of 10k memories: the join 2.3 -> 0.9 ms, the prefetch 4.0 -> 2.4 ms).
    """
    CREATE INDEX memories_scope_by_id ON memories (id, site_id, bucket, vector_model, team, project, type,
        expires_at, superseded_by, valid_to, occurred_at, updated_at) WHERE vector IS NOT NULL;
    """,
    # 13: OAuth clients that never signed in expire (memory_server/api/oauth/provider.py): when a client last had a
    # code exchanged (those with a grant already count as signed in at their registration).
    """
    ALTER TABLE oauth_clients ADD COLUMN granted_at REAL;     -- NULL: never signed in
    UPDATE oauth_clients SET granted_at = created_at WHERE client_id IN (SELECT client_id FROM oauth_grants);
    CREATE INDEX oauth_clients_unused ON oauth_clients (created_at) WHERE granted_at IS NULL;
    """,
    # 14: what a token is for (a label given when it is created), and when a token or an OAuth grant was last
    # used (RFC3339: a grant's code exchanged or refreshed, or one of its tokens or a token used, written at
    # most once a minute per credential and server: memory_server/auth/usage.py)
    """
    ALTER TABLE tokens ADD COLUMN label TEXT;
    ALTER TABLE tokens ADD COLUMN last_used_at TEXT;
    ALTER TABLE oauth_grants ADD COLUMN last_used_at TEXT;    -- NULL: not known (granted before this step)
    """,
    # 15: conversations recalled by topic (memory_server/logs/indexing.py): a site's choice to index its log items, a
    # conversation's own choice and bucket (given by an append), how far its items were turned into recallable
    # entries and how many were skipped (no text); the entries are memories of kind `turn`.
    """
    ALTER TABLE sites ADD COLUMN index_logs INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE conversations ADD COLUMN index_choice INTEGER;         -- NULL: as the site; 0 or 1: its own
    ALTER TABLE conversations ADD COLUMN bucket TEXT;                  -- its turns' bucket (NULL: default)
    ALTER TABLE conversations ADD COLUMN indexing INTEGER NOT NULL DEFAULT 0;  -- its items are to be indexed
    ALTER TABLE conversations ADD COLUMN indexed_seq INTEGER NOT NULL DEFAULT 0;  -- items before it are done
    ALTER TABLE conversations ADD COLUMN index_skipped INTEGER NOT NULL DEFAULT 0;  -- of those, without text
    CREATE INDEX conversations_to_index ON conversations (site_id, conversation_id)
        WHERE indexing = 1 AND indexed_seq < item_count;
    ALTER TABLE memories ADD COLUMN kind TEXT NOT NULL DEFAULT 'memory';  -- memory, or turn (a log item's)
    """,
    # 16: the OAuth caps shared out per client address and network (memory_server/storage/oauth_admission.py): who
    # registered a client and who asked for an authorization ('' for the rows stored before).
    """
    ALTER TABLE oauth_clients ADD COLUMN source_address TEXT NOT NULL DEFAULT '';
    ALTER TABLE oauth_clients ADD COLUMN source_network TEXT NOT NULL DEFAULT '';
    CREATE INDEX oauth_clients_unused_by_source ON oauth_clients (source_network, source_address, created_at)
        WHERE granted_at IS NULL;
    ALTER TABLE oauth_requests ADD COLUMN source_address TEXT NOT NULL DEFAULT '';
    ALTER TABLE oauth_requests ADD COLUMN source_network TEXT NOT NULL DEFAULT '';
    CREATE INDEX oauth_requests_by_source ON oauth_requests (source_network, source_address, expires_at);
    CREATE INDEX oauth_requests_by_client ON oauth_requests (client_id);
    CREATE INDEX oauth_codes_by_client ON oauth_codes (client_id);
    """,
    # 17: each site's lexical statistics (memory_lexicon: its rows and tokens, what FTS5 keeps for the whole
    # table), from each lexical row's site and FTS5 length (memories_fts_sizes: FTS5 tables take no triggers),
    # so that a site's ranking never depends on another site's memories. The lengths of the rows stored
    # before are counted by fts_token_count, which `migrate` defines.
    """
    CREATE TABLE memory_lexicon (site_id INTEGER PRIMARY KEY, rows INTEGER NOT NULL, tokens INTEGER NOT NULL);
    CREATE TABLE memories_fts_sizes (id INTEGER PRIMARY KEY, site_id INTEGER NOT NULL, size INTEGER NOT NULL);
    CREATE TRIGGER memories_fts_size_added AFTER INSERT ON memories_fts_sizes BEGIN
        INSERT INTO memory_lexicon (site_id, rows, tokens) VALUES (new.site_id, 1, new.size)
            ON CONFLICT (site_id) DO UPDATE SET rows = rows + 1, tokens = tokens + excluded.tokens;
    END;
    CREATE TRIGGER memories_fts_size_removed AFTER DELETE ON memories_fts_sizes BEGIN
        UPDATE memory_lexicon SET rows = rows - 1, tokens = tokens - old.size WHERE site_id = old.site_id;
    END;
    CREATE TRIGGER memories_fts_size_changed AFTER UPDATE OF size ON memories_fts_sizes BEGIN
        UPDATE memory_lexicon SET tokens = tokens - old.size + new.size WHERE site_id = new.site_id;
    END;
    INSERT INTO memories_fts_sizes (id, site_id, size)
        SELECT m.id, m.site_id, fts_token_count(f.terms) FROM memories m JOIN memories_fts f ON f.rowid = m.id;
    DROP TRIGGER memories_deleted;
    CREATE TRIGGER memories_deleted AFTER DELETE ON memories BEGIN
        DELETE FROM memories_fts WHERE rowid = old.id;
        DELETE FROM memories_fts_sizes WHERE id = old.id;
        INSERT OR IGNORE INTO index_deletions (id) VALUES (old.id);
    END;
    """,
    # 18: the change feed numbered per site (each site's own counter row), as on PostgreSQL, where it spares two
    # sites' writes a row in common. The feed starts again: only this process's held candidate sets read it.
    """
    DROP TRIGGER memories_change_insert;
    DROP TRIGGER memories_change_update;
    DROP TRIGGER memories_change_delete;
    DROP TABLE memory_changes;
    CREATE TABLE memory_change_counters (site_id INTEGER PRIMARY KEY, seq INTEGER NOT NULL);
    CREATE TABLE memory_changes (
        site_id INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        id INTEGER NOT NULL,
        deleted INTEGER NOT NULL,
        changed_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),  -- unix seconds
        PRIMARY KEY (site_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX memory_changes_by_time ON memory_changes (changed_at);
    CREATE TRIGGER memories_change_insert AFTER INSERT ON memories BEGIN
        INSERT INTO memory_change_counters (site_id, seq) VALUES (new.site_id, 1)
            ON CONFLICT (site_id) DO UPDATE SET seq = seq + 1;
        INSERT INTO memory_changes (site_id, seq, id, deleted)
            SELECT new.site_id, seq, new.id, 0 FROM memory_change_counters WHERE site_id = new.site_id;
    END;
    CREATE TRIGGER memories_change_update AFTER UPDATE OF content, type, location, project, team, bucket, tags,
        metadata, provenance, occurred_at, vector, vector_model, superseded_by, valid_to, expires_at ON memories
    BEGIN
        INSERT INTO memory_change_counters (site_id, seq) VALUES (new.site_id, 1)
            ON CONFLICT (site_id) DO UPDATE SET seq = seq + 1;
        INSERT INTO memory_changes (site_id, seq, id, deleted)
            SELECT new.site_id, seq, new.id, 0 FROM memory_change_counters WHERE site_id = new.site_id;
    END;
    CREATE TRIGGER memories_change_delete AFTER DELETE ON memories BEGIN
        INSERT INTO memory_change_counters (site_id, seq) VALUES (old.site_id, 1)
            ON CONFLICT (site_id) DO UPDATE SET seq = seq + 1;
        INSERT INTO memory_changes (site_id, seq, id, deleted)
            SELECT old.site_id, seq, old.id, 1 FROM memory_change_counters WHERE site_id = old.site_id;
    END;
    """,
]


def migrate(conn: sqlite3.Connection, extra: list[str] | None = None) -> None:
    """Apply schema steps not yet applied (tracked in `PRAGMA user_version`), each in one transaction."""
    steps = SCHEMA + (extra or [])
    conn.create_function("fts_token_count", 1, _token_count, deterministic=True)
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number, script in enumerate(steps[version:], start=version + 1):
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _token_count(terms: str | None) -> int:
    """A lexical row's length as FTS5 counts it (its number of tokens)."""
    return len(fts_tokens(terms)) if terms else 0


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT our transaction; split on complete statements instead.
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
