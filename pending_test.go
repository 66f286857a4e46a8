package trellis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// waitStatus polls Status until ok accepts it, and returns it.
func (e *env) waitStatus(c *trellis.Client, target string, ok func(*trellis.Status) bool) *trellis.Status {
	e.t.Helper()
	return e.pollStatus(c, target, stateWaitCap, 10*time.Millisecond,
		"the status of "+target+" never got where the test waits", ok)
}

// With no drain worker, committed changes are counted as pending, with
// how long they have waited, for the transform and for the chain reading
// its target; rolled back and uncommitted changes are not. Once a drain
// worker runs, both go back to 0. The staging worker's metrics report the
// same per transform.
func TestStatusPendingChanges(t *testing.T) {
	t.Parallel()
	e := setup(t)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	c := e.connect(trellis.Options{Staging: true})
	inst := e.instanceLabel("trellis")
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 1000) g`)
	_, err := c.Define(e.ctx, `TRANSFORM up FROM src SELECT v AS v`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM down FROM up SELECT v * 2 AS v2`)
	require.NoError(t, err)
	e.waitState(c, "up", trellis.StateLive)
	e.waitState(c, "down", trellis.StateLive)
	// up's build may have reached down through capture: drained, then no
	// drain worker runs.
	d0 := e.connect(trellis.Options{DrainWorkers: 1})
	e.converge(d0)
	require.NoError(t, d0.Close())
	for _, target := range []string{"up", "down"} {
		st, err := c.Status(e.ctx, target)
		require.NoError(t, err)
		require.Zero(t, st.PendingChanges, target)
		require.Zero(t, st.Lag, target)
	}
	alive, err := c.HasLiveDrainWorkers(e.ctx)
	require.NoError(t, err)
	require.False(t, alive)

	e.exec(`UPDATE src SET v = v + 1 WHERE id <= 499`)
	e.exec(`BEGIN; UPDATE src SET v = 0 WHERE id > 900; ROLLBACK`)
	open, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = open.Rollback(e.ctx) }()
	_, err = open.Exec(e.ctx, `UPDATE src SET v = 0 WHERE id BETWEEN 600 AND 609`)
	require.NoError(t, err)

	st := e.waitStatus(c, "up", func(st *trellis.Status) bool { return st.Lag >= 100*time.Millisecond })
	require.EqualValues(t, 499, st.PendingChanges, "the committed changes, not the rolled back or open ones")
	require.Equal(t, trellis.StateLive, st.State)
	require.Less(t, st.Lag, time.Minute)
	down, err := c.Status(e.ctx, "down")
	require.NoError(t, err)
	require.EqualValues(t, 499, down.PendingChanges, "a chain waits for what its upstream has not applied")
	require.Positive(t, down.Lag)
	// The lag grows while nothing drains.
	e.waitStatus(c, "up", func(s *trellis.Status) bool { return s.Lag > st.Lag && s.PendingChanges == 499 })

	e.waitMetric(inst, "trellis_transform_pending_changes", exactly(499), "target=public.up")
	e.waitMetric(inst, "trellis_transform_lag_seconds", func(v float64) bool { return v > 0 }, "target=public.up")
	e.waitMetric(inst, "trellis_transform_state", exactly(1), "target=public.up", "state=live")
	e.waitMetric(inst, "trellis_transform_state", exactly(0), "target=public.up", "state=paused")
	e.waitMetric(inst, "trellis_up", exactly(1))

	// A drain worker applies them: nothing pending, the targets exact.
	d := e.connect(trellis.Options{DrainWorkers: 1})
	e.converge(d)
	for _, target := range []string{"up", "down"} {
		st, err := c.Status(e.ctx, target)
		require.NoError(t, err)
		require.Zero(t, st.PendingChanges, target)
		require.Zero(t, st.Lag, target)
	}
	e.assertMatches("up", "SELECT id, v FROM src")
	e.waitMetric(inst, "trellis_transform_pending_changes", exactly(0), "target=public.up")
	e.waitMetric(inst, "trellis_transform_lag_seconds", exactly(0), "target=public.up")

	// The open transaction commits: its changes are applied too.
	require.NoError(t, open.Commit(e.ctx))
	e.converge(d)
	e.assertMatches("up", "SELECT id, v FROM src")
	e.assertMatches("down", "SELECT id, v * 2 FROM up")

	// A dropped transform's series go.
	_, err = c.Apply(e.ctx, `DROP TRANSFORM down`)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, ok := metricValue(trellis.RenderPrometheus(), "trellis_transform_pending_changes", "target=public.down", "trellis_instance="+inst)
		if !ok {
			break
		}
		require.True(t, time.Now().Before(deadline), "the dropped transform's series stayed")
		time.Sleep(20 * time.Millisecond)
	}
}

// A database the staging worker cannot reach shows as trellis_up 0 and
// counted sample errors, not as series that keep their last values; once
// it answers again, trellis_up is 1.
func TestMetricsDatabaseOutage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	inst := e.instanceLabel("trellis")
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL)`)
	_, err := c.Define(e.ctx, `TRANSFORM up FROM src SELECT v AS v`)
	require.NoError(t, err)
	e.waitState(c, "up", trellis.StateLive)
	e.waitMetric(inst, "trellis_up", exactly(1))
	errorsBefore, _ := metricValue(trellis.RenderPrometheus(), "trellis_metrics_sample_errors_total", "trellis_instance="+inst)

	// The outage is made from another database of the server.
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT current_database()`).Scan(&db))
	cfg, err := pgx.ParseConfig(e.url)
	require.NoError(t, err)
	cfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(e.ctx, cfg)
	require.NoError(t, err)
	defer admin.Close(e.ctx)
	_, err = admin.Exec(e.ctx, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS false`, db))
	require.NoError(t, err)
	restored := false
	restore := func() {
		if !restored {
			_, err := admin.Exec(e.ctx, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS true`, db))
			require.NoError(t, err)
			restored = true
		}
	}
	defer restore()
	// Cut off every Trellis session until the database takes connections again.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			_, _ = admin.Exec(e.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE application_name LIKE 'trellis%' AND datname = $1`, db)
		}
	}()
	e.waitMetric(inst, "trellis_up", exactly(0))
	e.waitMetric(inst, "trellis_metrics_sample_errors_total", atLeast(errorsBefore+1))
	close(stop)
	<-done
	restore()
	e.waitMetric(inst, "trellis_up", exactly(1))
	e.exec(`INSERT INTO src VALUES (1, 1)`)
	// The client's pool may still hold a connection the outage killed: a
	// call on it fails once.
	require.Eventually(t, func() bool {
		tok, err := c.WatermarkToken(e.ctx)
		return err == nil && c.AwaitConverged(e.ctx, tok, 25*time.Second) == nil
	}, time.Minute, 50*time.Millisecond)
	e.assertMatches("up", "SELECT id, v FROM src")
}
