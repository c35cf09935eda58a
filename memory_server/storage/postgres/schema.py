"""The PostgreSQL schema, as numbered steps applied in order (tracked in `schema_migrations`).

Tables and columns are named as on SQLite, so the same SQL reads the same rows on both backends. Text that
is ordered or compared (names, ids, timestamps) is `COLLATE "C"`: byte order, as SQLite compares, whatever
the database's locale. JSON is stored as the text that was written (payloads come back byte for byte);
vectors are float32 bytes, as SQLite's blobs.

The lexical index (`memories_fts`) holds each memory's site, its analysed terms, FTS5's tokens of them (a
GIN-indexed array) and their count; `memory_lexicon` keeps each site's row and token totals BM25 needs,
maintained by statement triggers.

Migrating takes a transaction-level advisory lock, so replicas starting together apply each step once: the
others wait, then find the schema current.
"""

from __future__ import annotations

from memory_server.storage.postgres.database import Conn
from memory_server.storage.postgres.schema_sites import SITE_STEPS
from memory_server.timestamps import now_rfc3339

# Tables holding a site's data, emptied when the site is deleted (memories_fts before memories, see sites.py;
# its OAuth codes, grants and tokens go by oauth.delete_site_rows).
SITE_TABLES = [
    "tokens",
    "console_sessions",
    "conversations",
    "log_items",
    "append_keys",
    "memory_words",
    "memories",
    "memory_lexicon",
]

# Any constant: every memory-server migrating this database takes the same one.
MIGRATION_LOCK = 0x6D656D6F7279  # "memory"

SCHEMA = [
    # 1: sites, tokens, conversation logs
    """
    CREATE TABLE sites (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- never reused: a recreated name is a new tenant
        name TEXT COLLATE "C" NOT NULL UNIQUE,
        secret_hash TEXT NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL
    );
    CREATE TABLE tokens (
        id TEXT COLLATE "C" PRIMARY KEY,
        site_id BIGINT NOT NULL REFERENCES sites (id) ON DELETE CASCADE,
        token_hash TEXT COLLATE "C" NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        teams TEXT,
        projects TEXT,
        buckets TEXT,
        created_at TEXT COLLATE "C" NOT NULL,
        revoked_at TEXT
    );
    CREATE INDEX tokens_by_site ON tokens (site_id);
    CREATE TABLE conversations (
        site_id BIGINT NOT NULL,
        conversation_id TEXT COLLATE "C" NOT NULL,
        item_count BIGINT NOT NULL,            -- the next seq: appends take theirs from it, under its row lock
        first_recorded_at TEXT COLLATE "C" NOT NULL,
        last_recorded_at TEXT COLLATE "C" NOT NULL,
        last_activity_us BIGINT NOT NULL,
        PRIMARY KEY (site_id, conversation_id)
    );
    CREATE INDEX conversations_by_activity
        ON conversations (site_id, last_activity_us DESC, conversation_id DESC);
    CREATE TABLE log_items (
        site_id BIGINT NOT NULL,
        conversation_id TEXT COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL,
        recorded_at TEXT COLLATE "C" NOT NULL,
        payload TEXT NOT NULL,                 -- the JSON text as appended, never re-serialised
        PRIMARY KEY (site_id, conversation_id, seq)
    );
    CREATE TABLE append_keys (
        site_id BIGINT NOT NULL,
        conversation_id TEXT COLLATE "C" NOT NULL,
        idempotency_key TEXT COLLATE "C" NOT NULL,
        first_seq BIGINT NOT NULL,
        last_seq BIGINT NOT NULL,
        count BIGINT NOT NULL,
        recorded_at TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (site_id, conversation_id, idempotency_key)
    );
    """,
    # 2: saved memories, their lexical index, and the outbox of index deletions
    """
    CREATE TABLE memories (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- the point id in the vector index; never reused
        reference TEXT COLLATE "C" NOT NULL UNIQUE,
        site_id BIGINT NOT NULL,
        content TEXT NOT NULL,
        type TEXT COLLATE "C" NOT NULL,
        location TEXT COLLATE "C",
        project TEXT COLLATE "C",
        team TEXT COLLATE "C",
        bucket TEXT COLLATE "C" NOT NULL,
        tags TEXT NOT NULL,                    -- JSON list
        metadata TEXT NOT NULL,                -- JSON object
        provenance TEXT NOT NULL,              -- JSON object
        occurred_at TEXT COLLATE "C" NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL,
        updated_at TEXT COLLATE "C" NOT NULL,
        dedup_key TEXT COLLATE "C" NOT NULL,
        conversation_id TEXT COLLATE "C",      -- from provenance: neighbours give context when ranking
        conversation_seq BIGINT,
        vector BYTEA,                          -- float32 embedding of the document text
        vector_model TEXT,
        indexed INTEGER NOT NULL DEFAULT 0,    -- the outbox: 0 until the vector index has the point
        UNIQUE (site_id, dedup_key)
    );
    CREATE INDEX memories_unindexed ON memories (id) WHERE indexed = 0;
    CREATE INDEX memories_by_bucket ON memories (site_id, bucket);
    CREATE INDEX memories_by_conversation ON memories (site_id, conversation_id, conversation_seq);
    CREATE INDEX memories_by_creation ON memories (site_id, created_at DESC, id DESC);
    CREATE TABLE memories_fts (
        id BIGINT PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
        terms TEXT NOT NULL,                   -- the analysed terms, space-joined (SQLite's FTS5 column)
        tokens TEXT[] NOT NULL,                -- FTS5's tokens of `terms`, in order
        size INTEGER GENERATED ALWAYS AS (cardinality(tokens)) STORED  -- the row's length for BM25
    );
    CREATE INDEX memories_fts_tokens ON memories_fts USING gin (tokens);
    CREATE TABLE memories_fts_totals (         -- one row: what FTS5 keeps in its averages record
        id INTEGER PRIMARY KEY CHECK (id = 1),
        rows BIGINT NOT NULL,
        tokens BIGINT NOT NULL
    );
    INSERT INTO memories_fts_totals (id, rows, tokens) VALUES (1, 0, 0);
    CREATE FUNCTION memories_fts_count() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        added_rows BIGINT := 0;
        added_tokens BIGINT := 0;
        n BIGINT;
        t BIGINT;
    BEGIN
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            SELECT count(*), coalesce(sum(size), 0) INTO n, t FROM new_rows;
            added_rows := added_rows + n;
            added_tokens := added_tokens + t;
        END IF;
        IF TG_OP IN ('DELETE', 'UPDATE') THEN
            SELECT count(*), coalesce(sum(size), 0) INTO n, t FROM old_rows;
            added_rows := added_rows - n;
            added_tokens := added_tokens - t;
        END IF;
        -- Untouched totals are not written: their row lock would serialise every statement.
        IF added_rows <> 0 OR added_tokens <> 0 THEN
            UPDATE memories_fts_totals SET rows = rows + added_rows, tokens = tokens + added_tokens WHERE id = 1;
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER memories_fts_inserted AFTER INSERT ON memories_fts
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memories_fts_count();
    CREATE TRIGGER memories_fts_deleted AFTER DELETE ON memories_fts
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memories_fts_count();
    CREATE TRIGGER memories_fts_updated AFTER UPDATE ON memories_fts
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
        EXECUTE FUNCTION memories_fts_count();
    CREATE TABLE index_deletions (id BIGINT PRIMARY KEY);  -- forgotten rows the index may still hold
    CREATE FUNCTION memories_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO index_deletions (id) SELECT id FROM gone ON CONFLICT DO NOTHING;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER memories_deleted AFTER DELETE ON memories
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION memories_deleted();
    """,
    # 3: single-word embeddings of each site's vocabulary, for query expansion (memory_server/retrieval/vocabulary.py)
    """
    CREATE TABLE memory_words (
        site_id BIGINT NOT NULL,
        word TEXT COLLATE "C" NOT NULL,
        model TEXT NOT NULL,                   -- vectors of another model are ignored and re-embedded
        vector BYTEA NOT NULL,                 -- float32 embedding of the word alone
        PRIMARY KEY (site_id, word)
    );
    CREATE TABLE memory_words_backfill (       -- one row: memories up to through_id have words from model
        id INTEGER PRIMARY KEY CHECK (id = 1),
        model TEXT NOT NULL,
        through_id BIGINT NOT NULL
    );
    """,
    # 4: the authority's identity, and the change feed of memories (what a replica's own index follows).
    # Numbers must follow commit order, which a sequence does not (a later number can commit first, and a
    # follower reading past it would never see the earlier one). So each change takes its number from one
    # counter row, in a trigger deferred to COMMIT: the row lock orders the committing transactions, and it
    # is taken last, holding nothing else up. Only what the index holds counts as a change, so marking a
    # row indexed is none.
    """
    CREATE TABLE meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO meta (key, value) VALUES ('identity', replace(gen_random_uuid()::text, '-', ''));
    CREATE TABLE memory_change_counter (id INTEGER PRIMARY KEY CHECK (id = 1), seq BIGINT NOT NULL);
    INSERT INTO memory_change_counter (id, seq) VALUES (1, 0);
    CREATE TABLE memory_changes (
        seq BIGINT PRIMARY KEY,
        id BIGINT NOT NULL,
        deleted INTEGER NOT NULL,
        changed_at DOUBLE PRECISION NOT NULL DEFAULT extract(epoch FROM clock_timestamp())  -- unix seconds
    );
    CREATE INDEX memory_changes_by_time ON memory_changes (changed_at);
    CREATE FUNCTION memories_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        number BIGINT;
    BEGIN
        UPDATE memory_change_counter SET seq = seq + 1 WHERE id = 1 RETURNING seq INTO number;
        IF TG_OP = 'DELETE' THEN
            INSERT INTO memory_changes (seq, id, deleted) VALUES (number, OLD.id, 1);
        ELSE
            INSERT INTO memory_changes (seq, id, deleted) VALUES (number, NEW.id, 0);
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE CONSTRAINT TRIGGER memories_change_insert AFTER INSERT ON memories
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION memories_changed();
    CREATE CONSTRAINT TRIGGER memories_change_update AFTER UPDATE OF content, type, location, project, team,
        bucket, tags, metadata, provenance, occurred_at, vector, vector_model ON memories
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION memories_changed();
    CREATE CONSTRAINT TRIGGER memories_change_delete AFTER DELETE ON memories
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION memories_changed();
    """,
    # 5: OAuth 2.1 (memory_server/api/oauth): registered clients, authorization requests waiting on the consent page,
    # codes, grants and their tokens, as on SQLite. Every secret is stored as its SHA-256 digest; times are
    # unix seconds. A site's codes, grants and tokens are deleted with it (oauth.delete_site_rows, from
    # sites.delete_site), in the order of the locks that keep them consistent (see oauth.py).
    """
    CREATE TABLE oauth_clients (
        client_id TEXT COLLATE "C" PRIMARY KEY,
        secret_hash TEXT COLLATE "C",          -- NULL: a public client
        client_name TEXT,
        metadata TEXT NOT NULL,                -- JSON: the registered metadata, without the secret
        created_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE oauth_requests (
        request_hash TEXT COLLATE "C" PRIMARY KEY,
        client_id TEXT COLLATE "C" NOT NULL,
        params TEXT NOT NULL,                  -- JSON: the validated authorization request
        csrf_hash TEXT COLLATE "C",
        expires_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX oauth_requests_by_expiry ON oauth_requests (expires_at);
    CREATE TABLE oauth_codes (
        code_hash TEXT COLLATE "C" PRIMARY KEY,
        client_id TEXT COLLATE "C" NOT NULL,
        site_id BIGINT NOT NULL,
        scopes TEXT NOT NULL,                  -- JSON lists; bounds NULL when unbounded
        teams TEXT,
        projects TEXT,
        buckets TEXT,
        resource TEXT COLLATE "C" NOT NULL,
        code_challenge TEXT COLLATE "C" NOT NULL,
        redirect_uri TEXT COLLATE "C" NOT NULL,
        redirect_uri_explicit INTEGER NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        grant_id TEXT COLLATE "C"              -- set when exchanged: a used code
    );
    CREATE INDEX oauth_codes_by_expiry ON oauth_codes (expires_at);
    CREATE INDEX oauth_codes_by_site ON oauth_codes (site_id);
    CREATE TABLE oauth_grants (
        id TEXT COLLATE "C" PRIMARY KEY,
        site_id BIGINT NOT NULL,
        client_id TEXT COLLATE "C" NOT NULL,
        scopes TEXT NOT NULL,
        teams TEXT,
        projects TEXT,
        buckets TEXT,
        resource TEXT COLLATE "C" NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,  -- when its current refresh token expires
        revoked_at TEXT COLLATE "C"
    );
    CREATE INDEX oauth_grants_by_site ON oauth_grants (site_id, created_at, id);
    CREATE TABLE oauth_tokens (
        token_hash TEXT COLLATE "C" PRIMARY KEY,
        grant_id TEXT COLLATE "C" NOT NULL,
        kind TEXT COLLATE "C" NOT NULL,        -- access or refresh
        scopes TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        rotated INTEGER NOT NULL DEFAULT 0     -- a refresh token already exchanged
    );
    CREATE INDEX oauth_tokens_by_grant ON oauth_tokens (grant_id);
    """,
    # 6: signed-in console sessions, kept in the authority so that every replica on it knows them; only a
    # hash of the session id is stored. (Saved memories by creation day, the console's status chart, read
    # memories_by_creation.)
    """
    CREATE TABLE console_sessions (
        id_hash TEXT COLLATE "C" PRIMARY KEY,
        site_id BIGINT NOT NULL,
        site TEXT COLLATE "C" NOT NULL,
        kind TEXT COLLATE "C" NOT NULL,        -- basic or bearer
        credential TEXT COLLATE "C" NOT NULL,  -- digest of the site's secret hash, or the token's hash
        created_at DOUBLE PRECISION NOT NULL,  -- unix seconds
        seen_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX console_sessions_by_seen ON console_sessions (seen_at);
    CREATE INDEX console_sessions_by_created ON console_sessions (created_at);
    """,
    # 7: log deletion: a conversation marked `deleting` is hidden from every read and purged in small steps
    # (memory_server/storage/deletion.py); a site's log retention; memories found by the conversation their
    # provenance names (the links a deletion clears). Adding a column with a constant default rewrites nothing.
    """
    ALTER TABLE conversations ADD COLUMN deleting BOOLEAN NOT NULL DEFAULT false;
    CREATE INDEX conversations_deleting ON conversations (site_id, conversation_id) WHERE deleting;
    ALTER TABLE sites ADD COLUMN log_retention_days INTEGER;  -- NULL: logs are kept until deleted
    CREATE INDEX memories_by_provenance_conversation
        ON memories (site_id, ((provenance::jsonb) ->> 'conversation_id'));
    """,
    # 8: time windows (occurred_after / occurred_before) read a site's memories by occurred_at
    """
    CREATE INDEX memories_by_occurrence ON memories (site_id, occurred_at);
    """,
    # 9: memories that supersede others. The links are references (they survive export and import); the
    # change feed also counts a change of the links the index holds (valid_to is in its payload).
    """
    ALTER TABLE memories
        ADD COLUMN supersedes TEXT COLLATE "C",       -- the memory this one replaced
        ADD COLUMN superseded_by TEXT COLLATE "C",    -- the memory that replaced this one
        ADD COLUMN valid_to TEXT COLLATE "C";         -- when: the successor's occurred_at
    DROP TRIGGER memories_change_update ON memories;
    CREATE CONSTRAINT TRIGGER memories_change_update AFTER UPDATE OF content, type, location, project, team,
        bucket, tags, metadata, provenance, occurred_at, vector, vector_model, superseded_by, valid_to ON memories
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION memories_changed();
    """,
    # 10: memories that expire: never returned from expires_at on, then purged (oldest expiry first)
    """
    ALTER TABLE memories ADD COLUMN expires_at TEXT COLLATE "C";  -- normalised RFC3339, or NULL: never
    CREATE INDEX memories_expiring ON memories (expires_at) WHERE expires_at IS NOT NULL;
    DROP TRIGGER memories_change_update ON memories;
    CREATE CONSTRAINT TRIGGER memories_change_update AFTER UPDATE OF content, type, location, project, team,
        bucket, tags, metadata, provenance, occurred_at, vector, vector_model, superseded_by, valid_to, expires_at
        ON memories DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION memories_changed();
    """,
    # 11: recall's list of what a scope sees (candidates.py `load`) from an index holding every column it tests
    # (an index-only scan once the table is vacuumed), as on SQLite
    """
    CREATE INDEX memories_candidates ON memories (site_id, bucket, vector_model) INCLUDE (team, project, type,
        expires_at, superseded_by, valid_to, occurred_at, updated_at) WHERE vector IS NOT NULL;
    """,
    # 12: OAuth clients that never signed in expire, as on SQLite: when a client last had a code exchanged
    # (those with a grant already count as signed in at their registration).
    """
    ALTER TABLE oauth_clients ADD COLUMN granted_at DOUBLE PRECISION;    -- NULL: never signed in
    UPDATE oauth_clients SET granted_at = created_at WHERE client_id IN (SELECT client_id FROM oauth_grants);
    CREATE INDEX oauth_clients_unused ON oauth_clients (created_at) WHERE granted_at IS NULL;
    """,
    # 13: what a token is for (a label given when it is created), and when a token or an OAuth grant was last
    # used (RFC3339, as on SQLite)
    """
    ALTER TABLE tokens ADD COLUMN label TEXT, ADD COLUMN last_used_at TEXT COLLATE "C";
    ALTER TABLE oauth_grants ADD COLUMN last_used_at TEXT COLLATE "C";
    """,
    # 14: conversations recalled by topic (memory_server/logs/indexing.py), as on SQLite
    """
    ALTER TABLE sites ADD COLUMN index_logs BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE conversations
        ADD COLUMN index_choice BOOLEAN,                   -- NULL: as the site; else its own
        ADD COLUMN bucket TEXT COLLATE "C",                -- its turns' bucket (NULL: default)
        ADD COLUMN indexing BOOLEAN NOT NULL DEFAULT false,
        ADD COLUMN indexed_seq BIGINT NOT NULL DEFAULT 0,  -- items before it are done
        ADD COLUMN index_skipped BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX conversations_to_index ON conversations (site_id, conversation_id)
        WHERE indexing AND indexed_seq < item_count;
    ALTER TABLE memories ADD COLUMN kind TEXT COLLATE "C" NOT NULL DEFAULT 'memory';
    """,
    # 15: the OAuth caps shared out per client address and network, as on SQLite
    """
    ALTER TABLE oauth_clients
        ADD COLUMN source_address TEXT COLLATE "C" NOT NULL DEFAULT '',
        ADD COLUMN source_network TEXT COLLATE "C" NOT NULL DEFAULT '';
    CREATE INDEX oauth_clients_unused_by_source ON oauth_clients (source_network, source_address, created_at)
        WHERE granted_at IS NULL;
    ALTER TABLE oauth_requests
        ADD COLUMN source_address TEXT COLLATE "C" NOT NULL DEFAULT '',
        ADD COLUMN source_network TEXT COLLATE "C" NOT NULL DEFAULT '';
    CREATE INDEX oauth_requests_by_source ON oauth_requests (source_network, source_address, expires_at);
    CREATE INDEX oauth_requests_by_client ON oauth_requests (client_id);
    CREATE INDEX oauth_codes_by_client ON oauth_codes (client_id);
    """,
    *SITE_STEPS,
]

TRACKING = "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"


def schema_version(conn: Conn) -> int | None:
    """The highest applied step, or None when this database has no memory-server schema."""
    if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,):
        return None
    row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: Conn, steps: list[str] | None = None) -> int:
    """Apply the steps not yet applied, in one transaction under the migration lock; the version reached.

    A database whose schema is newer than this code is left alone (RuntimeError), never half-understood."""
    steps = SCHEMA if steps is None else steps
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
        conn.execute(TRACKING)
        version = schema_version(conn) or 0
        if version > len(steps):
            raise RuntimeError(
                f"the database schema is at version {version}, newer than this memory-server's "
                f"({len(steps)}): upgrade memory-server"
            )
        for number, script in enumerate(steps[version:], start=version + 1):
            conn.execute(script)
            conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (%s, %s)", [number, now_rfc3339()])
    return len(steps)
