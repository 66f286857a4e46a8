package locks

const (
	sqlXactLock       = `SELECT pg_advisory_xact_lock($1)`
	sqlXactLockShared = `SELECT pg_advisory_xact_lock_shared($1)`
	sqlXactTryLock    = `SELECT pg_try_advisory_xact_lock($1)`
	sqlLock           = `SELECT pg_advisory_lock($1)`
	sqlLockShared     = `SELECT pg_advisory_lock_shared($1)`
	sqlTryLock        = `SELECT pg_try_advisory_lock($1)`
	sqlUnlock         = `SELECT pg_advisory_unlock($1)`
	sqlUnlockAll      = `SELECT pg_advisory_unlock_all()`

	// A bigint advisory lock shows in pg_locks as classid (high 32 bits)
	// and objid (low 32 bits) with objsubid 1.
	sqlHeld = `
SELECT EXISTS (SELECT 1 FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND objsubid = 1
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND classid = $1::bigint::oid AND objid = $2::bigint::oid)`

	// Key locks, taken in sorted order in one statement so two pages never
	// deadlock: the subquery's ORDER BY feeds the aggregate in order.
	sqlKeyLocks = `
SELECT count(pg_advisory_xact_lock(k)), set_config('lock_timeout', $2, true)
FROM (SELECT DISTINCT k FROM unnest($1::bigint[]) AS u(k) ORDER BY k) s`

	sqlSetLockTimeout = `SELECT set_config('lock_timeout', $1, true)`
)
