package trellis_test

import (
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// waitDrainFailure polls Status until ok accepts its DrainFailure.
func (e *env) waitDrainFailure(c *trellis.Client, target string, ok func(*trellis.DrainFailure) bool) *trellis.Status {
	e.t.Helper()
	return e.pollStatus(c, target, stateWaitCap, 20*time.Millisecond,
		target+": the drain failure never got where the test waits",
		func(st *trellis.Status) bool { return ok(st.DrainFailure) })
}

// A page that fails with no row to blame (a trigger on the target that
// refuses every statement) is retried and reported, and clears once fixed.
func TestDrainFailureReportedAndCleared(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 20) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM copy FROM src SELECT v AS v`)
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)
	e.exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'copy is read-only'; END $$`)
	e.exec(`CREATE TRIGGER refuse BEFORE INSERT OR UPDATE OR DELETE ON copy FOR EACH STATEMENT EXECUTE FUNCTION refuse()`)
	e.exec(`UPDATE src SET v = v + 100 WHERE id <= 5`)

	st := e.waitDrainFailure(c, "copy", func(f *trellis.DrainFailure) bool { return f != nil && f.Attempts >= 2 })
	f := st.DrainFailure
	require.Equal(t, []string{"public.src"}, f.Tables)
	require.Contains(t, f.Error, "copy is read-only")
	require.NotNil(t, f.SQLState)
	require.Equal(t, pgerrcode.RaiseException, *f.SQLState)
	require.Positive(t, f.SegSeq)
	require.False(t, f.Since.After(f.LastSeen))
	require.Equal(t, trellis.StateLive, st.State, "nothing is paused for it")
	require.Nil(t, st.HeldKeys, "no key is blamed")
	all, err := c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Empty(t, all)

	e.exec(`DROP TRIGGER refuse ON copy`)
	e.waitDrainFailure(c, "copy", func(f *trellis.DrainFailure) bool { return f == nil })
	e.converge(c)
	e.assertMatches("copy", `SELECT id, v FROM src`)
}

// A session holding a lock on the target for long makes the page fail
// after the apply lock timeout instead of waiting for it without end.
func TestDrainFailureOnLockHeld(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 20) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM copy FROM src SELECT v AS v`)
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)

	holder, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(e.ctx) }()
	_, err = holder.Exec(e.ctx, `LOCK TABLE copy IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	e.exec(`UPDATE src SET v = v + 100 WHERE id <= 5`)

	st := e.waitDrainFailure(c, "copy", func(f *trellis.DrainFailure) bool { return f != nil })
	require.NotNil(t, st.DrainFailure.SQLState)
	require.Equal(t, pgerrcode.LockNotAvailable, *st.DrainFailure.SQLState)
	require.Equal(t, []string{"public.src"}, st.DrainFailure.Tables)

	require.NoError(t, holder.Rollback(e.ctx))
	e.waitDrainFailure(c, "copy", func(f *trellis.DrainFailure) bool { return f == nil })
	e.converge(c)
	e.assertMatches("copy", `SELECT id, v FROM src`)
}
