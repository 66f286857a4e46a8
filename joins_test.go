package trellis_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// multiJoins are joins of three and four tables (star and chain, inner
// and left, grouped and not), and RIGHT JOINs of two and three tables,
// with the fresh recompute each must equal.
var multiJoins = []struct{ stmt, target, recompute string }{
	{`TRANSFORM rj_two FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, c.name, o.qty`,
		"rj_two", `SELECT c.id AS c_id, o.id AS order_id, c.name, o.qty FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id`},
	{`TRANSFORM rj_three FROM customers c RIGHT OUTER JOIN orders o ON o.customer_id = c.id LEFT JOIN regions r ON r.id = c.region_id SELECT o.id, c.name, r.name AS region`,
		"rj_three", `SELECT o.id, c.id AS c_id, r.id AS r_id, c.name, r.name AS region FROM customers c RIGHT JOIN orders o ON o.customer_id = c.id LEFT JOIN regions r ON r.id = c.region_id`},
	{`TRANSFORM rj_by_region FROM regions r RIGHT JOIN customers c ON r.id = c.region_id SELECT r.name AS region, count(*) AS n GROUP BY r.name`,
		"rj_by_region", `SELECT r.name AS region, count(*) AS n FROM regions r RIGHT JOIN customers c ON r.id = c.region_id GROUP BY r.name`},
	{`TRANSFORM mj_star FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN products p ON p.id = o.product_id SELECT o.id, c.name AS customer, p.title, o.qty`,
		"mj_star", `SELECT o.id, c.id AS c_id, p.id AS p_id, c.name AS customer, p.title, o.qty FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN products p ON p.id = o.product_id`},
	{`TRANSFORM mj_chain FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id SELECT o.id, c.id AS customer, r.name AS region, o.qty`,
		"mj_chain", `SELECT o.id, c.id AS customer, r.id AS r_id, r.name AS region, o.qty FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id`},
	{`TRANSFORM mj_by_region FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id SELECT r.name AS region, count(*) AS n, sum(o.qty) AS qty GROUP BY r.name`,
		"mj_by_region", `SELECT r.name AS region, count(*) AS n, sum(o.qty) AS qty FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id GROUP BY r.name`},
	{`TRANSFORM mj_by_customer FROM orders o, customers c, products p SELECT c.name AS customer, sum(o.qty * p.price) AS revenue, count(*) AS n WHERE c.id = o.customer_id AND p.id = o.product_id AND o.status <> 'void' GROUP BY c.name`,
		"mj_by_customer", `SELECT c.name AS customer, sum(o.qty * p.price) AS revenue, count(*) AS n FROM orders o JOIN customers c ON c.id = o.customer_id JOIN products p ON p.id = o.product_id WHERE o.status <> 'void' GROUP BY c.name`},
	{`TRANSFORM mj_four FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id LEFT JOIN products p ON p.id = o.product_id SELECT p.title, r.name AS region, o.id WHERE r.name <> 'r3'`,
		"mj_four", `SELECT o.id, c.id AS c_id, r.id AS r_id, p.id AS p_id, p.title, r.name AS region FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id LEFT JOIN products p ON p.id = o.product_id WHERE r.name <> 'r3'`},
	{`TRANSFORM mj_by_title FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id LEFT JOIN products p ON p.id = o.product_id SELECT p.title, count(*) AS n, string_agg(r.name, ',' ORDER BY o.id) AS names GROUP BY p.title`,
		"mj_by_title", `SELECT p.title, count(*) AS n, string_agg(r.name, ',' ORDER BY o.id) AS names FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id LEFT JOIN products p ON p.id = o.product_id GROUP BY p.title`},
	{`TRANSFORM mj_self FROM customers c JOIN customers ref ON ref.id = c.region_id JOIN regions r ON r.id = ref.region_id SELECT c.id, ref.name AS referrer, r.name AS region`,
		"mj_self", `SELECT c.id, ref.id AS ref_id, r.id AS r_id, ref.name AS referrer, r.name AS region FROM customers c JOIN customers ref ON ref.id = c.region_id JOIN regions r ON r.id = ref.region_id`},
}

// gapNames renders index gaps as table(columns).
func gapNames(gaps []trellis.SourceIndexGap) []string {
	var out []string
	for _, g := range gaps {
		out = append(out, g.Table+"("+strings.Join(g.Columns, ", ")+")")
	}
	return out
}

// semiJoins are semi- and anti-joins (EXISTS, NOT EXISTS, IN, NOT IN) over
// projections, aggregates and joins, with the fresh recompute each must
// equal: the same query in plain SQL.
var semiJoins = []struct{ stmt, target, recompute string }{
	{`TRANSFORM sj_buyers FROM customers c SELECT c.id, c.name WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'ok')`,
		"sj_buyers", `SELECT c.id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'ok')`},
	{`TRANSFORM sj_idle FROM customers c SELECT c.id, c.name WHERE NOT EXISTS (SELECT FROM orders WHERE customer_id = c.id) AND c.name <> 'c3'`,
		"sj_idle", `SELECT c.id, c.name FROM customers c WHERE NOT EXISTS (SELECT FROM orders WHERE customer_id = c.id) AND c.name <> 'c3'`},
	{`TRANSFORM sj_dear FROM orders o SELECT o.id, o.qty WHERE o.product_id IN (SELECT p.id FROM products p WHERE p.price > 10)`,
		"sj_dear", `SELECT o.id, o.qty FROM orders o WHERE o.product_id IN (SELECT p.id FROM products p WHERE p.price > 10)`},
	{`TRANSFORM sj_by_region FROM customers c SELECT c.region_id, count(*) AS n WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id) GROUP BY c.region_id`,
		"sj_by_region", `SELECT c.region_id, count(*) AS n FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id) GROUP BY c.region_id`},
	{`TRANSFORM sj_join FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id, c.name WHERE NOT EXISTS (SELECT 1 FROM regions r WHERE r.id = c.region_id AND r.name = 'r1')`,
		"sj_join", `SELECT o.id, c.id AS c_id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id WHERE NOT EXISTS (SELECT 1 FROM regions r WHERE r.id = c.region_id AND r.name = 'r1')`},
	{`TRANSFORM sj_not_in FROM products p SELECT p.id, p.title WHERE p.id NOT IN (SELECT r.id FROM regions r WHERE r.name <> 'r2')`,
		"sj_not_in", `SELECT p.id, p.title FROM products p WHERE p.id NOT IN (SELECT r.id FROM regions r WHERE r.name <> 'r2')`},
}

// TestSemiJoinsConverge maintains semi- and anti-joins while writers change
// the outer and the subqueries' tables at once, with two clients' drain
// workers; every target then equals a fresh recompute, both ways, and a
// self-check finds nothing. A NOT IN over a nullable column is refused.
func TestSemiJoinsConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, d := range semiJoins {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	_, err := c.Define(e.ctx, `TRANSFORM sj_bad FROM orders o SELECT o.id WHERE o.product_id NOT IN (SELECT p.id FROM products p)`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "use NOT EXISTS (SELECT 1 FROM products WHERE p.id = o.product_id)")

	st, err := c.Status(e.ctx, "sj_buyers")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.customers", "public.orders"}, st.Sources)
	require.ElementsMatch(t, []string{"public.orders(customer_id)"}, gapNames(st.SourceIndexGaps))
	for _, d := range semiJoins {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
		e.fixIndexGaps(c, d.target)
	}

	writes := e.writeConcurrently(4, 80, 400, writeJoinSources)
	e.converge(c)
	for _, d := range semiJoins {
		st := e.requireLiveAndExact(c, d.target, d.recompute)
		require.Empty(t, st.SourceIndexGaps, d.target)
	}
	t.Logf("%d write transactions", writes)
}

func createJoinSources(e *env) {
	e.exec(`CREATE TABLE regions (id int PRIMARY KEY, name text)`)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region_id int, name text)`)
	e.exec(`CREATE TABLE products (id int PRIMARY KEY, title text, price int)`)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, product_id int, qty int, status text)`)
	e.exec(`INSERT INTO regions SELECT g, 'r' || (g % 5) FROM generate_series(1, 12) g`)
	e.exec(`INSERT INTO customers SELECT g, g % 15, 'c' || (g % 9) FROM generate_series(1, 60) g`)
	e.exec(`INSERT INTO products SELECT g, 't' || (g % 7), g FROM generate_series(1, 40) g`)
	e.exec(`INSERT INTO orders SELECT g, g % 70, g % 45, g % 4, CASE WHEN g % 10 = 0 THEN 'void' ELSE 'ok' END FROM generate_series(1, 900) g`)
}

// writeJoinSources runs random transactions over the four tables, often
// changing several of them in one transaction (a page then holds changes
// of more than one table of a join), until stop closes.
func writeJoinSources(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, seed*3+5))
	nullable := func(n int) any {
		if r.IntN(12) == 0 {
			return nil
		}
		return r.IntN(n)
	}
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for n := 1 + r.IntN(4); n > 0; n-- {
				var q string
				var args []any
				switch r.IntN(14) {
				case 0, 1:
					q, args = `INSERT INTO orders VALUES ($1, $2, $3, $4, 'ok') ON CONFLICT (id) DO UPDATE SET qty = EXCLUDED.qty`, []any{r.Int64N(1200), nullable(75), nullable(50), r.IntN(5)}
				case 2:
					q, args = `UPDATE orders SET customer_id = $2, product_id = $3 WHERE id = $1`, []any{r.Int64N(1200), nullable(75), nullable(50)}
				case 3:
					q, args = `DELETE FROM orders WHERE id = $1`, []any{r.Int64N(1200)}
				case 4:
					q, args = `UPDATE orders SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM orders WHERE id = $2)`, []any{r.Int64N(1200), r.Int64N(1200)}
				case 5:
					q, args = `UPDATE customers SET region_id = $2 WHERE id = $1`, []any{r.IntN(75), nullable(16)}
				case 6:
					q, args = `INSERT INTO customers VALUES ($1, $2, 'c' || $3::int) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name`, []any{r.IntN(75), nullable(16), r.IntN(9)}
				case 7:
					q, args = `DELETE FROM customers WHERE id = $1`, []any{r.IntN(75)}
				case 8:
					q, args = `UPDATE customers SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM customers WHERE id = $2)`, []any{r.IntN(75), r.IntN(75)}
				case 9:
					q, args = `UPDATE regions SET name = 'r' || $2::int WHERE id = $1`, []any{r.IntN(16), r.IntN(6)}
				case 10:
					q, args = `INSERT INTO regions VALUES ($1, 'r' || $2::int) ON CONFLICT (id) DO NOTHING`, []any{r.IntN(16), r.IntN(6)}
				case 11:
					q, args = `DELETE FROM regions WHERE id = $1`, []any{r.IntN(16)}
				case 12:
					q, args = `UPDATE products SET title = 't' || $2::int, price = price + 1 WHERE id = $1`, []any{r.IntN(50), r.IntN(8)}
				case 13:
					if r.IntN(2) == 0 {
						q, args = `DELETE FROM products WHERE id = $1`, []any{r.IntN(50)}
					} else {
						q, args = `INSERT INTO products VALUES ($1, 't' || $2::int, $3) ON CONFLICT (id) DO NOTHING`, []any{r.IntN(50), r.IntN(8), r.IntN(30)}
					}
				}
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return err
				}
			}
			if r.IntN(15) == 0 {
				return errRollback
			}
			return nil
		})
		if err != nil && !errors.Is(err, errRollback) && ctx.Err() == nil && !isExpectedWriteConflict(err) {
			return err
		}
		writes.Add(1)
	}
}

// TestMultiJoinsConverge maintains joins of three and four tables while
// writers change all their tables at once, with two clients' drain
// workers; every target then equals a fresh recompute, both ways, and a
// self-check finds nothing.
func TestMultiJoinsConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, d := range multiJoins {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range multiJoins {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	// Every join column each affected-keys query and recompute looks up
	// is listed, on the table it belongs to, with a fix that runs.
	st, err := c.Status(e.ctx, "mj_chain")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.orders(customer_id)", "public.customers(region_id)"}, gapNames(st.SourceIndexGaps))
	require.ElementsMatch(t, []string{"public.orders", "public.customers", "public.regions"}, st.Sources)
	for _, d := range multiJoins {
		e.fixIndexGaps(c, d.target)
	}
	for _, d := range multiJoins {
		st, err := c.Status(e.ctx, d.target)
		require.NoError(t, err)
		require.Empty(t, st.SourceIndexGaps, d.target)
	}

	writes := e.writeConcurrently(4, 40, 400, writeJoinSources)
	e.converge(c)
	for _, d := range multiJoins {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)
}

// TestMultiJoinAlterChainDump alters a three-table join and a semi-join
// (ADD and DROP COLUMN, the new column reading the third table), reads the
// inner join's target from a chain, and dumps the definitions; after
// writes to every table each target equals its recompute.
func TestMultiJoinAlterChainDump(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createJoinSources(e)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM mja FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id SELECT o.id, c.name`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM sja FROM customers c SELECT c.id, c.name WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)`)
	require.NoError(t, err)
	e.waitState(c, "mja", trellis.StateLive)
	e.waitState(c, "sja", trellis.StateLive)

	_, err = c.Apply(e.ctx, `ALTER TRANSFORM mja ADD COLUMN upper(r.name) AS region`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM mja DROP COLUMN name`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM sja ADD COLUMN c.region_id * 2 AS twice`)
	require.NoError(t, err)
	// A column cannot read the subquery's table.
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM sja ADD COLUMN o.qty AS qty`)
	requireCode(t, err, trellis.CodeValidation)
	e.waitState(c, "mja", trellis.StateLive)
	e.waitState(c, "sja", trellis.StateLive)

	// A chain over the inner join's target, keyed by its three keys.
	_, err = c.Define(e.ctx, `TRANSFORM mja_copy FROM mja m SELECT m.region AS reg`)
	require.NoError(t, err)
	e.waitState(c, "mja_copy", trellis.StateLive)
	st, err := c.Status(e.ctx, "mja")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.orders", "public.customers", "public.regions"}, st.Sources)

	e.exec(`UPDATE regions SET name = 'moved' WHERE id = 3`)
	e.exec(`UPDATE customers SET region_id = 4 WHERE id % 7 = 0`)
	e.exec(`DELETE FROM orders WHERE id % 11 = 0`)
	e.exec(`DELETE FROM regions WHERE id = 5`)
	e.exec(`INSERT INTO orders VALUES (5000, 3, 1, 1, 'ok'), (5001, 61, 1, 1, 'ok')`)
	e.exec(`INSERT INTO customers VALUES (61, 2, 'new')`)
	e.converge(c)
	mja := `SELECT o.id, c.id AS c_id, r.id AS r_id, upper(r.name) AS region FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id`
	e.assertMatches("mja", mja)
	e.assertMatches("sja", `SELECT c.id, c.name, c.region_id * 2 AS twice FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)`)
	e.assertMatches("mja_copy", `SELECT id, c_id, r_id, region AS reg FROM (`+mja+`) m`)

	dump, err := c.DumpDefinitionsSQL(e.ctx)
	require.NoError(t, err)
	require.Contains(t, dump, "JOIN regions r ON r.id = c.region_id")
	require.Contains(t, dump, "WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)")
}
