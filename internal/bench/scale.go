package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellis-pg/trellis"
)

// Defaults of the scale benchmark's axes (Options.ScaleWriters,
// ScaleTransforms, ScaleWorkers).
var (
	DefaultScaleWriters    = []int{1, 2, 4, 8}
	DefaultScaleTransforms = []int{1, 10, 100}
	DefaultScaleWorkers    = []int{1, 2, 4}
)

// scale measures how the write and whole-cost figures move along three
// axes, one at a time, each point a plain phase then a Trellis phase
// (capture and drain workers, CPU counted until the drain caught up) of
// Options.Duration on one table:
//
//   - writers: 1, 2, 4, 8 writer connections flat out, 2 drain workers;
//   - workers: 1, 2, 4 drain workers, 4 writers;
//   - transforms: 1, 10, 100 transforms of the shape on the one source,
//     4 writers, 2 drain workers.
//
// The workers and transforms axes write at Options.Rate when it is set
// (flat out otherwise). Keep Rows and Duration small: the transforms axis
// builds every target.
func (s *suite) scale(ctx context.Context, e *env) ([]Result, error) {
	rows := s.opts.Rows
	if err := e.createSource(ctx, rows); err != nil {
		return nil, err
	}
	src := e.table("bench_src")
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
	targets := []string{e.table("bench_tgt")}
	limit := max(catchUpMin, catchUpPhases*s.opts.Duration)

	// point runs plain, then Trellis, on ws with c's workers.
	point := func(name string, ws *writers, detail string) (Result, error) {
		measure := func(replica bool) (float64, float64, string, error) {
			mode := "RESET session_replication_role"
			if replica {
				mode = "SET session_replication_role = replica"
			}
			if err := ws.setAll(ctx, mode); err != nil {
				return 0, 0, "", err
			}
			if err := e.exec(ctx, "VACUUM "+src); err != nil {
				return 0, 0, "", err
			}
			e.quiesce(ctx)
			m := e.startMeter(ctx)
			_, warm, err := ws.run(ctx, min(warmupMax, s.opts.Duration/10))
			if err != nil {
				return 0, 0, "", err
			}
			tps, n, err := ws.run(ctx, s.opts.Duration)
			if err != nil {
				return 0, 0, "", err
			}
			lag := ""
			if !replica {
				if lag, err = e.catchUp(ctx, c, limit, name); err != nil {
					return 0, 0, "", err
				}
			}
			return tps, m.perChange(ctx, float64(warm+n)), lag, nil
		}
		ptps, pcpu, _, err := measure(true)
		if err != nil {
			return Result{}, err
		}
		ttps, tcpu, lag, err := measure(false)
		if err != nil {
			return Result{}, err
		}
		if err := ws.setAll(ctx, "RESET session_replication_role"); err != nil {
			return Result{}, err
		}
		e.logf("%s: plain %.0f tx/s %.0f µs CPU per write; Trellis %.0f tx/s %.0f µs (drain %s)", name, ptps, pcpu, ttps, tcpu, lag)
		return withCPU(result("scale/"+name, ptps, ttps, "tx/s", detail+"; Trellis vs plain, CPU counted until the drain caught up ("+lag+")"), pcpu, tcpu), nil
	}
	// The plain phases' writes never reach the target (replica mode): it
	// is re-derived before the check at the end.
	pace := func(ws *writers) string {
		if s.opts.Rate > 0 {
			ws.rate = s.opts.Rate
			return fmt.Sprintf("paced at %.0f writes/s", ws.rate)
		}
		return "flat out"
	}
	var out []Result
	reconnect := func(workers int) error {
		if err := c.Close(); err != nil {
			return err
		}
		c = nil
		c2, err := e.connect(ctx, true, workers)
		if err != nil {
			return err
		}
		c = c2
		return nil
	}

	for _, w := range s.opts.ScaleWorkers {
		if err := reconnect(w); err != nil {
			return out, err
		}
		ws, err := newWritersN(ctx, e.url, src, rows, writeConns)
		if err != nil {
			return out, err
		}
		r, err := point(fmt.Sprintf("workers=%d", w), ws, fmt.Sprintf("%d drain workers, %d writers %s", w, writeConns, pace(ws)))
		ws.close()
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	if err := reconnect(drainWorkers); err != nil {
		return out, err
	}
	for _, n := range s.opts.ScaleWriters {
		ws, err := newWritersN(ctx, e.url, src, rows, n)
		if err != nil {
			return out, err
		}
		r, err := point(fmt.Sprintf("writers=%d", n), ws, fmt.Sprintf("%d writers flat out, %d drain workers", n, drainWorkers))
		ws.close()
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	have := 1
	for _, k := range s.opts.ScaleTransforms {
		for ; have < k; have++ {
			target := e.table(fmt.Sprintf("bench_tgt_%d", have))
			stmt := strings.Replace(e.transform(), e.table("bench_tgt")+" ", target+" ", 1)
			if _, err := c.Define(ctx, stmt); err != nil {
				return out, fmt.Errorf("defining transform %d: %w", have+1, err)
			}
			targets = append(targets, target)
		}
		if err := waitAllLive(ctx, c, targets); err != nil {
			return out, err
		}
		ws, err := newWritersN(ctx, e.url, src, rows, writeConns)
		if err != nil {
			return out, err
		}
		r, err := point(fmt.Sprintf("transforms=%d", k), ws, fmt.Sprintf("%d transforms on the source, %d writers %s, %d drain workers", k, writeConns, pace(ws), drainWorkers))
		ws.close()
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	if err := c.RequestBackfill(ctx, src); err != nil {
		return out, fmt.Errorf("re-reading the source after the plain phases: %w", err)
	}
	if err := waitAllLive(ctx, c, targets); err != nil {
		return out, err
	}
	if bad, err := e.mismatches(ctx); err != nil {
		return out, err
	} else if bad != 0 {
		return out, fmt.Errorf("after the scale runs %d target rows differ from the definition's result", bad)
	}
	return out, nil
}

// waitAllLive waits until the transforms writing targets are live.
func waitAllLive(ctx context.Context, c *trellis.Client, targets []string) error {
	for _, t := range targets {
		if err := waitLive(ctx, c, t); err != nil {
			return err
		}
	}
	return nil
}
