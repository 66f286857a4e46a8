package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
)

// write measures source write throughput with capture installed versus
// none: 4 connections doing autocommit single-row UPDATEs of random rows.
//
// Phases, on the same table, alternating so that table growth and noise
// fall on both sides:
//
//	B1 no transform
//	W1 transform live, staging and 2 drain workers running
//	C1 capture only: the worker client closed, the triggers still installed
//	B2 the writers in replica mode, where the capture triggers do not fire
//	W2 triggers enabled, workers running again (after the C1 backlog drained)
//
// After W1, before W2 and after W2 it waits for the drain to catch up, at
// most max(30 s, 6 phases) each time: a drain that cannot keep up with the
// writers (as on a GROUP BY whose recompute is slow) is reported in the
// notes, not an error, and W2 then runs with the workers still busy.
func (s *suite) write(ctx context.Context, e *env) ([]Result, error) {
	rows := s.opts.Rows
	if err := e.createSource(ctx, rows); err != nil {
		return nil, err
	}
	ws, err := newWriters(ctx, e.url, e.table("bench_src"), rows)
	if err != nil {
		return nil, err
	}
	defer ws.close()

	// A phase measures from its warm-up on: its CPU per change counts the
	// warm-up's writes too, and for a phase with workers, what the drain
	// spends on them until it has caught up (cpu, called after catchUp).
	type measured struct {
		tps     float64
		changes float64
		m       *meter
	}
	phase := func(label string) (measured, error) {
		if err := e.exec(ctx, "VACUUM "+e.table("bench_src")); err != nil {
			return measured{}, err
		}
		e.checkpoint(ctx)
		e.quiesce(ctx)
		m := e.startMeter(ctx)
		_, warm, err := ws.run(ctx, min(warmupMax, s.opts.Duration/10))
		if err != nil {
			return measured{}, err
		}
		tps, n, err := ws.run(ctx, s.opts.Duration)
		if err != nil {
			return measured{}, err
		}
		e.logf("%s: %.0f tx/s", label, tps)
		return measured{tps: tps, changes: float64(warm + n), m: m}, nil
	}
	cpu := func(p measured) float64 { return p.m.perChange(ctx, p.changes) }

	b1, err := phase("B1 (no transform)")
	if err != nil {
		return nil, err
	}
	b1CPU := cpu(b1)

	c, err := e.connect(ctx, true, drainWorkers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	build, err := e.define(ctx, c)
	if err != nil {
		return nil, err
	}
	e.logf("transform live after %s", build.Round(time.Millisecond))
	w1, err := phase("W1 (capture + drain)")
	if err != nil {
		return nil, err
	}
	limit := max(catchUpMin, catchUpPhases*s.opts.Duration)
	lag1, err := e.catchUp(ctx, c, limit, "after W1")
	if err != nil {
		return nil, err
	}
	w1CPU := cpu(w1)
	_ = c.Close()

	c1, err := phase("C1 (capture only)")
	if err != nil {
		return nil, err
	}
	c1CPU := cpu(c1)

	// B2: the writers' sessions in replica mode, where the capture triggers
	// do not fire. (Disabling the triggers would be a capture disruption,
	// which pauses the transform.) The rows B2 writes never reach the
	// target, so the target is re-derived from the source afterwards.
	if err := ws.setAll(ctx, "SET session_replication_role = replica"); err != nil {
		return nil, err
	}
	b2, err := phase("B2 (capture triggers not firing)")
	if err != nil {
		return nil, err
	}
	b2CPU := cpu(b2)
	if err := ws.setAll(ctx, "RESET session_replication_role"); err != nil {
		return nil, err
	}

	c2, err := e.connect(ctx, true, drainWorkers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c2.Close() }()
	if err := c2.RequestBackfill(ctx, e.table("bench_src")); err != nil {
		return nil, fmt.Errorf("re-reading the source after B2: %w", err)
	}
	if err := waitLive(ctx, c2, e.table("bench_tgt")); err != nil {
		return nil, err
	}
	backlog, err := e.catchUp(ctx, c2, limit, "C1's backlog")
	if err != nil {
		return nil, err
	}
	w2, err := phase("W2 (capture + drain)")
	if err != nil {
		return nil, err
	}
	lag2, err := e.catchUp(ctx, c2, limit, "after W2")
	if err != nil {
		return nil, err
	}
	w2CPU := cpu(w2)
	if strings.HasPrefix(lag2, "caught up") {
		bad, err := e.mismatches(ctx)
		if err != nil {
			return nil, err
		}
		if bad != 0 {
			return nil, fmt.Errorf("after the drain caught up %d target rows differ from the definition's result", bad)
		}
	}

	const bar = "DESIGN: >= 0.8"
	base, baseCPU := (b1.tps+b2.tps)/2, mean(b1CPU, b2CPU)
	return []Result{
		withCPU(result("write", base, (w1.tps+w2.tps)/2, "tx/s", fmt.Sprintf("mean of 2 alternated runs, capture + 2 drain workers vs no capture; %s", bar)),
			baseCPU, mean(w1CPU, w2CPU)),
		withCPU(result("write/run1", b1.tps, w1.tps, "tx/s", fmt.Sprintf("B1 then W1; drain %s after writes stopped", lag1)), b1CPU, w1CPU),
		withCPU(result("write/run2", b2.tps, w2.tps, "tx/s", fmt.Sprintf("B2 (writers in replica mode: capture triggers not firing) then W2 (after re-deriving the target; C1's backlog: drain %s); drain %s after writes stopped", backlog, lag2)), b2CPU, w2CPU),
		withCPU(result("write/capture-only", base, c1.tps, "tx/s", "triggers installed, no worker running; baseline = mean of B1, B2"), baseCPU, c1CPU),
	}, nil
}

// catchUp waits at most limit for the drain to catch up and says how it
// went; only a failure other than running out of time is an error.
func (e *env) catchUp(ctx context.Context, c *trellis.Client, limit time.Duration, what string) (string, error) {
	took, err := timed(func() error { return convergeWithin(ctx, c, limit) })
	switch {
	case err == nil:
		e.logf("%s: the drain caught up in %s", what, took.Round(time.Millisecond))
		return fmt.Sprintf("caught up in %s", took.Round(time.Millisecond)), nil
	case errors.Is(err, errBehind):
		e.logf("%s: the drain had NOT caught up after %s; going on", what, limit)
		return fmt.Sprintf("had NOT caught up within %s", limit), nil
	}
	return "", err
}

// pacingSlack is how far behind its schedule a paced writer may fall and
// still catch up: past it, the writes missed are dropped, not burst.
const pacingSlack = 100 * time.Millisecond

func timed(fn func() error) (time.Duration, error) {
	begin := time.Now()
	err := fn()
	return time.Since(begin), err
}

// writers are the write benchmark's connections.
type writers struct {
	conns []*pgx.Conn
	sql   string
	rows  int
	seed  uint64
	// rate paces the writers to that many writes per second in all
	// (spread evenly over the connections); 0 writes flat out.
	rate float64
}

// setAll runs a statement on every writer connection.
func (w *writers) setAll(ctx context.Context, sql string) error {
	for _, c := range w.conns {
		if _, err := c.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

func newWriters(ctx context.Context, url, table string, rows int) (*writers, error) {
	return newWritersN(ctx, url, table, rows, writeConns)
}

// newWritersN is newWriters with conns connections.
func newWritersN(ctx context.Context, url, table string, rows, conns int) (*writers, error) {
	w := &writers{sql: fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id = $1", table), rows: rows}
	for range conns {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("connecting a writer: %w", err)
		}
		w.conns = append(w.conns, c)
	}
	return w, nil
}

func (w *writers) close() {
	for _, c := range w.conns {
		_ = c.Close(context.Background())
	}
}

// run updates random rows on every connection for d and returns the
// transactions per second and their number.
func (w *writers) run(ctx context.Context, d time.Duration) (float64, int64, error) {
	var wg sync.WaitGroup
	counts := make([]int64, len(w.conns))
	errs := make([]error, len(w.conns))
	begin := time.Now()
	deadline := begin.Add(d)
	// Paced, each connection writes at its own share of the rate, on a
	// schedule (not a sleep after each write): a writer that fell behind
	// catches up, by at most pacingSlack's worth of writes.
	var every time.Duration
	if w.rate > 0 {
		every = time.Duration(float64(time.Second) * float64(len(w.conns)) / w.rate)
	}
	for i, c := range w.conns {
		w.seed++
		rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
		next := begin.Add(time.Duration(i) * every / time.Duration(len(w.conns)))
		wg.Go(func() {
			for {
				now := time.Now()
				if !now.Before(deadline) {
					return
				}
				if every > 0 {
					if wait := next.Sub(now); wait > 0 {
						if !backoff.Sleep(ctx, min(wait, deadline.Sub(now))) {
							return
						}
						continue
					}
					if floor := now.Add(-pacingSlack); next.Before(floor) {
						next = floor
					}
					next = next.Add(every)
				}
				if _, err := c.Exec(ctx, w.sql, rng.Int64N(int64(w.rows))+1); err != nil {
					errs[i] = fmt.Errorf("writer %d: %w", i, err)
					return
				}
				counts[i]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	var total int64
	for i := range counts {
		if errs[i] != nil {
			return 0, 0, errs[i]
		}
		total += counts[i]
	}
	return float64(total) / elapsed.Seconds(), total, nil
}
