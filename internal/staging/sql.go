package staging

// The staging worker's SQL; %[1]s is the quoted catalog schema.
const (
	sqlPendingSources = `
SELECT s.id, s.schema_name, s.table_name, s.key_columns, s.key_types, s.cap_columns, s.cap_types, s.partitioned
FROM %[1]s.sources s
WHERE s.capture_state = 'pending'
  AND EXISTS (SELECT 1 FROM %[1]s.transform_sources ts WHERE ts.source_id = s.id)
ORDER BY s.id`

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
	sqlPartitionedSources = `
SELECT id, schema_name, table_name, key_columns, key_types, cap_columns, cap_types, partitioned, partitions
FROM %[1]s.sources WHERE partitioned AND capture_state = 'installed' ORDER BY id`
	sqlSetPartitions = `UPDATE %[1]s.sources SET partitions = $2 WHERE id = $1`
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

	// Transforms with a build to run whose sources are all captured.
	sqlBuildable = `
SELECT t.id FROM %[1]s.transforms t
WHERE t.state IN ('waiting_to_backfill', 'backfilling')
  AND (t.build_next_at IS NULL OR t.build_next_at <= clock_timestamp())
  AND NOT EXISTS (SELECT 1 FROM %[1]s.transform_sources ts JOIN %[1]s.sources s ON s.id = ts.source_id
                  WHERE ts.transform_id = t.id AND s.capture_state <> 'installed')
ORDER BY t.id`

	sqlLockShared = `SELECT pg_advisory_xact_lock_shared($1)`

	sqlBuildProgress = `
UPDATE %[1]s.transforms SET build_cursor = $2, build_rows = build_rows + $3,
    state = 'backfilling',
    state_since = CASE WHEN state = 'backfilling' THEN state_since ELSE clock_timestamp() END,
    build_started = coalesce(build_started, clock_timestamp())
WHERE id = $1`
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

	// Ring maintenance.
	sqlRing = `SELECT cur, nsegs, extract(epoch FROM clock_timestamp() - rotated_at) FROM %[1]s.ring`
	// The drained frontier: the newest cut whose pages, and all older ones, are done.
	sqlFrontier = `
SELECT n, snap::text FROM %[1]s.cuts
WHERE n <= coalesce((SELECT min(cut) - 1 FROM %[1]s.pages WHERE NOT done), (SELECT max(n) FROM %[1]s.cuts))
ORDER BY n DESC LIMIT 1`
	sqlSegmentHasRows   = `SELECT EXISTS (SELECT 1 FROM %[1]s.%[2]s)`
	sqlSegmentUndrained = `SELECT EXISTS (SELECT 1 FROM %[1]s.%[2]s WHERE NOT pg_visible_in_snapshot(xid, $1::pg_snapshot))`
	sqlLockSegment      = `LOCK TABLE %[1]s.%[2]s IN ACCESS EXCLUSIVE MODE`
	sqlTruncateSegment  = `TRUNCATE %[1]s.%[2]s`
	sqlRotate           = `UPDATE %[1]s.ring SET cur = $1, rotated_at = clock_timestamp() WHERE cur = $2`
	sqlPrunePages       = `DELETE FROM %[1]s.pages WHERE done AND cut <= $1`
	sqlPruneCuts        = `DELETE FROM %[1]s.cuts WHERE n < $1`
)
