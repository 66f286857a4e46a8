package trellis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// derivedShapes are definitions reading derived tables and CTEs (decision
// 0028) over the concurrency tests' sources, each with the plain SQL query
// its target must equal, column for column: the same query, written as
// PostgreSQL reads it.
var derivedShapes = []struct{ stmt, target, recompute string }{
	{`TRANSFORM d_proj FROM (SELECT id, v * 2 AS dbl, note FROM items WHERE v > 10) s SELECT s.id, s.dbl + 1 AS d, upper(s.note) AS note WHERE s.dbl < 150`, "d_proj",
		`SELECT s.id, s.dbl + 1 AS d, upper(s.note) AS note FROM (SELECT id, v * 2 AS dbl, note FROM items WHERE v > 10) s WHERE s.dbl < 150`},
	{`TRANSFORM d_star FROM (SELECT * FROM items WHERE v % 2 = 0) s SELECT *`, "d_star",
		`SELECT * FROM (SELECT * FROM items WHERE v % 2 = 0) s`},
	{`TRANSFORM d_nested FROM (SELECT * FROM (SELECT id, v FROM items WHERE v > 5) a WHERE v < 90) b SELECT id, v % 7 AS m`, "d_nested",
		`SELECT id, v % 7 AS m FROM (SELECT * FROM (SELECT id, v FROM items WHERE v > 5) a WHERE v < 90) b`},
	{`TRANSFORM d_teams FROM (SELECT o.team, count(*) AS n, sum(i.v) AS total FROM items i JOIN owners o ON o.id = i.v GROUP BY o.team) s
		SELECT team, n, total / n AS mean WHERE total > 100`, "d_teams",
		`SELECT team, n, total / n AS mean FROM (SELECT o.team, count(*) AS n, sum(i.v) AS total FROM items i JOIN owners o ON o.id = i.v GROUP BY o.team) s WHERE total > 100`},
	{`TRANSFORM d_cte WITH big AS (SELECT id, v, note FROM items WHERE v >= 50) FROM big b JOIN owners o ON o.id = b.v SELECT b.id, o.name, b.note`, "d_cte",
		`WITH big AS (SELECT id, v, note FROM items WHERE v >= 50) SELECT b.id, o.id AS o_id, o.name, b.note FROM big b JOIN owners o ON o.id = b.v`},
	{`TRANSFORM d_joined FROM items i JOIN (SELECT id, name FROM owners WHERE team <> 3) o ON o.id = i.v SELECT i.id, o.name`, "d_joined",
		`SELECT i.id, o.id AS o_id, o.name FROM items i JOIN (SELECT id, name FROM owners WHERE team <> 3) o ON o.id = i.v`},
	{`TRANSFORM d_left FROM items i LEFT JOIN (SELECT id, name AS owner FROM owners) o ON o.id = i.v SELECT i.id, o.owner`, "d_left",
		`SELECT i.id, o.id AS o_id, o.owner FROM items i LEFT JOIN (SELECT id, name AS owner FROM owners) o ON o.id = i.v`},
	{`TRANSFORM d_distinct FROM (SELECT DISTINCT v % 7 AS m, v % 3 AS r FROM items) s SELECT m, r`, "d_distinct",
		`SELECT m, r FROM (SELECT DISTINCT v % 7 AS m, v % 3 AS r FROM items) s`},
	{`TRANSFORM d_global WITH wide AS (SELECT count(*) AS n, sum(v) AS total FROM items WHERE v > 20) FROM wide SELECT n, total WHERE n > 0`, "d_global",
		`SELECT n, total FROM (SELECT count(*) AS n, sum(v) AS total FROM items WHERE v > 20) w WHERE n > 0`},
}

// Derived tables and CTEs under random concurrent writes, with the drain
// workers of two clients: every target ends equal to its plain SQL query,
// a self-check agrees, and Definitions and Status list the base tables.
func TestDerivedTablesUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createShapeSources(e)
	staging := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, s := range derivedShapes {
		_, err := staging.Define(e.ctx, s.stmt)
		require.NoError(t, err, s.stmt)
	}
	for _, s := range derivedShapes {
		e.waitState(staging, s.target, trellis.StateLive)
		e.assertMatches(s.target, s.recompute)
	}
	// The inlined join needs the indexes of the join it is.
	st, err := staging.Status(e.ctx, "d_cte")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{{Table: "public.items", Columns: []string{"v"}, Role: trellis.RoleJoinFrom,
		Fix: `CREATE INDEX ON "public"."items" USING btree (v);`}}, st.SourceIndexGaps)
	require.Equal(t, []string{"public.items", "public.owners"}, st.Sources)
	for _, s := range derivedShapes {
		e.fixIndexGaps(staging, s.target)
	}

	w := e.startWriters(3, 70)
	require.Eventually(t, func() bool { return w.writes.Load() > 300 }, time.Minute, 10*time.Millisecond)
	w.stop(t)
	e.converge(staging)
	for _, s := range derivedShapes {
		e.assertMatches(s.target, s.recompute)
		st, err := staging.Status(e.ctx, s.target)
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, s.target)
		require.Nil(t, st.DrainFailure, s.target)
		requireConsistent(t, s.target, e.selfCheck(staging, s.target, trellis.SelfCheckStrict))
	}
	defs, err := staging.Definitions(e.ctx)
	require.NoError(t, err)
	sources := map[string][]string{}
	for _, d := range defs {
		sources[d.Target] = d.Sources
	}
	require.Equal(t, []string{"public.items"}, sources["public.d_nested"])
	require.ElementsMatch(t, []string{"public.items", "public.owners"}, sources["public.d_teams"])
	require.ElementsMatch(t, []string{"public.items", "public.owners"}, sources["public.d_joined"])
}

// A definition reading derived tables travels through a schema dump, and
// ALTER TRANSFORM works on what it was inlined to: a new column reads the
// derived table's base columns by its name; a derived table's own output
// is not a column there, and is refused with CodeValidation.
func TestDerivedTablesDumpAndAlter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	schema := `CREATE TABLE customers (id int PRIMARY KEY, region text);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric, status text);`
	e.exec(schema)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM o_paid FROM (SELECT id, price * 2 AS dbl FROM orders WHERE status = 'paid') p SELECT p.id, p.dbl`, "o_paid",
			`SELECT id, price * 2 AS dbl, price + 1 AS bumped FROM orders WHERE status = 'paid'`},
		{`TRANSFORM o_regions WITH lines AS (SELECT o.price, c.region FROM orders o JOIN customers c ON c.id = o.customer_id)
			FROM (SELECT region, sum(price) AS revenue FROM lines GROUP BY region) r SELECT region, revenue`, "o_regions",
			`SELECT c.region, sum(o.price) AS revenue FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.region`},
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range defs {
		e.waitState(c, d.target, trellis.StateLive)
	}
	_, err := c.Apply(e.ctx, `ALTER TRANSFORM o_paid ADD COLUMN p.price + 1 AS bumped`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM o_paid ADD COLUMN p.dbl + 1 AS nope`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%v", err)
	e.waitState(c, "o_paid", trellis.StateLive)
	res := e.structureDump(c, nil)

	e2 := e.fresh()
	e2.load(res.SQL)
	e2.exec(`INSERT INTO customers SELECT g, 'r' || (g % 4) FROM generate_series(1, 20) g`)
	e2.exec(`INSERT INTO orders SELECT g, g % 25, g % 50, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'paid' END FROM generate_series(1, 200) g`)
	c2 := e2.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	for _, d := range defs {
		e2.waitState(c2, d.target, trellis.StateLive)
	}
	e2.exec(`UPDATE orders SET customer_id = 3, status = 'paid' WHERE id % 10 = 0`)
	e2.exec(`DELETE FROM orders WHERE id % 11 = 0`)
	e2.exec(`UPDATE customers SET region = 'moved' WHERE id % 3 = 0`)
	e2.converge(c2)
	for _, d := range defs {
		e2.assertMatches(d.target, d.recompute)
	}
}

// A derived table's computed column quarantines like any other (its
// expression is the column's), and a transform can read an inlined
// target as it reads any target of its shape.
func TestDerivedTableQuarantineAndChain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL, g int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT i, i % 10, i % 4 FROM generate_series(1, 200) i`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM ratios FROM (SELECT id, 100 / v AS r, v FROM src) s SELECT s.id, s.r, s.v`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM per_g WITH grouped AS (SELECT g, sum(v) AS total, count(*) AS n FROM src GROUP BY g) FROM grouped SELECT g, total, n`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	e.waitState(c, "per_g", trellis.StateLive)
	col, err := c.QuarantineStatus(e.ctx, "ratios.r") // 100 / 0 on every tenth row
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, col.State)
	require.Contains(t, col.Error, "division by zero")
	e.assertMatches("(SELECT id, v FROM ratios) x", `SELECT id, v FROM src`)

	// A chain over the inlined GROUP BY (of a NOT NULL column).
	_, err = c.Define(e.ctx, `TRANSFORM per_g_big FROM per_g SELECT g, total * 2 AS dbl WHERE n > 10`)
	require.NoError(t, err)
	e.waitState(c, "per_g_big", trellis.StateLive)
	e.exec(`UPDATE src SET v = v + 1, g = (g + 1) % 4 WHERE id % 3 = 0`)
	e.exec(`DELETE FROM src WHERE id % 7 = 0`)
	e.converge(c)
	e.assertMatches("per_g", `SELECT g, sum(v) AS total, count(*) AS n FROM src GROUP BY g`)
	e.assertMatches("per_g_big", `SELECT g, sum(v) * 2 AS dbl FROM src GROUP BY g HAVING count(*) > 10`)
	e.assertMatches("(SELECT id, v FROM ratios) x", `SELECT id, v FROM src`)
}
