package trellis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// waitSelfCheck polls SelfCheckJob until the job is finished, and returns it.
func (e *env) waitSelfCheck(c *trellis.Client, id int64) trellis.SelfCheckJob {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last *trellis.SelfCheckJob
	for time.Now().Before(deadline) {
		j, err := c.SelfCheckJob(e.ctx, id)
		require.NoError(e.t, err)
		require.NotNil(e.t, j, "self-check job %d vanished", id)
		if j.Finished() {
			return *j
		}
		last = j
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("self-check job %d did not finish; last %+v", id, last)
	return trellis.SelfCheckJob{}
}

// selfCheck runs a check of target to its end and returns its report,
// failing the test unless it is done.
func (e *env) selfCheck(c *trellis.Client, target string, mode trellis.SelfCheckMode) *trellis.SelfCheckReport {
	e.t.Helper()
	job, err := c.SelfCheck(e.ctx, target, trellis.SelfCheckOptions{Timeout: 20 * time.Second, Mode: mode})
	require.NoError(e.t, err)
	// SelfCheck reads the job back after queuing it: a runner may have
	// finished a small check by then.
	require.Contains(e.t, []trellis.SelfCheckState{trellis.SelfCheckQueued, trellis.SelfCheckRunning, trellis.SelfCheckDone}, job.State)
	done := e.waitSelfCheck(c, job.ID)
	why := ""
	if done.Error != nil {
		why = *done.Error
	}
	require.Equal(e.t, trellis.SelfCheckDone, done.State, "job %+v error %s", done, why)
	require.Nil(e.t, done.Error)
	require.NotNil(e.t, done.Report)
	require.Equal(e.t, done.Report.RowsCompared, done.RowsCompared)
	return done.Report
}

// fixIndexGaps creates the source indexes a target's status says it lacks.
func (e *env) fixIndexGaps(c *trellis.Client, target string) {
	e.t.Helper()
	st, err := c.Status(e.ctx, target)
	require.NoError(e.t, err)
	for _, g := range st.SourceIndexGaps {
		e.exec(g.Fix)
	}
}

func requireConsistent(t *testing.T, target string, rep *trellis.SelfCheckReport) {
	t.Helper()
	require.Equal(t, trellis.SelfCheckConsistent, rep.Outcome, "%s: %+v", target, rep)
	require.Zero(t, rep.Missing+rep.Extra+rep.Differing, target)
	require.Empty(t, rep.Divergences, target)
	require.False(t, rep.Truncated, target)
}

func ptr(s string) *string { return &s }

// createOwnersItems creates the sources of the self-check shape tests:
// owners, and items with enough rows for several pages, NULL groups and
// owners that are missing.
func createOwnersItems(e *env) {
	e.t.Helper()
	e.exec(`CREATE TABLE owners (id int PRIMARY KEY, name text)`)
	e.exec(`INSERT INTO owners SELECT g, 'o' || g FROM generate_series(1, 50) g`)
	e.exec(`CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL, note text, owner int)`)
	e.exec(`INSERT INTO items SELECT g, g % 97, CASE WHEN g % 10 = 0 THEN NULL ELSE 'n' || g % 7 END, g % 60 FROM generate_series(1, 12000) g`)
	e.exec(`CREATE INDEX ON items (note)`)
	e.exec(`CREATE INDEX ON items (owner)`)
}

func TestSelfCheckConvergedShapes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	createOwnersItems(e)
	cases := []struct{ stmt, target string }{
		{`TRANSFORM doubled FROM items SELECT v * 2 AS dv, note AS note`, "doubled"},
		{`TRANSFORM by_note FROM items SELECT note AS note, count(*) AS n, sum(v) AS total GROUP BY note`, "by_note"},
		{`TRANSFORM item_owner FROM items i LEFT JOIN owners o ON o.id = i.owner SELECT i.id AS item, o.name AS owner_name`, "item_owner"},
		{`TRANSFORM owned FROM items i JOIN owners o ON o.id = i.owner SELECT i.v AS v, o.name AS owner_name`, "owned"},
	}
	for _, tc := range cases {
		_, err := c.Define(e.ctx, tc.stmt)
		require.NoError(t, err, tc.stmt)
	}
	for _, tc := range cases {
		e.waitState(c, tc.target, trellis.StateLive)
	}
	e.exec(`UPDATE items SET v = v + 1 WHERE id % 13 = 0`)
	e.exec(`DELETE FROM items WHERE id % 101 = 0`)
	e.exec(`UPDATE owners SET name = name || '!' WHERE id % 4 = 0`)
	e.converge(c)
	for _, tc := range cases {
		for _, mode := range []trellis.SelfCheckMode{trellis.SelfCheckStandard, trellis.SelfCheckStrict} {
			rep := e.selfCheck(c, tc.target, mode)
			requireConsistent(t, tc.target, rep)
			var n int64
			require.NoError(t, e.db.QueryRow(e.ctx, `SELECT count(*) FROM `+tc.target).Scan(&n))
			require.Equal(t, n, rep.RowsCompared, tc.target)
			require.Nil(t, rep.HeldKeys)
			require.Nil(t, rep.DrainFailures)
		}
	}
}

func TestSelfCheckFindsTampering(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	createOwnersItems(e)
	for _, stmt := range []string{
		`TRANSFORM doubled FROM items SELECT v * 2 AS dv, note AS note`,
		`TRANSFORM by_note FROM items SELECT note AS note, count(*) AS n, sum(v) AS total GROUP BY note`,
		`TRANSFORM item_owner FROM items i LEFT JOIN owners o ON o.id = i.owner SELECT i.id AS item, o.name AS owner_name`,
	} {
		_, err := c.Define(e.ctx, stmt)
		require.NoError(t, err, stmt)
	}
	for _, target := range []string{"doubled", "by_note", "item_owner"} {
		e.waitState(c, target, trellis.StateLive)
	}
	e.converge(c)

	t.Run("projection", func(t *testing.T) {
		// Rows deleted, added and changed behind Trellis's back, on every page.
		e.exec(`DELETE FROM doubled WHERE id IN (10, 5001, 11999)`)
		e.exec(`INSERT INTO doubled VALUES (-5, 1, 'x'), (20001, 2, NULL)`)
		e.exec(`UPDATE doubled SET dv = dv + 1 WHERE id IN (1, 2, 3)`)
		e.exec(`UPDATE doubled SET note = NULL WHERE id = 7001`)
		for _, mode := range []trellis.SelfCheckMode{trellis.SelfCheckStandard, trellis.SelfCheckStrict} {
			rep := e.selfCheck(c, "public.doubled", mode)
			require.Equal(t, trellis.SelfCheckDiverged, rep.Outcome)
			require.EqualValues(t, 3, rep.Missing)
			require.EqualValues(t, 2, rep.Extra)
			require.EqualValues(t, 4, rep.Differing)
			require.EqualValues(t, 12002, rep.RowsCompared)
			require.False(t, rep.Truncated)
			var keys []string
			for _, d := range rep.Divergences {
				keys = append(keys, string(d.Kind)+" "+d.Key)
			}
			require.Equal(t, []string{"extra -5", "differing 1", "differing 2", "differing 3", "missing 10",
				"missing 5001", "differing 7001", "missing 11999", "extra 20001"}, keys)
			d := rep.Divergences[1]
			require.Equal(t, []string{"dv"}, d.Columns)
			require.Equal(t, map[string]*string{"dv": ptr("3"), "note": ptr("n1")}, d.Target)
			require.Equal(t, map[string]*string{"dv": ptr("2"), "note": ptr("n1")}, d.Recomputed)
			require.Nil(t, rep.Divergences[0].Recomputed)
			require.Equal(t, map[string]*string{"dv": ptr("1"), "note": ptr("x")}, rep.Divergences[0].Target)
			require.Nil(t, rep.Divergences[4].Target)
			require.Equal(t, map[string]*string{"dv": ptr("20"), "note": nil}, rep.Divergences[4].Recomputed)
			require.Equal(t, []string{"note"}, rep.Divergences[6].Columns)
		}

		// More divergences than a report lists.
		e.exec(`UPDATE doubled SET dv = -1 WHERE id BETWEEN 100 AND 114`)
		rep := e.selfCheck(c, "doubled", trellis.SelfCheckStandard)
		require.EqualValues(t, 3, rep.Missing)
		require.EqualValues(t, 2, rep.Extra)
		require.EqualValues(t, 19, rep.Differing)
		require.Len(t, rep.Divergences, 10)
		require.True(t, rep.Truncated)
	})

	t.Run("group by", func(t *testing.T) {
		e.exec(`DELETE FROM by_note WHERE note IS NULL`)
		e.exec(`UPDATE by_note SET n = n + 1 WHERE note = 'n3'`)
		e.exec(`INSERT INTO by_note VALUES ('zz', 1, 1)`)
		rep := e.selfCheck(c, "by_note", trellis.SelfCheckStandard)
		require.Equal(t, trellis.SelfCheckDiverged, rep.Outcome)
		require.EqualValues(t, 1, rep.Missing)
		require.EqualValues(t, 1, rep.Extra)
		require.EqualValues(t, 1, rep.Differing)
		require.EqualValues(t, 9, rep.RowsCompared) // seven notes, NULL and zz
		require.Len(t, rep.Divergences, 3)
		require.Equal(t, trellis.DivergenceDiffering, rep.Divergences[0].Kind)
		require.Equal(t, "n3", rep.Divergences[0].Key)
		require.Equal(t, []string{"n"}, rep.Divergences[0].Columns)
		require.Equal(t, trellis.DivergenceExtra, rep.Divergences[1].Kind)
		require.Equal(t, "zz", rep.Divergences[1].Key)
		require.Equal(t, trellis.DivergenceMissing, rep.Divergences[2].Kind)
		require.Equal(t, "NULL", rep.Divergences[2].Key)
	})

	t.Run("join", func(t *testing.T) {
		e.exec(`UPDATE item_owner SET item = 99999 WHERE item = 5`) // 5 missing, 99999 extra
		e.exec(`DELETE FROM item_owner WHERE item = 9000`)
		e.exec(`UPDATE item_owner SET owner_name = 'nobody' WHERE item = 61`)
		// A left join's row with no owner (item 120 has owner 0) is a key
		// with a NULL; changing it is found like any other.
		e.exec(`UPDATE item_owner SET owner_name = 'ghost' WHERE item = 120`)
		rep := e.selfCheck(c, "item_owner", trellis.SelfCheckStrict)
		require.EqualValues(t, 2, rep.Missing)
		require.EqualValues(t, 1, rep.Extra)
		require.EqualValues(t, 2, rep.Differing)
		var keys []string
		for _, d := range rep.Divergences {
			keys = append(keys, string(d.Kind)+" "+d.Key)
		}
		require.Equal(t, []string{"missing (5,5)", "differing (61,1)", "differing (120,)", "missing (9000,)", "extra (99999,5)"}, keys)
	})
}

func TestSelfCheckWhileWriting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createShapeSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2}) // a second process: a second runner
	defineShapes(e, c)
	for _, s := range shapes {
		e.fixIndexGaps(c, s.target)
	}

	w := e.startWriters(4, 50)
	e.writesPast(&w.writes, 100)
	// Rows no write touches are added behind Trellis's back: found while
	// the writes go on, next to keys in flight that are not reported.
	tampered := map[string]string{"even_items": "1000000", "item_owners": "(999999,1)", "region_amounts": "77"}
	e.exec(`INSERT INTO even_items (id, doubled, note) VALUES (1000000, 10, 'bogus')`)
	e.exec(`INSERT INTO item_owners (item, o_id, owner, note) VALUES (999999, 1, 'x', 'y')`)
	e.exec(`INSERT INTO region_amounts (region, total, n) VALUES (77, 1, 1)`)
	// Every target is checked while the writes go on.
	var jobs []trellis.SelfCheckJob
	for _, s := range shapes {
		j, err := c.SelfCheck(e.ctx, s.target, trellis.SelfCheckOptions{Timeout: 20 * time.Second})
		require.NoError(t, err)
		require.Equal(t, trellis.SelfCheckStandard, j.Mode)
		jobs = append(jobs, j)
	}
	start := w.writes.Load()
	var inFlight int64
	for i, j := range jobs {
		done := e.waitSelfCheck(c, j.ID)
		target := shapes[i].target
		require.Equal(t, trellis.SelfCheckDone, done.State, "%s: %v", target, done.Error)
		rep := done.Report
		inFlight += rep.InFlight
		if key, ok := tampered[target]; ok {
			require.Equal(t, trellis.SelfCheckDiverged, rep.Outcome, target)
			require.Equal(t, []int64{0, 1, 0}, []int64{rep.Missing, rep.Extra, rep.Differing}, "%s: %+v", target, rep.Divergences)
			require.Equal(t, key, rep.Divergences[0].Key)
			continue
		}
		requireConsistent(t, target, rep)
	}
	require.Greater(t, w.writes.Load(), start, "the writes went on during the checks")
	w.stop(t)
	t.Logf("%d write transactions; %d keys in flight at a re-check", w.writes.Load(), inFlight)

	// Once the writes stop and the tampering is undone, a strict check
	// agrees, and so does a recompute.
	e.exec(`DELETE FROM even_items WHERE id = 1000000`)
	e.exec(`DELETE FROM item_owners WHERE item = 999999`)
	e.exec(`DELETE FROM region_amounts WHERE region = 77`)
	e.converge(c)
	for _, s := range shapes {
		requireConsistent(t, s.target, e.selfCheck(c, s.target, trellis.SelfCheckStrict))
		e.assertMatches(s.target, s.recompute)
	}
}

func TestSelfCheckJobs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	// A staging worker builds targets; with no drain worker anywhere, a
	// self-check stays queued.
	c := e.connect(trellis.Options{Staging: true})
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int, g int)`)
	e.exec(`INSERT INTO src SELECT g, g, g % 5 FROM generate_series(1, 100) g`)
	_, err := c.Define(e.ctx, `TRANSFORM copy FROM src SELECT v + 1 AS w`)
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)

	j, err := c.SelfCheckJob(e.ctx, 12345)
	require.NoError(t, err)
	require.Nil(t, j)
	_, err = c.SelfCheck(e.ctx, "nope", trellis.SelfCheckOptions{Timeout: time.Second})
	require.Equal(t, trellis.CodeNotFound, trellis.CodeOf(err))
	_, err = c.SelfCheck(e.ctx, "copy", trellis.SelfCheckOptions{})
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	_, err = c.SelfCheck(e.ctx, "copy", trellis.SelfCheckOptions{Timeout: time.Second, Mode: "sloppy"})
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))

	// A GROUP BY whose source lacks the index its pages need is refused,
	// unless it opted out.
	_, err = c.Define(e.ctx, `TRANSFORM per_g FROM src SELECT g AS g, sum(v) AS total GROUP BY g`)
	require.NoError(t, err)
	_, err = c.SelfCheck(e.ctx, "per_g", trellis.SelfCheckOptions{Timeout: time.Second})
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	require.Contains(t, err.Error(), `CREATE INDEX ON "public"."src" USING btree (g)`)
	_, err = c.Define(e.ctx, `TRANSFORM per_g2 FROM src SELECT g AS g, sum(v) AS total GROUP BY g WITHOUT SOURCE INDEX`)
	require.NoError(t, err)
	e.waitState(c, "per_g2", trellis.StateLive)
	queuedG, err := c.SelfCheck(e.ctx, "per_g2", trellis.SelfCheckOptions{Timeout: 10 * time.Second})
	require.NoError(t, err)

	first, err := c.SelfCheck(e.ctx, "copy", trellis.SelfCheckOptions{Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.Equal(t, trellis.SelfCheckQueued, first.State)
	require.Equal(t, "public.copy", first.Target)
	require.Equal(t, 10*time.Second, first.Timeout)
	require.Nil(t, first.Report)
	require.Nil(t, first.StartedAt)
	require.Equal(t, time.UTC, first.QueuedAt.Location())
	// An unfinished job is returned again, whatever the options.
	again, err := c.SelfCheck(e.ctx, "copy", trellis.SelfCheckOptions{Timeout: time.Second, Mode: trellis.SelfCheckStrict})
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, trellis.SelfCheckStandard, again.Mode)
	live, err := c.HasLiveDrainWorkers(e.ctx)
	require.NoError(t, err)
	require.False(t, live, "a drain worker could run the job")
	j, err = c.SelfCheckJob(e.ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, trellis.SelfCheckQueued, j.State, "no drain worker runs it")

	// A drain worker anywhere in the fleet runs it.
	e.connect(trellis.Options{DrainWorkers: 1})
	done := e.waitSelfCheck(c, first.ID)
	require.Equal(t, trellis.SelfCheckDone, done.State)
	require.EqualValues(t, 100, done.RowsCompared)
	require.NotNil(t, done.StartedAt)
	require.NotNil(t, done.FinishedAt)
	require.Equal(t, time.UTC, done.FinishedAt.Location())
	requireConsistent(t, "copy", done.Report)
	requireConsistent(t, "per_g2", e.waitSelfCheck(c, queuedG.ID).Report)

	// The next check replaces the finished job.
	next, err := c.SelfCheck(e.ctx, "copy", trellis.SelfCheckOptions{Timeout: 10 * time.Second, Mode: trellis.SelfCheckStrict})
	require.NoError(t, err)
	require.NotEqual(t, first.ID, next.ID)
	require.Equal(t, trellis.SelfCheckStrict, next.Mode)
	j, err = c.SelfCheckJob(e.ctx, first.ID)
	require.NoError(t, err)
	require.Nil(t, j, "a replaced job reads as none")
	require.Equal(t, trellis.SelfCheckDone, e.waitSelfCheck(c, next.ID).State)

	// A paused transform's check is cancelled, saying why.
	_, err = c.Apply(e.ctx, `PAUSE TRANSFORM copy`)
	require.NoError(t, err)
	paused, err := c.SelfCheck(e.ctx, "copy", trellis.SelfCheckOptions{Timeout: 10 * time.Second})
	require.NoError(t, err)
	cancelled := e.waitSelfCheck(c, paused.ID)
	require.Equal(t, trellis.SelfCheckCancelled, cancelled.State)
	require.NotNil(t, cancelled.Error)
	require.Contains(t, *cancelled.Error, "paused")
	require.Nil(t, cancelled.Report)

	// A dropped transform's job reads as none.
	_, err = c.Apply(e.ctx, `DROP TRANSFORM copy`)
	require.NoError(t, err)
	j, err = c.SelfCheckJob(e.ctx, paused.ID)
	require.NoError(t, err)
	require.Nil(t, j)
}

func TestSelfCheckHeldKeys(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 50) g`)
	_, err := c.Define(e.ctx, `TRANSFORM small FROM src SELECT v AS v`)
	require.NoError(t, err)
	e.waitState(c, "small", trellis.StateLive)
	// The target refuses a row: its key is poisoned and held.
	e.exec(`ALTER TABLE small ADD CONSTRAINT small_v CHECK (v < 100)`)
	e.exec(`INSERT INTO src VALUES (500, 500)`)
	e.waitQuarantine(c, "small", func(q trellis.QuarantineEntry) bool { return q.HeldKeys != nil })
	e.converge(c)
	rep := e.selfCheck(c, "small", trellis.SelfCheckStandard)
	requireConsistent(t, "small", rep)
	require.NotNil(t, rep.HeldKeys)
	require.EqualValues(t, 1, rep.HeldKeys.Count)
	require.EqualValues(t, 50, rep.RowsCompared)
	// A tampered row is still found next to the held key.
	e.exec(`UPDATE small SET v = 0 WHERE id = 7`)
	rep = e.selfCheck(c, "small", trellis.SelfCheckStrict)
	require.EqualValues(t, 1, rep.Differing)
	require.Equal(t, "7", rep.Divergences[0].Key)
}
