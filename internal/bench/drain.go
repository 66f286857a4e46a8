package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// drain measures the drain rate on a backlog: the transform is made live,
// its workers are stopped, Changes distinct rows are updated (10,000 per
// statement), and then a client with staging and 2 drain workers is
// connected and timed until AwaitConverged returns. The baseline is a bare
// INSERT ... SELECT ... WHERE id = ANY($1) ON CONFLICT DO UPDATE of the
// same keys into a copy of bench_src's (id, v), whatever the shape, 10,000
// shuffled keys per statement on one connection (run before and after the
// drain; the faster is used, so noise can only make the ratio worse).
func (s *suite) drain(ctx context.Context, e *env) ([]Result, error) {
	n := s.opts.Changes
	if err := e.createSource(ctx, n); err != nil {
		return nil, err
	}
	src, cp := e.table("bench_src"), e.table("bench_copy")
	c, err := e.connect(ctx, true, drainWorkers)
	if err != nil {
		return nil, err
	}
	if _, err := e.define(ctx, c); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.Close()

	for _, q := range []string{
		fmt.Sprintf("CREATE TABLE %s AS SELECT id, v FROM %s", cp, src),
		fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (id)", cp),
		fmt.Sprintf("VACUUM (ANALYZE) %s", cp),
	} {
		if err := e.exec(ctx, q); err != nil {
			return nil, err
		}
	}

	// The backlog: every row changes once, so the ledger holds n keys.
	e.quiesce(ctx)
	write, err := timed(func() error {
		for lo := 1; lo <= n; lo += drainStmtRows {
			hi := min(lo+drainStmtRows-1, n)
			if err := e.exec(ctx, fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id BETWEEN $1 AND $2", src), lo, hi); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.logf("backlog of %d changes written in %s", n, write.Round(time.Millisecond))
	if err := e.exec(ctx, "VACUUM "+src); err != nil {
		return nil, err
	}
	e.checkpoint(ctx)

	keys := make([]int64, n)
	for i := range keys {
		keys[i] = int64(i + 1)
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	upsert := fmt.Sprintf("INSERT INTO %s (id, v) SELECT id, v FROM %s WHERE id = ANY($1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", cp, src)
	var baseCPU []float64
	baseline := func() (time.Duration, error) {
		e.quiesce(ctx)
		m := e.startMeter(ctx)
		d, err := timed(func() error {
			for lo := 0; lo < n; lo += drainBatch {
				if err := e.exec(ctx, upsert, keys[lo:min(lo+drainBatch, n)]); err != nil {
					return err
				}
			}
			return nil
		})
		baseCPU = append(baseCPU, m.perChange(ctx, float64(n)))
		return d, err
	}
	base1, err := baseline()
	if err != nil {
		return nil, err
	}
	e.checkpoint(ctx)

	stmts, err := e.newStatements(ctx)
	if err != nil {
		return nil, err
	}
	var c2close func() error
	e.quiesce(ctx)
	stmts.reset(ctx)
	m := e.startMeter(ctx)
	took, err := timed(func() error {
		c2, err := e.connect(ctx, true, drainWorkers)
		if err != nil {
			return err
		}
		c2close = c2.Close
		return converge(ctx, c2)
	})
	// Measured before the workers' connections close: the CPU of a server
	// process that has exited can no longer be read.
	drainCPU := m.perChange(ctx, float64(n))
	if c2close != nil {
		_ = c2close()
	}
	if err != nil {
		return nil, err
	}
	stmts.report(ctx, "the drain", float64(n))
	e.logf("drained %d changes in %s", n, took.Round(time.Millisecond))
	bad, err := e.mismatches(ctx)
	if err != nil {
		return nil, err
	}
	if bad != 0 {
		return nil, fmt.Errorf("after convergence %d target rows differ from the definition's result", bad)
	}

	base2, err := baseline()
	if err != nil {
		return nil, err
	}
	base := min(base1, base2)
	e.logf("baseline upserts took %s and %s", base1.Round(time.Millisecond), base2.Round(time.Millisecond))
	perBatch := ms(base) / float64((n+drainBatch-1)/drainBatch)
	return []Result{
		withCPU(result("drain", float64(n)/base.Seconds(), float64(n)/took.Seconds(), "keys/s",
			fmt.Sprintf("%s shape, %d-change backlog, Connect to converged with 2 workers (%.2f s), vs bare upsert of %d keys/statement, best of 2 (%.0f ms each; DESIGN: ~160 ms, ~62k keys/s)",
				e.shape.name, n, took.Seconds(), drainBatch, perBatch)), least(baseCPU), drainCPU),
	}, nil
}
