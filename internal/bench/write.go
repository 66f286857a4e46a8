package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
//	B2 the capture triggers disabled (ALTER TABLE ... DISABLE TRIGGER USER)
//	W2 triggers enabled, workers running again (after the C1 backlog drained)
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

	phase := func(label string) (float64, error) {
		if err := e.exec(ctx, "VACUUM "+e.table("bench_src")); err != nil {
			return 0, err
		}
		e.checkpoint(ctx)
		e.quiesce(ctx)
		if _, err := ws.run(ctx, min(warmupMax, s.opts.Duration/10)); err != nil {
			return 0, err
		}
		tps, err := ws.run(ctx, s.opts.Duration)
		if err != nil {
			return 0, err
		}
		e.logf("%s: %.0f tx/s", label, tps)
		return tps, nil
	}

	b1, err := phase("B1 (no transform)")
	if err != nil {
		return nil, err
	}

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
	lag1, err := timed(func() error { return converge(ctx, c) })
	if err != nil {
		return nil, err
	}
	_ = c.Close()

	c1, err := phase("C1 (capture only)")
	if err != nil {
		return nil, err
	}

	if err := e.exec(ctx, fmt.Sprintf("ALTER TABLE %s DISABLE TRIGGER USER", e.table("bench_src"))); err != nil {
		return nil, err
	}
	b2, err := phase("B2 (triggers disabled)")
	if err != nil {
		return nil, err
	}
	if err := e.exec(ctx, fmt.Sprintf("ALTER TABLE %s ENABLE TRIGGER USER", e.table("bench_src"))); err != nil {
		return nil, err
	}

	c2, err := e.connect(ctx, true, drainWorkers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c2.Close() }()
	backlog, err := timed(func() error { return converge(ctx, c2) })
	if err != nil {
		return nil, err
	}
	e.logf("C1's backlog drained in %s", backlog.Round(time.Millisecond))
	w2, err := phase("W2 (capture + drain)")
	if err != nil {
		return nil, err
	}
	lag2, err := timed(func() error { return converge(ctx, c2) })
	if err != nil {
		return nil, err
	}

	const bar = "DESIGN: >= 0.8"
	base := (b1 + b2) / 2
	return []Result{
		result("write", base, (w1+w2)/2, "tx/s", fmt.Sprintf("mean of 2 alternated runs, capture + 2 drain workers vs no capture; %s", bar)),
		result("write/run1", b1, w1, "tx/s", fmt.Sprintf("B1 then W1; drain caught up %s after writes stopped", lag1.Round(time.Millisecond))),
		result("write/run2", b2, w2, "tx/s", fmt.Sprintf("B2 (triggers disabled) then W2; drain caught up %s after writes stopped", lag2.Round(time.Millisecond))),
		result("write/capture-only", base, c1, "tx/s", "triggers installed, no worker running; baseline = mean of B1, B2"),
	}, nil
}

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
}

func newWriters(ctx context.Context, url, table string, rows int) (*writers, error) {
	w := &writers{sql: fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id = $1", table), rows: rows}
	for range writeConns {
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
// transactions per second.
func (w *writers) run(ctx context.Context, d time.Duration) (float64, error) {
	var wg sync.WaitGroup
	counts := make([]int64, len(w.conns))
	errs := make([]error, len(w.conns))
	begin := time.Now()
	deadline := begin.Add(d)
	for i, c := range w.conns {
		w.seed++
		rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
		wg.Go(func() {
			for time.Now().Before(deadline) {
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
			return 0, errs[i]
		}
		total += counts[i]
	}
	return float64(total) / elapsed.Seconds(), nil
}
