package trellis_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// setBranchShapes are set operations whose branches join tables (INNER
// and LEFT JOIN, EXISTS/IN subqueries), each with the plain query a fresh
// recompute runs (the target's columns in order: key, then outputs).
var setBranchShapes = []struct{ stmt, target, recompute string }{
	// UNION ALL: key branch, id (each branch's FROM key), then the joined
	// tables' keys (c_id shared by both branches, o_id of the second).
	{`TRANSFORM sb_ledger FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id, c.region, o.amount
		UNION ALL SELECT r.id, c.region, -r.amount FROM refunds r JOIN orders o ON o.id = r.order_id LEFT JOIN customers c ON c.id = o.customer_id`,
		"sb_ledger", `SELECT 1::smallint AS branch, o.id, c.id AS c_id, NULL::bigint AS o_id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id
		UNION ALL SELECT 2, r.id, c.id, o.id, c.region, -r.amount FROM refunds r JOIN orders o ON o.id = r.order_id LEFT JOIN customers c ON c.id = o.customer_id`},
	{`TRANSFORM sb_flagged FROM customers c SELECT c.id, c.name WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.amount > 5)
		UNION ALL SELECT id, name FROM customers WHERE region = 'r1' AND id NOT IN (SELECT customer_id FROM vip)`,
		"sb_flagged", `SELECT 1::smallint AS branch, c.id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.amount > 5)
		UNION ALL SELECT 2, id, name FROM customers WHERE region = 'r1' AND id NOT IN (SELECT customer_id FROM vip)`},
	// Without ALL: every output of a joined branch reads one of its tables.
	{`TRANSFORM sb_regions FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.region UNION SELECT region FROM customers WHERE name = 'n1'`,
		"sb_regions", `SELECT c.region FROM orders o JOIN customers c ON c.id = o.customer_id UNION SELECT region FROM customers WHERE name = 'n1'`},
	{`TRANSFORM sb_unrefunded FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT c.region, c.name WHERE o.amount > 2
		EXCEPT SELECT c.region, c.name FROM refunds r JOIN orders o ON o.id = r.order_id JOIN customers c ON c.id = o.customer_id`,
		"sb_unrefunded", `SELECT c.region, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id WHERE o.amount > 2
		EXCEPT SELECT c.region, c.name FROM refunds r JOIN orders o ON o.id = r.order_id JOIN customers c ON c.id = o.customer_id`},
	{`TRANSFORM sb_statuses FROM orders o SELECT o.status WHERE o.customer_id IN (SELECT id FROM customers WHERE region = 'r2')
		INTERSECT SELECT o.status FROM refunds r JOIN orders o ON o.id = r.order_id WHERE r.amount > 1`,
		"sb_statuses", `SELECT o.status FROM orders o WHERE o.customer_id IN (SELECT id FROM customers WHERE region = 'r2')
		INTERSECT SELECT o.status FROM refunds r JOIN orders o ON o.id = r.order_id WHERE r.amount > 1`},
}

// writeSetBranchSources writes orders, customers, refunds and vip at
// random: inserts, moves of join columns, NULLs, key changes, deletes,
// several statements per transaction, some rolled back.
func writeSetBranchSources(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	nullable := func(n int) any {
		if r.IntN(10) == 0 {
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
			for n := 1 + r.IntN(3); n > 0; n-- {
				var q string
				var args []any
				switch r.IntN(12) {
				case 0, 1:
					q, args = `INSERT INTO orders VALUES ($1, $2, $3, 's' || $4::int) ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount`, []any{r.Int64N(300), nullable(40), r.IntN(9), r.IntN(4)}
				case 2:
					q, args = `UPDATE orders SET customer_id = $2, status = 's' || $3::int WHERE id = $1`, []any{r.Int64N(300), nullable(40), r.IntN(4)}
				case 3:
					q, args = `DELETE FROM orders WHERE id = $1`, []any{r.Int64N(300)}
				case 4:
					q, args = `UPDATE orders SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM orders WHERE id = $2)`, []any{r.Int64N(300), r.Int64N(300)}
				case 5:
					q, args = `INSERT INTO customers VALUES ($1, 'r' || $2::int, 'n' || $3::int) ON CONFLICT (id) DO UPDATE SET region = EXCLUDED.region`, []any{r.IntN(40), nullable(5), r.IntN(4)}
				case 6:
					q, args = `UPDATE customers SET region = 'r' || $2::int, name = 'n' || $3::int WHERE id = $1`, []any{r.IntN(40), r.IntN(5), r.IntN(4)}
				case 7:
					q, args = `DELETE FROM customers WHERE id = $1`, []any{r.IntN(40)}
				case 8:
					q, args = `UPDATE customers SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM customers WHERE id = $2)`, []any{r.IntN(40), r.IntN(40)}
				case 9:
					q, args = `INSERT INTO refunds VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET order_id = EXCLUDED.order_id`, []any{r.IntN(150), nullable(300), r.IntN(4)}
				case 10:
					q, args = `DELETE FROM refunds WHERE id = $1`, []any{r.IntN(150)}
				case 11:
					if r.IntN(2) == 0 {
						q, args = `DELETE FROM vip WHERE customer_id = $1`, []any{r.IntN(40)}
					} else {
						q, args = `INSERT INTO vip VALUES ($1) ON CONFLICT DO NOTHING`, []any{r.IntN(40)}
					}
				}
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return err
				}
			}
			if r.IntN(12) == 0 {
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

func setBranchTables(e *env) {
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text, name text)`)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount int, status text)`)
	e.exec(`CREATE TABLE refunds (id int PRIMARY KEY, order_id bigint, amount int)`)
	e.exec(`CREATE TABLE vip (customer_id int PRIMARY KEY)`)
	e.exec(`INSERT INTO customers SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE 'r' || (g % 5) END, 'n' || (g % 4) FROM generate_series(1, 30) g`)
	e.exec(`INSERT INTO orders SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE g % 35 END, g % 9, 's' || (g % 4) FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO refunds SELECT g, g * 2, g % 4 FROM generate_series(1, 80) g`)
	e.exec(`INSERT INTO vip SELECT g FROM generate_series(1, 30, 3) g`)
}

// Set operations whose branches join tables stay equal to a fresh
// recompute (both ways) under concurrent writers to every table, with a
// second client's drain workers; the strict self-check finds them
// consistent, and Status lists every table of every branch.
func TestSetOperationJoinedBranches(t *testing.T) {
	t.Parallel()
	e := setup(t)
	setBranchTables(e)
	c := e.engine()
	for _, d := range setBranchShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range setBranchShapes {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "sb_ledger")
	require.NoError(t, err)
	require.Equal(t, []string{"public.orders", "public.customers", "public.refunds"}, st.Sources)
	st, err = c.Status(e.ctx, "sb_flagged")
	require.NoError(t, err)
	require.Equal(t, []string{"public.customers", "public.orders", "public.vip"}, st.Sources)
	keyOf := func(target string) [][]string {
		return e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`, target)
	}
	require.Equal(t, [][]string{{"branch"}, {"id"}, {"c_id"}, {"o_id"}}, keyOf("sb_ledger"))
	require.Equal(t, [][]string{{"region"}, {"name"}}, keyOf("sb_unrefunded"))

	// Step by step: a change of a joined table reaches the rows it joins.
	e.exec(`UPDATE customers SET region = 'moved' WHERE id = 3`)
	e.converge(c)
	for _, d := range setBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}
	e.exec(`DELETE FROM customers WHERE id = 4`)
	e.exec(`UPDATE orders SET customer_id = 5 WHERE customer_id = 6`)
	e.converge(c)
	for _, d := range setBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}

	// A LEFT JOIN's NULL-extended row comes when the joined row leaves
	// (sb_unrefunded's outputs read the table a LEFT JOIN may leave out).
	e.exec(`DELETE FROM orders WHERE customer_id IS NULL OR customer_id NOT IN (SELECT id FROM customers)`)
	e.converge(c)
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM sb_unrefunded WHERE name IS NULL`))
	e.exec(`DELETE FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE amount > 2 LIMIT 1)`)
	e.converge(c)
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT count(*) FROM sb_unrefunded WHERE name IS NULL`))
	for _, d := range setBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}

	// Each branch's ON columns want an index on both tables (the keys'
	// are there); the fixes are accepted and close the gaps.
	st, err = c.Status(e.ctx, "sb_ledger")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{
		{Table: "public.orders", Columns: []string{"customer_id"}, Role: trellis.RoleJoinFrom, Fix: `CREATE INDEX ON "public"."orders" USING btree (customer_id);`},
		{Table: "public.refunds", Columns: []string{"order_id"}, Role: trellis.RoleJoinFrom, Fix: `CREATE INDEX ON "public"."refunds" USING btree (order_id);`},
	}, st.SourceIndexGaps)
	for _, d := range setBranchShapes {
		st, err := c.Status(e.ctx, d.target)
		require.NoError(t, err)
		for _, g := range st.SourceIndexGaps {
			e.exec(g.Fix)
		}
	}
	for _, d := range setBranchShapes {
		st, err := c.Status(e.ctx, d.target)
		require.NoError(t, err)
		require.Empty(t, st.SourceIndexGaps, d.target)
	}

	e.connect(trellis.Options{DrainWorkers: 2})
	e.writeConcurrently(3, 41, 500, writeSetBranchSources)
	e.converge(c)
	for _, d := range setBranchShapes {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}

	// A TRUNCATE of a joined table re-derives everything.
	e.exec(`TRUNCATE refunds`)
	e.exec(`INSERT INTO refunds VALUES (1, 2, 3), (2, NULL, 2)`)
	e.converge(c)
	for _, d := range setBranchShapes {
		e.assertMatches(d.target, d.recompute)
	}
}

// Set operations with joined branches go through a schema dump, load,
// build and stay exact; Definitions lists every table of every branch; a
// joined table's row failing a branch's expression quarantines its column
// (the sample names the branch and FROM key) and a fixed row releases it.
func TestSetOperationJoinedBranchesDumpAndQuarantine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, name text, weight int NOT NULL);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount int NOT NULL);
CREATE INDEX ON orders (customer_id);
CREATE INDEX ON customers (name)`)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM sb_ratio FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id, 100 / c.weight AS r UNION ALL SELECT id, amount FROM orders WHERE amount > 5`, "sb_ratio",
			`SELECT 1::smallint AS branch, o.id, c.id AS c_id, 100 / c.weight AS r FROM orders o JOIN customers c ON c.id = o.customer_id UNION ALL SELECT 2, id, NULL, amount FROM orders WHERE amount > 5`},
		{`TRANSFORM sb_names FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.name INTERSECT SELECT name FROM customers WHERE weight > 1`, "sb_names",
			`SELECT c.name FROM orders o JOIN customers c ON c.id = o.customer_id INTERSECT SELECT name FROM customers WHERE weight > 1`},
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
	e2.exec(`INSERT INTO customers SELECT g, 'n' || (g % 7), g % 4 + 1 FROM generate_series(1, 40) g`)
	e2.exec(`INSERT INTO orders SELECT g, g % 45, g % 9 FROM generate_series(1, 150) g`)
	c2 := e2.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	for _, d := range defs {
		e2.waitState(c2, d.target, trellis.StateLive)
		e2.assertMatches(d.target, d.recompute)
	}
	got, err := c2.Definitions(e2.ctx)
	require.NoError(t, err)
	sources := map[string][]string{}
	for _, d := range got {
		sources[d.Target] = d.Sources
	}
	require.Equal(t, []string{"public.orders", "public.customers"}, sources["public.sb_ratio"])
	require.Equal(t, []string{"public.orders", "public.customers"}, sources["public.sb_names"])

	// A change of the joined table makes the expression fail.
	e2.exec(`UPDATE customers SET weight = 0 WHERE id = 7`)
	e2.converge(c2)
	q := e2.waitQuarantine(c2, "sb_ratio.r", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	require.Contains(t, q.Error, "division by zero")
	page, err := c2.SampleQuarantined(e2.ctx, "sb_ratio.r", trellis.SampleOptions{Limit: 10})
	require.NoError(t, err)
	require.NotEmpty(t, page.Samples)
	e2.exec(`UPDATE customers SET weight = 2 WHERE id = 7`)
	e2.exec(`UPDATE customers SET name = 'moved' WHERE id % 3 = 0`)
	e2.converge(c2)
	_, err = c2.Apply(e2.ctx, `RESUME TRANSFORM sb_ratio.r`)
	require.NoError(t, err)
	e2.waitState(c2, "sb_ratio", trellis.StateLive)
	e2.converge(c2)
	for _, d := range defs {
		e2.requireLiveAndExact(c2, d.target, d.recompute)
	}
}

// writeChainSources writes orders, refunds and customers at random.
func writeChainSources(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, seed*5+3))
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		var q string
		var args []any
		switch r.IntN(8) {
		case 0, 1:
			q, args = `INSERT INTO orders VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount, customer_id = EXCLUDED.customer_id`, []any{r.Int64N(200), r.IntN(30), r.IntN(9)}
		case 2:
			q, args = `DELETE FROM orders WHERE id = $1`, []any{r.Int64N(200)}
		case 3:
			q, args = `INSERT INTO refunds VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET customer_id = EXCLUDED.customer_id`, []any{r.IntN(80), r.IntN(30), r.IntN(4)}
		case 4:
			q, args = `DELETE FROM refunds WHERE id = $1`, []any{r.IntN(80)}
		case 5:
			q, args = `UPDATE customers SET region = 'r' || $2::int, code = 'k' || $3::int WHERE id = $1`, []any{r.IntN(30), r.IntN(4), r.IntN(6)}
		case 6:
			q, args = `UPDATE customers SET vip = NOT vip WHERE id = $1`, []any{r.IntN(30)}
		case 7:
			q, args = `UPDATE customers SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM customers WHERE id = $2)`, []any{r.IntN(30), r.IntN(30)}
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil && ctx.Err() == nil && !isExpectedWriteConflict(err) {
			return err
		}
		writes.Add(1)
	}
}

// A transform can read a set operation's target when no key column can be
// NULL (each branch fills each with a NOT NULL key or output column of a
// table every row of the branch holds): the chain stays equal to its fresh
// recompute under concurrent writers with two clients' drain workers.
// Otherwise it is refused naming the key column.
func TestChainsOverSetOperations(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text NOT NULL, code text NOT NULL, vip bool NOT NULL, note text);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount int NOT NULL);
CREATE TABLE refunds (id bigint PRIMARY KEY, customer_id int, amount int NOT NULL);
CREATE INDEX ON orders (customer_id); CREATE INDEX ON refunds (customer_id); CREATE INDEX ON customers (code);
INSERT INTO customers SELECT g, 'r' || (g % 4), 'k' || (g % 6), g % 3 = 0 FROM generate_series(0, 29) g;
INSERT INTO orders SELECT g, g % 30, g % 9 FROM generate_series(1, 150) g;
INSERT INTO refunds SELECT g, (g * 7) % 30, g % 4 FROM generate_series(1, 60) g`)
	c := e.engine()
	for _, stmt := range []string{
		`TRANSFORM sbc_u FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id, c.region, o.amount
			UNION ALL SELECT r.id, c.region, -r.amount FROM refunds r JOIN customers c ON c.id = r.customer_id`,
		`TRANSFORM sbc_by_region FROM sbc_u SELECT region, sum(amount) AS total, count(*) AS n GROUP BY region`,
		`TRANSFORM sbc_d FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.code INTERSECT SELECT code FROM customers WHERE vip`,
		`TRANSFORM sbc_over_d FROM sbc_d SELECT code, length(code) AS len`,
		`TRANSFORM sbc_left FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT o.id, o.amount UNION ALL SELECT id, amount FROM refunds`,
		`TRANSFORM sbc_note FROM customers SELECT note UNION SELECT code FROM customers WHERE vip`,
	} {
		_, err := c.Define(e.ctx, stmt)
		require.NoError(t, err, stmt)
	}
	uRec := `SELECT 1::smallint AS branch, o.id, c.id AS c_id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id
		UNION ALL SELECT 2, r.id, c.id, c.region, -r.amount FROM refunds r JOIN customers c ON c.id = r.customer_id`
	dRec := `SELECT c.code FROM orders o JOIN customers c ON c.id = o.customer_id INTERSECT SELECT code FROM customers WHERE vip`
	chains := []struct{ target, recompute string }{
		{"sbc_u", uRec},
		{"sbc_by_region", `SELECT region, sum(amount) AS total, count(*) AS n FROM (` + uRec + `) u GROUP BY region`},
		{"sbc_d", dRec},
		{"sbc_over_d", `SELECT code, length(code) AS len FROM (` + dRec + `) d`},
	}
	for _, d := range chains {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	// A projection reads a target whose key may be NULL (LEFT JOIN's c_id
	// here is NULL in the refunds branch; an output that may be NULL), as an
	// aggregate does (decisions 0049, 0054); the writers below move them.
	for _, d := range []struct{ stmt, target, recompute string }{
		{`TRANSFORM sbc_left_rows FROM sbc_left SELECT amount`, "sbc_left_rows", `SELECT branch, id, c_id, amount FROM sbc_left`},
		{`TRANSFORM sbc_note_rows FROM sbc_note SELECT length(note) AS len`, "sbc_note_rows", `SELECT note, length(note) FROM sbc_note`},
	} {
		e.requireProjectionReads(c, d.stmt, d.target, d.recompute)
		chains = append(chains, struct{ target, recompute string }{d.target, d.recompute})
	}

	e.exec(`CREATE INDEX ON sbc_u (region)`)
	e.connect(trellis.Options{DrainWorkers: 2})
	e.writeConcurrently(3, 7, 400, writeChainSources)
	e.converge(c)
	e.converge(c) // a chain's upstream writes are changes of its own
	for _, d := range chains {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
}
