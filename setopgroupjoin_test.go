package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// joinedBranchShapes are UNION ALLs whose aggregating branches join two
// or three tables (INNER and LEFT), each with the plain query a fresh
// recompute runs: a branch's groups read one of its tables, as GROUP BY
// over a join does.
var joinedBranchShapes = []struct{ stmt, target, recompute string }{
	// Grouped by the joined table's column.
	{`TRANSFORM tier_sales FROM sales s JOIN tiers t ON t.region = s.region SELECT t.tier, count(*) AS n, sum(s.amount) AS total GROUP BY t.tier
		UNION ALL SELECT tier, count(*), sum(tier) FROM tiers GROUP BY tier`,
		"tier_sales", `SELECT 1::smallint AS branch, t.tier, count(*) AS n, sum(s.amount) AS total FROM sales s JOIN tiers t ON t.region = s.region GROUP BY t.tier
		UNION ALL SELECT 2, tier, count(*), sum(tier) FROM tiers GROUP BY tier`},
	// A LEFT JOIN's group may be NULL (refunds without a tier); WHERE
	// and HAVING in the joined branch.
	{`TRANSFORM refund_tiers FROM sales SELECT amount, count(*) AS n, count(region) AS matched GROUP BY amount
		UNION ALL SELECT t.tier, count(*), count(t.region) FROM refunds r LEFT JOIN tiers t ON t.region = r.region WHERE r.amount > 0 GROUP BY t.tier HAVING count(*) > 1`,
		"refund_tiers", `SELECT 1::smallint AS branch, amount, count(*) AS n, count(region) AS matched FROM sales GROUP BY amount
		UNION ALL SELECT 2, t.tier, count(*), count(t.region) FROM refunds r LEFT JOIN tiers t ON t.region = r.region WHERE r.amount > 0 GROUP BY t.tier HAVING count(*) > 1`},
	// Three tables, grouped by the FROM table; a change of either joined
	// table walks to it.
	{`TRANSFORM region_net FROM sales s JOIN tiers t ON t.region = s.region LEFT JOIN refunds r ON r.id = s.id SELECT s.region, count(*) AS n, sum(coalesce(r.amount, 0)) AS back, max(t.tier) AS top GROUP BY s.region
		UNION ALL SELECT region, count(*), sum(amount), min(amount) FROM refunds GROUP BY region`,
		"region_net", `SELECT 1::smallint AS branch, s.region, count(*) AS n, sum(coalesce(r.amount, 0)) AS back, max(t.tier) AS top FROM sales s JOIN tiers t ON t.region = s.region LEFT JOIN refunds r ON r.id = s.id GROUP BY s.region
		UNION ALL SELECT 2, region, count(*), sum(amount), min(amount) FROM refunds GROUP BY region`},
	// Aggregates without GROUP BY over a join: a row per branch.
	{`TRANSFORM joined_totals FROM sales s JOIN refunds r ON r.id = s.id SELECT count(*) AS n, sum(s.amount - r.amount) AS net UNION ALL SELECT count(*), sum(tier) FROM tiers`,
		"joined_totals", `SELECT 1::smallint AS branch, count(*) AS n, sum(s.amount - r.amount) AS net FROM sales s JOIN refunds r ON r.id = s.id UNION ALL SELECT 2, count(*), sum(tier) FROM tiers`},
	// DISTINCT over a join, in both branches.
	{`TRANSFORM dist_tiers FROM sales s JOIN tiers t ON t.region = s.region SELECT DISTINCT t.tier UNION ALL SELECT DISTINCT t.tier FROM refunds r LEFT JOIN tiers t ON t.region = r.region`,
		"dist_tiers", `SELECT 1::smallint AS branch, t.tier FROM sales s JOIN tiers t ON t.region = s.region GROUP BY t.tier
		UNION ALL SELECT 2, t.tier FROM refunds r LEFT JOIN tiers t ON t.region = r.region GROUP BY t.tier`},
}

// A UNION ALL whose aggregating branches join tables stays equal to a
// fresh recompute (both ways) under concurrent writers to every table,
// with a second client's drain workers; a change of any table of a
// branch recomputes the groups its old and new rows reach through the
// join; the strict self-check finds it consistent. It was refused before
// ("GROUP BY, an aggregate or DISTINCT in branch 1, which joins tables").
func TestUnionAllOfJoinedAggregatingBranches(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE tiers (region text PRIMARY KEY, tier int)`)
	e.exec(`INSERT INTO sales SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE 'r' || (g % 7) END, g % 7 FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO refunds SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE 'r' || (g % 8) END, g % 6 FROM generate_series(1, 120) g`)
	e.exec(`INSERT INTO tiers SELECT 'r' || g, g % 3 FROM generate_series(0, 5) g`)
	c := e.engine()
	for _, d := range joinedBranchShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range joinedBranchShapes {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "tier_sales")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.tiers"}, st.Sources)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"region"}, Role: trellis.RoleJoinFrom, Fix: `CREATE INDEX ON "public"."sales" USING btree (region);`},
		{Table: "public.tiers", Columns: []string{"tier"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."tiers" USING btree (tier);`},
	}, st.SourceIndexGaps)
	st, err = c.Status(e.ctx, "region_net")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"region"}, Role: trellis.RoleJoinFrom, Fix: `CREATE INDEX ON "public"."sales" USING btree (region);`},
		{Table: "public.refunds", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."refunds" USING btree (region);`},
	}, st.SourceIndexGaps, "sales(region) serves the join and the groups: listed once")
	st, err = c.Status(e.ctx, "refund_tiers")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.refunds", Columns: []string{"region"}, Role: trellis.RoleJoinFrom, Fix: `CREATE INDEX ON "public"."refunds" USING btree (region);`},
		{Table: "public.sales", Columns: []string{"amount"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."sales" USING btree (amount);`},
		{Table: "public.tiers", Columns: []string{"tier"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."tiers" USING btree (tier);`},
	}, st.SourceIndexGaps)
	e.exec(`CREATE INDEX ON sales (region)`)
	e.exec(`CREATE INDEX ON refunds (region)`)
	e.exec(`CREATE INDEX ON tiers (tier)`)
	e.exec(`CREATE INDEX ON sales (amount)`)
	keyOf := func(target string) [][]string {
		return e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`, target)
	}
	require.Equal(t, [][]string{{"branch"}, {"tier"}}, keyOf("tier_sales"))
	require.Equal(t, [][]string{{"branch"}}, keyOf("joined_totals"))

	// Step by step: a change of the joined table's join column moves
	// sales between groups (old and new values), one of the FROM table's
	// moves it between tiers, a row that leaves the join leaves its group.
	e.exec(`INSERT INTO tiers VALUES ('solo', 7)`)
	e.exec(`INSERT INTO sales VALUES (5000, 'solo', 5), (5001, 'solo', 6)`)
	e.converge(c)
	require.Equal(t, [][]string{{"1", "2", "11"}, {"2", "1", "7"}}, e.rows(`SELECT branch, n, total FROM tier_sales WHERE tier = 7 ORDER BY 1`))
	e.exec(`UPDATE tiers SET region = 'solo2' WHERE region = 'solo'`)
	e.exec(`UPDATE sales SET region = 'solo2' WHERE id = 5001`)
	e.converge(c)
	require.Equal(t, [][]string{{"1", "1", "6"}, {"2", "1", "7"}}, e.rows(`SELECT branch, n, total FROM tier_sales WHERE tier = 7 ORDER BY 1`))
	e.exec(`UPDATE tiers SET tier = 8 WHERE region = 'solo2'`)
	e.converge(c)
	require.Empty(t, e.rows(`SELECT branch FROM tier_sales WHERE tier = 7`))
	e.exec(`DELETE FROM sales WHERE id = 5001`)
	e.converge(c)
	require.Equal(t, [][]string{{"2", "1", "8"}}, e.rows(`SELECT branch, n, total FROM tier_sales WHERE tier = 8 ORDER BY 1`))
	for _, d := range joinedBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}

	e.connect(trellis.Options{DrainWorkers: 2})
	writeSalesAndRefunds(t, e, 31, true)
	e.exec(`UPDATE tiers SET region = 'r6' WHERE region = 'r1'`)
	e.exec(`DELETE FROM tiers WHERE region = 'r2'`)
	e.converge(c)
	for _, d := range joinedBranchShapes {
		e.assertMatches(d.target, d.recompute)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}
	e.exec(`TRUNCATE refunds`)
	e.exec(`INSERT INTO tiers VALUES ('r2', 9)`)
	e.converge(c)
	for _, d := range joinedBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}
}

// mixedBranchShapes are UNION ALLs of aggregating and plain branches
// (decision 0056): a plain branch's rows are keyed by the branch, its
// outputs in the groups' positions and its table's key.
var mixedBranchShapes = []struct{ stmt, target, recompute string }{
	{`TRANSFORM mixed FROM sales SELECT region, count(*) AS n, sum(amount) AS total GROUP BY region
		UNION ALL SELECT region, id, amount FROM refunds WHERE amount > 1`,
		"mixed", `SELECT 1::smallint AS branch, region, NULL::int AS refunds_id, count(*) AS n, sum(amount) AS total FROM sales GROUP BY region
		UNION ALL SELECT 2, region, id, id, amount FROM refunds WHERE amount > 1`},
	{`TRANSFORM mixed_global FROM refunds SELECT amount * 2 AS v UNION ALL SELECT count(*) FROM sales`,
		"mixed_global", `SELECT 1::smallint AS branch, id AS refunds_id, amount * 2 AS v FROM refunds UNION ALL SELECT 2, NULL, count(*) FROM sales`},
	{`TRANSFORM mixed_join FROM sales s JOIN tiers t ON t.region = s.region SELECT t.tier, count(*) AS n GROUP BY t.tier
		UNION ALL SELECT tier, 1 FROM tiers WHERE region <> 'r0'`,
		"mixed_join", `SELECT 1::smallint AS branch, t.tier, NULL::text AS tiers_region, count(*) AS n FROM sales s JOIN tiers t ON t.region = s.region GROUP BY t.tier
		UNION ALL SELECT 2, tier, region, 1 FROM tiers WHERE region <> 'r0'`},
}

// A UNION ALL of aggregating and plain branches stays equal to a fresh
// recompute (both ways) under concurrent writers and a second client's
// drain workers, and the strict self-check agrees. It was refused before
// ("branch 2 of the UNION ALL does not aggregate and another branch
// does").
func TestUnionAllOfAggregatingAndPlainBranches(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE tiers (region text PRIMARY KEY, tier int)`)
	e.exec(`INSERT INTO sales SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE 'r' || (g % 7) END, g % 7 FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO refunds SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE 'r' || (g % 8) END, g % 6 FROM generate_series(1, 120) g`)
	e.exec(`INSERT INTO tiers SELECT 'r' || g, g % 3 FROM generate_series(0, 5) g`)
	c := e.engine()
	for _, d := range mixedBranchShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range mixedBranchShapes {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	keyOf := func(target string) [][]string {
		return e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`, target)
	}
	require.Equal(t, [][]string{{"branch"}, {"region"}, {"refunds_id"}}, keyOf("mixed"))
	require.Equal(t, [][]string{{"branch"}, {"refunds_id"}}, keyOf("mixed_global"))
	st, err := c.Status(e.ctx, "mixed")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."sales" USING btree (region);`},
	}, st.SourceIndexGaps, "the plain branch's rows are found by refunds' key")
	e.exec(`CREATE INDEX ON sales (region)`)
	e.exec(`CREATE INDEX ON tiers (tier)`)

	// Step by step: a plain row moves with its output in the groups'
	// position, leaves with its WHERE, and a group beside it is kept.
	e.exec(`INSERT INTO refunds VALUES (5000, 'solo', 5)`)
	e.exec(`INSERT INTO sales VALUES (5000, 'solo', 3)`)
	e.converge(c)
	require.Equal(t, [][]string{{"1", "<nil>", "1", "3"}, {"2", "5000", "5000", "5"}}, e.rows(`SELECT branch, refunds_id, n, total FROM mixed WHERE region = 'solo' ORDER BY 1`))
	e.exec(`UPDATE refunds SET region = 'solo2' WHERE id = 5000`)
	e.converge(c)
	require.Equal(t, [][]string{{"1", "<nil>", "1", "3"}}, e.rows(`SELECT branch, refunds_id, n, total FROM mixed WHERE region = 'solo' ORDER BY 1`))
	e.exec(`UPDATE refunds SET amount = 0 WHERE id = 5000`)
	e.converge(c)
	require.Empty(t, e.rows(`SELECT branch FROM mixed WHERE region = 'solo2'`))
	for _, d := range mixedBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}

	e.connect(trellis.Options{DrainWorkers: 2})
	writeSalesAndRefunds(t, e, 37, true)
	e.converge(c)
	for _, d := range mixedBranchShapes {
		e.assertMatches(d.target, d.recompute)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}
	e.exec(`TRUNCATE refunds`)
	e.exec(`UPDATE tiers SET region = 'r6' WHERE region = 'r1'`)
	e.converge(c)
	for _, d := range mixedBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}
}
