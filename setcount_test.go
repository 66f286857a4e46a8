package trellis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// countedShapes are set operations that keep duplicates by count
// (decision 0050): INTERSECT ALL, EXCEPT ALL both ways, a UNION ALL over
// a UNION, a UNION over an EXCEPT ALL, and a joined branch. Each has
// PostgreSQL's own query (multiset) for its rows, numbered as the target
// numbers them (the ordinal of a row value's copies, 1..count).
var countedShapes = []struct{ stmt, target, cols, query string }{
	{`TRANSFORM common FROM sales SELECT region, amount % 3 AS m INTERSECT ALL SELECT region, amount % 3 FROM refunds`,
		"common", "region, m", `SELECT region, amount % 3 AS m FROM sales INTERSECT ALL SELECT region, amount % 3 FROM refunds`},
	{`TRANSFORM left_over FROM sales SELECT region WHERE amount > 1 EXCEPT ALL SELECT region FROM refunds`,
		"left_over", "region", `SELECT region FROM sales WHERE amount > 1 EXCEPT ALL SELECT region FROM refunds`},
	{`TRANSFORM right_over FROM refunds SELECT region, amount EXCEPT ALL SELECT region, amount FROM sales WHERE amount < 6`,
		"right_over", "region, amount", `SELECT region, amount FROM refunds EXCEPT ALL SELECT region, amount FROM sales WHERE amount < 6`},
	{`TRANSFORM any_then_low FROM sales SELECT region UNION SELECT region FROM refunds WHERE amount > 3 UNION ALL SELECT region FROM sales WHERE amount < 2`,
		"any_then_low", "region", `SELECT region FROM sales UNION SELECT region FROM refunds WHERE amount > 3 UNION ALL SELECT region FROM sales WHERE amount < 2`},
	{`TRANSFORM some_left FROM sales SELECT region EXCEPT ALL SELECT region FROM refunds UNION SELECT region FROM refunds WHERE amount = 0`,
		"some_left", "region", `SELECT region FROM sales EXCEPT ALL SELECT region FROM refunds UNION SELECT region FROM refunds WHERE amount = 0`},
	{`TRANSFORM tiered FROM sales s JOIN tiers t ON t.region = s.region SELECT t.tier INTERSECT ALL SELECT amount % 4 FROM refunds`,
		"tiered", "tier", `SELECT t.tier FROM sales s JOIN tiers t ON t.region = s.region INTERSECT ALL SELECT amount % 4 FROM refunds`},
}

// numbered is a counted shape's query with the target's ordinal: the
// copies of a row value numbered 1..count (any order: they are equal).
func numbered(cols, query string) string {
	return "SELECT " + cols + ", row_number() OVER (PARTITION BY " + cols + ") AS ordinal FROM (" + query + ") AS q"
}

// INTERSECT ALL and EXCEPT ALL stay equal to PostgreSQL's own, row for
// row with their copies counted, under concurrent writers to every table
// (inserts, moves, NULLs, key changes, deletes) and two clients' drain
// workers; the strict self-check finds them consistent.
func TestCountedSetOperationsConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE tiers (region text PRIMARY KEY, tier int)`)
	e.exec(`INSERT INTO sales SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE 'r' || (g % 4) END, g % 7 FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO refunds SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE 'r' || (g % 5) END, g % 6 FROM generate_series(1, 120) g`)
	e.exec(`INSERT INTO tiers SELECT 'r' || g, g % 3 FROM generate_series(0, 5) g`)
	c := e.engine()
	for _, d := range countedShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	check := func() {
		t.Helper()
		for _, d := range countedShapes {
			if d.target == "some_left" {
				e.assertMatches(d.target, d.query) // each row once
				continue
			}
			e.assertMatches(d.target, numbered(d.cols, d.query))
			// As multisets, the ordinal left out: PostgreSQL's rows.
			e.assertMatches("(SELECT "+d.cols+" FROM "+d.target+") x", d.query)
		}
	}
	for _, d := range countedShapes {
		e.waitState(c, d.target, trellis.StateLive)
	}
	check()
	require.NotEmpty(t, e.rows(`SELECT 1 FROM common WHERE ordinal > 1`), "the test's data makes copies")

	keyOf := func(target string) [][]string {
		return e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`, target)
	}
	require.Equal(t, [][]string{{"region"}, {"m"}, {"ordinal"}}, keyOf("common"))
	require.Equal(t, [][]string{{"region"}, {"ordinal"}}, keyOf("any_then_low"))
	require.Equal(t, [][]string{{"region"}}, keyOf("some_left"), "a UNION over an EXCEPT ALL keeps each row once")
	st, err := c.Status(e.ctx, "tiered")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.tiers", "public.refunds"}, st.Sources)
	st, err = c.Status(e.ctx, "common")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."sales" USING btree (region);`},
		{Table: "public.refunds", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."refunds" USING btree (region);`},
	}, st.SourceIndexGaps)
	for _, g := range st.SourceIndexGaps {
		e.exec(g.Fix)
	}
	st, err = c.Status(e.ctx, "common")
	require.NoError(t, err)
	require.Empty(t, st.SourceIndexGaps)

	// Step by step: a copy more on one side adds a row, one fewer on the
	// other removes the last copy.
	e.exec(`INSERT INTO sales VALUES (5000, 'solo', 5), (5001, 'solo', 5), (5002, 'solo', 5)`)
	e.exec(`INSERT INTO refunds VALUES (5000, 'solo', 5)`)
	e.converge(c)
	require.Equal(t, [][]string{{"1"}, {"2"}}, e.rows(`SELECT ordinal FROM left_over WHERE region = 'solo' ORDER BY 1`))
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT ordinal FROM common WHERE region = 'solo' ORDER BY 1`))
	e.exec(`INSERT INTO refunds VALUES (5001, 'solo', 2)`)
	e.exec(`UPDATE refunds SET region = 'solo', amount = 8 WHERE id = 1`)
	e.converge(c)
	require.Empty(t, e.rows(`SELECT ordinal FROM left_over WHERE region = 'solo'`))
	require.Equal(t, [][]string{{"1"}, {"2"}, {"3"}}, e.rows(`SELECT ordinal FROM common WHERE region = 'solo' ORDER BY 1`))
	e.exec(`DELETE FROM sales WHERE id = 5002`)
	e.converge(c)
	require.Equal(t, [][]string{{"1"}, {"2"}}, e.rows(`SELECT ordinal FROM common WHERE region = 'solo' ORDER BY 1`))
	check()

	e.connect(trellis.Options{DrainWorkers: 2})
	writeSalesAndRefunds(t, e, 23, true)
	tok, err := c.WatermarkToken(e.ctx)
	require.NoError(t, err)
	if err := c.AwaitConverged(e.ctx, tok, 25*time.Second); err != nil {
		for _, d := range countedShapes {
			st, _ := c.Status(e.ctx, d.target)
			t.Logf("%s: %+v", d.target, st)
			if st.DrainFailure != nil {
				t.Logf("  %+v", *st.DrainFailure)
			}
		}
		t.Fatal(err)
	}
	check()
	for _, d := range countedShapes {
		// Each branch's first output is indexed (an expression too).
		st, err := c.Status(e.ctx, d.target)
		require.NoError(t, err)
		for _, g := range st.SourceIndexGaps {
			e.exec(g.Fix)
		}
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	// A TRUNCATE re-derives everything.
	e.exec(`TRUNCATE refunds`)
	e.exec(`INSERT INTO refunds VALUES (1, 'r1', 1), (2, NULL, 3), (3, NULL, 3)`)
	e.converge(c)
	check()

	// Refused: an output named ordinal, ALTER TRANSFORM.
	_, err = c.Define(e.ctx, `TRANSFORM bad FROM sales SELECT id AS ordinal INTERSECT ALL SELECT id FROM refunds`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	require.Contains(t, err.Error(), "the output name ordinal is taken: the target of INTERSECT ALL has a column ordinal numbering a row's copies")
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM common ADD COLUMN region AS r2`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	require.Contains(t, err.Error(), "in every branch")

	// A projection may read it although its key may be NULL (decision
	// 0054): keyed by region, m and ordinal, NULL region included, it
	// follows rows into and out of the NULL key.
	_, err = c.Define(e.ctx, `TRANSFORM over_common FROM common SELECT m * 2 AS m2 WHERE ordinal < 3`)
	require.NoError(t, err)
	e.waitState(c, "over_common", trellis.StateLive)
	overCommon := `SELECT region, m, ordinal, m * 2 FROM common WHERE ordinal < 3`
	e.assertMatches("over_common", overCommon)
	e.exec(`INSERT INTO sales VALUES (1001, NULL, 3), (1002, NULL, 3), (1003, NULL, 6)`)
	e.exec(`INSERT INTO refunds VALUES (1001, NULL, 0), (1002, NULL, 3)`)
	e.converge(c)
	check()
	require.NotEmpty(t, e.rows(`SELECT 1 FROM over_common WHERE region IS NULL AND ordinal = 2`), "the writes make a second copy under a NULL key")
	e.assertMatches("over_common", overCommon)
	e.exec(`DELETE FROM refunds WHERE id = 1002`)
	e.exec(`UPDATE sales SET region = 'r9' WHERE id = 1001`)
	e.converge(c)
	check()
	e.assertMatches("over_common", overCommon)
	requireConsistent(t, "over_common", e.selfCheck(c, "over_common", trellis.SelfCheckStrict))
}

// overSetShapes aggregate over a set operation other than UNION ALL in a
// derived table, CTE or view (decision 0050): each with PostgreSQL's own
// query.
var overSetShapes = []struct{ stmt, target, query string }{
	{`TRANSFORM region_values WITH u AS (SELECT region, amount FROM sales UNION SELECT region, amount FROM refunds) FROM u SELECT region, count(*) AS n, sum(amount) AS total GROUP BY region`,
		"region_values", `SELECT region, count(*) AS n, sum(amount) AS total FROM (SELECT region, amount FROM sales UNION SELECT region, amount FROM refunds) u GROUP BY region`},
	{`TRANSFORM shared_mods FROM (SELECT region, amount % 3 AS m FROM sales INTERSECT SELECT region, amount % 3 FROM refunds WHERE amount > 0) s SELECT m, count(*) AS n GROUP BY m HAVING count(*) > 1`,
		"shared_mods", `SELECT m, count(*) AS n FROM (SELECT region, amount % 3 AS m FROM sales INTERSECT SELECT region, amount % 3 FROM refunds WHERE amount > 0) s GROUP BY m HAVING count(*) > 1`},
	{`TRANSFORM unrefunded WITH u AS (SELECT region FROM sales EXCEPT ALL SELECT region FROM refunds) FROM u SELECT region, count(*) AS n GROUP BY region`,
		"unrefunded", `SELECT region, count(*) AS n FROM (SELECT region FROM sales EXCEPT ALL SELECT region FROM refunds) u GROUP BY region`},
	{`TRANSFORM regions_seen FROM (SELECT region FROM sales UNION SELECT region FROM refunds) s SELECT count(*) AS n, count(region) AS named`,
		"regions_seen", `SELECT count(*) AS n, count(region) AS named FROM (SELECT region FROM sales UNION SELECT region FROM refunds) s`},
	{`TRANSFORM common_tiers WITH u AS (SELECT t.tier, s.amount FROM sales s JOIN tiers t ON t.region = s.region INTERSECT ALL SELECT tier, 3 FROM tiers) FROM u SELECT tier, count(*) AS n GROUP BY tier`,
		"common_tiers", `SELECT tier, count(*) AS n FROM (SELECT t.tier, s.amount FROM sales s JOIN tiers t ON t.region = s.region INTERSECT ALL SELECT tier, 3 FROM tiers) u GROUP BY tier`},
	{`TRANSFORM amounts_either FROM any_amount SELECT DISTINCT amount % 4 AS q`,
		"amounts_either", `SELECT DISTINCT amount % 4 AS q FROM (SELECT amount FROM sales UNION SELECT amount FROM refunds) v`},
}

// Aggregates over UNION, INTERSECT and EXCEPT (with and without ALL) stay
// equal to PostgreSQL's own under concurrent writers to every table and
// two clients' drain workers; a group is recomputed from every branch's
// rows of it. The strict self-check finds them consistent.
func TestAggregatesOverCountedSetOperationsConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE tiers (region text PRIMARY KEY, tier int)`)
	e.exec(`CREATE VIEW any_amount AS SELECT amount FROM sales UNION SELECT amount FROM refunds`)
	e.exec(`INSERT INTO sales SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE 'r' || (g % 4) END, g % 7 FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO refunds SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE 'r' || (g % 5) END, g % 6 FROM generate_series(1, 120) g`)
	e.exec(`INSERT INTO tiers SELECT 'r' || g, g % 3 FROM generate_series(0, 5) g`)
	c := e.engine()
	for _, d := range overSetShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	check := func() {
		t.Helper()
		for _, d := range overSetShapes {
			e.assertMatches(d.target, d.query)
		}
	}
	for _, d := range overSetShapes {
		e.waitState(c, d.target, trellis.StateLive)
	}
	check()
	st, err := c.Status(e.ctx, "region_values")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.refunds"}, st.Sources)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."sales" USING btree (region);`},
		{Table: "public.refunds", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."refunds" USING btree (region);`},
	}, st.SourceIndexGaps, "a group's rows are found in every branch through its group column")
	st, err = c.Status(e.ctx, "shared_mods")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"amount OPERATOR(pg_catalog.%) 3"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."sales" USING btree (((amount % 3)));`},
		{Table: "public.refunds", Columns: []string{"amount OPERATOR(pg_catalog.%) 3"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."refunds" USING btree (((amount % 3)));`},
	}, st.SourceIndexGaps, "a GROUP BY output that is an expression wants its expression's index in each branch")
	st, err = c.Status(e.ctx, "amounts_either")
	require.NoError(t, err)
	require.Equal(t, []string{"public.any_amount"}, st.Views)

	// Step by step: a value in both branches counts once under UNION.
	e.exec(`INSERT INTO sales VALUES (5000, 'solo', 5)`)
	e.exec(`INSERT INTO refunds VALUES (5000, 'solo', 5)`)
	e.converge(c)
	require.Equal(t, [][]string{{"1", "5"}}, e.rows(`SELECT n, total FROM region_values WHERE region = 'solo'`))
	e.exec(`UPDATE refunds SET amount = 6 WHERE id = 5000`)
	e.converge(c)
	require.Equal(t, [][]string{{"2", "11"}}, e.rows(`SELECT n, total FROM region_values WHERE region = 'solo'`))
	check()

	e.connect(trellis.Options{DrainWorkers: 2})
	writeSalesAndRefunds(t, e, 29, true)
	e.converge(c)
	check()
	for _, d := range overSetShapes {
		st, err := c.Status(e.ctx, d.target)
		require.NoError(t, err)
		for _, g := range st.SourceIndexGaps {
			e.exec(g.Fix)
		}
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}
	e.exec(`TRUNCATE sales`)
	e.exec(`INSERT INTO sales VALUES (1, 'r1', 1), (2, NULL, 3)`)
	e.converge(c)
	check()

	_, err = c.Apply(e.ctx, `ALTER TRANSFORM region_values ADD COLUMN max(amount) AS top`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	require.Contains(t, err.Error(), "aggregates over a set operation")
	e.requireProjectionReads(c, `TRANSFORM over_values FROM region_values SELECT n`, "over_values", `SELECT region, n FROM region_values`)
	e.exec(`INSERT INTO refunds VALUES (9001, NULL, 40), (9002, 'r7', 41)`)
	e.exec(`UPDATE sales SET region = NULL WHERE id = 1`)
	e.converge(c)
	check()
	e.assertMatches("over_values", `SELECT region, n FROM region_values`)
}
