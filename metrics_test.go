package trellis_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/capture"
)

// metricValue finds, in a text exposition, the sample of the series name
// carrying every label of labels ("key=value"), and returns its value.
func metricValue(text, name string, labels ...string) (float64, bool) {
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		set, _, _ := strings.Cut(line[len(name)+1:], "}")
		match := true
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if !strings.Contains(","+set+",", fmt.Sprintf(",%s=%q,", k, v)) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, false
		}
		return f, true
	}
	return 0, false
}

// instanceLabel is the trellis_instance value of the test's instance in
// schema.
func (e *env) instanceLabel(schema string) string {
	e.t.Helper()
	var db string
	require.NoError(e.t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	return db + "/" + schema
}

// waitMetric waits until the instance's series name with labels has a
// value ok accepts, and returns it.
func (e *env) waitMetric(inst, name string, ok func(float64) bool, labels ...string) float64 {
	e.t.Helper()
	labels = append(labels, "trellis_instance="+inst)
	deadline := time.Now().Add(30 * time.Second)
	var last float64
	var found bool
	for time.Now().Before(deadline) {
		last, found = metricValue(trellis.RenderPrometheus(), name, labels...)
		if found && ok(last) {
			return last
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("%s%v never got where the test waits: found %v, last value %v", name, labels, found, last)
	return 0
}

func atLeast(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
func exactly(n float64) func(float64) bool { return func(v float64) bool { return v == n } }

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	inst := e.instanceLabel("trellis")

	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, 1 FROM generate_series(1, 100) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM ratios FROM items SELECT a + b AS total, a / b AS ratio`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `TRANSFORM picky FROM items SELECT a AS a WHERE 100 / b > 0`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	e.waitState(c, "picky", trellis.StateLive)

	// The builds: one finished each, and their rows.
	e.waitMetric(inst, "trellis_builds_total", exactly(2), "result=finished")
	e.waitMetric(inst, "trellis_build_rows_total", atLeast(200))
	e.waitMetric(inst, "trellis_build_pages_total", atLeast(2), "result=ok")
	e.waitMetric(inst, "trellis_transforms", exactly(2), "state=live")

	// Writes changing 40 keys reach both targets: pages applied, and at
	// least 40 keys recomputed for each transform.
	e.exec(`UPDATE items SET a = a + 1 WHERE id <= 30`)
	e.exec(`INSERT INTO items SELECT g, g, 1 FROM generate_series(101, 110) g`)
	e.converge(c)
	e.waitMetric(inst, "trellis_drain_pages_total", atLeast(1), "result=ok")
	e.waitMetric(inst, "trellis_drain_keys_applied_total", atLeast(80))
	e.waitMetric(inst, "trellis_drain_page_seconds_count", atLeast(1))
	text := trellis.RenderPrometheus()
	failed, ok := metricValue(text, "trellis_drain_pages_total", "result=failed", "trellis_instance="+inst)
	require.True(t, ok, "the failed pages' series is there from the start")
	require.Zero(t, failed)
	quarantined, ok := metricValue(text, "trellis_quarantine_events_total", "kind=column", "trellis_instance="+inst)
	require.True(t, ok)
	require.Zero(t, quarantined)

	// Rows with b = 0: ratios.ratio is quarantined (one column event), and
	// picky holds their three keys (its WHERE fails on them).
	e.exec(`INSERT INTO items VALUES (201, 1, 0), (202, 2, 0), (203, 3, 0)`)
	e.converge(c)
	e.waitQuarantine(c, "ratios.ratio", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	e.waitMetric(inst, "trellis_quarantine_events_total", exactly(1), "kind=column")
	e.waitMetric(inst, "trellis_quarantine_events_total", exactly(3), "kind=key")
	// The gauges the staging worker samples catch up.
	e.waitMetric(inst, "trellis_quarantined_columns", exactly(1))
	e.waitMetric(inst, "trellis_held_keys", exactly(3))
	e.waitMetric(inst, "trellis_drain_pages_pending", atLeast(0))
	e.waitMetric(inst, "trellis_drain_lag_seconds", atLeast(0))
	e.waitMetric(inst, "trellis_ledger_rows", atLeast(0))

	// Every Trellis series of the process names its instance.
	for line := range strings.SplitSeq(trellis.RenderPrometheus(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		require.Contains(t, line, `trellis_instance="`, "a series without its instance")
	}

	// The collector gives a host's registry the same series.
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(trellis.MetricsCollector()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var pagesOK float64
	for _, mf := range mfs {
		if mf.GetName() != "trellis_drain_pages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["trellis_instance"] == inst && labels["result"] == "ok" {
				pagesOK = m.GetCounter().GetValue()
			}
		}
	}
	require.Positive(t, pagesOK)
}

// Two instances in one process keep their series apart, and an instance's
// series leave the registry with its last client.
func TestMetricsInstancesApart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.engine()
	instA := e.instanceLabel("trellis")
	m := e.connect(trellis.Options{Schema: "trellis_b"})
	require.NoError(t, m.Migrate(e.ctx))
	b := e.connect(trellis.Options{Schema: "trellis_b"})
	instB := e.instanceLabel("trellis_b")

	e.exec(`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	_, err := a.Apply(e.ctx, `TRANSFORM items_copy FROM items SELECT v AS v`)
	require.NoError(t, err)
	e.waitState(a, "items_copy", trellis.StateLive)
	e.exec(`INSERT INTO items SELECT g, g FROM generate_series(1, 20) g`)
	e.converge(a)
	e.waitMetric(instA, "trellis_drain_keys_applied_total", atLeast(20))

	// b's instance did nothing, and says so under its own label.
	text := trellis.RenderPrometheus()
	v, ok := metricValue(text, "trellis_drain_keys_applied_total", "trellis_instance="+instB)
	require.True(t, ok)
	require.Zero(t, v)
	v, ok = metricValue(text, "trellis_drain_pages_total", "result=ok", "trellis_instance="+instB)
	require.True(t, ok)
	require.Zero(t, v)

	require.NoError(t, b.Close())
	_, ok = metricValue(trellis.RenderPrometheus(), "trellis_drain_keys_applied_total", "trellis_instance="+instB)
	require.True(t, ok, "another client of the instance is open")
	require.NoError(t, m.Close())
	_, ok = metricValue(trellis.RenderPrometheus(), "trellis_drain_keys_applied_total", "trellis_instance="+instB)
	require.False(t, ok, "the instance's last client closed")
	_, ok = metricValue(trellis.RenderPrometheus(), "trellis_drain_keys_applied_total", "trellis_instance="+instA)
	require.True(t, ok)
}

// Wake-ups of the staging worker are debounced: any role may NOTIFY its
// channel, and a flood of notifications from another role makes at most
// one pass per 25 ms (trellis_staging_passes_total), not one per
// notification.
func TestStagingWakeUpsAreDebounced(t *testing.T) {
	t.Parallel()
	e := setup(t)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	e.connect(trellis.Options{Staging: true, PollInterval: time.Hour})
	inst := e.instanceLabel("trellis")
	e.waitMetric(inst, "trellis_staging_passes_total", atLeast(1))
	flooder := e.role("flooder")
	channel := capture.Names{Catalog: "trellis"}.StagingChannel()

	before, _ := metricValue(trellis.RenderPrometheus(), "trellis_staging_passes_total", "trellis_instance="+inst)
	start := time.Now()
	sent := 0
	for time.Since(start) < time.Second {
		_, err := flooder.Exec(e.ctx, `SELECT pg_notify($1, g::text) FROM generate_series(1, 50) g`, channel)
		require.NoError(t, err)
		sent += 50
	}
	e.waitMetric(inst, "trellis_staging_passes_total", atLeast(before+1))
	// Every pass counted by now started within elapsed.
	elapsed := time.Since(start)
	after, _ := metricValue(trellis.RenderPrometheus(), "trellis_staging_passes_total", "trellis_instance="+inst)
	bound := elapsed.Seconds()/(25*time.Millisecond).Seconds() + 2
	require.LessOrEqual(t, after-before, bound, "%.0f passes in %s for %d notifications", after-before, elapsed, sent)
	t.Logf("%.0f passes in %s for %d notifications", after-before, elapsed, sent)
}
