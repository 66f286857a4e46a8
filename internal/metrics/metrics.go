// Package metrics is the process-wide registry of the engine's Prometheus
// series. Every series carries the trellis_instance label
// ("<database>/<catalog schema>", the value the logs carry), so the
// clients of several instances in one process stay apart.
//
// Counters and histograms are observed in Go where the work happens (a
// drain page, a build page, a quarantine), at no extra SQL. Gauges of the
// instance's state are sampled with one catalog query by the staging
// worker, at most every SampleEvery, so only the process running the
// instance's staging worker reports them.
package metrics

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/trellis-pg/trellis/trellistype"
)

// InstanceLabel is the label every series carries.
const InstanceLabel = "trellis_instance"

// TargetLabel names the transform ("schema.table") of a per-transform series.
const TargetLabel = "target"

// SampleEvery is the least time between two samples of an instance's gauges.
const SampleEvery = 2 * time.Second

// sampleShare bounds the time the staging worker spends sampling: after a
// sample that took d, the next waits at least d / sampleShare (a sample
// counts every pending change, so on a backlog of 200,000 changes it took
// about a second, every SampleEvery, beside the drain it measured).
const sampleShare = 0.05

// sampleGap is the least time from one sample to the next, given how long
// the last one took.
func sampleGap(took time.Duration) time.Duration {
	return max(SampleEvery, time.Duration(float64(took)/sampleShare))
}

// States are the transform states trellis_transforms reports, as the
// catalog keeps them (a transform catching up is live in the catalog).
var States = []trellistype.State{trellistype.StateWaitingToBackfill, trellistype.StateBackfilling, trellistype.StateLive, trellistype.StatePaused}

// CaptureFailureKinds are the kinds trellis_capture_failures_total counts.
var CaptureFailureKinds = []trellistype.CaptureFailureKind{trellistype.CaptureFailureDisruption, trellistype.CaptureFailureCapture, trellistype.CaptureFailureHalt}

// families are every series family of the engine.
type families struct {
	drainPages   *prometheus.CounterVec
	drainKeys    *prometheus.CounterVec
	drainSeconds *prometheus.HistogramVec
	drainRows    *prometheus.HistogramVec
	quarantine   *prometheus.CounterVec
	buildPages   *prometheus.CounterVec
	builds       *prometheus.CounterVec
	buildRows    *prometheus.CounterVec
	passes       *prometheus.CounterVec
	captureFails *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	panics       *prometheus.CounterVec

	lag          *prometheus.GaugeVec
	pending      *prometheus.GaugeVec
	ledgerRows   *prometheus.GaugeVec
	quarantCols  *prometheus.GaugeVec
	heldKeys     *prometheus.GaugeVec
	transforms   *prometheus.GaugeVec
	sampleErrors *prometheus.CounterVec

	up            *prometheus.GaugeVec
	targetLag     *prometheus.GaugeVec
	targetPending *prometheus.GaugeVec
	targetState   *prometheus.GaugeVec
}

func newFamilies() *families {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{InstanceLabel}, labels...))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, append([]string{InstanceLabel}, labels...))
	}
	return &families{
		drainPages: counter("trellis_drain_pages_total",
			"Drain pages finished: ok (applied and committed) or failed (recorded as a drain failure and retried with backoff).", "result"),
		drainKeys: counter("trellis_drain_keys_applied_total",
			"Target keys recomputed by applied drain pages, summed over the transforms each page touched."),
		drainSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trellis_drain_page_seconds",
			Help:    "Time to apply one drain page, from its claim to its commit (applied pages only).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{InstanceLabel}),
		drainRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "trellis_drain_page_rows",
			Help: "Ledger rows read by one drain page (applied pages only): a worker holds one page's changes in memory at a time, and no page holds more than 20,000 rows.",
			// 10,000 is the ledger's page target, 20,000 its bound (ledger.PageMax).
			Buckets: []float64{1, 10, 100, 1000, 5000, 10000, 20000, 50000, 100000, 1000000},
		}, []string{InstanceLabel}),
		quarantine: counter("trellis_quarantine_events_total",
			"Quarantine events: a column paused because it failed on rows (kind column), or keys poisoned and held (kind key, one per key).", "kind"),
		buildPages: counter("trellis_build_pages_total",
			"Build (backfill) pages run by the staging worker: ok, or failed (retried with backoff).", "result"),
		builds: counter("trellis_builds_total",
			"Builds (backfills) ended: finished (the transform is live) or paused (the build kept failing).", "result"),
		buildRows: counter("trellis_build_rows_total",
			"Target rows written by build pages."),
		passes: counter("trellis_staging_passes_total",
			"Passes of the staging worker (install capture, build, upkeep); wake-ups are debounced, so a flood of notifications adds at most one pass per 25 ms."),
		captureFails: counter("trellis_capture_failures_total",
			"Transforms' sources found with broken capture, by kind: disruption (capture changed outside Trellis), capture (a source column read or the primary key lost), halt (the target changed outside Trellis).", "kind"),
		rejected: counter("trellis_ledger_rows_rejected_total",
			"Ledger rows the drain refused as malformed (a key of the wrong arity, a wrong bucket, old values of the wrong arity, an unknown source); each makes the drain re-read its source, if known, for every reader."),
		panics: counter("trellis_panics_total",
			"Panics recovered in a background part (service: drain, staging, self_check, listener); the part reports it and goes on.", "service"),

		lag: gauge("trellis_drain_lag_seconds",
			"Seconds since the oldest cut of the ledger with a page not yet applied was taken; 0 when every cut is applied. Sampled by the staging worker."),
		pending: gauge("trellis_drain_pages_pending",
			"Drain pages cut and not yet applied. Sampled by the staging worker."),
		ledgerRows: gauge("trellis_ledger_rows",
			"Rows in the ledger ring, applied or not (applied rows leave when their segment is truncated), estimated from PostgreSQL's table statistics. Sampled by the staging worker."),
		quarantCols: gauge("trellis_quarantined_columns",
			"Columns paused because they failed on rows. Sampled by the staging worker."),
		heldKeys: gauge("trellis_held_keys",
			"Keys poisoned and held by their transform until released. Sampled by the staging worker."),
		transforms: gauge("trellis_transforms",
			"Transforms by state (a transform catching up counts as live). Sampled by the staging worker.", "state"),
		sampleErrors: counter("trellis_metrics_sample_errors_total",
			"Failed samples of the instance's gauges by the staging worker (the gauges keep their last values; trellis_up reads 0)."),

		up: gauge("trellis_up",
			"1 when this process's last round trip to the instance's database (a sample of the gauges, a drain pass) succeeded, 0 when it failed: alert on 0, or on the series' absence from a process that runs workers."),
		targetLag: gauge("trellis_transform_lag_seconds",
			"Seconds the oldest change of the transform's sources not yet applied to its target has waited, at most; 0 when none is pending. Sampled by the staging worker.", TargetLabel),
		targetPending: gauge("trellis_transform_pending_changes",
			"Committed, captured changes of the transform's sources (through chains, of the sources upstream) not yet applied to its target. Sampled by the staging worker.", TargetLabel),
		targetState: gauge("trellis_transform_state",
			"1 for the state the transform is in (as the catalog keeps it: a transform catching up is live), 0 for the others. Sampled by the staging worker.", TargetLabel, "state"),
	}
}

func (f *families) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.drainPages, f.drainKeys, f.drainSeconds, f.drainRows, f.quarantine, f.buildPages, f.builds,
		f.buildRows, f.passes, f.captureFails, f.rejected, f.panics, f.lag, f.pending, f.ledgerRows, f.quarantCols, f.heldKeys, f.transforms, f.sampleErrors,
		f.up, f.targetLag, f.targetPending, f.targetState}
}

// sampled are the families the staging worker samples.
func (f *families) sampled() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{f.lag, f.pending, f.ledgerRows, f.quarantCols, f.heldKeys, f.transforms,
		f.targetLag, f.targetPending, f.targetState}
}

// collector is every family as one prometheus.Collector.
type collector struct{ f *families }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c.f.collectors() {
		x.Describe(ch)
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c.f.collectors() {
		x.Collect(ch)
	}
}

// The process-wide registry. It is the one mutable global of the module:
// one registry per process is what the design asks for, so that every
// client's series reach one scrape.
var (
	fam      = newFamilies()
	registry = prometheus.NewRegistry()

	mu        sync.Mutex
	instances = map[string]*Instance{}
)

func init() {
	registry.MustRegister(collector{fam})
}

// Collector is every series of the process, for a host's registry.
func Collector() prometheus.Collector { return collector{fam} }

// Gatherer is the process-wide registry.
func Gatherer() prometheus.Gatherer { return registry }

// Render is the process-wide registry in the Prometheus text exposition
// format.
func Render() string {
	mfs, err := registry.Gather()
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if eerr := enc.Encode(mf); eerr != nil && err == nil {
			err = eerr
		}
	}
	if err != nil {
		// Not expected of the engine's own collectors; said as a comment,
		// which scrapers ignore, rather than lost.
		fmt.Fprintf(&b, "# trellis: rendering the metrics failed: %v\n", err)
	}
	return b.String()
}

// Instance is one instance's series. Its methods are safe for concurrent
// use, and do nothing on a nil *Instance (engines built without metrics,
// as in tests).
type Instance struct {
	label string
	refs  int // under mu

	pagesOK, pagesFailed          prometheus.Counter
	keys                          prometheus.Counter
	pageSeconds                   prometheus.Observer
	pageRows                      prometheus.Observer
	quarantinedCols, poisonedKeys prometheus.Counter
	buildPagesOK, buildPagesFail  prometheus.Counter
	buildsDone, buildsPaused      prometheus.Counter
	buildRows                     prometheus.Counter
	passes                        prometheus.Counter
	captureFails                  map[trellistype.CaptureFailureKind]prometheus.Counter
	sampleErrors                  prometheus.Counter

	smu        sync.Mutex
	lastSample time.Time
	lastTook   time.Duration   // how long the last sample took
	targets    map[string]bool // the targets the last sample reported
}

// Open returns the series of the instance label ("<database>/<catalog
// schema>"), shared by every client of that instance in the process.
// Close it when the client closes: the instance's series leave the
// registry when its last client closes.
func Open(label string) *Instance {
	mu.Lock()
	defer mu.Unlock()
	if in := instances[label]; in != nil {
		in.refs++
		return in
	}
	in := &Instance{
		label:           label,
		refs:            1,
		pagesOK:         fam.drainPages.WithLabelValues(label, "ok"),
		pagesFailed:     fam.drainPages.WithLabelValues(label, "failed"),
		keys:            fam.drainKeys.WithLabelValues(label),
		pageSeconds:     fam.drainSeconds.WithLabelValues(label),
		pageRows:        fam.drainRows.WithLabelValues(label),
		quarantinedCols: fam.quarantine.WithLabelValues(label, "column"),
		poisonedKeys:    fam.quarantine.WithLabelValues(label, "key"),
		buildPagesOK:    fam.buildPages.WithLabelValues(label, "ok"),
		buildPagesFail:  fam.buildPages.WithLabelValues(label, "failed"),
		buildsDone:      fam.builds.WithLabelValues(label, "finished"),
		buildsPaused:    fam.builds.WithLabelValues(label, string(trellistype.StatePaused)),
		buildRows:       fam.buildRows.WithLabelValues(label),
		passes:          fam.passes.WithLabelValues(label),
		captureFails:    map[trellistype.CaptureFailureKind]prometheus.Counter{},
		sampleErrors:    fam.sampleErrors.WithLabelValues(label),
	}
	for _, k := range CaptureFailureKinds {
		in.captureFails[k] = fam.captureFails.WithLabelValues(label, string(k))
	}
	instances[label] = in
	return in
}

// Close releases the caller's share of the instance; the last one removes
// the instance's series from the registry.
func (in *Instance) Close() {
	if in == nil {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if in.refs--; in.refs > 0 {
		return
	}
	delete(instances, in.label)
	only := prometheus.Labels{InstanceLabel: in.label}
	for _, c := range fam.collectors() {
		if v, ok := c.(interface {
			DeletePartialMatch(prometheus.Labels) int
		}); ok {
			v.DeletePartialMatch(only)
		}
	}
}

// Label is the instance's trellis_instance value.
func (in *Instance) Label() string {
	if in == nil {
		return ""
	}
	return in.label
}

// Up records whether this process's last round trip to the instance's
// database succeeded (trellis_up).
func (in *Instance) Up(ok bool) {
	if in == nil {
		return
	}
	// Created on first use: a client that runs no workers reports nothing.
	v := 0.0
	if ok {
		v = 1
	}
	fam.up.WithLabelValues(in.label).Set(v)
}

// DrainPage counts a drain page applied in d, recomputing keys target keys
// from rows ledger rows.
func (in *Instance) DrainPage(d time.Duration, keys, rows int) {
	if in == nil {
		return
	}
	in.pagesOK.Inc()
	in.keys.Add(float64(keys))
	in.pageSeconds.Observe(d.Seconds())
	in.pageRows.Observe(float64(rows))
}

// DrainPageFailed counts a drain page that failed and is retried.
func (in *Instance) DrainPageFailed() {
	if in == nil {
		return
	}
	in.pagesFailed.Inc()
}

// ColumnsQuarantined counts n columns paused on failing rows.
func (in *Instance) ColumnsQuarantined(n int) {
	if in == nil || n <= 0 {
		return
	}
	in.quarantinedCols.Add(float64(n))
}

// KeysPoisoned counts n keys poisoned (held by their transform).
func (in *Instance) KeysPoisoned(n int) {
	if in == nil || n <= 0 {
		return
	}
	in.poisonedKeys.Add(float64(n))
}

// BuildPage counts a build page that wrote rows target rows; finished says
// the build is done.
func (in *Instance) BuildPage(rows int64, finished bool) {
	if in == nil {
		return
	}
	in.buildPagesOK.Inc()
	if rows > 0 {
		in.buildRows.Add(float64(rows))
	}
	if finished {
		in.buildsDone.Inc()
	}
}

// StagingPass counts a pass of the staging worker.
func (in *Instance) StagingPass() {
	if in == nil {
		return
	}
	in.passes.Inc()
}

// BuildPageFailed counts a failed build page; paused says its transform
// paused because the build kept failing.
func (in *Instance) BuildPageFailed(paused bool) {
	if in == nil {
		return
	}
	in.buildPagesFail.Inc()
	if paused {
		in.buildsPaused.Inc()
	}
}

// CaptureFailures counts n capture failures of kind (one of
// CaptureFailureKinds).
func (in *Instance) CaptureFailures(kind trellistype.CaptureFailureKind, n int) {
	if in == nil || n <= 0 {
		return
	}
	if c := in.captureFails[kind]; c != nil {
		c.Add(float64(n))
	}
}

// LedgerRowsRejected counts n ledger rows the drain refused as malformed.
func (in *Instance) LedgerRowsRejected(n int) {
	if in == nil || n <= 0 {
		return
	}
	fam.rejected.WithLabelValues(in.label).Add(float64(n))
}

// Panic counts a panic recovered in a background part.
func (in *Instance) Panic(service string) {
	if in == nil {
		return
	}
	fam.panics.WithLabelValues(in.label, service).Inc()
}
