package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A column added by ALTER TRANSFORM ... ADD COLUMN quarantines like any
// other: a row it fails on pauses that column, the row's other columns and
// every other row keep applying, nothing is held; the self-check of the
// target works and leaves the paused column out.
func TestAddedColumnQuarantines(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, 1 FROM generate_series(1, 50) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM ratios FROM items SELECT a + b AS total`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM ratios ADD COLUMN a / b AS ratio`)
	require.NoError(t, err)
	e.waitStatus(c, "ratios", func(st *trellis.Status) bool {
		return st.State == trellis.StateLive && len(st.BackfillingColumns) == 0
	})
	e.converge(c)
	e.assertMatches("ratios", `SELECT id, a + b, a / b FROM items`)

	e.exec(`INSERT INTO items VALUES (101, 1, 0)`)
	e.exec(`UPDATE items SET b = 0, a = a + 100 WHERE id = 5`)
	e.exec(`UPDATE items SET a = a + 1000 WHERE id = 6`)
	e.converge(c)
	q := e.waitQuarantine(c, "ratios.ratio", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	require.Contains(t, q.Error, "division by zero")
	st, err := c.Status(e.ctx, "ratios")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
	require.Nil(t, st.HeldKeys, "the key is not poisoned: only the column pauses")
	require.Equal(t, [][]string{{"5", "105"}, {"6", "1007"}, {"101", "1"}},
		e.rows(`SELECT id, total FROM ratios WHERE id IN (5, 6, 101) ORDER BY id`))

	rep := e.selfCheck(c, "ratios", trellis.SelfCheckStrict)
	require.Equal(t, trellis.SelfCheckConsistent, rep.Outcome, "%+v", rep)
	require.Contains(t, rep.PausedColumns, "ratio")
}
