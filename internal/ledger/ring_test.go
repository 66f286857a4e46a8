package ledger_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/ledger"
)

// openPage is a page claimed and read in its own transaction, not yet done.
type openPage struct {
	tx   pgx.Tx
	page *ledger.Page
	keys []string
}

// open claims the next page and reads its changes, as a drain worker does
// before it recomputes them; it cuts (and waits for a writer) when none is due.
func (f *fixture) open(t *testing.T) *openPage {
	t.Helper()
	wait := backoff.Exponential{Min: time.Millisecond, Max: 20 * time.Millisecond}
	for {
		tx, err := f.pool.Begin(f.ctx)
		require.NoError(t, err)
		p, err := f.l.Claim(f.ctx, tx, 0)
		require.NoError(t, err)
		if p != nil {
			changes, err := f.l.Changes(f.ctx, tx, p)
			require.NoError(t, err)
			op := &openPage{tx: tx, page: p}
			for _, c := range changes {
				op.keys = append(op.keys, *c.Key[0])
			}
			return op
		}
		require.NoError(t, tx.Rollback(f.ctx))
		_, err = f.l.Cut(f.ctx, true)
		require.NoError(t, err)
		backoff.Sleep(f.ctx, wait.Next())
		require.NoError(t, f.ctx.Err())
	}
}

// TestRingReclaimsUnderSustainedLoad: with a writer appending all the time
// and drain pages in flight at every moment (two workers, each page's
// transaction open until the next one has been claimed and read), the
// ring still goes round: drained segments are reclaimed, the ledger keeps
// only recent rows, and every change is read by exactly one page.
//
// "Recent" is counted in rotations, not in a share of the rows: a row
// committed before rotation k is in the segment rotation k left or an
// older one, which must be reclaimed before the ring enters it again, by
// rotation k-1+nsegs at the latest. (A share depended on the writer's
// pace against the loop's: under load the last turn could hold most rows.)
func TestRingReclaimsUnderSustainedLoad(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wctx, stop := context.WithCancel(f.ctx)
	defer stop()

	// The writer: one changed key per transaction, appended to the
	// segment its start time picks, as capture does, as fast as it goes.
	var written atomic.Int64
	writerDone := make(chan error, 1)
	go func() {
		for n := 1; ; n++ {
			_, err := f.pool.Exec(wctx, `INSERT INTO trellis.ledger (seg, src, bucket, key)
SELECT `+ledger.SegmentAt(`now()`)+`, 1, $1::int % 64, ARRAY[$1::text]`, n)
			if wctx.Err() != nil {
				writerDone <- nil
				return
			}
			if err != nil {
				writerDone <- err
				return
			}
			written.Store(int64(n))
		}
	}()

	// Pages left open by a failure are rolled back, and the writer stopped,
	// before the pool closes.
	var open []*openPage
	defer func() {
		stop()
		<-writerDone
		for _, op := range open {
			_ = op.tx.Rollback(context.WithoutCancel(f.ctx))
		}
	}()
	seen := map[string]int{}
	finish := func(op *openPage) {
		t.Helper()
		require.NoError(t, f.l.Done(f.ctx, op.tx, op.page))
		require.NoError(t, op.tx.Commit(f.ctx))
		for _, k := range op.keys {
			seen[k]++
		}
	}

	// Eight rotations are two full turns; each segment must have been
	// reclaimed before the ring enters it again for its old rows to be
	// gone at the end.
	var nsegs int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT nsegs FROM trellis.ring`).Scan(&nsegs))
	const turns = 2
	// before[k] is a change committed before rotation k+1 began: the last
	// one committed before the ring was last seen in the turn before it.
	var before []int64
	committed := written.Load()
	_, last := f.ring(t)
	inFlight := f.open(t)
	open = append(open, inFlight)
	for len(before) < turns*nsegs {
		require.NoError(t, f.ctx.Err(), "the ring rotated %d times with pages in flight", len(before))
		next := f.open(t)
		open = append(open, next)
		require.NoError(t, f.l.Maintain(f.ctx))
		finish(inFlight)
		inFlight = next
		now := written.Load()
		_, turn := f.ring(t)
		for ; last < turn; last++ {
			before = append(before, committed)
		}
		committed = now
	}
	finish(inFlight)

	// Only recent rows are kept: every change committed before the last
	// nsegs-1 rotations is gone (and some were written since).
	gone := before[len(before)-nsegs]
	var oldest, kept int64
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT coalesce(min(key[1]::bigint), 0), count(*) FROM trellis.ledger`).Scan(&oldest, &kept))
	stop()
	require.NoError(t, <-writerDone)
	writerDone <- nil // for the deferred stop
	total := written.Load()
	require.Greater(t, gone, int64(0), "no change was committed before the last turn")
	require.Greater(t, oldest, gone, "the ledger keeps change %d, committed before the last %d rotations (it keeps %d of %d rows)", oldest, nsegs-1, kept, total)

	// Every change committed before a last cut is read by one page.
	_, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	for {
		tx, err := f.pool.Begin(f.ctx)
		require.NoError(t, err)
		p, err := f.l.Claim(f.ctx, tx, 0)
		require.NoError(t, err)
		if p == nil {
			require.NoError(t, tx.Rollback(f.ctx))
			break
		}
		changes, err := f.l.Changes(f.ctx, tx, p)
		require.NoError(t, err)
		finish(&openPage{tx: tx, page: p, keys: func() []string {
			var ks []string
			for _, c := range changes {
				ks = append(ks, *c.Key[0])
			}
			return ks
		}()})
	}
	for n := int64(1); n <= total; n++ {
		if c := seen[strconv.FormatInt(n, 10)]; c != 1 {
			require.Failf(t, "a change is lost or read twice", "key %d was read by %d pages", n, c)
		}
	}
}

// TestPageReadsEverySegmentItsRowsAreIn: a page whose rows straddle a
// rotation reads both segments, and a page cut by an older release (no
// segments recorded) reads the whole ledger.
func TestPageReadsEverySegmentItsRowsAreIn(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.pool.Exec(f.ctx, `INSERT INTO trellis.ledger (seg, src, bucket, key) VALUES (0, 1, 5, '{a}'), (2, 1, 5, '{b}'), (3, 1, 6, '{c}')`)
	require.NoError(t, err)
	n, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var segs []int32
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT segs FROM trellis.pages`).Scan(&segs))
	require.Equal(t, []int32{0, 2, 3}, segs)

	read := func() []string {
		tx, err := f.pool.Begin(f.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(f.ctx) }()
		p, err := f.l.Claim(f.ctx, tx, 0)
		require.NoError(t, err)
		require.NotNil(t, p)
		changes, err := f.l.Changes(f.ctx, tx, p)
		require.NoError(t, err)
		var ks []string
		for _, c := range changes {
			ks = append(ks, *c.Key[0])
		}
		return ks
	}
	require.ElementsMatch(t, []string{"a", "b", "c"}, read())

	_, err = f.pool.Exec(f.ctx, `UPDATE trellis.pages SET segs = NULL`)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b", "c"}, read())
}
