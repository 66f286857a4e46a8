package staging

import "github.com/trellis-pg/trellis/internal/catalog"

// The staging worker's SQL, in the project's convention: %[1]s is the
// quoted catalog schema, further parts (quoted identifiers, or SQL built
// from them) are %[2]s on, all filled in by catalog.Catalog.SQL.
const (
	sqlPendingSources = `
SELECT s.id, s.schema_name, s.table_name, s.key_columns, s.key_types, s.cap_columns, s.cap_types, s.partitioned
FROM %[1]s.sources s
WHERE s.capture_state = 'pending'
  AND EXISTS (SELECT 1 FROM %[1]s.transform_sources ts JOIN %[1]s.transforms t ON t.id = ts.transform_id
              WHERE ts.source_id = s.id AND t.state <> 'paused')
ORDER BY s.id`

	// The readers of a source whose capture cannot be installed, paused
	// with a capture failure.
	sqlInstallFailure = `
UPDATE %[1]s.transforms t SET state = 'paused', state_since = clock_timestamp(), paused_reason = $3,
    failure_kind = 'capture', failure_table = $2, failure_error = $3, failure_columns = '{}', failure_at = clock_timestamp()
FROM %[1]s.transform_sources ts WHERE ts.transform_id = t.id AND ts.source_id = $1 AND t.state <> 'paused'`

	// Every transform that is live or building is rebuilt from its
	// sources (a ledger segment and the changes it held were lost).
	sqlRederiveAll = `
UPDATE %[1]s.transforms SET state = 'backfilling', state_since = clock_timestamp(), build_kind = 'rebuild',
    build_cursor = NULL, build_started = NULL
WHERE state IN ('backfilling', 'live')`

	sqlOrphanSources = `
SELECT s.id, s.schema_name, s.table_name, s.key_columns, s.key_types, s.cap_columns, s.cap_types, s.partitioned
FROM %[1]s.sources s
WHERE NOT EXISTS (SELECT 1 FROM %[1]s.transform_sources ts WHERE ts.source_id = s.id)
ORDER BY s.id`

	// Only the layout that was installed counts: a define may have widened
	// the source meanwhile, and then it stays pending for the next pass.
	sqlMarkInstalled = `UPDATE %[1]s.sources SET capture_state = 'installed', installed_at = clock_timestamp(), partitions = $2
WHERE id = $1 AND cap_columns = coalesce($3::text[], '{}')`

	// The leaf partitions of a partitioned table, as quoted qualified names.
	sqlLeafPartitions = `
SELECT format('%I.%I', n.nspname, c.relname)
FROM pg_partition_tree(to_regclass($1)) t
JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE t.isleaf AND t.level > 0 ORDER BY 1`
	// Each leaf's identity: its OID and the row versions of the pg_inherits
	// rows that attach it (and its ancestors below the source), which every
	// ATTACH inserts anew; and whether its storage was replaced since it
	// was created (TRUNCATE gives it a new relfilenode).
	sqlLeafIdentities = `
SELECT format('%I.%I', n.nspname, c.relname),
       c.oid::text || ':' || coalesce((SELECT string_agg(i.xmin::text, ',' ORDER BY i.inhrelid) FROM pg_inherits i
                                       WHERE i.inhrelid IN (SELECT a.relid FROM pg_partition_ancestors(c.oid) a)
                                         AND i.inhrelid <> to_regclass($1)), ''),
       c.relfilenode <> c.oid
FROM pg_partition_tree(to_regclass($1)) t
JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE t.isleaf AND t.level > 0 ORDER BY 1`
	sqlPartitionedSources = `
SELECT id, schema_name, table_name, key_columns, key_types, cap_columns, cap_types, partitioned, partitions, partition_ids
FROM %[1]s.sources WHERE partitioned AND capture_state = 'installed' ORDER BY id`
	sqlSetPartitions = `UPDATE %[1]s.sources SET partitions = $2, partition_ids = $3 WHERE id = $1`
	// A partition set change: every transform reading the source re-derives
	// its target, with the changed partitions listed as corrections.
	sqlCorrect = `
WITH r AS (
  UPDATE %[1]s.transforms t SET state = 'backfilling', state_since = clock_timestamp(),
      build_kind = 'rebuild', build_cursor = NULL, build_started = NULL
  FROM %[1]s.transform_sources ts
  WHERE ts.transform_id = t.id AND ts.source_id = $1 AND t.state <> 'paused'
  RETURNING t.id)
INSERT INTO %[1]s.corrections (transform_id, node)
SELECT r.id, n FROM r, unnest($2::text[]) n ON CONFLICT DO NOTHING`
	sqlCorrectionsDone = `DELETE FROM %[1]s.corrections WHERE transform_id = $1`
	sqlDeleteSource    = `DELETE FROM %[1]s.sources s WHERE id = $1
  AND NOT EXISTS (SELECT 1 FROM %[1]s.transform_sources ts WHERE ts.source_id = s.id)`

	// Transforms with a build to run whose sources are all captured,
	// recording every column whose old values the transform needs ($1 is
	// the mark of a captured column no longer recorded: one that was
	// dropped, and is recorded again once it is back).
	sqlBuildable = `
SELECT t.id FROM %[1]s.transforms t
WHERE t.state IN ('waiting_to_backfill', 'backfilling')
  AND (t.build_next_at IS NULL OR t.build_next_at <= clock_timestamp())
  AND NOT EXISTS (SELECT 1 FROM %[1]s.transform_sources ts JOIN %[1]s.sources s ON s.id = ts.source_id
                  WHERE ts.transform_id = t.id AND s.capture_state <> 'installed')
  AND NOT EXISTS (
      SELECT 1 FROM %[1]s.transform_sources ts JOIN %[1]s.sources s ON s.id = ts.source_id
      CROSS JOIN LATERAL unnest(s.cap_columns, s.cap_types) AS cc(col, typ)
      WHERE ts.transform_id = t.id AND right(cc.typ, length($1)) = $1
        AND ((t.spec->'source'->>'id')::int = s.id AND coalesce(t.spec->'source'->'needs', '[]') ? cc.col
          OR (t.spec->'join'->'source'->>'id')::int = s.id AND coalesce(t.spec->'join'->'source'->'needs', '[]') ? cc.col))
ORDER BY t.id`

	// Sources whose table has lost a column or the primary key capture or
	// its readers rely on, whose plain table is linked by inheritance (a
	// partition, a parent or a child: some writes then fire no statement
	// trigger of it), or has a dropped captured column back ($1 is the
	// mark of a captured column no longer recorded). readers are the
	// transforms to check (MissingReads): those reading it that are not
	// paused, or paused by a halt (a halt a dropped column caused is
	// reported as the capture failure it is). refit says capture itself no
	// longer fits the table. A table that is gone is the disruption check's.
	sqlReadsCheck = `
WITH s AS (
  SELECT s.*, to_regclass(format('%%I.%%I', s.schema_name, s.table_name)) AS rel
  FROM %[1]s.sources s
  WHERE s.capture_state = 'installed' AND s.disrupted_at IS NULL
), x AS (
  SELECT s.id, s.key_columns, s.cap_columns, s.cap_types, a.names,
         coalesce(pk.cols, '{}') <> (SELECT coalesce(array_agg(k ORDER BY k), '{}') FROM unnest(s.key_columns) k) AS unkeyed,
         coalesce((SELECT array_agg(t.id ORDER BY t.id)
                   FROM %[1]s.transform_sources ts JOIN %[1]s.transforms t ON t.id = ts.transform_id
                   WHERE ts.source_id = s.id AND (t.state <> 'paused' OR t.failure_kind = 'halt')), '{}') AS readers,
         EXISTS (SELECT 1 FROM %[1]s.transform_sources ts JOIN %[1]s.transforms t ON t.id = ts.transform_id
                 CROSS JOIN LATERAL jsonb_array_elements_text(
                     CASE WHEN (t.spec->'source'->>'id')::int = s.id THEN coalesce(t.spec->'reads', '[]') ELSE '[]' END ||
                     CASE WHEN (t.spec->'join'->'source'->>'id')::int = s.id THEN coalesce(t.spec->'join'->'source'->'reads', '[]') ELSE '[]' END) AS r(col)
                 WHERE ts.source_id = s.id AND (t.state <> 'paused' OR t.failure_kind = 'halt') AND r.col <> ALL (a.names)) AS unread,
         (SELECT c.relkind = 'r' FROM pg_class c WHERE c.oid = s.rel)
             AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = s.rel OR i.inhparent = s.rel) AS linked
  FROM s
  CROSS JOIN LATERAL (SELECT coalesce(array_agg(attname::text), '{}') FROM pg_attribute
                      WHERE attrelid = s.rel AND NOT attisdropped) AS a(names)
  LEFT JOIN LATERAL (SELECT array_agg(at.attname::text ORDER BY at.attname)
                     FROM pg_index i JOIN pg_attribute at ON at.attrelid = i.indrelid AND at.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])
                     WHERE i.indrelid = s.rel AND ` + catalog.IdentifyingIndex + `
                     GROUP BY i.indexrelid
                     HAVING array_agg(at.attname::text ORDER BY at.attname) = (SELECT array_agg(k ORDER BY k) FROM unnest(s.key_columns) k)
                     LIMIT 1) AS pk(cols) ON true
  WHERE s.rel IS NOT NULL
)
SELECT id, CASE WHEN unkeyed OR unread OR linked THEN readers ELSE '{}' END, refit FROM (
  SELECT x.*,
         EXISTS (SELECT 1 FROM unnest(key_columns) k WHERE k <> ALL (names))
         OR EXISTS (SELECT 1 FROM unnest(cap_columns, cap_types) AS c(col, typ)
                    WHERE (right(typ, length($1)) = $1) = (col = ANY (names))) AS refit
  FROM x) y
WHERE (readers <> '{}' AND (unkeyed OR unread OR linked)) OR refit
ORDER BY id`

	// A source to fix, locked, with the current columns of its table and
	// their types.
	sqlSourceToFix = `
SELECT s.id, s.schema_name, s.table_name, s.key_columns, s.key_types, s.cap_columns, s.cap_types, s.partitioned, s.partitions,
       coalesce(a.names, '{}'), coalesce(a.types, '{}')
FROM %[1]s.sources s
LEFT JOIN LATERAL (SELECT array_agg(attname::text ORDER BY attnum), array_agg(format_type(atttypid, atttypmod) ORDER BY attnum)
                   FROM pg_attribute
                   WHERE attrelid = to_regclass(format('%%I.%%I', s.schema_name, s.table_name)) AND attnum > 0 AND NOT attisdropped) AS a(names, types) ON true
WHERE s.id = $1 AND s.capture_state = 'installed' AND s.disrupted_at IS NULL
FOR UPDATE OF s`

	// A transform paused with a capture failure of kind capture: a source
	// column it reads was dropped, or its source lost its primary key.
	sqlCaptureFailure = `
UPDATE %[1]s.transforms SET state = 'paused', state_since = clock_timestamp(), paused_reason = $4,
    failure_kind = 'capture', failure_table = $2, failure_columns = $3, failure_error = $4, failure_at = clock_timestamp()
WHERE id = $1 AND (state <> 'paused' OR failure_kind = 'halt')`

	sqlSetCapTypes = `UPDATE %[1]s.sources SET cap_types = $2 WHERE id = $1`
	sqlSetRemoved  = `UPDATE %[1]s.sources SET disrupted_at = clock_timestamp(), disruption = $2 WHERE id = $1`

	sqlBuildProgress = `
UPDATE %[1]s.transforms SET build_cursor = $2, build_rows = build_rows + $3,
    state = 'backfilling',
    state_since = CASE WHEN state = 'backfilling' THEN state_since ELSE clock_timestamp() END,
    build_started = coalesce(build_started, clock_timestamp())
WHERE id = $1`
	sqlBuildRows = `SELECT build_rows FROM %[1]s.transforms WHERE id = $1`
	sqlBuildDone = `
UPDATE %[1]s.transforms SET state = 'live', state_since = clock_timestamp(),
    build_cursor = NULL, build_started = NULL, build_kind = 'initial', build_rows = build_rows + $2
WHERE id = $1`
	sqlColumnBuildsDone = `DELETE FROM %[1]s.column_builds WHERE transform_id = $1`

	// A failed build page: counted, retried with backoff (200 ms doubling,
	// at most a minute), and after $3 attempts the transform pauses.
	sqlBuildFailed = `
UPDATE %[1]s.transforms SET build_attempts = build_attempts + 1, build_error = $2,
    build_next_at = CASE WHEN build_attempts + 1 >= $3 THEN clock_timestamp()
        ELSE clock_timestamp() + least(200 * 2 ^ least(build_attempts, 10), 60000) * interval '1 millisecond' END,
    state = CASE WHEN build_attempts + 1 >= $3 THEN 'paused' ELSE state END,
    paused_reason = CASE WHEN build_attempts + 1 >= $3 THEN 'its build keeps failing: ' || $2 ELSE paused_reason END,
    state_since = CASE WHEN build_attempts + 1 >= $3 THEN clock_timestamp() ELSE state_since END
WHERE id = $1
RETURNING build_attempts, state`
	sqlBuildOK = `UPDATE %[1]s.transforms SET build_attempts = 0, build_error = NULL, build_next_at = NULL WHERE id = $1 AND build_attempts > 0`
	sqlBumpGen = `UPDATE %[1]s.trellis_instance SET gen = gen + 1`

	sqlWait = `
INSERT INTO %[1]s.capture_waits (source_id, operation, table_name, lock_mode, blockers)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (source_id) DO UPDATE SET blockers = EXCLUDED.blockers, operation = EXCLUDED.operation`
	sqlWaitDone = `DELETE FROM %[1]s.capture_waits WHERE source_id = $1`

	// Whether a source is small enough to build in one statement (a plain
	// table at most $5 rows by PostgreSQL's estimate, -1 when never
	// analysed, and at most $6 bytes), and the name of the target's primary
	// key constraint ("" if none).
	sqlOneShotCheck = `
SELECT coalesce((SELECT c.relkind = 'r' AND NOT c.relhassubclass AND c.reltuples <= $5 AND pg_table_size(c.oid) <= $6
                 FROM pg_class c WHERE c.oid = to_regclass(format('%I.%I', $1::text, $2::text))), false),
       coalesce((SELECT k.conname::text FROM pg_constraint k
                 WHERE k.conrelid = to_regclass(format('%I.%I', $3::text, $4::text)) AND k.contype = 'p'), '')`

	// The unique index Trellis gave a join or aggregate target, and its
	// definition as PostgreSQL renders it.
	sqlKeyIndex = `
SELECT c.relname::text, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass(format('%I.%I', $1::text, $2::text)) AND i.indisunique
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
ORDER BY i.indexrelid LIMIT 1`
)

// Statements around a source or target table (%[2]s, and %[3]s for a
// constraint or a key list), and the fingerprint expression
// (capture.Names.FingerprintSQL).
const (
	sqlSetFingerprint = `UPDATE %[1]s.sources s SET fingerprint = %[2]s WHERE id = $1`
	sqlTableExists    = `SELECT to_regclass($1) IS NOT NULL`
	sqlLockTable      = `LOCK TABLE %[2]s IN %[3]s MODE`
	sqlAnalyze        = `ANALYZE %[2]s`
	sqlHasRows        = `SELECT EXISTS (SELECT 1 FROM %[2]s)`
	sqlCountReads     = `SELECT count(*) FROM (%[2]s) x`
	sqlDropConstraint = `ALTER TABLE %[2]s DROP CONSTRAINT %[3]s`
	sqlAddPrimaryKey  = `ALTER TABLE %[2]s ADD CONSTRAINT %[3]s PRIMARY KEY (%[4]s)`
)

// sqlOrderedScan makes the rest of a savepoint's scans run in the order of
// an index, row by row, without parallel workers (staging's failure scans).
const sqlOrderedScan = `SELECT set_config('enable_sort', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)`

// The savepoint a failure scan runs under, and the rollback to it after a
// row raised (staging's failure scans).
const (
	sqlScanSavepoint = `SAVEPOINT trellis_failure_scan`
	sqlScanRollback  = `ROLLBACK TO SAVEPOINT trellis_failure_scan`
)
