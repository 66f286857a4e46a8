package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

func TestGroupByAggregates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric, status text, created_at timestamptz)`)
	e.exec(`INSERT INTO orders SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE g % 7 END, g % 50, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'paid' END,
		timestamptz '2026-01-01' + g * interval '5 hours' FROM generate_series(1, 400) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM customer_totals FROM orders SELECT customer_id AS customer_id, sum(price) AS revenue, count(*) AS orders,
		min(price) AS cheapest, max(price) AS dearest, avg(price) AS mean, count(DISTINCT status) AS statuses,
		bool_and(price > 10) AS all_big, string_agg(status, ',' ORDER BY id) AS trail, array_agg(id ORDER BY id) AS ids
		GROUP BY customer_id`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM daily FROM orders SELECT date_trunc('day', created_at) AS day, sum(price) AS revenue WHERE status = 'paid' GROUP BY date_trunc('day', created_at)`)
	require.NoError(t, err)
	e.waitState(c, "customer_totals", trellis.StateLive)
	e.waitState(c, "daily", trellis.StateLive)
	recompute := `SELECT customer_id, sum(price) AS revenue, count(*) AS orders, min(price) AS cheapest, max(price) AS dearest, avg(price) AS mean,
		count(DISTINCT status) AS statuses, bool_and(price > 10) AS all_big, string_agg(status, ',' ORDER BY id) AS trail, array_agg(id ORDER BY id) AS ids
		FROM orders GROUP BY customer_id`
	daily := `SELECT date_trunc('day', created_at) AS day, sum(price) AS revenue FROM orders WHERE status = 'paid' GROUP BY 1`
	e.assertMatches("customer_totals", recompute)
	e.assertMatches("daily", daily)

	// Rows move between groups, groups empty, the NULL group changes.
	e.exec(`UPDATE orders SET customer_id = 100 WHERE customer_id = 3`)
	e.exec(`DELETE FROM orders WHERE customer_id = 5`)
	e.exec(`UPDATE orders SET customer_id = NULL WHERE id = 1`)
	e.exec(`UPDATE orders SET price = price + 1, status = 'open' WHERE id % 4 = 0`)
	e.exec(`UPDATE orders SET created_at = created_at + interval '3 days' WHERE id % 5 = 0`)
	e.exec(`INSERT INTO orders VALUES (1000, 42, 9, 'paid', now())`)
	e.converge(c)
	e.assertMatches("customer_totals", recompute)
	e.assertMatches("daily", daily)
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM customer_totals WHERE customer_id = 5`))

	e.exec(`TRUNCATE orders`)
	e.exec(`INSERT INTO orders VALUES (1, 1, 1, 'paid', now())`)
	e.converge(c)
	e.assertMatches("customer_totals", recompute)
	e.assertMatches("daily", daily)
}

func TestJoins(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text, email text UNIQUE)`)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric)`)
	e.exec(`INSERT INTO customers SELECT g, 'r' || (g % 4), 'c' || g || '@x' FROM generate_series(1, 30) g`)
	e.exec(`INSERT INTO orders SELECT g, g % 35, g FROM generate_series(1, 300) g`)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM order_lines FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, c.region AS region, o.price AS price`,
			"order_lines", `SELECT o.id AS order_id, c.id AS c_id, c.region, o.price FROM orders o JOIN customers c ON c.id = o.customer_id`},
		{`TRANSFORM order_lines_left FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, c.id AS customer, c.region AS region`,
			"order_lines_left", `SELECT o.id AS order_id, c.id AS customer, c.region FROM orders o LEFT JOIN customers c ON c.id = o.customer_id`},
		{`TRANSFORM region_revenue FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.region AS region, sum(o.price) AS revenue, count(*) AS n GROUP BY c.region`,
			"region_revenue", `SELECT c.region, sum(o.price) AS revenue, count(*) AS n FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.region`},
		{`TRANSFORM region_revenue_left FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT c.region AS region, sum(o.price) AS revenue GROUP BY c.region WITHOUT SOURCE INDEX`,
			"region_revenue_left", `SELECT c.region, sum(o.price) AS revenue FROM orders o LEFT JOIN customers c ON c.id = o.customer_id GROUP BY c.region`},
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range defs {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}

	e.exec(`UPDATE customers SET region = 'moved' WHERE id = 3`)
	e.exec(`UPDATE orders SET customer_id = 4 WHERE id BETWEEN 10 AND 20`)
	e.exec(`DELETE FROM customers WHERE id = 7`)
	e.exec(`INSERT INTO customers VALUES (33, 'new', 'n@x')`)
	e.exec(`UPDATE customers SET id = 34 WHERE id = 8`)
	e.exec(`DELETE FROM orders WHERE id % 9 = 0`)
	e.exec(`INSERT INTO orders VALUES (5000, 33, 1), (5001, NULL, 2)`)
	e.converge(c)
	for _, d := range defs {
		e.assertMatches(d.target, d.recompute)
	}
}
