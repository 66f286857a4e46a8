package recompute

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/locks"
)

// ApplyLockTimeout bounds how long a page or a build, once it holds its key
// locks, waits for a lock on a target or source (a session holding one
// for long): past it the page fails, is reported as a DrainFailure and
// retried with backoff, instead of holding up the transform (and every
// definition change) for as long as the other session likes.
const ApplyLockTimeout = 10 * time.Second

// LockKeys takes the transaction-level key locks (locks.Key), in sorted
// order so two holders of overlapping sets never deadlock; then the
// transaction's lock waits are bounded by ApplyLockTimeout.
func LockKeys(ctx context.Context, tx pgx.Tx, keys []int64) error {
	return locks.Keys(ctx, tx, keys, ApplyLockTimeout)
}

// LockAll takes every key lock of a transform (all its buckets): it waits
// for every page in flight on it.
func LockAll(ctx context.Context, tx pgx.Tx, schema string, transformID int) error {
	keys := make([]int64, ledger.Buckets)
	for b := range keys {
		keys[b] = locks.Key(schema, transformID, b)
	}
	return LockKeys(ctx, tx, keys)
}
