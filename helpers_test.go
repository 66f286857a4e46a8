package trellis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) {
	os.Exit(testsupport.Main(m))
}

// env is one test's database, a SQL pool on it, and helpers.
type env struct {
	t   *testing.T
	url string
	db  *pgxpool.Pool
	ctx context.Context
}

func quietLogger() *slog.Logger {
	if os.Getenv("TRELLIS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func setup(t *testing.T) *env {
	t.Helper()
	url, db := testsupport.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &env{t: t, url: url, db: db, ctx: ctx}
}

// exec runs SQL on the test's own connection.
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.db.Exec(e.ctx, sql, args...)
	require.NoError(e.t, err, sql)
}

// connect opens a client with opts (URL and a quiet logger filled in) and
// closes it at cleanup.
func (e *env) connect(opts trellis.Options) *trellis.Client {
	e.t.Helper()
	opts.URL = e.url
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 20 * time.Millisecond
	}
	c, err := trellis.Connect(e.ctx, opts)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// engine migrates and connects a client running staging and drain workers.
func (e *env) engine() *trellis.Client {
	e.t.Helper()
	m := e.connect(trellis.Options{})
	require.NoError(e.t, m.Migrate(e.ctx))
	return e.connect(trellis.Options{Staging: true, DrainWorkers: 2})
}

// pollStatus polls target's Status every interval, for at most within,
// until ok accepts it (a nil status, no transform writing target, never
// is), and returns it; otherwise it fails the test with failure and the
// last status read. Every wait on a status goes through it.
func (e *env) pollStatus(c *trellis.Client, target string, within, every time.Duration, failure string, ok func(*trellis.Status) bool) *trellis.Status {
	e.t.Helper()
	deadline := time.Now().Add(within)
	var last *trellis.Status
	for time.Now().Before(deadline) {
		st, err := c.Status(e.ctx, target)
		require.NoError(e.t, err)
		if st != nil && ok(st) {
			return st
		}
		last = st
		time.Sleep(every)
	}
	e.t.Fatalf("%s; last status %+v", failure, last)
	return nil
}

// stateWaitCap bounds how long a test waits for a state it polls for: a
// loaded machine (2 shared cores) can take far longer than usual to build,
// pause or resume, and the wait returns as soon as the state holds.
const stateWaitCap = 3 * time.Minute

// waitState polls Status until target reaches state.
func (e *env) waitState(c *trellis.Client, target string, state trellis.State) *trellis.Status {
	e.t.Helper()
	return e.pollStatus(c, target, stateWaitCap, 10*time.Millisecond,
		fmt.Sprintf("%s did not reach %s", target, state), func(st *trellis.Status) bool { return st.State == state })
}

// writesPast waits until the writers counted n more writes.
func (e *env) writesPast(writes *atomic.Int64, n int64) {
	e.t.Helper()
	target := writes.Load() + n
	e.eventually(fmt.Sprintf("%d more writes", n), func() bool { return writes.Load() >= target })
}

// sourceWriter commits write transactions on a test's tables, its random
// stream picked by seed, counting them in writes, until stop is closed.
type sourceWriter func(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error

// writeConcurrently runs n writers (seeds seed to seed+n-1) until past more
// write transactions have committed, stops them and requires that none
// failed. It returns the write transactions committed in all.
func (e *env) writeConcurrently(n int, seed uint64, past int64, w sourceWriter) int64 {
	e.t.Helper()
	var writes atomic.Int64
	quit := make(chan struct{})
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- w(e.ctx, e.db, seed+uint64(i), quit, &writes)
		}()
	}
	e.writesPast(&writes, past)
	close(quit)
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(e.t, err)
	}
	return writes.Load()
}

// requireLiveAndExact requires that target equals its fresh recompute
// (both ways), is live with no drain failure and passes a strict
// self-check. It returns the target's status.
func (e *env) requireLiveAndExact(c *trellis.Client, target, recompute string) *trellis.Status {
	e.t.Helper()
	e.assertMatches(target, recompute)
	st, err := c.Status(e.ctx, target)
	require.NoError(e.t, err)
	require.Equal(e.t, trellis.StateLive, st.State, target)
	require.Nil(e.t, st.DrainFailure, target)
	requireConsistent(e.t, target, e.selfCheck(c, target, trellis.SelfCheckStrict))
	return st
}

// converge waits until everything committed so far reached the targets.
func (e *env) converge(c *trellis.Client) {
	e.t.Helper()
	tok, err := c.WatermarkToken(e.ctx)
	require.NoError(e.t, err)
	// A loaded machine slows the drain, a stuck drain makes no progress:
	// wait 25 s at a time for as long as the pending changes shrink between
	// two looks (up to convergeCap), and fail as soon as they do not.
	deadline := time.Now().Add(convergeCap)
	last := int64(-1)
	for {
		err := c.AwaitConverged(e.ctx, tok, 25*time.Second)
		if err == nil {
			return
		}
		if trellis.CodeOf(err) != trellis.CodeTimeout || time.Now().After(deadline) {
			require.NoError(e.t, err)
		}
		pending := e.pendingChanges(c)
		if last >= 0 && pending >= last {
			require.NoError(e.t, err, "no progress in the last 25 s: %d changes pending, %d before", pending, last)
		}
		last = pending
	}
}

// convergeCap bounds how long converge goes on waiting while the drain
// makes progress.
const convergeCap = 3 * time.Minute

// pendingChanges sums Status.PendingChanges over every transform.
func (e *env) pendingChanges(c *trellis.Client) int64 {
	e.t.Helper()
	defs, err := c.Definitions(e.ctx)
	require.NoError(e.t, err)
	var n int64
	for _, d := range defs {
		st, err := c.Status(e.ctx, d.Target)
		require.NoError(e.t, err)
		n += st.PendingChanges
	}
	return n
}

// rows returns a query's rows as strings, sorted by the query's ORDER BY.
func (e *env) rows(sql string, args ...any) [][]string {
	e.t.Helper()
	rs, err := e.db.Query(e.ctx, sql, args...)
	require.NoError(e.t, err)
	defer rs.Close()
	var out [][]string
	for rs.Next() {
		vals, err := rs.Values()
		require.NoError(e.t, err)
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = fmt.Sprint(v)
		}
		out = append(out, row)
	}
	require.NoError(e.t, rs.Err())
	return out
}

// assertMatches checks target equals a fresh recompute query, both ways.
func (e *env) assertMatches(target, recompute string) {
	e.t.Helper()
	var missing, extra int
	// target is a table, or a derived table "(SELECT ...) x" of some of its columns.
	if strings.HasPrefix(target, "(") {
		target = "(SELECT * FROM " + target + ")"
	} else {
		target = "TABLE " + target
	}
	q := fmt.Sprintf("SELECT (SELECT count(*) FROM ((%s) EXCEPT ALL (%s)) a), (SELECT count(*) FROM ((%s) EXCEPT ALL (%s)) b)",
		recompute, target, target, recompute)
	require.NoError(e.t, e.db.QueryRow(e.ctx, q).Scan(&missing, &extra))
	if missing > 0 || extra > 0 {
		lacks := e.rows(fmt.Sprintf("(%s) EXCEPT ALL (%s) LIMIT 5", recompute, target))
		has := e.rows(fmt.Sprintf("(%s) EXCEPT ALL (%s) LIMIT 5", target, recompute))
		e.t.Fatalf("%s differs from a fresh recompute: it lacks %d rows (e.g. %v) and has %d extra (e.g. %v)", target, missing, lacks, extra, has)
	}
}

// requireProjectionReads defines stmt, a projection reading another
// transform's target, waits until target is live and requires it equal to
// recompute, a query over that upstream target.
func (e *env) requireProjectionReads(c *trellis.Client, stmt, target, recompute string) {
	e.t.Helper()
	_, err := c.Define(e.ctx, stmt)
	require.NoError(e.t, err, stmt)
	e.waitState(c, target, trellis.StateLive)
	e.assertMatches(target, recompute)
}

// waitCorrecting polls Status until it lists corrections, and returns it.
func (e *env) waitCorrecting(c *trellis.Client, target string) *trellis.Status {
	e.t.Helper()
	// Corrections are short-lived: poll often so as not to miss them.
	return e.pollStatus(c, target, stateWaitCap, 2*time.Millisecond,
		target+" never listed a correction", func(st *trellis.Status) bool { return len(st.Correcting) > 0 })
}
