package trellis_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A halt says what failed: a target changed outside Trellis is named with
// the change; a statement of Trellis's own that fails with the target as
// Trellis made it is not blamed on the target.
func TestHaltSaysWhatFailed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL, w int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT g, g, g FROM generate_series(1, 10) g`)
	e.exec(`CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 2'`)
	for _, s := range []string{
		`TRANSFORM changed FROM src SELECT v AS v, w AS w`,
		`TRANSFORM calls FROM src SELECT twice(v) AS v2`,
	} {
		_, err := c.Define(e.ctx, s)
		require.NoError(t, err)
	}
	e.waitState(c, "changed", trellis.StateLive)
	e.waitState(c, "calls", trellis.StateLive)

	e.exec(`ALTER TABLE changed DROP COLUMN w`)
	e.exec(`DROP FUNCTION twice(int)`)
	e.exec(`UPDATE src SET v = v + 1`)
	st := e.waitState(c, "changed", trellis.StatePaused)
	require.NotNil(t, st.CaptureFailure)
	require.Equal(t, trellis.CaptureFailureHalt, st.CaptureFailure.Kind)
	require.Contains(t, st.PausedReason, "changed outside Trellis (column w was dropped)")

	st = e.waitState(c, "calls", trellis.StatePaused)
	require.NotContains(t, st.PausedReason, "changed outside Trellis", "the target of calls was not touched")
	require.True(t, strings.Contains(st.PausedReason, "twice"), st.PausedReason)
}

// DROP SCHEMA ... CASCADE that takes a target along does not leave a
// transform that looks healthy: its status reports the target gone.
func TestDropSchemaCascadeOfTargetIsReported(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 10) g`)
	e.exec(`CREATE SCHEMA reports`)
	_, err := c.Define(e.ctx, `TRANSFORM reports.copy FROM src SELECT v AS v`)
	require.NoError(t, err)
	e.waitState(c, "reports.copy", trellis.StateLive)
	e.exec(`DROP SCHEMA reports CASCADE`)
	e.exec(`UPDATE src SET v = v + 1`)
	st := e.waitStatus(c, "reports.copy", func(st *trellis.Status) bool { return st.State == trellis.StatePaused })
	require.NotNil(t, st.CaptureFailure)
	require.Contains(t, st.PausedReason, "dropped")
}
