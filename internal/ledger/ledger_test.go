package ledger_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

// fixture is a migrated catalog and its ledger.
type fixture struct {
	ctx  context.Context
	pool *pgxpool.Pool
	l    *ledger.Ledger
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, testsupport.Database(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, catalog.Migrate(ctx, pool, "trellis", "public"))
	return &fixture{ctx: ctx, pool: pool, l: &ledger.Ledger{Pool: pool, Cat: catalog.New("trellis")}}
}

// appendRows appends n changed keys of source src in bucket, the way
// capture does, in q's transaction.
func (f *fixture) appendRows(t *testing.T, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, src, bucket, n int) {
	t.Helper()
	_, err := q.Exec(f.ctx, `INSERT INTO trellis.ledger (seg, src, bucket, key)
SELECT (SELECT cur FROM trellis.ring), $1, $2, ARRAY[g::text] FROM generate_series(1, $3) g`, src, bucket, n)
	require.NoError(t, err)
}

type page struct {
	Cut     int64
	Buckets []int32
	Done    bool
}

func (f *fixture) pages(t *testing.T) []page {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT cut, buckets, done FROM trellis.pages ORDER BY id`)
	require.NoError(t, err)
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[page])
	require.NoError(t, err)
	return ps
}

func (f *fixture) cuts(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM trellis.cuts`).Scan(&n))
	return n
}

// finish marks the pages of a cut done, as a drain worker does once it
// applied them.
func (f *fixture) finish(t *testing.T, cut int64) {
	t.Helper()
	_, err := f.pool.Exec(f.ctx, `UPDATE trellis.pages SET done = true WHERE cut = $1`, cut)
	require.NoError(t, err)
}

func TestCutSplitsCommittedRowsIntoPages(t *testing.T) {
	t.Parallel()
	f := setup(t)

	// Nothing committed: an unforced cut records nothing.
	n, err := f.l.Cut(f.ctx, false)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 1, f.cuts(t), "only the cut the migration made")

	// A writer still open when the cut is taken.
	open, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = open.Rollback(context.WithoutCancel(f.ctx)) }()
	f.appendRows(t, open, 1, 5, 1)

	// Buckets 0 and 1 together exceed a page; 1 and 2 fit in one.
	f.appendRows(t, f.pool, 1, 0, 3000)
	f.appendRows(t, f.pool, 1, 1, 3000)
	f.appendRows(t, f.pool, 2, 2, 10)
	n, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	ps := f.pages(t)
	require.Len(t, ps, 2)
	require.Equal(t, []int32{0}, ps[0].Buckets)
	require.Equal(t, []int32{1, 2}, ps[1].Buckets)
	require.Equal(t, ps[0].Cut, ps[1].Cut, "one cut")

	// The open writer's row was not in that cut: it is in the next one,
	// once committed, so nothing is lost.
	require.NoError(t, open.Commit(f.ctx))
	n, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ps = f.pages(t)
	require.Len(t, ps, 3)
	require.Equal(t, []int32{5}, ps[2].Buckets)
	require.Greater(t, ps[2].Cut, ps[0].Cut)

	// A forced cut with nothing new records a cut and no page.
	before := f.cuts(t)
	n, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, before+1, f.cuts(t))
	require.Len(t, f.pages(t), 3)
}

func TestConvergedWaitsForThePagesOfItsToken(t *testing.T) {
	t.Parallel()
	f := setup(t)

	f.appendRows(t, f.pool, 1, 3, 10)
	f.appendRows(t, f.pool, 2, 4, 10)
	token, err := ledger.Snapshot(f.ctx, f.pool)
	require.NoError(t, err)

	// No cut covers the token yet: a wait forces one. Source 3 has no
	// changes, so nothing is pending for it.
	cutsBefore := f.cuts(t)
	require.NoError(t, f.l.Converged(f.ctx, token, 1, []int{3}, nil))
	require.Equal(t, cutsBefore+1, f.cuts(t), "the wait forced a cut")
	ps := f.pages(t)
	require.Len(t, ps, 1, "buckets 3 and 4 share a page")
	cut := ps[0].Cut

	// While the page is pending, neither source has converged.
	short, cancel := context.WithTimeout(f.ctx, 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, f.l.Converged(short, token, 1, nil, nil), context.DeadlineExceeded)
	short, cancel = context.WithTimeout(f.ctx, 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, f.l.Converged(short, token, 1, []int{2}, nil), context.DeadlineExceeded)

	// The page applied, a waiter returns (woken at once by wake).
	wake := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- f.l.Converged(f.ctx, token, 2, nil, wake) }()
	f.finish(t, cut)
	wake <- struct{}{}
	require.NoError(t, <-done)

	fr, err := f.l.DrainedFrontier(f.ctx, f.pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, fr.Cut, cut)
}

func TestConvergedOnlyWaitsForItsSources(t *testing.T) {
	t.Parallel()
	f := setup(t)

	// Source 1's page is applied; source 2's keeps failing.
	f.appendRows(t, f.pool, 1, 0, 10)
	_, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	f.appendRows(t, f.pool, 2, 1, 10)
	_, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	ps := f.pages(t)
	require.Len(t, ps, 2)
	f.finish(t, ps[0].Cut)

	token, err := ledger.Snapshot(f.ctx, f.pool)
	require.NoError(t, err)
	bounded, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, f.l.Converged(bounded, token, 1, []int{1}, nil), "source 2's page does not hold up source 1")

	fr, err := f.l.DrainedFrontier(f.ctx, f.pool)
	require.NoError(t, err)
	require.Equal(t, ps[0].Cut, fr.Cut, "the frontier stops before the pending page")
}

func (f *fixture) ring(t *testing.T) int {
	t.Helper()
	var cur int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT cur FROM trellis.ring`).Scan(&cur))
	return cur
}

func (f *fixture) segmentRows(t *testing.T, seg int) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, fmt.Sprintf(`SELECT count(*) FROM trellis.ledger_%d`, seg)).Scan(&n))
	return n
}

func TestMaintainRotatesAndReclaimsDrainedSegments(t *testing.T) {
	t.Parallel()
	f := setup(t)
	age := func() {
		t.Helper()
		_, err := f.pool.Exec(f.ctx, `UPDATE trellis.ring SET rotated_at = now() - interval '1 minute'`)
		require.NoError(t, err)
	}

	// A young segment is not rotated; an old one with rows is.
	f.appendRows(t, f.pool, 1, 0, 100)
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Equal(t, 0, f.ring(t))
	age()
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Equal(t, 1, f.ring(t), "writers moved on to segment 1")

	// Segment 0's rows are not drained yet: it stays.
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Equal(t, 100, f.segmentRows(t, 0))

	// Drained, but a writer still holds the segment: the reclaim gives way.
	_, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	ps := f.pages(t)
	require.Len(t, ps, 1)
	f.finish(t, ps[0].Cut)
	writer, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = writer.Rollback(context.WithoutCancel(f.ctx)) }()
	_, err = writer.Exec(f.ctx, `LOCK TABLE trellis.ledger_0 IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Equal(t, 100, f.segmentRows(t, 0))

	// Once the writer is gone, the segment is reclaimed and the finished
	// pages and the cuts before the frontier are pruned.
	require.NoError(t, writer.Rollback(f.ctx))
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Zero(t, f.segmentRows(t, 0))
	require.Empty(t, f.pages(t))
	require.Equal(t, 1, f.cuts(t), "the frontier's cut stays")

	// Rows in the current segment and an empty next one: rotation goes on
	// round the ring; a next segment still holding rows is not rotated into.
	f.appendRows(t, f.pool, 1, 0, 10)
	age()
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Equal(t, 2, f.ring(t))
	_, err = f.pool.Exec(f.ctx, `INSERT INTO trellis.ledger (seg, src, bucket, key) VALUES (3, 1, 0, '{x}')`)
	require.NoError(t, err)
	f.appendRows(t, f.pool, 1, 0, 10)
	age()
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Equal(t, 2, f.ring(t), "segment 3 still holds rows")
}
