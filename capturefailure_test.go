package trellis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/capture"
)

// waitCaptureFailure polls Status until target is paused with a capture
// failure of kind capture detected after since, and returns it.
func (e *env) waitCaptureFailure(c *trellis.Client, target string, since time.Time) *trellis.Status {
	e.t.Helper()
	return e.pollStatus(c, target, stateWaitCap, 10*time.Millisecond,
		target+" was not paused with a capture failure", func(st *trellis.Status) bool {
			return st.State == trellis.StatePaused && st.CaptureFailure != nil &&
				st.CaptureFailure.Kind == trellis.CaptureFailureCapture && st.CaptureFailure.DetectedAt.After(since)
		})
}

func TestCaptureFailureDroppedColumnPausesItsReaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, c int, v int)`)
	e.exec(`INSERT INTO src SELECT g, g * 10, g FROM generate_series(1, 50) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM reads_c FROM src SELECT c + 1 AS c1, v AS v")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM no_c FROM src SELECT v * 2 AS w")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM alters FROM src SELECT c * 2 AS c2, v AS v")
	require.NoError(t, err)
	e.waitState(c, "reads_c", trellis.StateLive)
	e.waitState(c, "no_c", trellis.StateLive)
	e.waitState(c, "alters", trellis.StateLive)

	before := time.Now()
	e.exec(`ALTER TABLE src DROP COLUMN c`)
	st := e.waitCaptureFailure(c, "reads_c", before.Add(-time.Second))
	f := st.CaptureFailure
	require.Equal(t, "public.src", f.SourceTable)
	require.Equal(t, []string{"c"}, f.Columns)
	require.Contains(t, f.Error, "column c of public.src")
	require.Contains(t, f.Error, "RESUME TRANSFORM reads_c")
	require.Equal(t, f.Error, st.PausedReason)

	// The transform that does not read c goes on applying writes.
	e.exec(`INSERT INTO src (id, v) VALUES (100, 100); UPDATE src SET v = v + 1 WHERE id <= 10; DELETE FROM src WHERE id = 20`)
	e.converge(c)
	e.assertMatches("no_c", "SELECT id, v * 2 AS w FROM src")
	st, err = c.Status(e.ctx, "no_c")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
	require.Nil(t, st.CaptureFailure)
	// The writes leave the paused transform's failure as it was.
	st, err = c.Status(e.ctx, "reads_c")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, st.State)
	require.Equal(t, trellis.CaptureFailureCapture, st.CaptureFailure.Kind)

	// Stopping reading it is a fix too.
	st = e.waitCaptureFailure(c, "alters", before.Add(-time.Second))
	require.Contains(t, st.CaptureFailure.Error, "ALTER TRANSFORM alters DROP COLUMN c2")
	_, err = c.Apply(e.ctx, "ALTER TRANSFORM alters DROP COLUMN c2")
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM alters")
	require.NoError(t, err)
	st = e.waitState(c, "alters", trellis.StateLive)
	require.Nil(t, st.CaptureFailure)
	e.exec(`UPDATE src SET v = v + 1 WHERE id > 40`)
	e.converge(c)
	e.assertMatches("alters", "SELECT id, v FROM src")

	// RESUME while the column is still gone: paused again, for the same reason.
	resumed := time.Now()
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM reads_c")
	require.NoError(t, err)
	st = e.waitCaptureFailure(c, "reads_c", resumed)
	require.Equal(t, []string{"c"}, st.CaptureFailure.Columns)

	// The column back, RESUME re-derives the target.
	e.exec(`ALTER TABLE src ADD COLUMN c int`)
	e.exec(`UPDATE src SET c = id * 3`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM reads_c")
	require.NoError(t, err)
	st = e.waitState(c, "reads_c", trellis.StateLive)
	require.Nil(t, st.CaptureFailure)
	e.exec(`UPDATE src SET c = c + 1 WHERE id % 2 = 0; INSERT INTO src (id, c, v) VALUES (200, 7, 7)`)
	e.converge(c)
	e.assertMatches("reads_c", "SELECT id, c + 1 AS c1, v FROM src")
	e.assertMatches("no_c", "SELECT id, v * 2 AS w FROM src")
}

func TestCaptureFailureDroppedGroupColumnKeepsWritesWorking(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, h text, amt int)`)
	e.exec(`INSERT INTO src SELECT i, i % 3, 'h' || (i % 4), i FROM generate_series(1, 40) i`)
	c := e.engine()
	// Both capture old values: g is recorded before h.
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(amt) AS total, count(*) AS n GROUP BY g")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM by_h FROM src SELECT h AS h, sum(amt) AS total GROUP BY h")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	e.waitState(c, "by_h", trellis.StateLive)

	before := time.Now()
	e.exec(`ALTER TABLE src DROP COLUMN g`)
	// Capture records old values of g: updates and deletes succeed at
	// once all the same, before the staging worker stops recording g.
	e.exec(`UPDATE src SET amt = amt + 1 WHERE id = 1`)
	e.exec(`DELETE FROM src WHERE id = 2; INSERT INTO src (id, h, amt) VALUES (1000, 'h9', 5)`)
	st := e.waitCaptureFailure(c, "by_g", before.Add(-time.Second))
	require.Equal(t, "public.src", st.CaptureFailure.SourceTable)
	require.Equal(t, []string{"g"}, st.CaptureFailure.Columns)
	require.Contains(t, st.CaptureFailure.Error, "column g of public.src")

	// The other reader of the table keeps applying every kind of write,
	// groups moving included (old values of h are still recorded).
	e.exec(`UPDATE src SET h = h || 'x' WHERE id % 2 = 0; DELETE FROM src WHERE id = 3; UPDATE src SET amt = amt + 1 WHERE id % 5 = 0`)
	e.converge(c)
	e.assertMatches("by_h", "SELECT h, sum(amt) AS total FROM src GROUP BY h")
	st, err = c.Status(e.ctx, "by_h")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
	require.Nil(t, st.CaptureFailure)

	// g back and RESUME: capture records g again and the target follows
	// rows moving between groups.
	e.exec(`ALTER TABLE src ADD COLUMN g int`)
	e.exec(`UPDATE src SET g = id % 4`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM by_g")
	require.NoError(t, err)
	st = e.waitState(c, "by_g", trellis.StateLive)
	require.Nil(t, st.CaptureFailure)
	e.exec(`UPDATE src SET g = g + 1 WHERE id % 3 = 0; UPDATE src SET h = 'moved' WHERE id % 7 = 0; DELETE FROM src WHERE id = 4`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(amt) AS total, count(*) AS n FROM src GROUP BY g")
	e.assertMatches("by_h", "SELECT h, sum(amt) AS total FROM src GROUP BY h")
}

func TestCaptureFailureLostPrimaryKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 30) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM keyed FROM src SELECT v AS v")
	require.NoError(t, err)
	e.waitState(c, "keyed", trellis.StateLive)

	// The primary key dropped, its column kept.
	before := time.Now()
	e.exec(`ALTER TABLE src DROP CONSTRAINT src_pkey`)
	st := e.waitCaptureFailure(c, "keyed", before.Add(-time.Second))
	require.Equal(t, "public.src", st.CaptureFailure.SourceTable)
	require.Equal(t, []string{"id"}, st.CaptureFailure.Columns)
	require.Contains(t, st.CaptureFailure.Error, "primary key")
	e.exec(`ALTER TABLE src ADD PRIMARY KEY (id)`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM keyed")
	require.NoError(t, err)
	e.waitState(c, "keyed", trellis.StateLive)
	e.exec(`UPDATE src SET v = v + 1 WHERE id < 5`)
	e.converge(c)
	e.assertMatches("keyed", "SELECT id, v FROM src")

	// The key column dropped: capture has nothing to record, and writes to
	// the table must not fail in it.
	before = time.Now()
	e.exec(`ALTER TABLE src DROP COLUMN id`)
	e.exec(`INSERT INTO src (v) VALUES (1000)`)
	e.exec(`UPDATE src SET v = v + 1 WHERE v < 3`)
	e.exec(`DELETE FROM src WHERE v = 30`)
	st = e.waitCaptureFailure(c, "keyed", before.Add(-time.Second))
	require.Equal(t, []string{"id"}, st.CaptureFailure.Columns)
	e.exec(`ALTER TABLE src ADD COLUMN id int`)
	e.exec(`UPDATE src s SET id = n.rn FROM (SELECT ctid, row_number() OVER () AS rn FROM src) n WHERE s.ctid = n.ctid`)
	e.exec(`ALTER TABLE src ADD PRIMARY KEY (id)`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM keyed")
	require.NoError(t, err)
	st = e.waitState(c, "keyed", trellis.StateLive)
	require.Nil(t, st.CaptureFailure)
	e.exec(`UPDATE src SET v = v * 2 WHERE id % 2 = 0; INSERT INTO src (id, v) VALUES (5000, 1)`)
	e.converge(c)
	e.assertMatches("keyed", "SELECT id, v FROM src")
}

// A key column that holds NULL while its table is captured (the primary
// key dropped, and NOT NULL with it, or a key column dropped and added
// again) puts ledger rows whose key has a NULL part. The drain re-reads
// the source for them, as for any key it cannot use, instead of failing
// on their page again and again: that stalled every change of every table
// in the page's buckets, here another table's.
func TestCaptureFailureNullKeyPartStallsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`CREATE TABLE other (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 30) g`)
	e.exec(`INSERT INTO other SELECT g, g FROM generate_series(1, 30) g`)
	c := e.engine()
	for _, stmt := range []string{"TRANSFORM keyed FROM src SELECT v AS v", "TRANSFORM mirror FROM other SELECT v AS v"} {
		_, err := c.Define(e.ctx, stmt)
		require.NoError(t, err)
	}
	e.waitState(c, "keyed", trellis.StateLive)
	e.waitState(c, "mirror", trellis.StateLive)

	before := time.Now()
	e.exec(`ALTER TABLE src DROP CONSTRAINT src_pkey`)
	e.exec(`ALTER TABLE src ALTER COLUMN id DROP NOT NULL`)
	e.exec(`INSERT INTO src VALUES (NULL, 7)`)
	e.exec(`UPDATE src SET id = NULL WHERE id = 1`)
	e.exec(`UPDATE other SET v = v + 1 WHERE id % 2 = 0`)
	e.converge(c)
	e.assertMatches("mirror", "SELECT id, v FROM other")
	st, err := c.Status(e.ctx, "mirror")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
	e.waitCaptureFailure(c, "keyed", before.Add(-time.Second))

	// The rows fixed and the key back: RESUME rebuilds, and changes flow.
	e.exec(`UPDATE src SET id = 1 WHERE v = 1`)
	e.exec(`DELETE FROM src WHERE id IS NULL`)
	e.exec(`ALTER TABLE src ADD PRIMARY KEY (id)`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM keyed")
	require.NoError(t, err)
	e.waitState(c, "keyed", trellis.StateLive)
	e.exec(`UPDATE src SET v = v * 2 WHERE id % 3 = 0`)
	e.exec(`UPDATE other SET v = v + 1 WHERE id % 3 = 0`)
	e.converge(c)
	e.assertMatches("keyed", "SELECT id, v FROM src")
	e.assertMatches("mirror", "SELECT id, v FROM other")
}

// The staging worker's fitting of capture to a dropped captured column
// reinstalls every capture function and trigger of the source, owner-only:
// a source whose triggers still call one function for every operation (as
// a release before level 15 installed them) ends with each operation's
// trigger calling its own function, none executable by another role, and
// its other reader still exact.
func TestCaptureFittingReinstallsEveryFunctionOwnerOnly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, h text, amt int)`)
	e.exec(`INSERT INTO src SELECT i, i % 3, 'h' || (i % 4), i FROM generate_series(1, 40) i`)
	e.role("other")
	other := e.rows(`SELECT current_database() || '_other'`)[0][0]
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(amt) AS total GROUP BY g")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM by_h FROM src SELECT h AS h, sum(amt) AS total GROUP BY h")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	e.waitState(c, "by_h", trellis.StateLive)
	e.captureByOneFunction("src")

	before := time.Now()
	e.exec(`ALTER TABLE src DROP COLUMN g`)
	e.waitCaptureFailure(c, "by_g", before.Add(-time.Second))
	n := capture.Names{Catalog: "trellis"}
	e.eventually("each operation's trigger calls its own function", func() bool {
		got := e.rows(`SELECT tgname, tgfoid::regproc::text FROM pg_trigger WHERE tgrelid = 'src'::regclass AND NOT tgisinternal ORDER BY tgname`)
		return len(got) == 4 && got[0][1] == "trellis.capture_1_del" && got[1][1] == "trellis.capture_1_ins" &&
			got[2][1] == "trellis.capture_1" && got[3][1] == "trellis.capture_1_upd" && got[2][0] == n.Trigger("trunc")
	})
	require.Empty(t, e.rows(`SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'trellis'::regnamespace AND p.proname LIKE 'capture%'
  AND has_function_privilege($1, p.oid, 'EXECUTE')`, other), "another role may run a capture function")

	e.exec(`UPDATE src SET h = h || 'x' WHERE id % 2 = 0; DELETE FROM src WHERE id = 3; INSERT INTO src (id, h, amt) VALUES (1000, 'h9', 5)`)
	e.converge(c)
	e.assertMatches("by_h", "SELECT h, sum(amt) AS total FROM src GROUP BY h")
	st, err := c.Status(e.ctx, "by_h")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
}
