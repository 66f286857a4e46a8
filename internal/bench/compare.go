package bench

import (
	"context"
	"fmt"
	"strings"
)

// compareRounds is how many times the side-by-side benchmark runs each of
// its four configurations, interleaved.
const compareRounds = 2

// compare runs the write benchmark's workload (4 connections of
// single-row UPDATEs) on one table in four configurations, interleaved
// (plain, floor, capture, Trellis, then Trellis, capture, floor, plain), so that
// table growth, checkpoints and the machine's other work fall on all of
// them alike:
//
//   - plain: no trigger fires (the writers in replica mode, where capture
//     does not fire, and the floor trigger disabled);
//   - floor: an empty statement-level AFTER UPDATE trigger with transition
//     tables fires (ENABLE ALWAYS, so it fires in replica mode), the least
//     any trigger-based capture costs;
//   - capture: capture fires and no drain worker runs (the backlog is
//     drained after the phase, not counted): the capture's own cost;
//   - trellis: capture fires and 2 drain workers apply it; the phase's CPU
//     is counted until the drain has caught up, so it is the whole cost of
//     a maintained write.
//
// It reports each configuration's throughput and CPU per write against
// plain.
func (s *suite) compare(ctx context.Context, e *env) ([]Result, error) {
	rows := s.opts.Rows
	if err := e.createSource(ctx, rows); err != nil {
		return nil, err
	}
	src := e.table("bench_src")
	if err := e.exec(ctx, fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$`, e.table("bench_floor"))); err != nil {
		return nil, err
	}
	if err := e.exec(ctx, fmt.Sprintf(`CREATE TRIGGER bench_floor AFTER UPDATE ON %s REFERENCING OLD TABLE AS o NEW TABLE AS n
FOR EACH STATEMENT EXECUTE FUNCTION %s()`, src, e.table("bench_floor"))); err != nil {
		return nil, err
	}
	ws, err := newWriters(ctx, e.url, src, rows)
	if err != nil {
		return nil, err
	}
	defer ws.close()
	c, err := e.connect(ctx, true, drainWorkers)
	if err != nil {
		return nil, err
	}
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	if _, err := e.define(ctx, c); err != nil {
		return nil, err
	}
	limit := max(catchUpMin, catchUpPhases*s.opts.Duration)
	stmts, err := e.newStatements(ctx)
	if err != nil {
		return nil, err
	}
	pace := "flat out"
	switch {
	case s.opts.Rate > 0:
		ws.rate = s.opts.Rate
		pace = fmt.Sprintf("paced at %.0f writes/s", ws.rate)
	case s.opts.Load > 0:
		// The pace: a share of the plain rate, measured flat out first.
		if err := ws.setAll(ctx, "SET session_replication_role = replica"); err != nil {
			return nil, err
		}
		if _, _, err := ws.run(ctx, min(warmupMax, s.opts.Duration/10)); err != nil {
			return nil, err
		}
		full, _, err := ws.run(ctx, s.opts.Duration)
		if err != nil {
			return nil, err
		}
		ws.rate = s.opts.Load * full
		pace = fmt.Sprintf("paced at %.0f%% of the plain rate (%.0f of %.0f writes/s)", 100*s.opts.Load, ws.rate, full)
		e.logf("plain flat out: %.0f tx/s; every configuration now writes at %.0f tx/s", full, ws.rate)
	}

	type config struct {
		name    string
		replica bool   // the writers in replica mode: capture does not fire
		floor   string // ENABLE ALWAYS or DISABLE the floor trigger
		noDrain bool   // capture fires with no drain worker running
	}
	configs := []config{
		{name: "plain", replica: true, floor: "DISABLE"},
		{name: "floor", replica: true, floor: "ENABLE ALWAYS"},
		{name: "capture", replica: false, floor: "DISABLE", noDrain: true},
		{name: "trellis", replica: false, floor: "DISABLE"},
	}
	type sums struct{ tps, cpu []float64 }
	got := map[string]*sums{}
	var lags []string
	run := func(cf config) error {
		if err := e.exec(ctx, fmt.Sprintf("ALTER TABLE %s %s TRIGGER bench_floor", src, cf.floor)); err != nil {
			return err
		}
		mode := "RESET session_replication_role"
		if cf.replica {
			mode = "SET session_replication_role = replica"
		}
		if err := ws.setAll(ctx, mode); err != nil {
			return err
		}
		if err := e.exec(ctx, "VACUUM "+src); err != nil {
			return err
		}
		e.checkpoint(ctx)
		e.quiesce(ctx)
		if cf.noDrain {
			if err := c.Close(); err != nil {
				return err
			}
			c = nil
		}
		if !cf.replica {
			stmts.reset(ctx)
		}
		m := e.startMeter(ctx)
		_, warm, err := ws.run(ctx, min(warmupMax, s.opts.Duration/10))
		if err != nil {
			return err
		}
		tps, n, err := ws.run(ctx, s.opts.Duration)
		if err != nil {
			return err
		}
		if !cf.replica && !cf.noDrain {
			lag, err := e.catchUp(ctx, c, limit, "after "+cf.name)
			if err != nil {
				return err
			}
			lags = append(lags, lag)
		}
		cpu := m.perChange(ctx, float64(warm+n))
		if cf.noDrain {
			// The workers again, and the phase's backlog drained before
			// the next phase (not counted).
			if c, err = e.connect(ctx, true, drainWorkers); err != nil {
				return err
			}
			if _, err := e.catchUp(ctx, c, limit, "the capture phase's backlog"); err != nil {
				return err
			}
		}
		e.logf("%s: %.0f tx/s, %.0f µs CPU per write", cf.name, tps, cpu)
		if !cf.replica {
			stmts.report(ctx, cf.name+" phase", float64(warm+n))
		}
		g := got[cf.name]
		if g == nil {
			g = &sums{}
			got[cf.name] = g
		}
		g.tps, g.cpu = append(g.tps, tps), append(g.cpu, cpu)
		return nil
	}
	for r := range compareRounds {
		for i := range configs {
			cf := configs[i]
			if r%2 == 1 {
				cf = configs[len(configs)-1-i]
			}
			if err := run(cf); err != nil {
				return nil, err
			}
		}
	}
	if err := ws.setAll(ctx, "RESET session_replication_role"); err != nil {
		return nil, err
	}
	avg := func(xs []float64) float64 {
		t := 0.0
		for _, x := range xs {
			if x <= 0 {
				return 0
			}
			t += x
		}
		return t / float64(len(xs))
	}
	plain := got["plain"]
	order := fmt.Sprintf("mean of %d interleaved runs vs plain (no trigger firing), %s", compareRounds, pace)
	return []Result{
		withCPU(result("compare/floor", avg(plain.tps), avg(got["floor"].tps), "tx/s",
			order+"; an empty statement trigger with transition tables: the floor of trigger capture"),
			avg(plain.cpu), avg(got["floor"].cpu)),
		withCPU(result("compare/capture", avg(plain.tps), avg(got["capture"].tps), "tx/s",
			order+"; capture only, no drain worker running (the drain's own cost is trellis minus this)"),
			avg(plain.cpu), avg(got["capture"].cpu)),
		withCPU(result("compare/trellis", avg(plain.tps), avg(got["trellis"].tps), "tx/s",
			order+"; capture + 2 drain workers, CPU counted until the drain caught up ("+strings.Join(lags, ", ")+")"),
			avg(plain.cpu), avg(got["trellis"].cpu)),
	}, nil
}
