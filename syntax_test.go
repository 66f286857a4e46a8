package trellis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// syntaxShapes are definitions in the everyday syntax of issue 11 (`*`,
// outputs without AS, comma joins, USING, DISTINCT, HAVING) over the
// concurrency tests' sources, each with the plain query its target must
// equal, column for column.
var syntaxShapes = []struct{ stmt, target, recompute string }{
	{"TRANSFORM items_star FROM items SELECT *", "items_star", "SELECT id, v, note FROM items"},
	{"TRANSFORM items_bare FROM items i SELECT i.v, upper(note), note::varchar WHERE v > 5", "items_bare",
		"SELECT id, v, upper(note) AS upper, note::varchar AS note FROM items WHERE v > 5"},
	{"TRANSFORM item_owner_comma FROM items i, owners o SELECT i.id AS item, o.name, i.note WHERE o.id = i.v AND o.team <> 3", "item_owner_comma",
		"SELECT i.id AS item, o.id AS o_id, o.name, i.note FROM items i JOIN owners o ON o.id = i.v WHERE o.team <> 3"},
	{"TRANSFORM item_owner_using FROM items LEFT JOIN owners USING (id) SELECT *", "item_owner_using",
		"SELECT items.id, owners.id AS owners_id, v, note, name, team FROM items LEFT JOIN owners USING (id)"},
	{"TRANSFORM item_notes_distinct FROM items SELECT DISTINCT note, v % 3 AS m", "item_notes_distinct",
		"SELECT DISTINCT note, v % 3 AS m FROM items"},
	{"TRANSFORM owner_teams_used FROM items i JOIN owners o ON o.id = i.v SELECT DISTINCT o.team", "owner_teams_used",
		"SELECT DISTINCT o.team FROM items i JOIN owners o ON o.id = i.v"},
	{"TRANSFORM busy_notes FROM items SELECT note, count(*) AS n, sum(v) GROUP BY note HAVING count(*) > 1", "busy_notes",
		"SELECT note, count(*) AS n, sum(v) AS sum FROM items GROUP BY note HAVING count(*) > 1"},
	{"TRANSFORM busy_teams FROM items i JOIN owners o ON o.id = i.v SELECT o.team, count(*) AS n GROUP BY o.team HAVING sum(i.v) > 3000", "busy_teams",
		"SELECT o.team, count(*) AS n FROM items i JOIN owners o ON o.id = i.v GROUP BY o.team HAVING sum(i.v) > 3000"},
}

// The everyday syntax under random concurrent writes, with the drain
// workers of two clients: every target ends equal to a fresh recompute,
// a self-check agrees, and Definitions and Status list every source.
func TestEverydaySyntaxUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createShapeSources(e)
	staging := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, s := range syntaxShapes {
		_, err := staging.Define(e.ctx, s.stmt)
		require.NoError(t, err, s.stmt)
	}
	for _, s := range syntaxShapes {
		e.waitState(staging, s.target, trellis.StateLive)
		e.assertMatches(s.target, s.recompute)
	}
	// A comma join needs the same source indexes as the JOIN it stands for.
	st, err := staging.Status(e.ctx, "item_owner_comma")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{{Table: "public.items", Columns: []string{"v"}, Role: trellis.RoleJoinFrom,
		Fix: `CREATE INDEX ON "public"."items" USING btree (v);`}}, st.SourceIndexGaps)
	st, err = staging.Status(e.ctx, "busy_notes")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{{Table: "public.items", Columns: []string{"note"}, Role: trellis.RoleGroupBy,
		Fix: `CREATE INDEX ON "public"."items" USING btree (note);`}}, st.SourceIndexGaps)
	for _, s := range syntaxShapes {
		e.fixIndexGaps(staging, s.target)
	}

	w := e.startWriters(3, 40)
	require.Eventually(t, func() bool { return w.writes.Load() > 300 }, time.Minute, 10*time.Millisecond)
	w.stop(t)
	e.converge(staging)
	for _, s := range syntaxShapes {
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
	require.ElementsMatch(t, []string{"public.items", "public.owners"}, sources["public.item_owner_comma"])
	require.ElementsMatch(t, []string{"public.items", "public.owners"}, sources["public.item_owner_using"])
	require.ElementsMatch(t, []string{"public.items"}, sources["public.items_star"])
	st, err = staging.Status(e.ctx, "item_owner_using")
	require.NoError(t, err)
	require.Equal(t, []string{"public.items", "public.owners"}, st.Sources)

}

// What the everyday syntax cannot say is refused with CodeValidation
// naming it; nothing is created.
func TestEverydaySyntaxRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE a (id int PRIMARY KEY, x int, name text)`)
	e.exec(`CREATE TABLE b (id int PRIMARY KEY, x int, name text)`)
	e.exec(`CREATE TABLE c (id int PRIMARY KEY, x int)`)
	c := e.engine()
	for _, tc := range []struct{ stmt, msg string }{
		{"TRANSFORM t FROM a JOIN b ON a.x = b.x SELECT *", "duplicate output column name id"},
		{"TRANSFORM t FROM a, b SELECT a.name WHERE a.x > b.x", "needs an equality of a column of a and a column of b in WHERE"},
		{"TRANSFORM t FROM a, b SELECT a.name", "needs an equality"},
		{"TRANSFORM t FROM a, b, c SELECT a.name WHERE a.x = b.x", "needs an equality"},
		{"TRANSFORM t FROM a JOIN b USING (nope) SELECT a.name", "USING column nope is not a column of a"},
		{"TRANSFORM t FROM a SELECT x + 1", "?column?"},
		{"TRANSFORM t FROM a SELECT DISTINCT ON (x) x, name", "DISTINCT ON without ORDER BY"},
		{"TRANSFORM t FROM a LEFT JOIN (b JOIN c ON c.x = b.x) ON b.x = a.x SELECT a.name", "a LEFT JOIN of a parenthesized inner join is not supported"},
		{"TRANSFORM t FROM a SELECT q.*", "q.* names no table"},
	} {
		_, err := c.Define(e.ctx, tc.stmt)
		require.Error(t, err, tc.stmt)
		require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), tc.stmt)
		require.Contains(t, err.Error(), tc.msg, tc.stmt)
	}
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, defs)
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 't'`))
}

// The new shapes travel through a schema dump: the loaded database builds
// and maintains them from their dumped definitions.
func TestEverydaySyntaxThroughSchemaDump(t *testing.T) {
	t.Parallel()
	e := setup(t)
	schema := `CREATE TABLE customers (id int PRIMARY KEY, region text);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric, status text);`
	e.exec(schema)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM o_star FROM orders SELECT *`, "o_star", `SELECT id, customer_id, price, status FROM orders`},
		{`TRANSFORM o_lines FROM orders o, customers c SELECT o.id, c.region, o.price WHERE o.customer_id = c.id`, "o_lines",
			`SELECT o.id, c.id AS c_id, c.region, o.price FROM orders o JOIN customers c ON c.id = o.customer_id`},
		{`TRANSFORM o_busy FROM orders SELECT customer_id, count(*) AS n GROUP BY customer_id HAVING count(*) > 3`, "o_busy",
			`SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id HAVING count(*) > 3`},
		{`TRANSFORM o_totals FROM orders SELECT count(*), sum(price) AS revenue`, "o_totals",
			`SELECT count(*), sum(price) AS revenue FROM orders`},
		{`TRANSFORM o_statuses FROM orders SELECT DISTINCT status`, "o_statuses", `SELECT DISTINCT status FROM orders`},
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range defs {
		e.waitState(c, d.target, trellis.StateLive)
	}
	res := e.structureDump(c, nil)

	e2 := e.fresh()
	e2.load(res.SQL)
	e2.exec(`INSERT INTO customers SELECT g, 'r' || (g % 4) FROM generate_series(1, 20) g`)
	e2.exec(`INSERT INTO orders SELECT g, g % 25, g % 50, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'paid' END FROM generate_series(1, 200) g`)
	c2 := e2.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	for _, d := range defs {
		e2.waitState(c2, d.target, trellis.StateLive)
	}
	e2.exec(`UPDATE orders SET customer_id = 3, status = 'moved' WHERE id % 10 = 0`)
	e2.exec(`DELETE FROM orders WHERE id % 11 = 0`)
	e2.converge(c2)
	for _, d := range defs {
		e2.assertMatches(d.target, d.recompute)
	}
}

// ALTER TRANSFORM works on the resolved shapes: a DISTINCT or HAVING
// transform takes a new aggregate and drops a column; the targets stay
// equal to a fresh recompute.
func TestEverydaySyntaxAlter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric, status text)`)
	e.exec(`INSERT INTO orders SELECT g, g % 9, g % 40, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'paid' END FROM generate_series(1, 300) g`)
	c := e.engine()
	for _, s := range []string{
		`TRANSFORM pairs FROM orders SELECT DISTINCT customer_id, status`,
		`TRANSFORM busy FROM orders SELECT customer_id, count(*) AS n, sum(price) GROUP BY customer_id HAVING sum(price) > 600`,
		`TRANSFORM copy FROM orders SELECT *`,
	} {
		_, err := c.Define(e.ctx, s)
		require.NoError(t, err, s)
	}
	for _, tg := range []string{"pairs", "busy", "copy"} {
		e.waitState(c, tg, trellis.StateLive)
	}
	for _, s := range []string{
		`ALTER TRANSFORM pairs ADD COLUMN max(price) AS top`,
		`ALTER TRANSFORM busy ADD COLUMN min(price)`,
		`ALTER TRANSFORM busy DROP COLUMN sum`,
		`ALTER TRANSFORM copy DROP COLUMN status`,
		`ALTER TRANSFORM copy ADD COLUMN upper(status)`,
	} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err, s)
	}
	_, err := c.Apply(e.ctx, `ALTER TRANSFORM pairs ADD COLUMN price AS p`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	for _, tg := range []string{"pairs", "busy", "copy"} {
		e.waitState(c, tg, trellis.StateLive)
	}
	e.exec(`UPDATE orders SET price = price + 100 WHERE id % 4 = 0`)
	e.exec(`DELETE FROM orders WHERE customer_id = 2`)
	e.converge(c)
	e.assertMatches("pairs", `SELECT customer_id, status, max(price) AS top FROM orders GROUP BY customer_id, status`)
	e.assertMatches("busy", `SELECT customer_id, count(*) AS n, min(price) AS min FROM orders GROUP BY customer_id HAVING sum(price) > 600`)
	e.assertMatches("copy", `SELECT id, customer_id, price, upper(status) AS upper FROM orders`)
}
