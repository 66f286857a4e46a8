package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// groupedBranchShapes are UNION ALLs whose branches aggregate (decision
// 0044), each with the plain query a fresh recompute runs.
var groupedBranchShapes = []struct{ stmt, target, recompute string }{
	{`TRANSFORM per_branch FROM sales SELECT region, count(*) AS n, sum(amount) AS total WHERE amount > 1 GROUP BY region
		UNION ALL SELECT region, count(*), sum(-amount) FROM refunds GROUP BY region HAVING count(*) > 1`,
		"per_branch", `SELECT 1::smallint AS branch, region, count(*) AS n, sum(amount) AS total FROM sales WHERE amount > 1 GROUP BY region
		UNION ALL SELECT 2, region, count(*), sum(-amount) FROM refunds GROUP BY region HAVING count(*) > 1`},
	{`TRANSFORM branch_counts FROM sales SELECT count(*) AS n, max(amount) AS top UNION ALL SELECT count(*), max(amount) FROM refunds WHERE amount > 2`,
		"branch_counts", `SELECT 1::smallint AS branch, count(*) AS n, max(amount) AS top FROM sales UNION ALL SELECT 2, count(*), max(amount) FROM refunds WHERE amount > 2`},
	{`TRANSFORM dist_regions FROM sales SELECT DISTINCT region UNION ALL SELECT DISTINCT region FROM refunds WHERE amount < 4`,
		"dist_regions", `SELECT 1::smallint AS branch, region FROM sales GROUP BY region UNION ALL SELECT 2, region FROM refunds WHERE amount < 4 GROUP BY region`},
	{`TRANSFORM big_groups FROM (SELECT region, count(*) AS n FROM sales GROUP BY region UNION ALL SELECT region, count(*) FROM refunds GROUP BY region) g SELECT region, n WHERE n > 5`,
		"big_groups", `SELECT 1::smallint AS branch, region, count(*) AS n FROM sales GROUP BY region HAVING count(*) > 5 UNION ALL SELECT 2, region, count(*) FROM refunds GROUP BY region HAVING count(*) > 5`},
}

// A UNION ALL of aggregating branches (GROUP BY, HAVING, aggregates
// without GROUP BY, DISTINCT) stays equal to a fresh recompute under
// concurrent writers to both tables, with a second client's drain
// workers; the self-check finds it consistent.
func TestUnionAllOfAggregatingBranches(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int)`)
	e.exec(`INSERT INTO sales SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE 'r' || (g % 4) END, g % 7 FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO refunds SELECT g, 'r' || (g % 5), g % 6 FROM generate_series(1, 120) g`)
	c := e.engine()
	for _, d := range groupedBranchShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range groupedBranchShapes {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "per_branch")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.refunds"}, st.Sources)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."sales" USING btree (region);`},
		{Table: "public.refunds", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."refunds" USING btree (region);`},
	}, st.SourceIndexGaps)
	e.exec(`CREATE INDEX ON sales (region)`)
	e.exec(`CREATE INDEX ON refunds (region)`)
	st, err = c.Status(e.ctx, "branch_counts")
	require.NoError(t, err)
	require.Empty(t, st.SourceIndexGaps, "aggregates without GROUP BY read every row of their branch")
	keyOf := func(target string) [][]string {
		return e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`, target)
	}
	require.Equal(t, [][]string{{"branch"}, {"region"}}, keyOf("per_branch"))
	require.Equal(t, [][]string{{"branch"}}, keyOf("branch_counts"))

	// Step by step: a group of one branch, then of the other.
	e.exec(`INSERT INTO sales VALUES (5000, 'solo', 5)`)
	e.converge(c)
	require.Equal(t, [][]string{{"1", "1", "5"}}, e.rows(`SELECT branch, n, total FROM per_branch WHERE region = 'solo'`))
	e.exec(`INSERT INTO refunds VALUES (5000, 'solo', 2), (5001, 'solo', 1)`)
	e.exec(`UPDATE sales SET region = 'solo2' WHERE id = 5000`)
	e.converge(c)
	require.Equal(t, [][]string{{"1", "solo2", "1"}, {"2", "solo", "2"}}, e.rows(`SELECT branch, region, n FROM per_branch WHERE region LIKE 'solo%' ORDER BY 1`))
	for _, d := range groupedBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}

	e.connect(trellis.Options{DrainWorkers: 2})
	writeSalesAndRefunds(t, e, 29, false)
	e.converge(c)
	for _, d := range groupedBranchShapes {
		e.assertMatches(d.target, d.recompute)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}
	e.exec(`TRUNCATE refunds`)
	e.converge(c)
	for _, d := range groupedBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}

	// A projection may read a target whose group may be NULL (decision
	// 0054): keyed by branch and region, NULL region included.
	_, err = c.Define(e.ctx, `TRANSFORM over_branch FROM per_branch SELECT total WHERE n > 0`)
	require.NoError(t, err)
	e.waitState(c, "over_branch", trellis.StateLive)
	overBranch := `SELECT branch, region, total FROM per_branch WHERE n > 0`
	e.assertMatches("over_branch", overBranch)
	e.exec(`INSERT INTO sales VALUES (2001, NULL, 7), (2002, NULL, 8)`)
	e.exec(`INSERT INTO refunds VALUES (2001, NULL, 9)`)
	e.converge(c)
	require.NotEmpty(t, e.rows(`SELECT 1 FROM over_branch WHERE region IS NULL`), "the writes make a NULL group")
	e.assertMatches("over_branch", overBranch)
	e.exec(`UPDATE sales SET region = 'r1' WHERE region IS NULL`)
	e.exec(`DELETE FROM refunds WHERE id = 2001`)
	e.converge(c)
	e.assertMatches("over_branch", overBranch)
	requireConsistent(t, "over_branch", e.selfCheck(c, "over_branch", trellis.SelfCheckStrict))
	// ALTER is refused.
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM per_branch ADD COLUMN max(amount) AS top`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	require.Contains(t, err.Error(), "in every branch")
}

// A branch aggregating without GROUP BY or WHERE reads no column of its
// table to find its one row, so capture keeps no old values of it: a
// deleted row was then no change to any row of the target (the branch's
// row was found only through current rows), and deletes were never
// counted (found by the differential test, seed
// union_all_global_branch_deletes).
func TestGlobalBranchesSeeEveryChange(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE gb_p (id int, part int, s text, PRIMARY KEY (id, part))`)
	e.exec(`CREATE TABLE gb_b (id int PRIMARY KEY, w int, label text)`)
	e.exec(`INSERT INTO gb_p SELECT g, g % 4, 's' || g FROM generate_series(1, 40) g`)
	e.exec(`INSERT INTO gb_b SELECT g, g, 'l' || g FROM generate_series(1, 20) g`)
	c := e.engine()
	defs := map[string]string{
		"gb_counts": `SELECT 1::smallint AS branch, count(*) AS n FROM gb_p UNION ALL SELECT 2, count(*) FROM gb_b`,
		"gb_sums":   `SELECT 1::smallint AS branch, min(s COLLATE "C") AS lo, sum(part) AS total FROM gb_p UNION ALL SELECT 2, min(label COLLATE "C"), sum(w) FROM gb_b WHERE label IS NOT NULL`,
	}
	for _, stmt := range []string{
		`TRANSFORM gb_counts FROM gb_p SELECT count(*) AS n UNION ALL SELECT count(*) FROM gb_b`,
		`TRANSFORM gb_sums FROM gb_p SELECT min(s COLLATE "C") AS lo, sum(part) AS total UNION ALL SELECT min(label COLLATE "C"), sum(w) FROM gb_b WHERE label IS NOT NULL`,
	} {
		_, err := c.Define(e.ctx, stmt)
		require.NoError(t, err, stmt)
	}
	for n, q := range defs {
		e.waitState(c, n, trellis.StateLive)
		e.assertMatches(n, q)
	}
	for _, step := range []string{
		`DELETE FROM gb_p WHERE id % 3 = 0`,
		`DELETE FROM gb_b WHERE id % 4 = 0`,
		`UPDATE gb_p SET part = part + 1 WHERE id % 2 = 0`,
		`UPDATE gb_b SET w = w * 2, label = NULL WHERE id % 5 = 1`,
		`INSERT INTO gb_p SELECT g, 9, 'a' || g FROM generate_series(100, 110) g`,
		`DELETE FROM gb_p WHERE part = 9`,
		`TRUNCATE gb_b`,
		`DELETE FROM gb_p`,
	} {
		e.exec(step)
		e.converge(c)
		for n, q := range defs {
			e.assertMatches(n, q)
		}
	}
	require.Equal(t, [][]string{{"1", "0"}, {"2", "0"}}, e.rows(`SELECT branch, n FROM gb_counts ORDER BY branch`))
}
