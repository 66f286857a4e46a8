package selfcheck

// The self-check's SQL; %[1]s is the quoted catalog schema.
const (
	// A new job, or the finished one of the transform replaced by it. No row
	// when the transform has an unfinished job: that one stands.
	sqlStart = `
INSERT INTO %[1]s.self_checks (transform_id, mode, timeout_ms) VALUES ($1, $2, $3)
ON CONFLICT (transform_id) DO UPDATE SET id = DEFAULT, mode = EXCLUDED.mode, timeout_ms = EXCLUDED.timeout_ms,
    state = 'queued', rows_compared = 0, report = NULL, error = NULL, claim = NULL, heartbeat_at = NULL,
    queued_at = clock_timestamp(), started_at = NULL, finished_at = NULL
WHERE %[1]s.self_checks.state IN ('done', 'failed', 'cancelled')
RETURNING id`
	sqlJobOf = `SELECT id FROM %[1]s.self_checks WHERE transform_id = $1`

	sqlJob = `
SELECT j.id, j.transform_id, t.target_schema, t.target_name, j.mode, j.timeout_ms, j.state, j.rows_compared,
       j.report, j.error, j.queued_at, j.started_at, j.finished_at
FROM %[1]s.self_checks j JOIN %[1]s.transforms t ON t.id = j.transform_id
WHERE j.id = $1`

	// A queued job, or a running one whose runner stopped beating.
	sqlClaim = `
UPDATE %[1]s.self_checks SET state = 'running', claim = $1, heartbeat_at = clock_timestamp(),
    started_at = clock_timestamp(), rows_compared = 0
WHERE id = (SELECT id FROM %[1]s.self_checks
            WHERE state = 'queued' OR (state = 'running' AND heartbeat_at < clock_timestamp() - $2 * interval '1 millisecond')
            ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, transform_id, mode, timeout_ms`
	sqlBeat = `
UPDATE %[1]s.self_checks SET heartbeat_at = clock_timestamp()
WHERE id = $1 AND claim = $2 AND state = 'running'`
	sqlProgress = `
UPDATE %[1]s.self_checks SET rows_compared = $3, heartbeat_at = clock_timestamp()
WHERE id = $1 AND claim = $2 AND state = 'running'`
	sqlFinish = `
UPDATE %[1]s.self_checks SET state = $3, report = $4, error = $5, rows_compared = coalesce($6, rows_compared),
    finished_at = clock_timestamp(), claim = NULL, heartbeat_at = NULL
WHERE id = $1 AND claim = $2 AND state = 'running'`
	sqlRequeue = `
UPDATE %[1]s.self_checks SET state = 'queued', claim = NULL, heartbeat_at = NULL, started_at = NULL, rows_compared = 0
WHERE id = $1 AND claim = $2 AND state = 'running'`

	sqlHeldUnits = `SELECT key FROM %[1]s.quarantine WHERE transform_id = $1 AND column_name = ''`
	sqlHeld      = `SELECT count(*), min(at) FROM %[1]s.quarantine WHERE transform_id = $1 AND column_name = ''`
)
