package bench

import (
	"context"
	"fmt"
	"time"
)

// backfill measures how fast a transform of Rows rows is built: the time
// from Define to Status.State == live (polled every 20 ms), with staging
// and 2 drain workers running and no writes. The baseline is CREATE TABLE
// AS SELECT id, v plus ALTER TABLE ... ADD PRIMARY KEY of the same rows
// (for a GROUP BY or JOIN shape: CREATE TABLE AS of the definition's query
// plus a unique index on the target's key), run before and after the build
// (the faster is used, so noise can only make the ratio worse).
func (s *suite) backfill(ctx context.Context, e *env) ([]Result, error) {
	rows := s.opts.Rows
	if err := e.createSource(ctx, rows); err != nil {
		return nil, err
	}
	src, ctas := e.table("bench_src"), e.table("bench_ctas")
	var baseCPU []float64
	baseline := func() (time.Duration, error) {
		e.quiesce(ctx)
		m := e.startMeter(ctx)
		d, err := timed(func() error {
			if e.shape.name == Projection {
				if err := e.exec(ctx, fmt.Sprintf("CREATE TABLE %s AS SELECT id, v FROM %s", ctas, src)); err != nil {
					return err
				}
				return e.exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (id)", ctas))
			}
			if err := e.exec(ctx, fmt.Sprintf("CREATE TABLE %s AS %s", ctas, e.definition())); err != nil {
				return err
			}
			return e.exec(ctx, e.keyIndex(ctas))
		})
		if err != nil {
			return 0, err
		}
		baseCPU = append(baseCPU, m.perChange(ctx, float64(rows)))
		if err := e.exec(ctx, "DROP TABLE "+ctas); err != nil {
			return 0, err
		}
		e.checkpoint(ctx)
		return d, nil
	}
	base1, err := baseline()
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
	// The staging worker logs the build after the transaction that made
	// it live: read it before Close stops the worker.
	built := e.builds.lastBuild(ctx)
	_ = c.Close()
	e.logf("built %d rows in %s", rows, build.Round(time.Millisecond))
	bad, err := e.mismatches(ctx)
	if err != nil {
		return nil, err
	}
	if bad != 0 {
		return nil, fmt.Errorf("after the build %d target rows differ from the definition's result", bad)
	}
	// Vacuum the new target now, so that autovacuum does not do it during
	// the second baseline.
	if err := e.exec(ctx, "VACUUM "+e.table("bench_tgt")); err != nil {
		return nil, err
	}
	e.checkpoint(ctx)

	base2, err := baseline()
	if err != nil {
		return nil, err
	}
	e.logf("CREATE TABLE AS + key took %s and %s", base1.Round(time.Millisecond), base2.Round(time.Millisecond))
	base := min(base1, base2)
	what := "CREATE TABLE AS + PRIMARY KEY"
	if e.shape.name != Projection {
		what = e.shape.name + " shape: CREATE TABLE AS of the definition + UNIQUE INDEX on its key"
	}
	out := []Result{
		withCPU(result("backfill", float64(rows)/base.Seconds(), float64(rows)/build.Seconds(), "rows/s",
			fmt.Sprintf("Define to live, %d source rows (%.2f s), vs %s, best of 2 (%.2f s); DESIGN: >= 0.7; cpu per source row",
				rows, build.Seconds(), what, base.Seconds())), least(baseCPU), e.buildCPU*1e6/float64(rows)),
	}
	// The build alone: Define to live less the Define call and the wait
	// for the staging worker, which installs capture before it starts the
	// build. Those are fixed costs that do not grow with the source: they
	// set the ratio of a shape whose CREATE TABLE AS takes 0.1 s (global).
	if b := built; b > 0 {
		e.logf("the build took %s of it; Define %s, capture install and waits %s", b.Round(time.Millisecond),
			e.defineTook.Round(time.Millisecond), (build - b - e.defineTook).Round(time.Millisecond))
		out = append(out, result("backfill/build", float64(rows)/base.Seconds(), float64(rows)/b.Seconds(), "rows/s",
			fmt.Sprintf("the staging worker's build alone (%.3f s: its start to live, from its log), vs the same baseline; the Define call took %.3f s",
				b.Seconds(), e.defineTook.Seconds())))
	}
	return out, nil
}
