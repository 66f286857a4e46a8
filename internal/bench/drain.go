package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// drain measures the drain rate on a backlog: the transform of a source of
// Rows rows (the other benchmarks' data) is made live, its workers are
// stopped, Changes distinct rows spread evenly over the source are updated
// (10,000 per statement; all of them when Changes >= Rows), and then a client with staging and 2 drain workers is
// connected and timed until AwaitConverged returns. The baseline is what a
// hand-written batch job runs for the same changes: one upsert per 10,000
// shuffled changed keys, on one connection, of the definition's rows for
// those keys (or for the groups or partitions they are in) into a copy of
// the target (see baselineUpsert; run before and after the drain; the
// faster is used, so noise can only make the ratio worse).
func (s *suite) drain(ctx context.Context, e *env) ([]Result, error) {
	rows := s.opts.Rows
	n := min(s.opts.Changes, rows)
	if err := e.createSource(ctx, rows); err != nil {
		return nil, err
	}
	src := e.table("bench_src")
	c, err := e.connect(ctx, true, drainWorkers)
	if err != nil {
		return nil, err
	}
	if _, err := e.define(ctx, c); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.Close()

	create, upsert := e.baselineUpsert(e.table("bench_copy"))
	for _, q := range create {
		if err := e.exec(ctx, q); err != nil {
			return nil, err
		}
	}

	// The backlog: n rows spread over the source change once each, so the
	// ledger holds n keys.
	keys := backlogKeys(rows, n)
	e.quiesce(ctx)
	write, err := timed(func() error {
		for lo := 0; lo < n; lo += drainStmtRows {
			if err := e.exec(ctx, fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id = ANY ($1)", src), keys[lo:min(lo+drainStmtRows, n)]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.logf("backlog of %d changes to %d source rows written in %s", n, rows, write.Round(time.Millisecond))
	if err := e.exec(ctx, "VACUUM "+src); err != nil {
		return nil, err
	}
	e.checkpoint(ctx)

	rand.New(rand.NewPCG(3, 4)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
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
	// The baseline must do the drain's work: after it the copy is the
	// definition's result.
	if bad, err := e.mismatchesIn(ctx, e.table("bench_copy")); err != nil {
		return nil, err
	} else if bad != 0 {
		return nil, fmt.Errorf("after the baseline upserts %d rows of the copy differ from the definition's result", bad)
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
	drainCPU, selfCPU := m.split(ctx, float64(n))
	if c2close != nil {
		_ = c2close()
	}
	if err != nil {
		return nil, err
	}
	stmts.report(ctx, "the drain", float64(n))
	e.logf("drained %d changes in %s, CPU %.1f µs per change, %.1f of it in the workers' process", n, took.Round(time.Millisecond), drainCPU, selfCPU)
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
			fmt.Sprintf("%s shape, %d-change backlog on %d source rows, Connect to converged with 2 workers (%.2f s), vs a bare upsert of the same recompute, %d keys/statement, best of 2 (%.0f ms each; DESIGN: ~160 ms, ~62k keys/s)",
				e.shape.name, n, rows, took.Seconds(), drainBatch, perBatch)), least(baseCPU), drainCPU),
	}, nil
}

// backlogKeys returns the ids of the n rows (of ids 1..rows) the drain
// benchmark changes, spread evenly: ids 1 + i*rows/n, in order.
func backlogKeys(rows, n int) []int64 {
	keys := make([]int64, n)
	for i := range keys {
		keys[i] = 1 + int64(i)*int64(rows)/int64(n)
	}
	return keys
}

// baselineUpsert is the drain benchmark's baseline: the statements that
// create cp, a copy of the target with its key, and the one upsert a
// hand-written batch job would run to apply a batch of changed source ids
// ($1 bigint[]) to it: the definition's rows for those ids (a projection
// or join), or for the groups or partitions the ids are in (an aggregate or
// window), inserted or updated by key; with no key (a global aggregate),
// the one row. It writes every row it recomputes and deletes nothing: the
// cheapest statement that applies such a batch of updates. A UNION without
// ALL is keyed by its whole row, as Trellis keys it, so its batch deletes
// the rows gone and inserts the new ones.
func (e *env) baselineUpsert(cp string) (create []string, upsert string) {
	def := e.definition()
	conflict := e.keyTarget()
	create = []string{
		fmt.Sprintf("CREATE TABLE %s AS %s", cp, def),
		e.keyIndex(cp),
		fmt.Sprintf("VACUUM (ANALYZE) %s", cp),
	}
	if m, ok := e.more(); ok && m.chained {
		return e.chainBaseline(cp)
	}
	if q := e.moreBaseline(cp); q != "" {
		return create, q
	}
	if e.shape.name == UnionDistinct {
		// Keyed by the whole row, as Trellis keys a UNION: a changed row
		// is another key, so the batch deletes the rows of its ids the
		// union no longer yields and inserts the new ones (an upsert by
		// id alone would need a key the union does not have).
		create[1] = fmt.Sprintf("CREATE UNIQUE INDEX ON %s (id, v)", cp)
		upsert = fmt.Sprintf("WITH d AS (SELECT id, v FROM (%s) d WHERE d.id = ANY ($1::bigint[])), "+
			"gone AS (DELETE FROM %s WHERE id = ANY ($1::bigint[]) AND (id, v) NOT IN (SELECT id, v FROM d)) "+
			"INSERT INTO %s (id, v) SELECT id, v FROM d ON CONFLICT (id, v) DO NOTHING", def, cp, cp)
		return create, upsert
	}
	var cond string
	m, _ := e.more()
	switch {
	case m.recompute != "":
		cond = fmt.Sprintf(m.recompute, e.table("bench_src"))
	case len(e.shape.keys) == 0:
		cond = "cardinality($1::bigint[]) > 0"
	case slices.Contains(e.shape.keys, "id") && e.shape.keys[0] != "grp":
		cond = "d.id = ANY ($1::bigint[])"
	default:
		// The groups (partitions) of the changed rows.
		cond = fmt.Sprintf("d.%s = ANY (ARRAY(SELECT DISTINCT %s FROM %s WHERE id = ANY ($1::bigint[])))",
			e.shape.keys[0], e.shape.keys[0], e.table("bench_src"))
	}
	cols := append(slices.Clone(e.shape.keys), e.shape.vals...)
	set := make([]string, len(e.shape.vals))
	for i, v := range e.shape.vals {
		set[i] = v + " = EXCLUDED." + v
	}
	upsert = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM (%s) d WHERE %s ON CONFLICT %s DO UPDATE SET %s",
		cp, strings.Join(cols, ", "), strings.Join(cols, ", "), def, cond, conflict, strings.Join(set, ", "))
	return create, upsert
}
