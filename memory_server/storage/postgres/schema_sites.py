"""PostgreSQL schema steps 16-18 (memory_server/storage/postgres/schema.py applies them after its own): each
site's lexical statistics, the change feed numbered per site, and keys that lead with the site, so that no
row is written by every site's writes and the memory tables can be distributed by `site_id`."""

from __future__ import annotations

SITE_STEPS = [
    # 16: each site's lexical statistics. The lexical rows carry their site, and the row and token totals BM25
    # needs are kept per site (memory_lexicon) rather than in one row that every write of every site updated:
    # a site's ranking never depends on another site's memories, and two sites' writes lock no row in common.
    """
    ALTER TABLE memories_fts ADD COLUMN site_id BIGINT;
    UPDATE memories_fts f SET site_id = m.site_id FROM memories m WHERE m.id = f.id;
    ALTER TABLE memories_fts ALTER COLUMN site_id SET NOT NULL;
    CREATE INDEX memories_fts_by_site ON memories_fts (site_id);
    CREATE TABLE memory_lexicon (              -- per site: what FTS5 keeps in its averages record
        site_id BIGINT PRIMARY KEY,
        rows BIGINT NOT NULL,
        tokens BIGINT NOT NULL
    );
    INSERT INTO memory_lexicon (site_id, rows, tokens)
        SELECT site_id, count(*), coalesce(sum(size), 0) FROM memories_fts GROUP BY site_id;
    CREATE OR REPLACE FUNCTION memories_fts_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- Sites in id order, so that a statement touching several locks their rows in one order.
        IF TG_OP = 'INSERT' THEN
            INSERT INTO memory_lexicon AS l (site_id, rows, tokens)
                SELECT site_id, count(*), sum(size) FROM new_rows GROUP BY site_id ORDER BY site_id
                ON CONFLICT (site_id) DO UPDATE SET rows = l.rows + excluded.rows, tokens = l.tokens + excluded.tokens;
        ELSIF TG_OP = 'DELETE' THEN
            UPDATE memory_lexicon l SET rows = l.rows - d.n, tokens = l.tokens - d.t
                FROM (SELECT site_id, count(*) AS n, sum(size) AS t FROM old_rows GROUP BY site_id) d
                WHERE l.site_id = d.site_id;
        ELSE
            -- Untouched totals are not written: their row lock would serialise the site's statements.
            UPDATE memory_lexicon l SET tokens = l.tokens + d.t
                FROM (SELECT site_id, sum(size) AS t FROM (SELECT site_id, size FROM new_rows
                      UNION ALL SELECT site_id, -size FROM old_rows) AS c GROUP BY site_id) d
                WHERE l.site_id = d.site_id AND d.t <> 0;
        END IF;
        RETURN NULL;
    END
    $$;
    DROP TABLE memories_fts_totals;
    """,
    # 17: the change feed numbered per site: each site's changes take their numbers from the site's own counter
    # row (what orders that site's committing transactions), so two sites' writes lock no row in common, and
    # a replica follows each site from where it left it. The feed starts again (its numbers were the store's),
    # so a replica's index is rebuilt once. memory_change_counter, read by `doctor`, becomes how many changes
    # every site has had, which is what a replica's state counts too.
    """
    DROP TABLE memory_changes;
    DROP TABLE memory_change_counter;
    CREATE TABLE memory_change_counters (site_id BIGINT PRIMARY KEY, seq BIGINT NOT NULL);
    CREATE TABLE memory_changes (
        site_id BIGINT NOT NULL,
        seq BIGINT NOT NULL,
        id BIGINT NOT NULL,
        deleted INTEGER NOT NULL,
        changed_at DOUBLE PRECISION NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),  -- unix seconds
        PRIMARY KEY (site_id, seq)
    );
    CREATE INDEX memory_changes_by_time ON memory_changes (changed_at);
    CREATE OR REPLACE FUNCTION memories_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        number BIGINT;
        site BIGINT;
    BEGIN
        IF TG_OP = 'DELETE' THEN
            site := OLD.site_id;
        ELSE
            site := NEW.site_id;
        END IF;
        -- An UPDATE as a rule (the lock is held from here to the end of COMMIT); a site's first change inserts.
        UPDATE memory_change_counters SET seq = seq + 1 WHERE site_id = site RETURNING seq INTO number;
        IF NOT FOUND THEN
            INSERT INTO memory_change_counters AS c (site_id, seq) VALUES (site, 1)
                ON CONFLICT (site_id) DO UPDATE SET seq = c.seq + 1 RETURNING seq INTO number;
        END IF;
        IF TG_OP = 'DELETE' THEN
            INSERT INTO memory_changes (site_id, seq, id, deleted) VALUES (site, number, OLD.id, 1);
        ELSE
            INSERT INTO memory_changes (site_id, seq, id, deleted) VALUES (site, number, NEW.id, 0);
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE VIEW memory_change_counter AS
        SELECT 1 AS id, coalesce(sum(seq), 0)::bigint AS seq FROM memory_change_counters;
    """,
    # 18: keys that lead with the site, so that the memories and the rows hanging off them can be distributed
    # by `site_id` (docs/operations.md, "Past one machine"): a cluster sharding by a column needs it in every
    # unique key and foreign key. Ids stay unique in the store (one identity) and references too (a new one is
    # a random UUID; an import refuses one another site holds), each still found by an index of its own.
    """
    ALTER TABLE memories_fts DROP CONSTRAINT memories_fts_id_fkey;
    ALTER TABLE memories_fts DROP CONSTRAINT memories_fts_pkey;
    DROP INDEX memories_fts_by_site;
    ALTER TABLE memories DROP CONSTRAINT memories_pkey;
    ALTER TABLE memories ADD CONSTRAINT memories_pkey PRIMARY KEY (site_id, id);
    CREATE INDEX memories_by_id ON memories (id);
    ALTER TABLE memories DROP CONSTRAINT memories_reference_key;
    ALTER TABLE memories ADD CONSTRAINT memories_reference_key UNIQUE (site_id, reference);
    CREATE INDEX memories_by_reference ON memories (reference);
    ALTER TABLE memories_fts ADD CONSTRAINT memories_fts_pkey PRIMARY KEY (site_id, id);
    ALTER TABLE memories_fts ADD CONSTRAINT memories_fts_id_fkey FOREIGN KEY (site_id, id)
        REFERENCES memories (site_id, id) ON DELETE CASCADE;
    ALTER TABLE index_deletions ADD COLUMN site_id BIGINT NOT NULL DEFAULT 0;  -- 0: queued before this step
    ALTER TABLE index_deletions ALTER COLUMN site_id DROP DEFAULT;
    ALTER TABLE index_deletions DROP CONSTRAINT index_deletions_pkey;
    ALTER TABLE index_deletions ADD CONSTRAINT index_deletions_pkey PRIMARY KEY (site_id, id);
    CREATE OR REPLACE FUNCTION memories_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO index_deletions (site_id, id) SELECT site_id, id FROM gone ON CONFLICT DO NOTHING;
        RETURN NULL;
    END
    $$;
    """,
]
