package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A chain may read a GROUP BY target, a JOIN target, and a user table
// identified by a unique index over NOT NULL columns; every one stays equal
// to its recompute through inserts, updates (key changes included) and
// deletes.
func TestChainsOverShapedTargets(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text NOT NULL)`)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, amount int NOT NULL)`)
	e.exec(`CREATE TABLE codes (code text NOT NULL, label text, CONSTRAINT codes_code UNIQUE (code))`)
	e.exec(`INSERT INTO customers SELECT g, 'r' || (g % 3) FROM generate_series(1, 20) g`)
	e.exec(`INSERT INTO orders SELECT g, 1 + g % 20, g FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO codes SELECT 'c' || g, 'label ' || g FROM generate_series(1, 30) g`)
	for _, stmt := range []string{
		`TRANSFORM customer_totals FROM orders SELECT customer_id AS customer_id, sum(amount) AS revenue, count(*) AS n GROUP BY customer_id`,
		`TRANSFORM big FROM customer_totals SELECT revenue AS revenue WHERE n > 9`,
		`TRANSFORM by_region FROM customer_totals SELECT customer_id % 3 AS bucket, sum(revenue) AS revenue GROUP BY customer_id % 3`,
		`TRANSFORM order_regions FROM orders o JOIN customers c ON o.customer_id = c.id SELECT o.amount AS amount, c.region AS region`,
		`TRANSFORM region_orders FROM order_regions SELECT region AS region, count(*) AS n GROUP BY region`,
		`TRANSFORM code_labels FROM codes SELECT upper(label) AS label`,
	} {
		_, err := c.Define(e.ctx, stmt)
		require.NoError(t, err, stmt)
	}
	for _, target := range []string{"customer_totals", "big", "by_region", "order_regions", "region_orders", "code_labels"} {
		e.waitState(c, target, trellis.StateLive)
	}
	check := func() {
		t.Helper()
		e.converge(c)
		e.assertMatches("customer_totals", `SELECT customer_id, sum(amount), count(*) FROM orders GROUP BY customer_id`)
		e.assertMatches("big", `SELECT customer_id, revenue FROM customer_totals WHERE n > 9`)
		e.assertMatches("big", `SELECT customer_id, sum(amount) FROM orders GROUP BY customer_id HAVING count(*) > 9`)
		e.assertMatches("by_region", `SELECT customer_id % 3, sum(amount) FROM orders GROUP BY customer_id % 3`)
		e.assertMatches("(SELECT amount, region FROM order_regions) x", `SELECT o.amount, c.region FROM orders o JOIN customers c ON o.customer_id = c.id`)
		e.assertMatches("region_orders", `SELECT c.region, count(*) FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.region`)
		e.assertMatches("code_labels", `SELECT code, upper(label) FROM codes`)
	}
	check()

	e.exec(`INSERT INTO orders SELECT g, 1 + g % 7, g FROM generate_series(201, 260) g`)
	e.exec(`UPDATE orders SET customer_id = 3 WHERE id % 10 = 0`) // orders change group
	e.exec(`DELETE FROM orders WHERE customer_id = 5`)            // a group goes
	e.exec(`UPDATE customers SET region = 'moved' WHERE id IN (1, 2)`)
	e.exec(`UPDATE codes SET code = code || 'x' WHERE code IN ('c1', 'c2')`) // key changes
	e.exec(`UPDATE codes SET label = NULL WHERE code = 'c3'`)
	e.exec(`DELETE FROM codes WHERE code = 'c4'`)
	check()
	e.exec(`DELETE FROM orders`)
	e.exec(`INSERT INTO orders SELECT g, 1 + g % 4, 2 * g FROM generate_series(1, 50) g`)
	check()
}

// What a chain cannot read is refused with CodeValidation, and nothing is
// created: a table keyed only by a unique index over nullable columns, and
// a target whose key may be NULL under a FULL JOIN (with EXISTS it is
// accepted since decision 0064). A projection of such a
// target (a GROUP BY target: a nullable column, an expression, a LEFT JOIN
// grouped by the joined side; a LEFT JOIN target) is accepted since
// decision 0054, a join with one as its joined table or of three tables
// since 0062, keyed by its key, NULL parts and all
// (TestChainsOverNullableKeys).
func TestChainsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE loose (code text UNIQUE, v int)`)
	e.exec(`CREATE TABLE r (i int PRIMARY KEY, g int)`)
	e.exec(`CREATE TABLE s (i int PRIMARY KEY, j int NOT NULL)`)
	e.exec(`INSERT INTO r VALUES (1, 1), (2, NULL)`)
	e.exec(`INSERT INTO s VALUES (1, 10)`)
	for _, d := range []string{
		`TRANSFORM with_null FROM r SELECT g AS g, count(*) AS n GROUP BY g`,
		`TRANSFORM by_expr FROM r SELECT i % 2 AS m, count(*) AS n GROUP BY i % 2`,
		`TRANSFORM oj FROM r LEFT JOIN s ON r.i = s.i SELECT s.j AS sj`,
		`TRANSFORM ojg FROM r LEFT JOIN s ON r.i = s.i SELECT s.j AS sj, count(*) AS n GROUP BY s.j`,
	} {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	for _, target := range []string{"with_null", "by_expr", "oj", "ojg"} {
		e.waitState(c, target, trellis.StateLive)
	}

	for stmt, want := range map[string]string{
		`TRANSFORM a FROM loose SELECT v AS v`:                            "nor a unique index over NOT NULL columns",
		`TRANSFORM d FROM nonesuch SELECT x AS x`:                         "does not exist",
		`TRANSFORM f FROM ojg FULL JOIN s ON s.i = ojg.n SELECT s.j AS j`: "reading public.ojg, whose key column sj may be NULL",
	} {
		_, err := c.Define(e.ctx, stmt)
		require.Error(t, err, stmt)
		require.Contains(t, err.Error(), want, stmt)
		if want != "does not exist" {
			require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), stmt)
		}
	}
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, defs, 4, "nothing was created by the refused statements")
	// Their projections are accepted (decision 0054), keyed by the key
	// that may be NULL: with_null's NULL group is a row of with_null_n.
	for stmt, want := range map[string]string{
		`TRANSFORM with_null_n FROM with_null SELECT n AS n`: `SELECT g, n FROM with_null`,
		`TRANSFORM oj_sj FROM oj SELECT sj AS sj`:            `SELECT r_i, s_i, sj FROM oj`,
		`TRANSFORM by_expr_n FROM by_expr SELECT n AS n`:     `SELECT m, n FROM by_expr`,
		// As the joined table of a join of two tables (decision 0062).
		`TRANSFORM b FROM s JOIN with_null w ON w.g = s.j SELECT w.n AS n`: `SELECT s.i, w.g, w.n FROM s JOIN with_null w ON w.g = s.j`,
		`TRANSFORM c FROM s JOIN oj ON oj.sj = s.j SELECT oj.r_i AS ri`:    `SELECT s.i, oj.r_i, oj.s_i FROM s JOIN oj ON oj.sj = s.j`,
		// In a join of three tables.
		`TRANSFORM e FROM by_expr b JOIN s ON s.i = b.n JOIN r ON r.i = s.j SELECT r.g`: `SELECT b.m, s.i, r.i, r.g FROM by_expr b JOIN s ON s.i = b.n JOIN r ON r.i = s.j`,
	} {
		target, err := c.Define(e.ctx, stmt)
		require.NoError(t, err, stmt)
		e.waitState(c, target, trellis.StateLive)
		e.assertMatches(target, want)
	}
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT n FROM with_null_n WHERE g IS NULL`))
	var notNull bool
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT attnotnull FROM pg_attribute WHERE attrelid = 'with_null'::regclass AND attname = 'g'`).Scan(&notNull))
	require.False(t, notNull, "a refused reader leaves its upstream as it was")
}

// A LEFT JOIN grouped by a column of the joined side: a FROM row that gains
// a partner leaves the NULL group, and one that loses its partner joins it.
func TestLeftJoinGroupedByJoinedSide(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE r (i int PRIMARY KEY, v int)`)
	e.exec(`CREATE TABLE s (i int PRIMARY KEY, j int)`)
	e.exec(`INSERT INTO r VALUES (1, 10), (2, 20), (3, 30)`)
	e.exec(`INSERT INTO s VALUES (1, 100)`)
	_, err := c.Define(e.ctx, `TRANSFORM oj FROM r LEFT JOIN s ON r.i = s.i SELECT s.j AS sj, count(*) AS n, sum(r.v) AS total GROUP BY s.j`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM ojc FROM r LEFT JOIN s ON r.i = s.i SELECT coalesce(s.j, -1) AS sj, count(*) AS n GROUP BY coalesce(s.j, -1)`)
	require.NoError(t, err)
	e.waitState(c, "oj", trellis.StateLive)
	e.waitState(c, "ojc", trellis.StateLive)
	check := func() {
		t.Helper()
		e.converge(c)
		e.assertMatches("oj", `SELECT s.j, count(*), sum(r.v) FROM r LEFT JOIN s ON r.i = s.i GROUP BY s.j`)
		e.assertMatches("ojc", `SELECT coalesce(s.j, -1), count(*) FROM r LEFT JOIN s ON r.i = s.i GROUP BY coalesce(s.j, -1)`)
	}
	check()
	e.exec(`INSERT INTO s VALUES (2, 200)`) // r 2 leaves the NULL group
	check()
	e.exec(`INSERT INTO s VALUES (3, 100)`) // the last unmatched row: the NULL group goes
	check()
	e.exec(`UPDATE s SET i = 9 WHERE i = 1`) // r 1 loses its partner
	check()
	e.exec(`UPDATE s SET i = 1 WHERE i = 9`)
	e.exec(`DELETE FROM s WHERE i = 3`)
	check()
	e.exec(`DELETE FROM s`)
	check()
}

// A join grouped by one side, both sides changed in one transaction (so in
// one page): a FROM row deleted while its partner moved to another row
// leaves its group, and a partner deleted while its FROM row changed group
// too. Found by the differential test (join_group_both_sides_one_page).
func TestJoinGroupBothSidesChangeInOnePage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE a (id int PRIMARY KEY, k text)`)
	e.exec(`CREATE TABLE b (id int PRIMARY KEY, aid int, w int)`)
	e.exec(`INSERT INTO a VALUES (1, 'alice'), (2, 'bob'), (3, 'carol')`)
	e.exec(`INSERT INTO b VALUES (10, 1, 5), (20, 2, 7), (30, 3, 9)`)
	defs := map[string]string{
		"by_a":  `SELECT a.k, count(*), sum(b.w) FROM a JOIN b ON a.id = b.aid GROUP BY a.k`,
		"by_b":  `SELECT b.w, count(*) FROM a JOIN b ON a.id = b.aid GROUP BY b.w`,
		"lby_a": `SELECT a.k, count(b.id) FROM a LEFT JOIN b ON a.id = b.aid GROUP BY a.k`,
		"lby_b": `SELECT b.w, count(*) FROM a LEFT JOIN b ON a.id = b.aid GROUP BY b.w`,
	}
	for _, s := range []string{
		`TRANSFORM by_a FROM a JOIN b ON a.id = b.aid SELECT a.k AS k, count(*) AS n, sum(b.w) AS sw GROUP BY a.k`,
		`TRANSFORM by_b FROM a JOIN b ON a.id = b.aid SELECT b.w AS w, count(*) AS n GROUP BY b.w`,
		`TRANSFORM lby_a FROM a LEFT JOIN b ON a.id = b.aid SELECT a.k AS k, count(b.id) AS n GROUP BY a.k`,
		`TRANSFORM lby_b FROM a LEFT JOIN b ON a.id = b.aid SELECT b.w AS w, count(*) AS n GROUP BY b.w`,
	} {
		_, err := c.Define(e.ctx, s)
		require.NoError(t, err)
	}
	check := func() {
		t.Helper()
		e.converge(c)
		for target, q := range defs {
			e.assertMatches(target, q)
		}
	}
	for target := range defs {
		e.waitState(c, target, trellis.StateLive)
	}
	check()
	e.exec(`BEGIN; UPDATE b SET aid = 3 WHERE id = 10; DELETE FROM a WHERE id = 1; COMMIT`)
	check()
	e.exec(`BEGIN; UPDATE a SET k = 'dave' WHERE id = 2; DELETE FROM b WHERE id = 20; COMMIT`)
	check()
	e.exec(`BEGIN; UPDATE b SET w = 100 WHERE id = 30; UPDATE a SET id = 4 WHERE id = 3; COMMIT`)
	check()
}
