package capture

// The capture package's static SQL, in the project's convention: %[1]s is
// the quoted catalog schema and %[2]s the fingerprint expression
// (Names.FingerprintSQL), both filled in by catalog.Catalog.SQL. The
// capture functions and triggers are generated per source (capture.go).
const (
	sqlAnyDisrupted = `SELECT EXISTS (SELECT 1 FROM %[1]s.sources s
WHERE s.capture_state = 'installed' AND s.disrupted_at IS NULL AND s.fingerprint IS DISTINCT FROM %[2]s)`

	sqlDisrupted = `
SELECT s.id, s.schema_name || '.' || s.table_name, to_regclass(format('%%I.%%I', s.schema_name, s.table_name)) IS NOT NULL,
       coalesce(s.fingerprint, ''), %[2]s
FROM %[1]s.sources s
WHERE s.capture_state = 'installed' AND s.disrupted_at IS NULL AND s.fingerprint IS DISTINCT FROM %[2]s
ORDER BY s.id`

	sqlMarkDisrupted = `UPDATE %[1]s.sources SET disrupted_at = clock_timestamp(), disruption = $2 WHERE id = $1`

	sqlPauseDisrupted = `
UPDATE %[1]s.transforms t SET
    state = 'paused', state_since = clock_timestamp(), paused_reason = $3,
    failure_kind = 'disruption', failure_table = $2, failure_error = $3, failure_columns = '{}', failure_at = clock_timestamp()
FROM %[1]s.transform_sources ts WHERE ts.transform_id = t.id AND ts.source_id = $1 AND t.state <> 'paused'`

	// Statements without the schema are sent as written (a % is itself).
	sqlBlockers = `
SELECT format('pid %s (%s, %s since %s): %s', a.pid, coalesce(a.usename::text, '?'), coalesce(a.state, '?'),
       coalesce(to_char(coalesce(a.xact_start, a.query_start) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '?'),
       left(coalesce(a.query, ''), 200))
FROM pg_stat_activity a
WHERE a.pid IN (SELECT l.pid FROM pg_locks l WHERE l.relation = to_regclass($1) AND l.pid <> pg_backend_pid())
ORDER BY a.pid`

	sqlTableExists = `SELECT to_regclass($1) IS NOT NULL`
)
