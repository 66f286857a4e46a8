package trellis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A chain dropped and defined again at once (as a sync's rebuild does): the
// upstream target is a new table under the old name, and capture of it is
// installed afresh, not taken for the old table's (whose triggers went
// with it, which would read as a disruption and pause the reader).
func TestChainDroppedAndDefinedAgainAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, price int, status text);
		INSERT INTO orders SELECT g, g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END FROM generate_series(1, 40) g`)
	c := e.engine()
	up := "TRANSFORM order_totals FROM orders SELECT price AS total, status AS status"
	down := "TRANSFORM total_by_status FROM order_totals SELECT status AS status, sum(total) AS sum GROUP BY status"
	for _, s := range []string{up, down} {
		_, err := c.Define(e.ctx, s)
		require.NoError(t, err)
	}
	e.waitState(c, "total_by_status", trellis.StateLive)
	for _, s := range []string{"DROP TRANSFORM total_by_status", "DROP TRANSFORM order_totals",
		"TRANSFORM order_totals FROM orders SELECT price * 2 AS total, status AS status", down} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err, s)
	}
	e.waitState(c, "order_totals", trellis.StateLive)
	e.waitState(c, "total_by_status", trellis.StateLive)
	e.exec(`UPDATE orders SET price = price + 1 WHERE id <= 10`)
	e.converge(c)
	e.assertMatches("total_by_status", "SELECT status, sum(price * 2) FROM orders GROUP BY status")
	st, err := c.Status(e.ctx, "total_by_status")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
}

// DROP TRANSFORM, then (optionally) drop and re-create the source table,
// then define the same transform at once, several times over: each time it
// goes live with capture on the table as it is now, follows later writes,
// and is never paused as disrupted.
func TestRedefineRace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	const def = `TRANSFORM agg FROM src SELECT g AS g, count(*) AS n, sum(v) AS total GROUP BY g`
	create := func() {
		e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int NOT NULL, v int NOT NULL)`)
		e.exec(`INSERT INTO src SELECT x, x % 5, x FROM generate_series(1, 50) x`)
	}
	create()
	_, err := c.Define(e.ctx, def)
	require.NoError(t, err)
	e.waitState(c, "agg", trellis.StateLive)
	for round := 0; round < 8; round++ {
		recreate := round%2 == 0
		t.Logf("round %d, table re-created: %v", round, recreate)
		_, err := c.Apply(e.ctx, `DROP TRANSFORM agg`)
		require.NoError(t, err)
		if recreate {
			e.exec(`DROP TABLE src`)
			create()
		}
		if round%4 == 1 {
			// Give the staging worker time to start removing capture.
			time.Sleep(time.Duration(round) * 50 * time.Millisecond)
		}
		_, err = c.Define(e.ctx, def)
		require.NoError(t, err)
		st := e.waitStatus(c, "agg", func(st *trellis.Status) bool {
			return st.State == trellis.StateLive || st.State == trellis.StatePaused
		})
		require.Equal(t, trellis.StateLive, st.State, "round %d: %+v", round, st)
		e.exec(fmt.Sprintf(`INSERT INTO src VALUES (%d, 1, 1000)`, 1000+round))
		e.exec(`UPDATE src SET g = g + 1 WHERE id % 7 = 0`)
		e.converge(c)
		e.assertMatches("agg", `SELECT g, count(*), sum(v) FROM src GROUP BY g`)
		st, err = c.Status(e.ctx, "agg")
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, "round %d: %+v", round, st)
		require.Nil(t, st.CaptureFailure, "round %d", round)
		var triggers int
		require.NoError(t, e.db.QueryRow(e.ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'src'::regclass AND NOT tgisinternal`).Scan(&triggers))
		require.Positive(t, triggers, "round %d: no capture triggers on src", round)
	}
}
