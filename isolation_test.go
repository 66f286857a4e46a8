package trellis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A page that keeps failing for one transform (a trigger on its target
// refuses every statement) stops only that transform. Another table's
// changes on the same page (the same keys, so the same buckets) reach their
// target, and AwaitConverged for them returns. The failing transform is
// paused, with the cause in its Status. Its drain failure is not reported
// on the other table's reader. RESUME after the fix re-derives it with
// every change.
func TestFailingPageStopsOnlyItsReaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	for _, s := range []string{"a", "b"} {
		e.exec(`CREATE TABLE ` + s + ` (id int PRIMARY KEY, v int NOT NULL)`)
		e.exec(`INSERT INTO ` + s + ` SELECT g, g FROM generate_series(1, 20) g`)
		_, err := c.Define(e.ctx, `TRANSFORM `+s+`_copy FROM `+s+` SELECT v AS v`)
		require.NoError(t, err)
	}
	e.waitState(c, "a_copy", trellis.StateLive)
	e.waitState(c, "b_copy", trellis.StateLive)
	writer := e.role("writer", "GRANT SELECT, UPDATE ON a, b TO %s")
	e.exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'a_copy is read-only'; END $$`)
	e.exec(`CREATE TRIGGER refuse BEFORE INSERT OR UPDATE OR DELETE ON a_copy FOR EACH STATEMENT EXECUTE FUNCTION refuse()`)

	e.as(writer, `UPDATE a SET v = v + 100 WHERE id <= 5`, `UPDATE b SET v = v + 100 WHERE id <= 5`)
	tok, err := c.WatermarkToken(e.ctx)
	require.NoError(t, err)

	st := e.waitDrainFailure(c, "a_copy", func(f *trellis.DrainFailure) bool { return f != nil })
	require.Equal(t, []string{"public.a"}, st.DrainFailure.Tables, "the failure is the table a_copy reads")
	other, err := c.Status(e.ctx, "b_copy")
	require.NoError(t, err)
	require.Nil(t, other.DrainFailure, "b_copy's changes do not fail")

	require.NoError(t, c.AwaitConverged(e.ctx, tok, 60*time.Second), "b's changes drain while a_copy's keep failing")
	e.assertMatches("b_copy", `SELECT id, v FROM b`)
	st = e.waitState(c, "a_copy", trellis.StatePaused)
	require.NotNil(t, st.CaptureFailure)
	require.Equal(t, trellis.CaptureFailureHalt, st.CaptureFailure.Kind)
	require.Contains(t, st.CaptureFailure.Error, "a_copy is read-only")
	require.Contains(t, st.PausedReason, "a_copy is read-only")
	require.Contains(t, st.PausedReason, "RESUME")
	other, err = c.Status(e.ctx, "b_copy")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, other.State)

	// Writes go on meanwhile; after the fix, RESUME re-derives a_copy.
	e.as(writer, `UPDATE a SET v = v + 1000 WHERE id > 15`, `UPDATE b SET v = v + 1000 WHERE id > 15`)
	e.converge(c)
	e.assertMatches("b_copy", `SELECT id, v FROM b`)
	e.exec(`DROP TRIGGER refuse ON a_copy`)
	_, err = c.Apply(e.ctx, `RESUME TRANSFORM a_copy`)
	require.NoError(t, err)
	e.waitState(c, "a_copy", trellis.StateLive)
	e.converge(c)
	e.assertMatches("a_copy", `SELECT id, v FROM a`)
}
