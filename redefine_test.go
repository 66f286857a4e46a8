package trellis_test

import (
	"testing"

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
