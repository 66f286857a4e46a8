package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ledger"
)

// Sample reads the instance's gauges from its catalog, unless the last
// sample is younger than SampleEvery, or than twenty times what it took. The staging worker calls it from its
// maintenance pass. A failed sample is counted and returned; the gauges
// keep their last values.
func (in *Instance) Sample(ctx context.Context, q catalog.Querier, cat *catalog.Catalog) error {
	if in == nil {
		return nil
	}
	in.smu.Lock()
	defer in.smu.Unlock()
	if time.Since(in.lastSample) < sampleGap(in.lastTook) {
		return nil
	}
	in.lastSample = time.Now()
	defer func() { in.lastTook = time.Since(in.lastSample) }()
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	var pending, ledgerRows, cols, held int64
	var lag float64
	states := make([]int64, len(States))
	err := q.QueryRow(ctx, cat.SQL(sqlSample), cat.Q()+".ledger").Scan(&pending, &lag, &ledgerRows, &cols, &held,
		&states[0], &states[1], &states[2], &states[3])
	var work []ledger.Pending
	if err == nil {
		work, err = ledger.PendingWork(ctx, q, cat, 0)
	}
	if err != nil {
		in.sampleFailed(ctx)
		return fmt.Errorf("sampling the metrics' gauges: %w", err)
	}
	fam.up.WithLabelValues(in.label).Set(1)
	l := in.label
	fam.pending.WithLabelValues(l).Set(float64(pending))
	fam.lag.WithLabelValues(l).Set(lag)
	fam.ledgerRows.WithLabelValues(l).Set(float64(ledgerRows))
	fam.quarantCols.WithLabelValues(l).Set(float64(cols))
	fam.heldKeys.WithLabelValues(l).Set(float64(held))
	for i, s := range States {
		fam.transforms.WithLabelValues(l, string(s)).Set(float64(states[i]))
	}
	seen := make(map[string]bool, len(work))
	for _, p := range work {
		target := p.Target.String()
		seen[target] = true
		fam.targetPending.WithLabelValues(l, target).Set(float64(p.Changes))
		fam.targetLag.WithLabelValues(l, target).Set(p.Lag.Seconds())
		for _, s := range States {
			v := 0.0
			if s == p.State {
				v = 1
			}
			fam.targetState.WithLabelValues(l, target, string(s)).Set(v)
		}
	}
	for target := range in.targets {
		if !seen[target] { // dropped since the last sample
			only := prometheus.Labels{InstanceLabel: l, TargetLabel: target}
			for _, g := range []*prometheus.GaugeVec{fam.targetPending, fam.targetLag, fam.targetState} {
				g.DeletePartialMatch(only)
			}
		}
	}
	in.targets = seen
	return nil
}

// sampleTimeout bounds one sample, so a database that does not answer
// shows as a failed sample (trellis_up 0) rather than as silence.
const sampleTimeout = 5 * time.Second

// sampleFailed counts a failed sample, unless the worker is stopping.
func (in *Instance) sampleFailed(ctx context.Context) {
	if context.Cause(ctx) == context.Canceled {
		return
	}
	in.SampleFailed()
}

// SampleFailed counts a sample that could not be taken (the database did
// not answer) and sets trellis_up to 0.
func (in *Instance) SampleFailed() {
	if in == nil {
		return
	}
	in.sampleErrors.Inc()
	fam.up.WithLabelValues(in.label).Set(0)
}

// ForgetSample removes the instance's sampled gauges: the staging worker
// that sampled them stopped, and another process may sample them now.
func (in *Instance) ForgetSample() {
	if in == nil {
		return
	}
	in.smu.Lock()
	defer in.smu.Unlock()
	in.lastSample = time.Time{}
	in.lastTook = 0
	in.targets = nil
	only := prometheus.Labels{InstanceLabel: in.label}
	for _, g := range fam.sampled() {
		g.DeletePartialMatch(only)
	}
}
