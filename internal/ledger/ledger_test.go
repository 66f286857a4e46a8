package ledger_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/backoff"
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
	_, pool := testsupport.Pool(t)
	require.NoError(t, catalog.Migrate(ctx, pool, "trellis", "public"))
	return &fixture{ctx: ctx, pool: pool, l: &ledger.Ledger{Pool: pool, Cat: catalog.New("trellis")}}
}

// appendRows appends n changed keys of source src, the way capture does
// (with no bucket), in q's transaction, and returns its xid.
func (f *fixture) appendRows(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, src, n int) string {
	t.Helper()
	var xid string
	require.NoError(t, q.QueryRow(f.ctx, `WITH a AS (INSERT INTO trellis.ledger (seg, src, key)
SELECT (SELECT cur FROM trellis.ring), $1, ARRAY[g::text] FROM generate_series(1, $2) g)
SELECT pg_current_xact_id()::text`, src, n).Scan(&xid))
	return xid
}

// page is a page's row: its cut, xid range and buckets (NULL in a page
// this release cuts).
type page struct {
	Cut      int64
	XLo, XHi *string
	Buckets  []int32
	Done     bool
}

func (f *fixture) pages(t *testing.T) []page {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT cut, xlo::text, xhi::text, buckets, done FROM trellis.pages ORDER BY id`)
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
	late := f.appendRows(t, open, 1, 1)

	// Transactions a and b together exceed a page, each is never split,
	// and b and c fit in one; the pages are ranges of xids, and list no
	// buckets.
	a := f.appendRows(t, f.pool, 1, ledger.PageTarget*3/5)
	b := f.appendRows(t, f.pool, 1, ledger.PageTarget*3/5)
	c := f.appendRows(t, f.pool, 2, 10)
	n, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	ps := f.pages(t)
	require.Len(t, ps, 2)
	require.Equal(t, [][]string{{a, a}, {b, c}}, [][]string{{*ps[0].XLo, *ps[0].XHi}, {*ps[1].XLo, *ps[1].XHi}})
	require.Nil(t, ps[0].Buckets)
	require.Equal(t, ps[0].Cut, ps[1].Cut, "one cut")

	// The open writer's row was not in that cut, though its xid is below
	// theirs: it is in the next one, once committed, so nothing is lost.
	require.NoError(t, open.Commit(f.ctx))
	n, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ps = f.pages(t)
	require.Len(t, ps, 3)
	require.Equal(t, []string{late, late}, []string{*ps[2].XLo, *ps[2].XHi})
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

	f.appendRows(t, f.pool, 1, 10)
	f.appendRows(t, f.pool, 2, 10)
	token, err := ledger.Snapshot(f.ctx, f.pool)
	require.NoError(t, err)

	// No cut covers the token yet: a wait forces one. Source 3 has no
	// changes, so nothing is pending for it.
	cutsBefore := f.cuts(t)
	require.NoError(t, f.l.Converged(f.ctx, token, 1, []int{3}, nil))
	require.Equal(t, cutsBefore+1, f.cuts(t), "the wait forced a cut")
	ps := f.pages(t)
	require.Len(t, ps, 1, "both transactions share a page")
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
	f.appendRows(t, f.pool, 1, 10)
	_, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	f.appendRows(t, f.pool, 2, 10)
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

// ring is the segment writers that start now append to, and the turn of
// the ring it is in (how many segment periods the clock has gone through).
func (f *fixture) ring(t *testing.T) (seg int, turn int64) {
	t.Helper()
	q := `SELECT ` + ledger.SegmentAt(`now()`) + `, date_part('epoch', now())::int8 / ` + strconv.Itoa(int(ledger.SegmentPeriod/time.Second))
	require.NoError(t, f.pool.QueryRow(f.ctx, q).Scan(&seg, &turn))
	return seg, turn
}

func (f *fixture) segmentRows(t *testing.T, seg int) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, fmt.Sprintf(`SELECT count(*) FROM trellis.ledger_%d`, seg)).Scan(&n))
	return n
}

// The clock picks the segments in turn, SegmentPeriod each, whatever the
// session's time zone.
func TestSegmentFollowsTheClock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, c := range []struct {
		at   string
		want int
	}{
		{"1970-01-01 00:00:00+00", 0}, {"1970-01-01 00:00:01.4+00", 0}, {"1970-01-01 00:00:02+00", 1},
		{"1970-01-01 00:00:07+00", 3}, {"1970-01-01 00:00:08+00", 0}, {"2026-12-01 12:00:02+00", 1},
		{"2026-12-01 14:00:02+02", 1}, {"2026-12-01 12:00:05.2+00", 2},
	} {
		var got int
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT `+ledger.SegmentAt(`$1::timestamptz`), c.at).Scan(&got))
		require.Equal(t, c.want, got, c.at)
	}
	seg, _ := f.ring(t)
	require.True(t, seg >= 0 && seg < ledger.Segments)
}

// Maintain truncates a segment once every row in it is drained, never
// while a writer holds it; and finished pages and old cuts are pruned.
func TestMaintainReclaimsDrainedSegments(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// A segment writers append to two periods from now: the clock may
	// move the ring on meanwhile, and a segment is not reclaimed while it
	// is the current one, so what must happen is waited for.
	cur, _ := f.ring(t)
	seg := (cur + 2) % ledger.Segments
	_, err := f.pool.Exec(f.ctx, `INSERT INTO trellis.ledger (seg, src, bucket, key)
SELECT $1, 1, 0, ARRAY[g::text] FROM generate_series(1, 100) g`, seg)
	require.NoError(t, err)

	// Its rows are not drained yet: it stays.
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Equal(t, 100, f.segmentRows(t, seg))

	// Drained, but a writer still holds the segment: the reclaim gives way.
	_, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	ps := f.pages(t)
	require.Len(t, ps, 1)
	f.finish(t, ps[0].Cut)
	writer, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = writer.Rollback(context.WithoutCancel(f.ctx)) }()
	_, err = writer.Exec(f.ctx, fmt.Sprintf(`LOCK TABLE trellis.ledger_%d IN ROW EXCLUSIVE MODE`, seg))
	require.NoError(t, err)
	require.NoError(t, f.l.Maintain(f.ctx))
	require.Equal(t, 100, f.segmentRows(t, seg))

	// Once the writer is gone, the segment is reclaimed and the finished
	// pages and the cuts before the frontier are pruned.
	require.NoError(t, writer.Rollback(f.ctx))
	wait := backoff.Exponential{Min: time.Millisecond, Max: 50 * time.Millisecond}
	for f.segmentRows(t, seg) > 0 {
		require.NoError(t, f.l.Maintain(f.ctx))
		if f.segmentRows(t, seg) > 0 {
			require.True(t, backoff.Sleep(f.ctx, wait.Next()), "segment %d not reclaimed", seg)
		}
	}
	require.Empty(t, f.pages(t))
	require.Equal(t, 1, f.cuts(t), "the frontier's cut stays")

	// A row appended to it after the reclaim (its transaction began while
	// it was current) is in the next cut's page.
	_, err = f.pool.Exec(f.ctx, `INSERT INTO trellis.ledger (seg, src, bucket, key) VALUES ($1, 1, 0, '{x}')`, seg)
	require.NoError(t, err)
	_, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	ps = f.pages(t)
	require.Len(t, ps, 1)
	var segs []int32
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT segs FROM trellis.pages WHERE NOT done`).Scan(&segs))
	require.Equal(t, []int32{int32(seg)}, segs)
}

func TestPagesAreClaimedOnceAppliedAndRetried(t *testing.T) {
	t.Parallel()
	f := setup(t)

	// Key 1 changed twice the same way, key 2 once with old values, key 3
	// updated (its old values and its new key: two rows), and a TRUNCATE.
	// Key 1's rows carry no bucket, as capture writes them; the others
	// were stored in bucket 0, as an older capture (or a forger) would.
	_, err := f.pool.Exec(f.ctx, `INSERT INTO trellis.ledger (seg, src, bucket, key, vals) VALUES
  (0, 7, NULL, '{1}', NULL), (0, 7, NULL, '{1}', NULL), (0, 7, 0, '{2}', '{old}'), (0, 8, 0, NULL, NULL),
  (0, 7, 0, '{3}', NULL), (0, 7, 0, '{3}', '{was}')`)
	require.NoError(t, err)
	_, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	token, err := ledger.Snapshot(f.ctx, f.pool)
	require.NoError(t, err)

	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(f.ctx)) }()
	p, err := f.l.Claim(f.ctx, tx, 0)
	require.NoError(t, err)
	require.NotNil(t, p)
	require.Nil(t, p.Buckets)
	require.NotNil(t, p.XLo)
	require.Zero(t, p.Attempts)
	changes, err := f.l.Changes(f.ctx, tx, p)
	require.NoError(t, err)
	old, was := "old", "was"
	// Each change carries its key's own bucket, and says when it was
	// stored under another.
	var b1, b2, b3 int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT hashtext('{1}') & 63, hashtext('{2}') & 63, hashtext('{3}') & 63`).Scan(&b1, &b2, &b3))
	require.ElementsMatch(t, []ledger.Change{
		{Src: 7, Key: keyText("1"), Bucket: b1},
		{Src: 7, Key: keyText("2"), Vals: []*string{&old}, Bucket: b2, Mislabeled: b2 != 0},
		{Src: 7, Key: keyText("3"), Vals: []*string{&was}, Bucket: b3, Mislabeled: b3 != 0},
		{Src: 8},
	}, changes, "each distinct change once (an update's new key is its old row's); a TRUNCATE has no key")

	// Another worker does not get the page, not even by its id.
	other, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(context.WithoutCancel(f.ctx)) }()
	q, err := f.l.Claim(f.ctx, other, 0)
	require.NoError(t, err)
	require.Nil(t, q)
	q, err = f.l.Claim(f.ctx, other, p.ID)
	require.NoError(t, err)
	require.Nil(t, q)
	require.NoError(t, other.Rollback(f.ctx))

	// A failure is recorded for the tables named, and the page waits for
	// its retry; by its id it can still be claimed at once.
	require.NoError(t, tx.Rollback(f.ctx))
	cause := &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	require.NoError(t, f.l.Failed(f.ctx, p, cause, []string{"public.orders"}))
	var attempts int
	var lastErr, state string
	var tables []string
	var due bool
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT attempts, last_error, last_sqlstate, tables, retry_at <= clock_timestamp()
FROM trellis.pages WHERE id = $1`, p.ID).Scan(&attempts, &lastErr, &state, &tables, &due))
	require.Equal(t, 1, attempts)
	require.Contains(t, lastErr, "deadlock detected")
	require.Equal(t, "40P01", state)
	require.Equal(t, []string{"public.orders"}, tables)
	require.False(t, due)
	failing, err := f.l.Failing(f.ctx, f.pool, []string{"public.customers", "public.orders"}, 0)
	require.NoError(t, err)
	require.Len(t, failing, 1)
	require.Equal(t, p.ID, failing[0].SegSeq)
	require.Equal(t, 1, failing[0].Attempts)
	require.Equal(t, "40P01", *failing[0].SQLState)
	failing, err = f.l.Failing(f.ctx, f.pool, []string{"public.customers"}, 0)
	require.NoError(t, err)
	require.Empty(t, failing, "another table's page")

	tx, err = f.pool.Begin(f.ctx)
	require.NoError(t, err)
	q, err = f.l.Claim(f.ctx, tx, 0)
	require.NoError(t, err)
	require.Nil(t, q, "not due yet")
	q, err = f.l.Claim(f.ctx, tx, p.ID)
	require.NoError(t, err)
	require.NotNil(t, q)
	require.Equal(t, 1, q.Attempts)
	require.NoError(t, f.l.Done(f.ctx, tx, q))
	require.NoError(t, tx.Commit(f.ctx))

	// Applied: the token has converged, and the page is not claimed again.
	bounded, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, f.l.Converged(bounded, token, 1, nil, nil))
	failing, err = f.l.Failing(f.ctx, f.pool, []string{"public.orders"}, 1)
	require.NoError(t, err)
	require.Empty(t, failing, "a page applied no longer fails")
	tx, err = f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(f.ctx)) }()
	q, err = f.l.Claim(f.ctx, tx, p.ID)
	require.NoError(t, err)
	require.Nil(t, q)
}

func TestInFlightAndRestage(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.pool.Exec(f.ctx, `INSERT INTO trellis.sources (schema_name, table_name, key_columns, key_types, capture_state)
VALUES ('public', 'orders', '{id}', '{integer}', 'installed') RETURNING id`)
	require.NoError(t, err)
	var src int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT id FROM trellis.sources`).Scan(&src))

	inFlight := func() []ledger.Change {
		t.Helper()
		tx, err := f.pool.BeginTx(f.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(f.ctx)) }()
		fr, err := f.l.DrainedFrontier(f.ctx, tx)
		require.NoError(t, err)
		changes, err := f.l.InFlight(f.ctx, tx, []int{src}, &fr.Snap)
		require.NoError(t, err)
		return changes
	}

	// A restaged key is a change in flight until its page is applied.
	v := "41"
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	ok, err := f.l.Restage(f.ctx, tx, "public.orders", []*string{&v})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = f.l.Restage(f.ctx, tx, "public.customers", []*string{&v})
	require.NoError(t, err)
	require.False(t, ok, "not captured")
	require.NoError(t, tx.Commit(f.ctx))
	f.appendRows(t, f.pool, src+1, 3) // another source's changes
	require.Equal(t, []ledger.Change{{Src: src, Key: keyText("41")}}, inFlight())

	_, err = f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Len(t, inFlight(), 1, "cut, not applied")
	for _, p := range f.pages(t) {
		f.finish(t, p.Cut)
	}
	require.Empty(t, inFlight())
}

// TestBusyLedgerIsCutInFewerLargerPages: under a heavy write load idle
// workers, which try to cut all the time, cut about every MaxCutInterval
// rather than every MinCutInterval, so each page holds many more rows;
// once the load stops, a lone change is cut as soon as before.
func TestBusyLedgerIsCutInFewerLargerPages(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first := f.cuts(t)

	// A writer appending 500 rows a round, and idle workers trying to cut
	// between every two rounds; about 2 s of it.
	begin := time.Now()
	rows := 0
	for time.Since(begin) < 2*time.Second {
		f.appendRows(t, f.pool, 1, 500)
		rows += 500
		time.Sleep(time.Millisecond)
		_, err := f.l.Cut(f.ctx, false)
		require.NoError(t, err)
	}
	elapsed := time.Since(begin)
	cuts := f.cuts(t) - first
	require.Positive(t, cuts)
	// At MinCutInterval there would be elapsed/5ms cuts; at well over
	// 10,000 rows/s the interval is MaxCutInterval.
	t.Logf("%d rows in %s: %d cuts (%.0f rows each, one every %s)", rows, elapsed.Round(time.Millisecond), cuts,
		float64(rows)/float64(cuts), (elapsed / time.Duration(cuts)).Round(time.Millisecond))
	require.LessOrEqual(t, cuts, int(elapsed/(ledger.MaxCutInterval/2)),
		"a busy ledger is cut about every MaxCutInterval, not every MinCutInterval")

	// Quiet again: once the last cut is older than the longest interval,
	// the next change is cut at once.
	_, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	time.Sleep(ledger.MaxCutInterval)
	x := f.appendRows(t, f.pool, 1, 1)
	n, err := f.l.Cut(f.ctx, false)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ps := f.pages(t)
	require.Equal(t, []string{x, x}, []string{*ps[len(ps)-1].XLo, *ps[len(ps)-1].XHi})
}

// TestLookSaysWhatIsDue: the idle worker's one statement says whether a
// page is due, whether rows wait for a cut, and when that cut is due.
func TestLookSaysWhatIsDue(t *testing.T) {
	t.Parallel()
	f := setup(t)
	o, err := f.l.Look(f.ctx)
	require.NoError(t, err)
	require.Equal(t, ledger.Outlook{}, o, "nothing to do")

	f.appendRows(t, f.pool, 1, 10)
	o, err = f.l.Look(f.ctx)
	require.NoError(t, err)
	require.Zero(t, o.PagesDue)
	require.True(t, o.NewRows)

	// A writer still open: its rows are not new rows yet.
	n, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	open, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = open.Rollback(context.WithoutCancel(f.ctx)) }()
	f.appendRows(t, open, 1, 1)
	o, err = f.l.Look(f.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, o.PagesDue, "the cut's page")
	require.False(t, o.NewRows, "an uncommitted row is not new")
	require.LessOrEqual(t, o.CutIn, ledger.MinCutInterval, "a quiet ledger's cuts are MinCutInterval apart")

	// Done, the page is no longer due.
	_, err = f.pool.Exec(f.ctx, `UPDATE trellis.pages SET done = true`)
	require.NoError(t, err)
	require.NoError(t, open.Commit(f.ctx))
	o, err = f.l.Look(f.ctx)
	require.NoError(t, err)
	require.Zero(t, o.PagesDue)
	require.True(t, o.NewRows, "committed since the cut")
}

func TestCutInterval(t *testing.T) {
	t.Parallel()
	// One worker of a process waits for the next cut; another may once
	// that wait is over.
	l := &ledger.Ledger{}
	require.True(t, l.WaitForCut(1, time.Millisecond))
	require.False(t, l.WaitForCut(2, time.Millisecond))
	require.True(t, l.WaitForCut(1, time.Millisecond), "the waiter again")
	time.Sleep(time.Millisecond + ledger.MinCutInterval)
	require.True(t, l.WaitForCut(2, time.Millisecond))

	require.Equal(t, ledger.MinCutInterval, ledger.CutInterval(0))
	require.Equal(t, ledger.MinCutInterval, ledger.CutInterval(ledger.QuietRate))
	require.Equal(t, 2*ledger.MinCutInterval, ledger.CutInterval(2*ledger.QuietRate))
	require.Equal(t, ledger.MaxCutInterval, ledger.CutInterval(1e9))
}

// TestPageCutByAnOlderReleaseReadsItsBuckets: a page an older release cut
// (buckets, no xid range) holds the rows stored under its buckets and
// nothing else, whatever their xids; this release's pages of the same
// rows would hold them all.
func TestPageCutByAnOlderReleaseReadsItsBuckets(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var b1, b2 int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT hashtext('{1}') & 63, hashtext('{2}') & 63`).Scan(&b1, &b2))
	require.NotEqual(t, b1, b2)
	_, err := f.pool.Exec(f.ctx, `INSERT INTO trellis.ledger (seg, src, bucket, key) VALUES (0, 1, $1, '{1}'), (0, 1, $2, '{2}')`, b1, b2)
	require.NoError(t, err)
	_, err = f.pool.Exec(f.ctx, `WITH last AS (SELECT snap FROM trellis.cuts ORDER BY n DESC LIMIT 1),
c AS (INSERT INTO trellis.cuts (snap) VALUES (pg_current_snapshot()) RETURNING n, snap)
INSERT INTO trellis.pages (cut, lo, hi, buckets) SELECT c.n, last.snap, c.snap, ARRAY[$1::int] FROM c, last`, b2)
	require.NoError(t, err)

	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(f.ctx)) }()
	p, err := f.l.Claim(f.ctx, tx, 0)
	require.NoError(t, err)
	require.Nil(t, p.XLo)
	changes, err := f.l.Changes(f.ctx, tx, p)
	require.NoError(t, err)
	require.Equal(t, []ledger.Change{{Src: 1, Key: keyText("2"), Bucket: b2}}, changes)
}

// keyText is a key of text parts, as a Change holds it.
func keyText(parts ...string) []*string {
	out := make([]*string, len(parts))
	for i := range parts {
		out[i] = &parts[i]
	}
	return out
}

// keyStrings is a key's parts as text, NULL as "NULL".
func keyStrings(key []*string) []string {
	out := make([]string, len(key))
	for i, k := range key {
		out[i] = "NULL"
		if k != nil {
			out[i] = *k
		}
	}
	return out
}
