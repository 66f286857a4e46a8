package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// overShapes are transforms over a set operation written in a derived
// table, a CTE or a view (decision 0044), each with the plain query a
// fresh recompute runs (the target's columns: the key, then the others).
var overShapes = []struct{ stmt, target, recompute string }{
	{`TRANSFORM region_net WITH u AS (SELECT s.region, s.amount FROM sales s WHERE s.amount > 1 UNION ALL SELECT region, -amount FROM refunds)
		FROM u SELECT region, sum(amount) AS total, count(*) AS n GROUP BY region`,
		"region_net", `SELECT region, sum(amount) AS total, count(*) AS n FROM (SELECT region, amount FROM sales WHERE amount > 1 UNION ALL SELECT region, -amount FROM refunds) u GROUP BY region`},
	{`TRANSFORM all_net FROM (SELECT amount FROM sales UNION ALL SELECT amount FROM refunds WHERE region IS NOT NULL) m SELECT count(*) AS n, sum(amount) AS total`,
		"all_net", `SELECT count(*) AS n, sum(amount) AS total FROM (SELECT amount FROM sales UNION ALL SELECT amount FROM refunds WHERE region IS NOT NULL) m`},
	{`TRANSFORM upper_top FROM (SELECT region AS r, amount FROM sales UNION ALL SELECT region, amount FROM refunds UNION ALL SELECT region, amount + 1 FROM sales WHERE amount < 3) m
		SELECT upper(r) AS ur, max(amount) AS top WHERE amount < 6 GROUP BY upper(r) HAVING count(*) > 2`,
		"upper_top", `SELECT upper(r) AS ur, max(amount) AS top FROM (SELECT region AS r, amount FROM sales UNION ALL SELECT region, amount FROM refunds UNION ALL SELECT region, amount + 1 FROM sales WHERE amount < 3) m
		WHERE amount < 6 GROUP BY upper(r) HAVING count(*) > 2`},
	{`TRANSFORM tier_net WITH u AS (SELECT t.tier, s.amount FROM sales s JOIN tiers t ON t.region = s.region UNION ALL SELECT tier, 1 FROM tiers)
		FROM u SELECT tier, sum(amount) AS total GROUP BY tier`,
		"tier_net", `SELECT tier, sum(amount) AS total FROM (SELECT t.tier, s.amount FROM sales s JOIN tiers t ON t.region = s.region UNION ALL SELECT tier, 1 FROM tiers) u GROUP BY tier`},
	{`TRANSFORM by_view FROM all_moves SELECT region, count(*) AS n, sum(amount) AS total GROUP BY region`,
		"by_view", `SELECT region, count(*) AS n, sum(amount) AS total FROM all_moves GROUP BY region`},
	{`TRANSFORM any_region FROM (SELECT region FROM sales UNION ALL SELECT region FROM refunds) r SELECT DISTINCT region`,
		"any_region", `SELECT DISTINCT region FROM (SELECT region FROM sales UNION ALL SELECT region FROM refunds) r`},
	{`TRANSFORM big_moves FROM (SELECT id, amount, region FROM sales UNION ALL SELECT id, amount, region FROM refunds) m SELECT id, amount * 10 AS a10 WHERE amount > 3`,
		"big_moves", `SELECT 1::smallint AS branch, id, amount * 10 AS a10 FROM sales WHERE amount > 3 UNION ALL SELECT 2, id, amount * 10 FROM refunds WHERE amount > 3`},
}

// Aggregates over a UNION ALL in a derived table, CTE or view, and a
// filter of one, stay equal to a fresh recompute under concurrent writers
// to every table, with a second client's drain workers; the self-check
// finds them consistent.
func TestAggregatesOverSetOperations(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE tiers (region text PRIMARY KEY, tier int)`)
	e.exec(`CREATE VIEW all_moves AS SELECT region, amount FROM sales UNION ALL SELECT region, -amount FROM refunds WHERE amount > 0`)
	e.exec(`INSERT INTO sales SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE 'r' || (g % 4) END, g % 7 FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO refunds SELECT g, 'r' || (g % 5), g % 6 FROM generate_series(1, 120) g`)
	e.exec(`INSERT INTO tiers SELECT 'r' || g, g % 3 FROM generate_series(0, 5) g`)
	c := e.engine()
	for _, d := range overShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range overShapes {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "region_net")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.refunds"}, st.Sources)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."sales" USING btree (region);`},
		{Table: "public.refunds", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."refunds" USING btree (region);`},
	}, st.SourceIndexGaps)
	e.exec(`CREATE INDEX ON sales (region)`)
	e.exec(`CREATE INDEX ON refunds (region)`)
	st, err = c.Status(e.ctx, "region_net")
	require.NoError(t, err)
	require.Empty(t, st.SourceIndexGaps)
	st, err = c.Status(e.ctx, "tier_net")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.tiers"}, st.Sources)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.tiers", Columns: []string{"tier"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."tiers" USING btree (tier);`},
	}, st.SourceIndexGaps, "both branches find a group's rows through tiers (sales.region has its index now)")
	e.exec(`CREATE INDEX ON tiers (tier)`)
	st, err = c.Status(e.ctx, "by_view")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.refunds"}, st.Sources)
	st, err = c.Status(e.ctx, "all_net")
	require.NoError(t, err)
	require.Empty(t, st.SourceIndexGaps, "a global aggregate reads every row")
	keyOf := func(target string) [][]string {
		return e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`, target)
	}
	require.Equal(t, [][]string{{"region"}}, keyOf("region_net"))
	require.Equal(t, [][]string{{"ur"}}, keyOf("upper_top"))
	require.Equal(t, [][]string{{"branch"}, {"id"}}, keyOf("big_moves"))

	// Step by step: a row moving between groups, from one branch's table
	// to the other's group, and out of the filter.
	e.exec(`INSERT INTO sales VALUES (5000, 'solo', 5)`)
	e.converge(c)
	require.Equal(t, [][]string{{"5", "1"}}, e.rows(`SELECT total, n FROM region_net WHERE region = 'solo'`))
	e.exec(`INSERT INTO refunds VALUES (5000, 'solo', 2)`)
	e.exec(`UPDATE tiers SET tier = 7 WHERE region = 'r1'`)
	e.converge(c)
	require.Equal(t, [][]string{{"3", "2"}}, e.rows(`SELECT total, n FROM region_net WHERE region = 'solo'`))
	e.exec(`UPDATE sales SET region = 'solo2' WHERE id = 5000`)
	e.converge(c)
	require.Equal(t, [][]string{{"solo", "-2"}, {"solo2", "5"}}, e.rows(`SELECT region, total FROM region_net WHERE region LIKE 'solo%' ORDER BY 1`))
	for _, d := range overShapes {
		e.assertMatches(d.target, d.recompute)
	}

	e.connect(trellis.Options{DrainWorkers: 2})
	writeSalesAndRefunds(t, e, 23, true)
	e.converge(c)
	for _, d := range overShapes {
		e.assertMatches(d.target, d.recompute)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	// A TRUNCATE re-derives everything.
	e.exec(`TRUNCATE refunds`)
	e.exec(`INSERT INTO refunds VALUES (1, 'r1', 1), (2, NULL, 3)`)
	e.converge(c)
	for _, d := range overShapes {
		e.assertMatches(d.target, d.recompute)
	}

	// A projection reads a target whose group may be NULL (decision 0054).
	e.requireProjectionReads(c, `TRANSFORM over_net FROM region_net SELECT total`, "over_net", `SELECT region, total FROM region_net`)
	// Refused: a global aggregate's chain, ALTER TRANSFORM.
	_, err = c.Define(e.ctx, `TRANSFORM over_all FROM all_net SELECT n`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	require.Contains(t, err.Error(), "has one row and no key column")
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM region_net ADD COLUMN max(amount) AS top`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	require.Contains(t, err.Error(), "it aggregates over a set operation")
}

// Aggregates over a UNION ALL go through a schema dump, load, build and
// stay exact (the view's too); a branch's failing expression quarantines
// the aggregate's column, naming the group, and a fixed row releases it.
func TestAggregatesOverSetOperationsDumpAndQuarantine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int NOT NULL);
CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int NOT NULL);
CREATE VIEW moves AS SELECT region, amount FROM sales UNION ALL SELECT region, amount FROM refunds`)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM ratio_sum WITH u AS (SELECT region, 100 / amount AS r FROM sales UNION ALL SELECT region, 10 / amount FROM refunds) FROM u SELECT region, sum(r) AS total, count(*) AS n GROUP BY region`,
			"ratio_sum", `SELECT region, sum(r) AS total, count(*) AS n FROM (SELECT region, 100 / amount AS r FROM sales UNION ALL SELECT region, 10 / amount FROM refunds) u GROUP BY region`},
		{`TRANSFORM move_count FROM moves SELECT region, count(*) AS n GROUP BY region`, "move_count",
			`SELECT region, count(*) AS n FROM moves GROUP BY region`},
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
	e2.exec(`INSERT INTO sales SELECT g, 'r' || (g % 4), g % 9 + 1 FROM generate_series(1, 100) g`)
	e2.exec(`INSERT INTO refunds SELECT g, 'r' || (g % 6), g % 5 + 1 FROM generate_series(1, 60) g`)
	c2 := e2.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	for _, d := range defs {
		e2.waitState(c2, d.target, trellis.StateLive)
		e2.assertMatches(d.target, d.recompute)
	}
	defs2, err := c2.Definitions(e2.ctx)
	require.NoError(t, err)
	sources := map[string][]string{}
	for _, d := range defs2 {
		sources[d.Target] = d.Sources
	}
	require.Equal(t, []string{"public.sales", "public.refunds"}, sources["public.ratio_sum"])
	require.Equal(t, []string{"public.sales", "public.refunds"}, sources["public.move_count"])

	e2.exec(`INSERT INTO refunds VALUES (500, 'r1', 0)`)
	e2.converge(c2)
	q := e2.waitQuarantine(c2, "ratio_sum.total", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	require.Contains(t, q.Error, "division by zero")
	page, err := c2.SampleQuarantined(e2.ctx, "ratio_sum.total", trellis.SampleOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Samples, 1)
	require.Contains(t, page.Samples[0].Key, "r1")
	e2.exec(`UPDATE refunds SET amount = 2 WHERE id = 500`)
	e2.exec(`UPDATE sales SET region = 'gone' WHERE id % 3 = 0`)
	e2.converge(c2)
	_, err = c2.Apply(e2.ctx, `RESUME TRANSFORM ratio_sum.total`)
	require.NoError(t, err)
	e2.waitState(c2, "ratio_sum", trellis.StateLive)
	e2.converge(c2)
	for _, d := range defs {
		e2.assertMatches(d.target, d.recompute)
	}
}
