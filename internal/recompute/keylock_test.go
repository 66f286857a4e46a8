package recompute

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/testsupport"
)

// LockKeys takes a set's locks in sorted order in one statement: a page
// waiting for its lowest key holds none of its higher ones, so two pages
// with overlapping sets never deadlock, and a third that needs only a
// higher key goes ahead. Once the locks are held, lock waits are bounded.
func TestLockKeysTakesLocksInOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, pool := testsupport.Pool(t)

	a, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = a.Rollback(context.WithoutCancel(ctx)) }()
	require.NoError(t, LockKeys(ctx, a, []int64{1}))

	// b wants 9 and 1, given in that order: it waits for 1, holding nothing.
	b, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = b.Rollback(context.WithoutCancel(ctx)) }()
	var bPID int
	require.NoError(t, b.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&bPID))
	bLocked := make(chan error, 1)
	go func() { bLocked <- LockKeys(ctx, b, []int64{9, 1}) }()
	require.Eventually(t, func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`, bPID).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 10*time.Millisecond, "b waits for key 1")

	// c needs only 9: b does not hold it, so c gets it at once.
	c, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = c.Rollback(context.WithoutCancel(ctx)) }()
	_, err = c.Exec(ctx, `SET LOCAL lock_timeout = '5s'`)
	require.NoError(t, err)
	require.NoError(t, LockKeys(ctx, c, []int64{9}))
	var timeout string
	require.NoError(t, c.QueryRow(ctx, `SHOW lock_timeout`).Scan(&timeout))
	require.Equal(t, "10s", timeout, "lock waits after the key locks are bounded by ApplyLockTimeout")

	// Once a and c are done, b gets both.
	require.NoError(t, a.Commit(ctx))
	require.NoError(t, c.Commit(ctx))
	require.NoError(t, <-bLocked)
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND granted`, bPID).Scan(&held))
	require.Equal(t, 2, held)
}
