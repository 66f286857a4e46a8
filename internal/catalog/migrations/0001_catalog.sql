-- The catalog of one Trellis instance. %[1]s is the quoted catalog schema.

CREATE TABLE %[1]s.trellis_instance (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    catalog_schema text NOT NULL,
    target_schema  text NOT NULL,
    gen            bigint NOT NULL DEFAULT 0, -- bumped by every change to the definitions
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- Source tables Trellis captures. key_columns/key_types describe the primary
-- key as the capture triggers render it (text values, cast back by type).
CREATE TABLE %[1]s.sources (
    id            serial PRIMARY KEY,
    schema_name   text NOT NULL,
    table_name    text NOT NULL,
    key_columns   text[] NOT NULL,
    key_types     text[] NOT NULL,
    -- Columns whose old values capture records (GROUP BY and JOIN readers need them).
    cap_columns   text[] NOT NULL DEFAULT '{}',
    cap_types     text[] NOT NULL DEFAULT '{}',
    partitioned   boolean NOT NULL DEFAULT false,
    -- The leaf partitions capture last saw, for attach/detach corrections.
    partitions    text[] NOT NULL DEFAULT '{}',
    capture_state text NOT NULL DEFAULT 'pending' CHECK (capture_state IN ('pending', 'installed')),
    installed_at  timestamptz,
    -- The capture triggers and function as installed (oids, row versions,
    -- enabled state): a difference means capture was changed outside Trellis.
    fingerprint   text,
    disrupted_at  timestamptz,
    disruption    text,
    UNIQUE (schema_name, table_name)
);

CREATE TABLE %[1]s.transforms (
    id             serial PRIMARY KEY,
    target_schema  text NOT NULL,
    target_name    text NOT NULL,
    statement      text NOT NULL,
    spec           jsonb NOT NULL,
    state          text NOT NULL DEFAULT 'waiting_to_backfill'
                   CHECK (state IN ('waiting_to_backfill', 'backfilling', 'live', 'paused')),
    state_since    timestamptz NOT NULL DEFAULT clock_timestamp(),
    paused_reason  text,
    -- A capture failure: why capture of a source is broken (kind disruption,
    -- capture) or why applying halted on the transform (halt).
    failure_kind    text,
    failure_table   text,
    failure_error   text,
    failure_columns text[],
    failure_at      timestamptz,
    build_kind     text NOT NULL DEFAULT 'initial' CHECK (build_kind IN ('initial', 'rebuild')),
    build_cursor   text[],
    build_rows     bigint NOT NULL DEFAULT 0,
    build_started  timestamptz,
    -- A build that keeps failing: attempts, latest error, next attempt.
    build_attempts int NOT NULL DEFAULT 0,
    build_error    text,
    build_next_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (target_schema, target_name)
);

-- Which sources each transform reads.
CREATE TABLE %[1]s.transform_sources (
    transform_id int NOT NULL REFERENCES %[1]s.transforms (id) ON DELETE CASCADE,
    source_id    int NOT NULL REFERENCES %[1]s.sources (id),
    PRIMARY KEY (transform_id, source_id)
);
CREATE INDEX ON %[1]s.transform_sources (source_id);

-- A capture install, widen or uninstall waiting for a lock on its table.
CREATE TABLE %[1]s.capture_waits (
    source_id  int PRIMARY KEY REFERENCES %[1]s.sources (id) ON DELETE CASCADE,
    operation  text NOT NULL,
    table_name text NOT NULL,
    lock_mode  text NOT NULL,
    blockers   text[] NOT NULL,
    since      timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Partitions a transform is being corrected for after an ATTACH or DETACH.
CREATE TABLE %[1]s.corrections (
    transform_id int NOT NULL REFERENCES %[1]s.transforms (id) ON DELETE CASCADE,
    node         text NOT NULL,
    since        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (transform_id, node)
);

-- Columns added by ALTER TRANSFORM that are still being filled.
CREATE TABLE %[1]s.column_builds (
    transform_id int NOT NULL REFERENCES %[1]s.transforms (id) ON DELETE CASCADE,
    column_name  text NOT NULL,
    since        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (transform_id, column_name)
);

-- The ledger: capture triggers append one row per changed key, inside the
-- writer's transaction. It is partitioned into a ring of segments; writers
-- append to the current one, and a segment whose rows are all drained is
-- reclaimed with TRUNCATE.
CREATE TABLE %[1]s.ring (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    cur        int NOT NULL,
    nsegs      int NOT NULL,
    rotated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO %[1]s.ring (cur, nsegs) VALUES (0, 4);

CREATE TABLE %[1]s.ledger (
    seg    int NOT NULL,
    xid    xid8 NOT NULL DEFAULT pg_current_xact_id(),
    src    int NOT NULL,
    bucket int NOT NULL,
    key    text[],
    vals   text[] -- old values of the source's cap_columns (updates and deletes)
) PARTITION BY LIST (seg);
CREATE TABLE %[1]s.ledger_0 PARTITION OF %[1]s.ledger FOR VALUES IN (0);
CREATE TABLE %[1]s.ledger_1 PARTITION OF %[1]s.ledger FOR VALUES IN (1);
CREATE TABLE %[1]s.ledger_2 PARTITION OF %[1]s.ledger FOR VALUES IN (2);
CREATE TABLE %[1]s.ledger_3 PARTITION OF %[1]s.ledger FOR VALUES IN (3);
CREATE INDEX ON %[1]s.ledger (bucket, xid);

-- Capture functions run as the writer of a source table, who needs to read
-- the ring and append to the ledger. A row appended by anyone else can only
-- cause a recompute from the source's current rows, never a wrong target.
GRANT USAGE ON SCHEMA %[1]s TO PUBLIC;
GRANT SELECT ON %[1]s.ring TO PUBLIC;
GRANT INSERT ON %[1]s.ledger TO PUBLIC;

-- Cuts: snapshots that split the committed ledger into pages. The rows of
-- cut n are those visible in its snapshot and not in cut n-1's.
CREATE TABLE %[1]s.cuts (
    n      bigserial PRIMARY KEY,
    snap   pg_snapshot NOT NULL,
    cut_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO %[1]s.cuts (snap) VALUES (pg_current_snapshot());

-- Pages: the unit of work drain workers claim. A cut's rows are split by
-- key bucket into one or more pages.
CREATE TABLE %[1]s.pages (
    id            bigserial PRIMARY KEY,
    cut           bigint NOT NULL,
    lo            pg_snapshot NOT NULL,
    hi            pg_snapshot NOT NULL,
    buckets       int[] NOT NULL,
    done          boolean NOT NULL DEFAULT false,
    retry_at      timestamptz,
    attempts      int NOT NULL DEFAULT 0,
    first_failed  timestamptz,
    last_failed   timestamptz,
    last_error    text,
    last_sqlstate text,
    tables        text[]
);
CREATE INDEX ON %[1]s.pages (id) WHERE NOT done;

-- Quarantine. A column whose expression failed on some rows is paused
-- (spec column "paused") and listed here with the first error.
CREATE TABLE %[1]s.quarantined_columns (
    transform_id int NOT NULL REFERENCES %[1]s.transforms (id) ON DELETE CASCADE,
    column_name  text NOT NULL,
    error        text NOT NULL,
    sqlstate     text,
    since        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (transform_id, column_name)
);

-- Quarantined rows: with a column_name, a row whose evaluation of that
-- column failed (a sample kept for diagnosis); with column_name '', a key
-- the transform holds (poisoned): its changes are not applied until it is
-- released. key holds the key's values as text (the target key: a source
-- key, or an aggregate's group), key_text its rendering (one per key).
-- A source_row entry is a changed row of src_table (key its source key)
-- whose place in an aggregate could not be computed (its GROUP BY raised).
CREATE TABLE %[1]s.quarantine (
    transform_id int NOT NULL REFERENCES %[1]s.transforms (id) ON DELETE CASCADE,
    column_name  text NOT NULL,
    src_table    text NOT NULL,
    source_row   boolean NOT NULL DEFAULT false,
    key_text     text NOT NULL,
    key          text[] NOT NULL,
    error        text NOT NULL,
    sqlstate     text,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (transform_id, column_name, src_table, source_row, key_text)
);
CREATE INDEX ON %[1]s.quarantine (at) WHERE column_name = '';

-- Runs the statements qs once for each key of keys (a two-dimensional
-- array, one key per row, passed to the statements as $1), each key in a
-- subtransaction of its own, and returns the keys whose statements failed
-- with an error a row can explain (bad data, a constraint, a function that
-- raised), with the error. Any other error (a lock timeout, a missing
-- object) is raised. With dry, every key's work is undone.
CREATE FUNCTION %[1]s.probe(qs text[], keys text[], dry boolean)
RETURNS TABLE (err_key text[], err_state text, err_message text)
LANGUAGE plpgsql AS $probe$
DECLARE
    k text[];
    q text;
BEGIN
    IF keys IS NULL OR cardinality(keys) = 0 THEN
        RETURN;
    END IF;
    FOREACH k SLICE 1 IN ARRAY keys LOOP
        BEGIN
            FOREACH q IN ARRAY qs LOOP
                EXECUTE q USING k;
            END LOOP;
            IF dry THEN
                RAISE SQLSTATE 'TR000';
            END IF;
        EXCEPTION WHEN OTHERS THEN
            IF SQLSTATE = 'TR000' THEN
                CONTINUE;
            END IF;
            IF left(SQLSTATE, 2) NOT IN ('21', '22', '23', '2F', '38', '39', '44', 'P0') AND SQLSTATE <> '54000' THEN
                RAISE;
            END IF;
            err_key := k;
            err_state := SQLSTATE;
            err_message := SQLERRM;
            RETURN NEXT;
        END;
    END LOOP;
END
$probe$;

-- Self-check jobs: at most one per transform (a new check replaces a
-- finished one; an unfinished one is returned instead). A process with
-- drain workers claims a queued job, or a running one whose runner stopped
-- beating (heartbeat_at), under a fresh claim token; report is the
-- finished job's verdict.
CREATE TABLE %[1]s.self_checks (
    id            bigserial PRIMARY KEY,
    transform_id  int NOT NULL UNIQUE REFERENCES %[1]s.transforms (id) ON DELETE CASCADE,
    mode          text NOT NULL CHECK (mode IN ('standard', 'strict')),
    timeout_ms    bigint NOT NULL CHECK (timeout_ms > 0),
    state         text NOT NULL DEFAULT 'queued'
                  CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    rows_compared bigint NOT NULL DEFAULT 0,
    report        jsonb,
    error         text,
    claim         bigint,
    heartbeat_at  timestamptz,
    queued_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at    timestamptz,
    finished_at   timestamptz
);
CREATE INDEX ON %[1]s.self_checks (id) WHERE state IN ('queued', 'running');
