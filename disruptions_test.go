package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

func TestCaptureDisruptionsPauseReaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE a (id int PRIMARY KEY, v int); CREATE TABLE b (id int PRIMARY KEY, v int); CREATE TABLE d (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO a VALUES (1, 1); INSERT INTO b VALUES (1, 1); INSERT INTO d VALUES (1, 1)`)
	c := e.engine()
	for _, s := range []string{"TRANSFORM a1 FROM a SELECT v AS v", "TRANSFORM a2 FROM a SELECT v * 2 AS w",
		"TRANSFORM b1 FROM b SELECT v AS v", "TRANSFORM d1 FROM d SELECT v AS v"} {
		_, err := c.Define(e.ctx, s)
		require.NoError(t, err)
	}
	for _, tg := range []string{"a1", "a2", "b1", "d1"} {
		e.waitState(c, tg, trellis.StateLive)
	}
	tables, err := c.DetectCaptureDisruptions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, tables)

	// Disabled and re-enabled, a trigger dropped, the function replaced.
	e.exec(`ALTER TABLE a DISABLE TRIGGER ALL; UPDATE a SET v = 100; ALTER TABLE a ENABLE TRIGGER ALL`)
	var trig, fn string
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT tgname, tgfoid::regproc::text FROM pg_trigger WHERE tgrelid = 'b'::regclass AND tgname LIKE 'trellis%ins'`).Scan(&trig, &fn))
	e.exec(`DROP TRIGGER "` + trig + `" ON b`)
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT tgfoid::regproc::text FROM pg_trigger WHERE tgrelid = 'd'::regclass AND tgname LIKE 'trellis%ins'`).Scan(&fn))
	e.exec(`ALTER FUNCTION ` + fn + ` RENAME TO capture_x`)
	e.exec(`ALTER FUNCTION trellis.capture_x RENAME TO ` + fn[len("trellis."):])
	tables, err = c.DetectCaptureDisruptions(e.ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.a", "public.b", "public.d"}, tables)
	for _, tg := range []string{"a1", "a2", "b1", "d1"} {
		st, err := c.Status(e.ctx, tg)
		require.NoError(t, err)
		require.Equal(t, trellis.StatePaused, st.State, tg)
		require.NotNil(t, st.CaptureFailure, tg)
		require.Equal(t, trellis.CaptureFailureDisruption, st.CaptureFailure.Kind)
		require.NotEmpty(t, st.CaptureFailure.Error)
		require.False(t, st.CaptureFailure.DetectedAt.IsZero())
	}

	// RESUME reinstalls capture and re-derives the target: the rows written
	// while capture was off arrive, and capture works again.
	for _, tg := range []string{"a1", "a2", "b1", "d1"} {
		_, err := c.Apply(e.ctx, "RESUME TRANSFORM "+tg)
		require.NoError(t, err)
	}
	for _, tg := range []string{"a1", "a2", "b1", "d1"} {
		st := e.waitState(c, tg, trellis.StateLive)
		require.Nil(t, st.CaptureFailure)
	}
	e.exec(`UPDATE a SET v = 7; UPDATE b SET v = 8`)
	e.converge(c)
	e.assertMatches("a1", "SELECT id, v FROM a")
	e.assertMatches("a2", "SELECT id, v * 2 AS w FROM a")
	e.assertMatches("b1", "SELECT id, v FROM b")
	tables, err = c.DetectCaptureDisruptions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, tables)

	// A dropped source: the staging worker notices by itself, and RESUME is refused.
	e.exec(`DROP TABLE d`)
	require.Eventually(t, func() bool {
		st, err := c.Status(e.ctx, "d1")
		return err == nil && st.CaptureFailure != nil
	}, 20e9, 20e6)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM d1")
	requireCode(t, err, trellis.CodeNotFound)
}

func TestCaptureWaitNamesBlockersWithoutStallingWriters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE busy (id int PRIMARY KEY, v int)`)
	c := e.engine()

	// A writer's open transaction holds a lock that installing capture needs.
	holder, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	defer holder.Rollback(context.Background())
	_, err = holder.Exec(e.ctx, `INSERT INTO busy VALUES (1, 1)`)
	require.NoError(t, err)
	var pid int
	require.NoError(t, holder.QueryRow(e.ctx, `SELECT pg_backend_pid()`).Scan(&pid))

	_, err = c.Define(e.ctx, "TRANSFORM busy_copy FROM busy SELECT v AS v")
	require.NoError(t, err)
	var st *trellis.Status
	require.Eventually(t, func() bool {
		st, err = c.Status(e.ctx, "busy_copy")
		return err == nil && st.CaptureWait != nil
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, "install", st.CaptureWait.Operation)
	require.Equal(t, "public.busy", st.CaptureWait.Table)
	require.Equal(t, "SHARE ROW EXCLUSIVE", st.CaptureWait.LockMode)
	require.NotEmpty(t, st.CaptureWait.Blockers)
	require.Contains(t, strings.Join(st.CaptureWait.Blockers, "\n"), fmt.Sprintf("pid %d", pid))
	require.Equal(t, trellis.StateWaitingToBackfill, st.State)

	// Other writers of the table are not stuck behind the waiting install.
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		_, err := e.db.Exec(ctx, `INSERT INTO busy VALUES ($1, 2)`, 10+i)
		cancel()
		require.NoError(t, err)
	}

	require.NoError(t, holder.Commit(e.ctx))
	st = e.waitState(c, "busy_copy", trellis.StateLive)
	require.Nil(t, st.CaptureWait)
	e.converge(c)
	e.assertMatches("busy_copy", "SELECT id, v FROM busy")
}

func TestBackfillFailureRetriesThenPauses(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 100) g`)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	_, err := m.Define(e.ctx, "TRANSFORM fragile FROM src SELECT v AS v")
	require.NoError(t, err)
	// Something no row explains makes every build page fail.
	e.exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'fragile is read-only'; END $$`)
	e.exec(`CREATE TRIGGER refuse BEFORE INSERT ON fragile FOR EACH STATEMENT EXECUTE FUNCTION refuse()`)
	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 1})

	var st *trellis.Status
	require.Eventually(t, func() bool {
		st, err = c.Status(e.ctx, "fragile")
		return err == nil && st.BackfillFailure != nil
	}, 20*time.Second, 10*time.Millisecond)
	require.Contains(t, st.BackfillFailure.LastError, "fragile is read-only")
	require.GreaterOrEqual(t, st.BackfillFailure.Attempts, 1)

	// After a few attempts it pauses, saying why.
	st = e.waitState(c, "fragile", trellis.StatePaused)
	require.Contains(t, st.PausedReason, "fragile is read-only")
	require.NotNil(t, st.BackfillFailure)
	require.Equal(t, 5, st.BackfillFailure.Attempts)

	// Fixed and resumed, the build goes through.
	e.exec(`DROP TRIGGER refuse ON fragile`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM fragile")
	require.NoError(t, err)
	st = e.waitState(c, "fragile", trellis.StateLive)
	require.Nil(t, st.BackfillFailure)
	e.assertMatches("fragile", "SELECT id, v FROM src")
}

func TestTargetChangedOutsideTrellisHaltsOnlyItsTransform(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 20) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM kept FROM src SELECT v AS v")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM broken FROM src SELECT v * 2 AS w")
	require.NoError(t, err)
	e.waitState(c, "kept", trellis.StateLive)
	e.waitState(c, "broken", trellis.StateLive)

	e.exec(`ALTER TABLE broken DROP COLUMN w`)
	e.exec(`UPDATE src SET v = v + 1`)
	e.converge(c) // not stuck behind the broken transform
	e.assertMatches("kept", "SELECT id, v FROM src")
	st, err := c.Status(e.ctx, "broken")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, st.State)
	require.NotNil(t, st.CaptureFailure)
	require.Equal(t, trellis.CaptureFailureHalt, st.CaptureFailure.Kind)
	require.Contains(t, st.CaptureFailure.Error, "broken")
	st, err = c.Status(e.ctx, "kept")
	require.NoError(t, err)
	require.Nil(t, st.DrainFailure)
}
