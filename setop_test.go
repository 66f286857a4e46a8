package trellis_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// setOpShapes are set-operation transforms over sales and refunds, each
// with the plain query a fresh recompute runs (the target's columns in
// its order: the key, then the other outputs).
var setOpShapes = []struct{ stmt, target, recompute string }{
	{`TRANSFORM moves FROM sales s SELECT s.id, s.amount, s.region WHERE s.amount > 2
		UNION ALL SELECT id, -amount, region FROM refunds`,
		"moves", `SELECT 1::smallint AS branch, id, amount, region FROM sales WHERE amount > 2 UNION ALL SELECT 2, id, -amount, region FROM refunds`},
	{`TRANSFORM tagged FROM sales SELECT region, amount * 2 AS twice UNION ALL SELECT region, amount FROM refunds WHERE amount < 5
		UNION ALL SELECT region, amount FROM sales WHERE region = 'r1'`,
		"tagged", `SELECT 1::smallint AS branch, id AS sales_id, NULL::int AS refunds_id, region, amount * 2 AS twice FROM sales
		UNION ALL SELECT 2, NULL, id, region, amount FROM refunds WHERE amount < 5
		UNION ALL SELECT 3, id, NULL, region, amount FROM sales WHERE region = 'r1'`},
	{`TRANSFORM regions_any FROM sales SELECT region UNION SELECT region FROM refunds`,
		"regions_any", `SELECT region FROM sales UNION SELECT region FROM refunds`},
	{`TRANSFORM regions_both FROM sales SELECT region, amount INTERSECT SELECT region, amount FROM refunds`,
		"regions_both", `SELECT region, amount FROM sales INTERSECT SELECT region, amount FROM refunds`},
	{`TRANSFORM regions_only FROM sales SELECT region, amount % 3 AS m WHERE amount > 1 EXCEPT SELECT region, amount % 3 FROM refunds`,
		"regions_only", `SELECT region, amount % 3 AS m FROM sales WHERE amount > 1 EXCEPT SELECT region, amount % 3 FROM refunds`},
	{`TRANSFORM regions_mix FROM sales SELECT region UNION SELECT region FROM refunds WHERE amount > 3 INTERSECT SELECT region FROM sales WHERE amount < 4 EXCEPT SELECT region FROM refunds WHERE amount = 0`,
		"regions_mix", `SELECT region FROM sales UNION SELECT region FROM refunds WHERE amount > 3 INTERSECT SELECT region FROM sales WHERE amount < 4 EXCEPT SELECT region FROM refunds WHERE amount = 0`},
	// Branches of one table read in one scan (decision 0057).
	{`TRANSFORM ids_kept FROM sales SELECT id, amount WHERE amount >= 2 INTERSECT SELECT id, amount FROM sales WHERE region <> 'r2' EXCEPT SELECT id, amount FROM sales WHERE amount = 5`,
		"ids_kept", `SELECT id, amount FROM sales WHERE amount >= 2 INTERSECT SELECT id, amount FROM sales WHERE region <> 'r2' EXCEPT SELECT id, amount FROM sales WHERE amount = 5`},
}

// Set operations stay equal to a fresh recompute under concurrent writers
// to both tables (inserts, moves, NULLs, key changes, deletes), with a
// second client's drain workers; the self-check finds them consistent.
func TestSetOperations(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int)`)
	e.exec(`CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int)`)
	e.exec(`INSERT INTO sales SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE 'r' || (g % 4) END, g % 7 FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO refunds SELECT g, 'r' || (g % 5), g % 6 FROM generate_series(1, 120) g`)
	c := e.engine()
	for _, d := range setOpShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range setOpShapes {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "moves")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.refunds"}, st.Sources)
	require.Empty(t, st.SourceIndexGaps, "UNION ALL finds its rows by each table's key")
	st, err = c.Status(e.ctx, "tagged")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.refunds"}, st.Sources, "a table read by two branches is listed once")
	st, err = c.Status(e.ctx, "regions_both")
	require.NoError(t, err)
	require.Equal(t, []string{"public.sales", "public.refunds"}, st.Sources)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.sales", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."sales" USING btree (region);`},
		{Table: "public.refunds", Columns: []string{"region"}, Role: trellis.RoleGroupBy, Fix: `CREATE INDEX ON "public"."refunds" USING btree (region);`},
	}, st.SourceIndexGaps)
	e.exec(`CREATE INDEX ON sales (region)`)
	e.exec(`CREATE INDEX ON refunds (region)`)
	st, err = c.Status(e.ctx, "regions_both")
	require.NoError(t, err)
	require.Empty(t, st.SourceIndexGaps)
	keyOf := func(target string) [][]string {
		return e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`, target)
	}
	require.Equal(t, [][]string{{"branch"}, {"id"}}, keyOf("moves"))
	require.Equal(t, [][]string{{"branch"}, {"sales_id"}, {"refunds_id"}}, keyOf("tagged"))
	require.Equal(t, [][]string{{"region"}, {"amount"}}, keyOf("regions_both"))

	// Step by step: a row moving out of a distinct row leaves it, one
	// moving in makes it, in every form.
	e.exec(`INSERT INTO sales VALUES (5000, 'solo', 5)`)
	e.converge(c)
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT count(*) FROM regions_any WHERE region = 'solo'`))
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT count(*) FROM regions_only WHERE region = 'solo'`))
	e.exec(`INSERT INTO refunds VALUES (5000, 'solo', 5)`)
	e.converge(c)
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM regions_only WHERE region = 'solo'`))
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT count(*) FROM regions_both WHERE region = 'solo'`))
	e.exec(`UPDATE sales SET region = 'solo2' WHERE id = 5000`)
	e.exec(`UPDATE refunds SET region = 'solo3' WHERE id = 5000`)
	e.converge(c)
	require.Equal(t, [][]string{{"solo2"}, {"solo3"}}, e.rows(`SELECT region FROM regions_any WHERE region LIKE 'solo%' ORDER BY 1`))
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM regions_both WHERE region LIKE 'solo%'`))
	require.Equal(t, [][]string{{"1", "5000"}, {"2", "5000"}}, e.rows(`SELECT branch, id FROM moves WHERE id = 5000 ORDER BY 1`))
	for _, d := range setOpShapes {
		e.assertMatches(d.target, d.recompute)
	}

	e.connect(trellis.Options{DrainWorkers: 2})
	writeSalesAndRefunds(t, e, 17, false)
	e.converge(c)
	for _, d := range setOpShapes {
		e.assertMatches(d.target, d.recompute)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	// A TRUNCATE re-derives everything.
	e.exec(`TRUNCATE refunds`)
	e.exec(`INSERT INTO refunds VALUES (1, 'r1', 1), (2, NULL, 3)`)
	e.converge(c)
	for _, d := range setOpShapes {
		e.assertMatches(d.target, d.recompute)
	}

	// A projection over a set operation's target whose key may be NULL
	// (tagged's sales_id is NULL in the refunds rows) is keyed by that key
	// (decision 0054).
	_, err = c.Define(e.ctx, `TRANSFORM over_tagged FROM tagged SELECT twice`)
	require.NoError(t, err)
	e.waitState(c, "over_tagged", trellis.StateLive)
	e.assertMatches("over_tagged", `SELECT branch, sales_id, refunds_id, twice FROM tagged`)
	// Refused: ALTER TRANSFORM.
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM moves ADD COLUMN region AS r2`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	require.Contains(t, err.Error(), "in every branch")
}

// A set operation's definitions go through a schema dump, load, build and
// stay exact; a branch's failing expression quarantines its column (the
// sample names the branch and key) and a fixed row releases it.
func TestSetOperationsDumpAndQuarantine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, region text, amount int NOT NULL);
CREATE TABLE refunds (id int PRIMARY KEY, region text, amount int NOT NULL)`)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM ratios FROM sales SELECT id, 100 / amount AS r UNION ALL SELECT id, 10 / amount FROM refunds`, "ratios",
			`SELECT 1::smallint AS branch, id, 100 / amount AS r FROM sales UNION ALL SELECT 2, id, 10 / amount FROM refunds`},
		{`TRANSFORM shared FROM sales SELECT region INTERSECT SELECT region FROM refunds WHERE amount > 1`, "shared",
			`SELECT region FROM sales INTERSECT SELECT region FROM refunds WHERE amount > 1`},
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
	var found bool
	for _, d := range defs2 {
		if d.Target == "public.ratios" {
			found = true
			require.Equal(t, []string{"public.sales", "public.refunds"}, d.Sources)
		}
	}
	require.True(t, found, "%+v", defs2)

	e2.exec(`INSERT INTO refunds VALUES (500, 'r1', 0)`)
	e2.converge(c2)
	q := e2.waitQuarantine(c2, "ratios.r", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	require.Contains(t, q.Error, "division by zero")
	page, err := c2.SampleQuarantined(e2.ctx, "ratios.r", trellis.SampleOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Samples, 1)
	require.Contains(t, page.Samples[0].Key, "500")
	e2.exec(`UPDATE refunds SET amount = 2 WHERE id = 500`)
	e2.exec(`UPDATE sales SET region = 'gone' WHERE id % 3 = 0`)
	e2.converge(c2)
	_, err = c2.Apply(e2.ctx, `RESUME TRANSFORM ratios.r`)
	require.NoError(t, err)
	e2.waitState(c2, "ratios", trellis.StateLive)
	e2.converge(c2)
	for _, d := range defs {
		e2.assertMatches(d.target, d.recompute)
	}
}

// A branch reading a view is read with the definer's rights, as any view
// is: a definer who may read the view but not the table under it is
// refused, naming the table, and nothing is defined; granted SELECT on it,
// the same definition is accepted and lists the view and every table.
func TestSetOperationBranchViewReadWithTheDefinersRights(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	_, url := e.roleURL("definer", fmt.Sprintf("GRANT CREATE ON DATABASE %q TO %%s", db), "GRANT CREATE ON SCHEMA public TO %s")
	role := db + "_definer"
	e.exec(`CREATE TABLE open_t (id int PRIMARY KEY, x int)`)
	e.exec(`CREATE TABLE secret_t (id int PRIMARY KEY, x int)`)
	e.exec(`CREATE VIEW secret_v AS SELECT id, x FROM secret_t WHERE x > 0`)
	e.exec(`INSERT INTO open_t SELECT g, g % 3 FROM generate_series(1, 20) g`)
	e.exec(`INSERT INTO secret_t SELECT g, g % 4 FROM generate_series(1, 20) g`)
	e.exec(fmt.Sprintf(`GRANT SELECT ON open_t, secret_v TO %q`, role))

	m, err := trellis.Connect(e.ctx, trellis.Options{URL: url, Logger: quietLogger()})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Migrate(e.ctx))
	for _, stmt := range []string{
		`TRANSFORM peek FROM open_t SELECT id, x UNION ALL SELECT id, x FROM secret_v`,
		`TRANSFORM peek FROM open_t SELECT x EXCEPT SELECT x FROM secret_v`,
	} {
		_, err = m.Define(e.ctx, stmt)
		require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%s: %v", stmt, err)
		require.Contains(t, err.Error(), "view public.secret_v reads table public.secret_t, which you may not read", stmt)
	}
	defs, err := m.Definitions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, defs)
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM pg_class WHERE relname = 'peek'`), "a refused definition leaves no target")

	e.exec(fmt.Sprintf(`GRANT SELECT ON secret_t TO %q`, role))
	_, err = m.Define(e.ctx, `TRANSFORM peek FROM open_t SELECT x EXCEPT SELECT x FROM secret_v`)
	require.NoError(t, err)
	st, err := m.Status(e.ctx, "peek")
	require.NoError(t, err)
	require.Equal(t, []string{"public.open_t", "public.secret_t"}, st.Sources)
	require.Equal(t, []string{"public.secret_v"}, st.Views)
}

// writeSalesAndRefunds runs three writers of random inserts, updates (of
// region, amount and id) and deletes on sales and refunds, and with tiers
// of updates of tiers' tier too, until they made more than 600 writes, and
// waits for them to stop.
func writeSalesAndRefunds(t *testing.T, e *env, seed uint64, tiers bool) {
	t.Helper()
	tables := []string{"sales", "refunds"}
	if tiers {
		tables = []string{"sales", "refunds", "sales", "refunds", "tiers"}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				table := tables[r.IntN(len(tables))]
				id := r.Int64N(300) + 1
				var err error
				if table == "tiers" {
					_, err = e.db.Exec(e.ctx, `UPDATE tiers SET tier = $2 WHERE region = $1`, fmt.Sprint("r", r.IntN(6)), r.IntN(4))
					if err != nil && !isExpectedWriteConflict(err) {
						t.Error(err)
						return
					}
					writes.Add(1)
					continue
				}
				switch r.IntN(5) {
				case 0:
					_, err = e.db.Exec(e.ctx, `INSERT INTO `+table+` VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount`, id, fmt.Sprint("r", r.IntN(6)), r.IntN(8))
				case 1:
					_, err = e.db.Exec(e.ctx, `UPDATE `+table+` SET region = $2 WHERE id = $1`, id, fmt.Sprint("r", r.IntN(6)))
				case 2:
					_, err = e.db.Exec(e.ctx, `UPDATE `+table+` SET region = NULL, amount = amount + 1 WHERE id = $1`, id)
				case 3:
					_, err = e.db.Exec(e.ctx, `DELETE FROM `+table+` WHERE id = $1`, id)
				case 4:
					_, err = e.db.Exec(e.ctx, `UPDATE `+table+` SET id = id + 1000 WHERE id = $1`, id)
				}
				if err != nil && !isExpectedWriteConflict(err) {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	require.Eventually(t, func() bool { return writes.Load() > 600 }, time.Minute, 10*time.Millisecond)
	close(stop)
	wg.Wait()
}
