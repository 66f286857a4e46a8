package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

func TestProjectionEndToEnd(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, price numeric NOT NULL, tax numeric NOT NULL, status text)`)
	e.exec(`INSERT INTO orders SELECT g, g, g / 10.0, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'closed' END FROM generate_series(1, 1000) g`)
	c := e.engine()

	target, err := c.Define(e.ctx, "TRANSFORM order_totals FROM orders SELECT price + tax AS total, status AS status WHERE status = 'open'")
	require.NoError(t, err)
	require.Equal(t, "public.order_totals", target)
	e.waitState(c, "order_totals", trellis.StateLive)
	recompute := "SELECT id, price + tax AS total, status FROM orders WHERE status = 'open'"
	e.assertMatches("order_totals", recompute)

	// Inserts, updates (into and out of the WHERE, and of the key), deletes.
	e.exec(`INSERT INTO orders VALUES (5000, 1, 1, 'open'), (5001, 2, 2, 'closed')`)
	e.exec(`UPDATE orders SET status = 'open' WHERE id BETWEEN 1 AND 10`)
	e.exec(`UPDATE orders SET status = 'closed' WHERE id BETWEEN 90 AND 99`)
	e.exec(`UPDATE orders SET id = id + 10000 WHERE id BETWEEN 300 AND 330`)
	e.exec(`UPDATE orders SET price = price * 2 WHERE id % 7 = 0`)
	e.exec(`DELETE FROM orders WHERE id BETWEEN 500 AND 600`)
	e.converge(c)
	e.assertMatches("order_totals", recompute)

	// TRUNCATE, then new rows in the same transaction.
	e.exec(`BEGIN; TRUNCATE orders; INSERT INTO orders VALUES (1, 10, 1, 'open'), (2, 20, 2, 'open'); COMMIT`)
	e.converge(c)
	e.assertMatches("order_totals", recompute)
	require.Len(t, e.rows("TABLE order_totals"), 2)
}
