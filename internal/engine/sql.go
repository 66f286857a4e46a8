package engine

import "github.com/trellis-pg/trellis/internal/catalog"

// The engine's SQL for statements and reads, in the project's convention:
// %[1]s is the quoted catalog schema, further parts (quoted identifiers, a
// type) %[2]s on, all filled in by catalog.Catalog.SQL.
const (

	// Resolves a relation name, $1 quoted and possibly qualified, through
	// the definer's search_path: the one statement run under it, so what
	// it calls is qualified.
	sqlResolveName = `SELECT pg_catalog.to_regclass($1)::pg_catalog.oid`
	// The relation of an OID.
	sqlResolve = `
SELECT c.oid::int8, n.nspname, c.relname, c.relkind::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = $1::oid`

	// What makes a table unfit to be a source: temporary, a system
	// catalog, a parent in table inheritance (its children's writes would
	// not fire its capture), or a plain table with a parent (a partition,
	// or a child in table inheritance: writes through the parent fire no
	// statement trigger of it), whose parent is returned with whether it is
	// partitioned ("" and false for none).
	sqlSourceFacts = `
SELECT c.relpersistence = 't',
       n.nspname IN ('pg_catalog', 'information_schema') OR n.nspname LIKE 'pg\_toast%' OR c.oid < 16384,
       c.relkind = 'r' AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid),
       coalesce((SELECT format('%I.%I', pn.nspname, p.relname) FROM pg_inherits i
                 JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace pn ON pn.oid = p.relnamespace
                 WHERE i.inhrelid = c.oid AND c.relkind = 'r' ORDER BY 1 LIMIT 1), ''),
       EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
               WHERE i.inhrelid = c.oid AND c.relkind = 'r' AND p.relkind = 'p')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = $1::oid`

	// The temporary views whose dependencies tell what a definition's
	// query reaches; the query is appended.
	sqlNamesProbeView      = "CREATE TEMPORARY VIEW trellis_names_probe AS "
	sqlVolatilityProbeView = "CREATE TEMPORARY VIEW trellis_volatility_probe AS "

	// The functions (and aggregates), types and operators a view's rule
	// names, with their schemas: kind f, t or o, name, schema.
	sqlNamesReached = `
WITH dep AS (
    SELECT d.refclassid, d.refobjid FROM pg_depend d JOIN pg_rewrite r ON d.objid = r.oid
    WHERE d.classid = 'pg_rewrite'::regclass AND r.ev_class = $1::regclass
)
SELECT DISTINCT 'f', p.proname::text, n.nspname::text FROM dep JOIN pg_proc p ON p.oid = dep.refobjid JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE dep.refclassid = 'pg_proc'::regclass
UNION
SELECT DISTINCT 't', t.typname::text, n.nspname::text FROM dep JOIN pg_type t ON t.oid = dep.refobjid JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE dep.refclassid = 'pg_type'::regclass
UNION
SELECT DISTINCT 'o', o.oprname::text, n.nspname::text FROM dep JOIN pg_operator o ON o.oid = dep.refobjid JOIN pg_namespace n ON n.oid = o.oprnamespace
WHERE dep.refclassid = 'pg_operator'::regclass`

	// The volatile functions a view's rule reaches: called, behind an
	// operator or a cast, an aggregate's support, or a domain's CHECK.
	sqlVolatileReached = `
WITH rule AS (
    SELECT r.oid FROM pg_rewrite r WHERE r.ev_class = $1::regclass
), dep AS (
    SELECT d.refclassid, d.refobjid FROM pg_depend d JOIN rule ON d.objid = rule.oid WHERE d.classid = 'pg_rewrite'::regclass
), direct AS (
    SELECT refobjid AS fn FROM dep WHERE refclassid = 'pg_proc'::regclass
    UNION SELECT o.oprcode::oid FROM dep JOIN pg_operator o ON o.oid = dep.refobjid WHERE dep.refclassid = 'pg_operator'::regclass
    UNION SELECT cd.refobjid FROM dep JOIN pg_type t ON t.oid = dep.refobjid AND t.typtype = 'd'
          JOIN pg_constraint k ON k.contypid = t.oid
          JOIN pg_depend cd ON cd.classid = 'pg_constraint'::regclass AND cd.objid = k.oid AND cd.refclassid = 'pg_proc'::regclass
          WHERE dep.refclassid = 'pg_type'::regclass
), called AS (
    SELECT fn FROM direct
    UNION
    SELECT unnest(ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn]::oid[]) FROM pg_aggregate a JOIN direct ON a.aggfnoid = direct.fn
)
SELECT p.oid::regprocedure::text FROM pg_proc p JOIN called c ON c.fn = p.oid WHERE p.provolatile = 'v' ORDER BY 1`

	// Whether a column of a table is NOT NULL.
	sqlColumnNotNull = `SELECT coalesce((SELECT attnotnull FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped), false)`

	// The key columns of the index that identifies a table's rows: its
	// primary key, else the narrowest unique index over NOT NULL columns.
	sqlPrimaryKey = `
WITH k AS (
    SELECT (i.indkey::int2[])[0:i.indnkeyatts - 1] AS cols
    FROM pg_index i
    WHERE i.indrelid = $1::oid AND ` + catalog.IdentifyingIndex + `
    ORDER BY i.indisprimary DESC, i.indnkeyatts, i.indexrelid
    LIMIT 1)
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM k CROSS JOIN LATERAL unnest(k.cols) WITH ORDINALITY AS u(attnum, ord)
JOIN pg_attribute a ON a.attrelid = $1::oid AND a.attnum = u.attnum
ORDER BY u.ord`

	// The key columns of a Trellis target's unique index NULLS NOT
	// DISTINCT, with their types.
	sqlNullableKey = `
WITH k AS (
    SELECT (i.indkey::int2[])[0:i.indnkeyatts - 1] AS cols
    FROM pg_index i
    WHERE i.indrelid = $1::oid AND ` + catalog.NullableKeyIndex + `
    ORDER BY i.indnkeyatts, i.indexrelid
    LIMIT 1)
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM k CROSS JOIN LATERAL unnest(k.cols) WITH ORDINALITY AS u(attnum, ord)
JOIN pg_attribute a ON a.attrelid = $1::oid AND a.attnum = u.attnum
ORDER BY u.ord`

	// What PostgreSQL knows of every function called by a name.
	sqlFunctionKinds = `
SELECT coalesce(bool_or(p.provolatile = 'v'), false), coalesce(bool_or(p.proretset), false),
       coalesce(bool_or(p.prokind = 'a'), false), coalesce(bool_or(p.prokind = 'w'), false)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.proname = $1 AND ($2 = '' OR n.nspname = $2)`

	// The source row of a table by name, locked, with the OID it was
	// registered for.
	sqlSourceByName = `SELECT id, rel_oid::int8 FROM %[1]s.sources WHERE schema_name = $1 AND table_name = $2 FOR UPDATE`
	sqlInsertSource = `
INSERT INTO %[1]s.sources (schema_name, table_name, key_columns, key_types, partitioned, rel_oid)
VALUES ($1, $2, $3, $4, $5, $6::int8::oid)
RETURNING id, key_columns, key_types, cap_columns`
	sqlSourceRow = `SELECT key_columns, key_types, cap_columns FROM %[1]s.sources WHERE id = $1`
	// A source row whose table was dropped and created again (another OID)
	// describes the new table from scratch: capture to install, nothing
	// recorded of the old one's.
	sqlRenewSource = `
UPDATE %[1]s.sources SET rel_oid = $2::int8::oid, key_columns = $3, key_types = $4, partitioned = $5,
    cap_columns = '{}', cap_types = '{}', partitions = '{}', partition_ids = '{}', capture_state = 'pending', installed_at = NULL,
    fingerprint = NULL, disrupted_at = NULL, disruption = NULL
WHERE id = $1
RETURNING key_columns, key_types, cap_columns`
	sqlWidenSource = `
UPDATE %[1]s.sources SET cap_columns = cap_columns || $2::text[], cap_types = cap_types || $3::text[],
    capture_state = 'pending'
WHERE id = $1`

	sqlColumns = `
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped
ORDER BY attnum`
	// sqlSourceRows is the planner's estimate of a table's rows (-1
	// before it was first analyzed or vacuumed): the partials' range size
	// is chosen from it (decision 0051).
	sqlSourceRows = `SELECT c.reltuples::float8 FROM pg_catalog.pg_class AS c WHERE c.oid = pg_catalog.to_regclass($1)`

	sqlTargetTypes = `
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`

	sqlInsertTransform = `
INSERT INTO %[1]s.transforms (target_schema, target_name, statement, spec, target_oid)
VALUES ($1, $2, $3, $4, to_regclass(pg_catalog.format('%%I.%%I', $1::text, $2::text))) RETURNING id`
	// Whether the table under a target's name is the one its transform
	// created (a transform defined before targets were tracked counts as so).
	sqlTargetIsOurs = `
SELECT coalesce(to_regclass(pg_catalog.format('%%I.%%I', target_schema, target_name)) = coalesce(target_oid, to_regclass(pg_catalog.format('%%I.%%I', target_schema, target_name))), false)
FROM %[1]s.transforms WHERE id = $1`
	sqlInsertTransformSource = `INSERT INTO %[1]s.transform_sources (transform_id, source_id) VALUES ($1, $2)`

	sqlFindByName = `
SELECT target_schema FROM %[1]s.transforms WHERE target_name = $1
ORDER BY (target_schema = $2) DESC, target_schema`

	sqlSetPaused = `
UPDATE %[1]s.transforms SET state = 'paused', state_since = clock_timestamp(), paused_reason = $2
WHERE id = $1 AND state <> 'paused'`
	sqlSetRebuild = `
UPDATE %[1]s.transforms SET state = $2, state_since = clock_timestamp(), paused_reason = NULL,
    build_kind = 'rebuild', build_cursor = NULL, build_started = NULL,
    failure_kind = NULL, failure_table = NULL, failure_error = NULL, failure_columns = NULL, failure_at = NULL,
    build_attempts = 0, build_error = NULL, build_next_at = NULL
WHERE id = $1`
	sqlDisruptedSources = `
SELECT s.schema_name || '.' || s.table_name, to_regclass(format('%%I.%%I', s.schema_name, s.table_name)) IS NOT NULL
FROM %[1]s.sources s JOIN %[1]s.transform_sources ts ON ts.source_id = s.id
WHERE ts.transform_id = $1 AND s.disrupted_at IS NOT NULL`
	sqlReinstallDisrupted = `
UPDATE %[1]s.sources s SET capture_state = 'pending', disrupted_at = NULL, disruption = NULL
FROM %[1]s.transform_sources ts
WHERE ts.source_id = s.id AND ts.transform_id = $1 AND s.disrupted_at IS NOT NULL`
	sqlDisrupted   = `SELECT schema_name || '.' || table_name FROM %[1]s.sources WHERE disrupted_at IS NOT NULL ORDER BY 1`
	sqlSetSpec     = `UPDATE %[1]s.transforms SET spec = $2 WHERE id = $1`
	sqlDeleteTrans = `DELETE FROM %[1]s.transforms WHERE id = $1`
	sqlReaders     = `
SELECT t.target_schema || '.' || t.target_name, t.spec
FROM %[1]s.transforms t JOIN %[1]s.transform_sources ts ON ts.transform_id = t.id
JOIN %[1]s.sources s ON s.id = ts.source_id
WHERE s.schema_name = $1 AND s.table_name = $2 AND t.id <> $3`
	// The capture record of a table no transform reads.
	sqlSourceOfTable = `
SELECT s.id, s.schema_name, s.table_name, s.key_columns, s.key_types, s.cap_columns, s.cap_types, s.partitioned
FROM %[1]s.sources s WHERE s.schema_name = $1 AND s.table_name = $2
  AND NOT EXISTS (SELECT 1 FROM %[1]s.transform_sources ts WHERE ts.source_id = s.id)`
	sqlDeleteUnreadSource = `DELETE FROM %[1]s.sources s WHERE id = $1
  AND NOT EXISTS (SELECT 1 FROM %[1]s.transform_sources ts WHERE ts.source_id = s.id)`
	sqlColumnBuild     = `INSERT INTO %[1]s.column_builds (transform_id, column_name) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	sqlDropColumnBuild = `DELETE FROM %[1]s.column_builds WHERE transform_id = $1 AND column_name = $2`
	sqlColumnBuilds    = `SELECT column_name FROM %[1]s.column_builds WHERE transform_id = $1 ORDER BY since, column_name`

	sqlNotify = `SELECT pg_notify($1, '')`

	sqlCaptureWait = `
SELECT w.operation, w.table_name, w.lock_mode, w.blockers, w.since
FROM %[1]s.capture_waits w JOIN %[1]s.transform_sources ts ON ts.source_id = w.source_id
WHERE ts.transform_id = $1 ORDER BY w.since LIMIT 1`

	// Every live or building reader of a captured source is rebuilt.
	sqlRequestBackfill = `
UPDATE %[1]s.transforms t SET state = 'backfilling', state_since = clock_timestamp(), build_kind = 'rebuild',
    build_cursor = NULL, build_started = NULL
FROM %[1]s.transform_sources ts JOIN %[1]s.sources s ON s.id = ts.source_id
WHERE ts.transform_id = t.id AND s.schema_name = $1 AND s.table_name = $2 AND s.capture_state = 'installed'
  AND t.state <> 'paused'`
	sqlIsCaptured = `SELECT EXISTS (SELECT 1 FROM %[1]s.sources WHERE schema_name = $1 AND table_name = $2 AND capture_state = 'installed')`

	// The leading columns (or expressions) of every valid index of a table.
	// An index dropped while this runs has no definition (NULL): skipped.
	sqlIndexLeads = `
SELECT array_agg(d.def ORDER BY k.n)
FROM pg_index i CROSS JOIN LATERAL generate_series(1, $2::int) AS k(n)
CROSS JOIN LATERAL (SELECT pg_get_indexdef(i.indexrelid, k.n, true) AS def OFFSET 0) d
WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND i.indnkeyatts >= $2::int AND i.indpred IS NULL
GROUP BY i.indexrelid
HAVING count(d.def) = count(*)`
	// The leading n columns of every valid btree index of a table, each
	// with its options (indoption: 1 DESC, 2 NULLS FIRST).
	sqlIndexOrders = `
SELECT array_agg(pg_get_indexdef(i.indexrelid, k.n, true) ORDER BY k.n), array_agg(i.indoption[k.n - 1] ORDER BY k.n)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam AND a.amname = 'btree'
CROSS JOIN generate_series(1, $2::int) AS k(n)
WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND i.indnkeyatts >= $2::int AND i.indpred IS NULL
GROUP BY i.indexrelid`
	// The planner's estimate of a table's rows, partitions included (0 for
	// a table never analyzed or vacuumed).
	sqlRowEstimate = `
SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::int8 FROM pg_class c
WHERE c.oid = to_regclass($1) OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass($1))`
	sqlCorrections = `SELECT node, since FROM %[1]s.corrections WHERE transform_id = $1 ORDER BY since, node`

	// Liveness: a granted advisory lock in this database.

	// Quarantine (quarantine.go).
	sqlHeldKeys        = `SELECT count(*), min(at) FROM %[1]s.quarantine WHERE transform_id = $1 AND column_name = ''`
	sqlOldestHeldError = `
SELECT error, coalesce(sqlstate, '') FROM %[1]s.quarantine WHERE transform_id = $1 AND column_name = ''
ORDER BY at LIMIT 1`
	sqlQuarantinedColumns = `
SELECT c.column_name, c.error, c.sqlstate, c.since,
       (SELECT count(*) FROM %[1]s.quarantine q WHERE q.transform_id = c.transform_id AND q.column_name = c.column_name)
FROM %[1]s.quarantined_columns c WHERE c.transform_id = $1`
	sqlSample = `
SELECT src_table, key_text, error FROM %[1]s.quarantine
WHERE transform_id = $1 AND column_name = $2
  AND ($3::text IS NULL OR (src_table, key_text) > ($3::text, $4::text))
ORDER BY src_table, key_text LIMIT $5`
	sqlPoisonedSince = `
SELECT t.target_schema || '.' || t.target_name, q.src_table, q.key_text, q.error, q.at
FROM %[1]s.quarantine q JOIN %[1]s.transforms t ON t.id = q.transform_id
WHERE q.column_name = '' AND q.at > $1
ORDER BY q.at, t.id, q.src_table, q.key_text`
	// A key held, named by its table qualified or bare.
	sqlReleaseKey = `
DELETE FROM %[1]s.quarantine
WHERE transform_id = $1 AND column_name = '' AND key_text = $3
  AND (src_table = $2 OR split_part(src_table, '.', 2) = $2)
RETURNING key, source_row, src_table`
	sqlReleaseAll = `DELETE FROM %[1]s.quarantine WHERE transform_id = $1 AND column_name = '' RETURNING key, source_row, src_table`
	// A column quarantined or paused, and its samples.
	sqlColumnPause = `
INSERT INTO %[1]s.quarantined_columns (transform_id, column_name, error) VALUES ($1, $2, '')
ON CONFLICT (transform_id, column_name) DO NOTHING`
	sqlColumnUnquarantine = `
WITH d AS (DELETE FROM %[1]s.quarantined_columns WHERE transform_id = $1 AND column_name = $2)
DELETE FROM %[1]s.quarantine WHERE transform_id = $1 AND column_name = $2`

	// A source index gap's fix, checked on an empty copy of the table
	// named as the definition's alias (so its qualified column references
	// resolve), then rendered back by PostgreSQL: %s are the quoted alias,
	// then the table, then the index's expressions.
	sqlIndexProbeTable = `CREATE TEMPORARY TABLE %s (LIKE %s) ON COMMIT DROP`
	sqlIndexProbe      = `CREATE INDEX trellis_index_probe ON pg_temp.%s (%s)`
	sqlIndexProbeDef   = `
SELECT pg_get_indexdef(i.oid), array_agg(pg_get_indexdef(i.oid, k.n, true) ORDER BY k.n)
FROM (SELECT 'pg_temp.trellis_index_probe'::regclass::oid AS oid) i CROSS JOIN generate_series(1, $1::int) AS k(n)
GROUP BY i.oid`
)

// Statements on a target table (%[2]s), a column of it (%[3]s) and a type
// PostgreSQL formatted (%[4]s).
const (
	sqlDropTarget = `DROP TABLE IF EXISTS %[2]s`
	sqlFormatType = `SELECT format_type($1::oid, $2)`
	// The search_path types are formatted under (pinnedQuery).
	sqlSearchPath    = `SELECT pg_catalog.current_setting('search_path')`
	sqlSetSearchPath = `SELECT pg_catalog.set_config('search_path', $1, true)`
	sqlAddColumn     = `ALTER TABLE %[2]s ADD COLUMN %[3]s %[4]s`
	sqlDropColumn    = `ALTER TABLE %[2]s DROP COLUMN %[3]s`
)

// The views a definition reads (views.go).
const (
	// sqlViewFacts reads a view's definition (printed under the pinned
	// search_path, so every name outside pg_catalog is qualified), its
	// fingerprint, and whether it is a security_barrier or
	// security_invoker view. Parameter: its oid.
	sqlViewFacts = `
SELECT pg_get_viewdef(c.oid), md5(pg_get_viewdef(c.oid)),
       EXISTS (SELECT 1 FROM unnest(coalesce(c.reloptions, '{}')) o WHERE lower(o) ~ '^security_barrier=(true|on|yes|1)$'),
       EXISTS (SELECT 1 FROM unnest(coalesce(c.reloptions, '{}')) o WHERE lower(o) ~ '^security_invoker=(true|on|yes|1)$')
FROM pg_class c WHERE c.oid = $1::oid`

	// sqlViewTables lists the tables a view's query reads directly, with
	// whether the session may read them and whether they have row level
	// security enabled. Parameter: the view's oid.
	sqlViewTables = `
SELECT DISTINCT t.oid::regclass::text, has_table_privilege(t.oid, 'SELECT'), t.relrowsecurity
FROM pg_rewrite r
JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid AND d.refclassid = 'pg_class'::regclass
JOIN pg_class t ON t.oid = d.refobjid AND t.oid <> r.ev_class AND t.relkind IN ('r', 'p')
WHERE r.ev_class = $1::oid
ORDER BY 1`
)
