package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/ledger"
)

// part is a page's row with the columns of a part of one transaction.
type part struct {
	ID       int64
	XLo, XHi string
	Seg      *int32
	TLo      *string
	Done     bool
}

// TestOneTransactionIsCutIntoBoundedParts: a transaction of more rows
// than PageMax, its rows interleaved with another writer's, is cut into
// parts of at most PageMax rows each, which together read each of
// its rows exactly once and none of another transaction's; the pages of
// the transactions before and after it do not reach into it. While a part
// is not done, its rows are in flight and its segment is never reclaimed;
// once all are, it is.
func TestOneTransactionIsCutIntoBoundedParts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	before := f.appendRows(t, f.pool, 9, 10)
	big, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = big.Rollback(context.WithoutCancel(f.ctx)) }()
	xid := f.appendRows(t, big, 1, 16_000)
	between := f.appendRows(t, f.pool, 9, 7)
	f.appendRows(t, big, 2, 17_000)
	f.appendRows(t, f.pool, 9, 5)
	f.appendRows(t, big, 3, 15_000)
	require.NoError(t, big.Commit(f.ctx))
	const bigRows = 48_000

	n, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	rows, err := f.pool.Query(f.ctx, `SELECT id, xlo::text, xhi::text, seg, tlo::text, done FROM trellis.pages ORDER BY id`)
	require.NoError(t, err)
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[part])
	require.NoError(t, err)
	require.Len(t, ps, n)
	require.GreaterOrEqual(t, n, 2+3, "a page before, at least three parts, a page after")
	require.Equal(t, []string{before, before}, []string{ps[0].XLo, ps[0].XHi}, "the page before ends before it")
	last := ps[len(ps)-1]
	require.Nil(t, last.TLo)
	require.Equal(t, between, last.XLo, "the page after starts after it")
	parts := ps[1 : len(ps)-1]

	// Each part reads at most PageMax of the transaction's rows, and
	// together they read each once.
	seen := map[string]int{}
	for _, p := range parts {
		require.Equal(t, []string{xid, xid}, []string{p.XLo, p.XHi})
		require.NotNil(t, p.TLo)
		require.NotNil(t, p.Seg)
		tx, err := f.pool.Begin(f.ctx)
		require.NoError(t, err)
		claimed, err := f.l.Claim(f.ctx, tx, p.ID)
		require.NoError(t, err)
		require.NotNil(t, claimed)
		changes, err := f.l.Changes(f.ctx, tx, claimed)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(f.ctx))
		require.LessOrEqual(t, claimed.Rows, ledger.PageMax, "part %d", p.ID)
		require.Equal(t, claimed.Rows, len(changes), "every row of the transaction is a distinct change")
		for _, c := range changes {
			require.Contains(t, []int{1, 2, 3}, c.Src, "only the transaction's rows")
			seen[fmt.Sprint(c.Src, keyStrings(c.Key))]++
		}
	}
	require.Len(t, seen, bigRows)
	for k, n := range seen {
		require.Equal(t, 1, n, k)
	}

	// A part done: the transaction's other rows are still in flight.
	inFlight := func() int {
		t.Helper()
		tx, err := f.pool.BeginTx(f.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(f.ctx)) }()
		fr, err := f.l.DrainedFrontier(f.ctx, tx)
		require.NoError(t, err)
		changes, err := f.l.InFlight(f.ctx, tx, []int{1, 2, 3}, &fr.Snap)
		require.NoError(t, err)
		return len(changes)
	}
	require.Equal(t, bigRows, inFlight())
	var firstRows int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM trellis.ledger l, trellis.pages p
WHERE p.id = $1 AND l.seg = p.seg AND l.ctid >= p.tlo AND l.ctid < p.thi AND l.xid = p.xlo`, parts[0].ID).Scan(&firstRows))
	require.Positive(t, firstRows)
	_, err = f.pool.Exec(f.ctx, `UPDATE trellis.pages SET done = true WHERE id = $1`, parts[0].ID)
	require.NoError(t, err)
	require.Equal(t, bigRows-firstRows, inFlight())

	// Every page done but the last part: its segment is not reclaimed,
	// whenever the clock leaves it to reclaim.
	seg := int(*parts[0].Seg)
	held := parts[len(parts)-1].ID
	_, err = f.pool.Exec(f.ctx, `UPDATE trellis.pages SET done = true WHERE id <> $1`, held)
	require.NoError(t, err)
	total := f.segmentRows(t, seg)
	wait := backoff.Exponential{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}
	for tried := 0; tried < 3; {
		if cur, _ := f.ring(t); cur == seg {
			require.True(t, backoff.Sleep(f.ctx, wait.Next()))
			continue
		}
		require.NoError(t, f.l.Maintain(f.ctx))
		require.Equal(t, total, f.segmentRows(t, seg), "a partly drained transaction's segment was reclaimed")
		tried++
	}

	// Its last part done, the segment is reclaimed.
	_, err = f.pool.Exec(f.ctx, `UPDATE trellis.pages SET done = true WHERE id = $1`, held)
	require.NoError(t, err)
	require.Zero(t, inFlight())
	for f.segmentRows(t, seg) > 0 {
		require.NoError(t, f.l.Maintain(f.ctx))
		if f.segmentRows(t, seg) > 0 {
			require.True(t, backoff.Sleep(f.ctx, wait.Next()), "segment %d not reclaimed", seg)
		}
	}
}

// TestTransactionOverATargetIsAPageOfItsOwn: a transaction of more than
// PageTarget rows and at most PageMax is one page, whole, and the
// transactions around it are not gathered with it: every page holds at
// most PageMax rows.
func TestTransactionOverATargetIsAPageOfItsOwn(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.appendRows(t, f.pool, 1, ledger.PageTarget-1)
	b := f.appendRows(t, f.pool, 1, ledger.PageMax)
	c := f.appendRows(t, f.pool, 1, ledger.PageTarget-1)
	d := f.appendRows(t, f.pool, 1, 2)
	n, err := f.l.Cut(f.ctx, true)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	var got [][]string
	for _, p := range f.pages(t) {
		got = append(got, []string{*p.XLo, *p.XHi})
	}
	require.Equal(t, [][]string{{a, a}, {b, b}, {c, d}}, got)
	var parts int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM trellis.pages WHERE tlo IS NOT NULL`).Scan(&parts))
	require.Zero(t, parts, "no transaction over PageMax")
}
