package recompute

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/ledger"
)

// KeyLock is the advisory-lock key that serialises recomputes of one
// bucket of one transform's keys (shared with the staging worker's builds).
func KeyLock(schema string, transformID, bucket int) int64 {
	h := fnv.New32a()
	h.Write([]byte(schema))
	return int64(h.Sum32()&0x7fffffff)<<32 | int64(transformID)<<8 | int64(bucket)
}

// ApplyLockTimeout bounds how long a page or a build, once it holds its key
// locks, waits for a lock on a target or source (a session holding one
// for long): past it the page fails, is reported as a DrainFailure and
// retried with backoff, instead of holding up the transform (and every
// definition change) for as long as the other session likes.
const ApplyLockTimeout = 10 * time.Second

// LockKeys takes the transaction-level key locks, in sorted order in one
// statement, so two holders of overlapping sets never deadlock. Then the
// transaction's lock waits are bounded by ApplyLockTimeout.
func LockKeys(ctx context.Context, tx pgx.Tx, keys []int64) error {
	_, err := tx.Exec(ctx, sqlKeyLocks, keys, fmt.Sprintf("%dms", ApplyLockTimeout.Milliseconds()))
	return err
}

// LockAll takes every key lock of a transform (all its buckets): it waits
// for every page in flight on it.
func LockAll(ctx context.Context, tx pgx.Tx, schema string, transformID int) error {
	locks := make([]int64, ledger.Buckets)
	for b := range locks {
		locks[b] = KeyLock(schema, transformID, b)
	}
	return LockKeys(ctx, tx, locks)
}
