package trellis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/locks"
)

func TestGroupByAggregates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric, status text, created_at timestamptz)`)
	e.exec(`INSERT INTO orders SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE g % 7 END, g % 50, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'paid' END,
		timestamptz '2026-01-01' + g * interval '5 hours' FROM generate_series(1, 400) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM customer_totals FROM orders SELECT customer_id AS customer_id, sum(price) AS revenue, count(*) AS orders,
		min(price) AS cheapest, max(price) AS dearest, avg(price) AS mean, count(DISTINCT status) AS statuses,
		bool_and(price > 10) AS all_big, string_agg(status, ',' ORDER BY id) AS trail, array_agg(id ORDER BY id) AS ids
		GROUP BY customer_id`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM daily FROM orders SELECT date_trunc('day', created_at) AS day, sum(price) AS revenue WHERE status = 'paid' GROUP BY date_trunc('day', created_at)`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM customer_status FROM orders SELECT customer_id AS customer_id, status AS status, count(*) AS n GROUP BY customer_id, status`)
	require.NoError(t, err)
	byStatus := `SELECT customer_id, status, count(*) AS n FROM orders GROUP BY customer_id, status`
	e.waitState(c, "customer_totals", trellis.StateLive)
	e.waitState(c, "daily", trellis.StateLive)
	e.waitState(c, "customer_status", trellis.StateLive)
	defer func() { e.assertMatches("customer_status", byStatus) }()
	recompute := `SELECT customer_id, sum(price) AS revenue, count(*) AS orders, min(price) AS cheapest, max(price) AS dearest, avg(price) AS mean,
		count(DISTINCT status) AS statuses, bool_and(price > 10) AS all_big, string_agg(status, ',' ORDER BY id) AS trail, array_agg(id ORDER BY id) AS ids
		FROM orders GROUP BY customer_id`
	daily := `SELECT date_trunc('day', created_at) AS day, sum(price) AS revenue FROM orders WHERE status = 'paid' GROUP BY 1`
	e.assertMatches("customer_totals", recompute)
	e.assertMatches("daily", daily)

	// Rows move between groups, groups empty, the NULL group changes.
	e.exec(`UPDATE orders SET customer_id = 100 WHERE customer_id = 3`)
	e.exec(`DELETE FROM orders WHERE customer_id = 5`)
	e.exec(`UPDATE orders SET customer_id = NULL WHERE id = 1`)
	e.exec(`UPDATE orders SET price = price + 1, status = 'open' WHERE id % 4 = 0`)
	e.exec(`UPDATE orders SET created_at = created_at + interval '3 days' WHERE id % 5 = 0`)
	e.exec(`INSERT INTO orders VALUES (1000, 42, 9, 'paid', now())`)
	e.converge(c)
	e.assertMatches("customer_totals", recompute)
	e.assertMatches("daily", daily)
	e.assertMatches("customer_status", byStatus)
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM customer_totals WHERE customer_id = 5`))

	e.exec(`TRUNCATE orders`)
	e.exec(`INSERT INTO orders VALUES (1, 1, 1, 'paid', now())`)
	e.converge(c)
	e.assertMatches("customer_totals", recompute)
	e.assertMatches("daily", daily)
}

func TestJoins(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text, email text UNIQUE)`)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric)`)
	e.exec(`INSERT INTO customers SELECT g, 'r' || (g % 4), 'c' || g || '@x' FROM generate_series(1, 30) g`)
	e.exec(`INSERT INTO orders SELECT g, g % 35, g FROM generate_series(1, 300) g`)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM order_lines FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, c.region AS region, o.price AS price`,
			"order_lines", `SELECT o.id AS order_id, c.id AS c_id, c.region, o.price FROM orders o JOIN customers c ON c.id = o.customer_id`},
		{`TRANSFORM order_lines_left FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, c.id AS customer, c.region AS region`,
			"order_lines_left", `SELECT o.id AS order_id, c.id AS customer, c.region FROM orders o LEFT JOIN customers c ON c.id = o.customer_id`},
		{`TRANSFORM region_revenue FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.region AS region, sum(o.price) AS revenue, count(*) AS n GROUP BY c.region`,
			"region_revenue", `SELECT c.region, sum(o.price) AS revenue, count(*) AS n FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.region`},
		{`TRANSFORM region_revenue_left FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT c.region AS region, sum(o.price) AS revenue GROUP BY c.region WITHOUT SOURCE INDEX`,
			"region_revenue_left", `SELECT c.region, sum(o.price) AS revenue FROM orders o LEFT JOIN customers c ON c.id = o.customer_id GROUP BY c.region`},
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range defs {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}

	e.exec(`UPDATE customers SET region = 'moved' WHERE id = 3`)
	e.exec(`UPDATE orders SET customer_id = 4 WHERE id BETWEEN 10 AND 20`)
	e.exec(`DELETE FROM customers WHERE id = 7`)
	e.exec(`INSERT INTO customers VALUES (33, 'new', 'n@x')`)
	e.exec(`UPDATE customers SET id = 34 WHERE id = 8`)
	e.exec(`DELETE FROM orders WHERE id % 9 = 0`)
	e.exec(`INSERT INTO orders VALUES (5000, 33, 1), (5001, NULL, 2)`)
	e.converge(c)
	for _, d := range defs {
		e.assertMatches(d.target, d.recompute)
	}
}

func TestSourceIndexGaps(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text)`)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric)`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM per_customer FROM orders SELECT customer_id AS customer_id, sum(price) AS total GROUP BY customer_id`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM lines FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.region AS region, o.price AS price WITHOUT SOURCE INDEX`)
	require.NoError(t, err)
	st, err := c.Status(e.ctx, "per_customer")
	require.NoError(t, err)
	require.Equal(t, []trellis.SourceIndexGap{{Table: "public.orders", Columns: []string{"customer_id"}, Role: trellis.RoleGroupBy,
		Fix: `CREATE INDEX ON "public"."orders" USING btree (customer_id);`}}, st.SourceIndexGaps)
	st, err = c.Status(e.ctx, "lines")
	require.NoError(t, err)
	// customers.id is its primary key: only the FROM side lacks an index.
	require.Equal(t, []trellis.SourceIndexGap{{Table: "public.orders", Columns: []string{"customer_id"}, Role: trellis.RoleJoinFrom,
		OptedOut: true, Fix: `CREATE INDEX ON "public"."orders" USING btree (customer_id);`}}, st.SourceIndexGaps)

	// Trellis never creates it; once the user does, the gaps are gone.
	e.exec(st.SourceIndexGaps[0].Fix)
	for _, target := range []string{"per_customer", "lines"} {
		st, err := c.Status(e.ctx, target)
		require.NoError(t, err)
		require.Empty(t, st.SourceIndexGaps, target)
	}
}

func TestChainsCatchUpOnPausedUpstreamColumns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE raw (id int PRIMARY KEY, a int, b int)`)
	e.exec(`INSERT INTO raw SELECT g, g, g * 10 FROM generate_series(1, 100) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM up FROM raw SELECT a + 1 AS a1, b + 1 AS b1`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM mid FROM up SELECT a1 * 2 AS a2`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM low FROM mid SELECT a2 % 7 AS bucket, count(*) AS n GROUP BY a2 % 7`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM other FROM up SELECT b1 AS b1`)
	require.NoError(t, err)
	for _, tg := range []string{"up", "mid", "low", "other"} {
		e.waitState(c, tg, trellis.StateLive)
	}

	res, err := c.Apply(e.ctx, "PAUSE TRANSFORM up.a1")
	require.NoError(t, err)
	require.Equal(t, trellis.Paused{Addresses: []string{"up.a1"}}, res)
	st, err := c.Status(e.ctx, "mid")
	require.NoError(t, err)
	require.Equal(t, trellis.StateCatchingUp, st.State)
	require.Equal(t, []string{"up.a1"}, st.PausedUpstreamColumns)
	st, err = c.Status(e.ctx, "other") // reads only b1
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
	require.Empty(t, st.PausedUpstreamColumns)

	// The paused column stands still, the others keep flowing.
	e.exec(`UPDATE raw SET a = a + 1000, b = b + 1000 WHERE id <= 10`)
	e.converge(c)
	require.Equal(t, [][]string{{"2", "1011"}}, e.rows(`SELECT a1, b1 FROM up WHERE id = 1`))
	require.Equal(t, [][]string{{"1011"}}, e.rows(`SELECT b1 FROM other WHERE id = 1`))

	res, err = c.Apply(e.ctx, "RESUME TRANSFORM up.a1")
	require.NoError(t, err)
	require.Equal(t, trellis.Resumed{Addresses: []string{"up.a1"}}, res)
	e.waitState(c, "up", trellis.StateLive)
	e.waitState(c, "mid", trellis.StateLive)
	e.converge(c)
	e.assertMatches("up", "SELECT id, a + 1 AS a1, b + 1 AS b1 FROM raw")
	e.assertMatches("mid", "SELECT id, (a + 1) * 2 AS a2 FROM raw")
	e.assertMatches("low", "SELECT (a + 1) * 2 % 7 AS bucket, count(*) AS n FROM raw GROUP BY 1")
}

func TestRequestBackfill(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`CREATE TABLE other (id int PRIMARY KEY)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 300) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM copy FROM src SELECT v AS v`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM sums FROM src SELECT v % 3 AS m, sum(v) AS total GROUP BY v % 3`)
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)
	e.waitState(c, "sums", trellis.StateLive)

	// In replica mode (as a replication apply writes), capture triggers do not
	// fire, and nothing about them changes: only a re-read finds these rows.
	e.exec(`BEGIN; SET LOCAL session_replication_role = replica; DELETE FROM src WHERE id > 200; UPDATE src SET v = 0 WHERE id <= 5; COMMIT`)
	require.NoError(t, c.RequestBackfill(e.ctx, "src"))
	st, err := c.Status(e.ctx, "copy")
	require.NoError(t, err)
	require.Equal(t, trellis.StateBackfilling, st.State)
	e.waitState(c, "copy", trellis.StateLive)
	e.waitState(c, "sums", trellis.StateLive)
	e.assertMatches("copy", "SELECT id, v FROM src")
	e.assertMatches("sums", "SELECT v % 3 AS m, sum(v) AS total FROM src GROUP BY 1")

	requireCode(t, c.RequestBackfill(e.ctx, "other"), trellis.CodeValidation)
	requireCode(t, c.RequestBackfill(e.ctx, "missing"), trellis.CodeNotFound)
}

func TestPartitionAttachDetachIsCorrected(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE readings (id int, site int, value int, PRIMARY KEY (id, site)) PARTITION BY LIST (site)`)
	e.exec(`CREATE TABLE readings_1 PARTITION OF readings FOR VALUES IN (1)`)
	e.exec(`CREATE TABLE readings_2 PARTITION OF readings FOR VALUES IN (2)`)
	e.exec(`INSERT INTO readings SELECT g, 1 + g % 2, g FROM generate_series(1, 200) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM reading_values FROM readings SELECT value * 10 AS v10`)
	require.NoError(t, err)
	e.waitState(c, "reading_values", trellis.StateLive)

	// A partition created later is captured, writes to a partition directly too.
	e.exec(`CREATE TABLE readings_3 PARTITION OF readings FOR VALUES IN (3)`)
	e.exec(`INSERT INTO readings_3 VALUES (1, 3, 5)`)
	e.exec(`UPDATE readings SET site = 3 WHERE id = 2 AND site = 1`)
	e.converge(c)
	e.assertMatches("reading_values", "SELECT id, site, value * 10 AS v10 FROM readings")

	// Attaching a table that holds rows, and detaching one, are corrected.
	e.exec(`CREATE TABLE readings_4 (id int, site int, value int, PRIMARY KEY (id, site))`)
	e.exec(`INSERT INTO readings_4 SELECT g, 4, g FROM generate_series(1, 50) g`)
	// Hold builds back (they take the instance's DDL lock shared), so the
	// correction is seen before it is done.
	hold, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	defer hold.Rollback(context.Background())
	_, err = hold.Exec(e.ctx, `SELECT pg_advisory_xact_lock($1)`, locks.DDLKey("trellis"))
	require.NoError(t, err)
	e.exec(`ALTER TABLE readings ATTACH PARTITION readings_4 FOR VALUES IN (4)`)
	e.exec(`ALTER TABLE readings DETACH PARTITION readings_2`)
	st := e.waitCorrecting(c, "reading_values")
	require.Equal(t, trellis.StateBackfilling, st.State)
	var nodes []string
	for _, n := range st.Correcting {
		nodes = append(nodes, n.Node)
		require.False(t, n.Since.IsZero())
	}
	// readings_3 may be listed too: it got a row before the worker noticed it.
	require.Subset(t, []string{"public.readings_2", "public.readings_3", "public.readings_4"}, nodes)
	require.NoError(t, hold.Rollback(e.ctx))
	e.waitState(c, "reading_values", trellis.StateLive)
	e.converge(c)
	e.assertMatches("reading_values", "SELECT id, site, value * 10 AS v10 FROM readings")
	// The corrections' records are cleared once each is done (waited for:
	// the state can go live a moment before the last record goes).
	e.waitStatus(c, "reading_values", func(st *trellis.Status) bool { return len(st.Correcting) == 0 })
	// TRUNCATE of a partition reaches the target too.
	e.exec(`TRUNCATE readings_1`)
	e.converge(c)
	e.assertMatches("reading_values", "SELECT id, site, value * 10 AS v10 FROM readings")
}

func TestAlterShapes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text)`)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric)`)
	e.exec(`INSERT INTO customers SELECT g, 'r' || (g % 3) FROM generate_series(1, 20) g`)
	e.exec(`INSERT INTO orders SELECT g, g % 20 + 1, g FROM generate_series(1, 200) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM per_customer FROM orders SELECT customer_id AS customer_id, sum(price) AS total GROUP BY customer_id`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM lines FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, o.price AS price`)
	require.NoError(t, err)
	e.waitState(c, "per_customer", trellis.StateLive)
	e.waitState(c, "lines", trellis.StateLive)

	_, err = c.Apply(e.ctx, `ALTER TRANSFORM per_customer ADD COLUMN max(price) AS dearest`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM lines ADD COLUMN upper(c.region) AS region`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM per_customer ADD COLUMN price * 2 AS twice`)
	requireCode(t, err, trellis.CodeValidation)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM per_customer DROP COLUMN customer_id`)
	requireCode(t, err, trellis.CodeValidation)
	// What the new column calls and reads is checked as for a definition.
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM per_customer ADD COLUMN sum(price) + price AS mixed`)
	requireCode(t, err, trellis.CodeValidation)
	require.Contains(t, err.Error(), "price must be inside an aggregate")
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM lines ADD COLUMN o.price * random() AS noisy`)
	requireCode(t, err, trellis.CodeValidation)
	require.Contains(t, err.Error(), "random is volatile")
	e.waitState(c, "per_customer", trellis.StateLive)
	e.waitState(c, "lines", trellis.StateLive)
	e.exec(`UPDATE orders SET price = price + 1000 WHERE id % 10 = 0`)
	e.exec(`UPDATE customers SET region = 'x' WHERE id = 2`)
	e.converge(c)
	e.assertMatches("per_customer", `SELECT customer_id, sum(price) AS total, max(price) AS dearest FROM orders GROUP BY customer_id`)
	e.assertMatches("lines", `SELECT o.id AS order_id, c.id AS c_id, o.price, upper(c.region) AS region FROM orders o JOIN customers c ON c.id = o.customer_id`)

	_, err = c.Apply(e.ctx, `ALTER TRANSFORM per_customer DROP COLUMN total`)
	require.NoError(t, err)
	e.exec(`UPDATE orders SET price = 1 WHERE id = 3`)
	e.converge(c)
	e.assertMatches("per_customer", `SELECT customer_id, max(price) AS dearest FROM orders GROUP BY customer_id`)
}

func TestJoinOnSeveralColumns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE prices (sku text, store int, price numeric, PRIMARY KEY (sku, store))`)
	e.exec(`CREATE TABLE sales (id bigint PRIMARY KEY, sku text, store int, qty int)`)
	e.exec(`INSERT INTO prices SELECT 's' || (g % 10), g / 10, g FROM generate_series(0, 49) g`)
	e.exec(`INSERT INTO sales SELECT g, 's' || (g % 12), g % 6, g % 4 FROM generate_series(1, 300) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM sale_amounts FROM sales s LEFT JOIN prices p ON p.sku = s.sku AND p.store = s.store
		SELECT s.id AS sale, s.qty * p.price AS amount`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM store_revenue FROM sales s JOIN prices p ON p.sku = s.sku AND p.store = s.store
		SELECT s.store AS store, sum(s.qty * p.price) AS revenue, bool_or(s.qty > 2) AS any_big GROUP BY s.store`)
	require.NoError(t, err)
	e.waitState(c, "sale_amounts", trellis.StateLive)
	e.waitState(c, "store_revenue", trellis.StateLive)
	amounts := `SELECT s.id AS sale, p.sku AS p_sku, p.store AS p_store, s.qty * p.price AS amount FROM sales s LEFT JOIN prices p ON p.sku = s.sku AND p.store = s.store`
	revenue := `SELECT s.store, sum(s.qty * p.price) AS revenue, bool_or(s.qty > 2) AS any_big FROM sales s JOIN prices p ON p.sku = s.sku AND p.store = s.store GROUP BY s.store`
	e.assertMatches("sale_amounts", amounts)
	e.assertMatches("store_revenue", revenue)
	e.exec(`UPDATE prices SET price = price * 2 WHERE store = 1`)
	e.exec(`UPDATE prices SET store = 9 WHERE sku = 's3' AND store = 2`)
	e.exec(`UPDATE sales SET store = (store + 1) % 6 WHERE id % 7 = 0`)
	e.exec(`DELETE FROM prices WHERE sku = 's5'`)
	e.converge(c)
	e.assertMatches("sale_amounts", amounts)
	e.assertMatches("store_revenue", revenue)
}

// Every fix a source index gap offers is a statement PostgreSQL accepts
// (each is run here) and closes the gap; a gap no index can serve (an
// expression that is not IMMUTABLE) says so instead of offering one.
func TestSourceIndexGapFixesRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE events (id int PRIMARY KEY, "User Name" text, at timestamptz, day timestamp, "Kind" int)`)
	e.exec(`CREATE TABLE kinds (id int PRIMARY KEY, "Kind Code" int, label text)`)
	e.exec(`INSERT INTO events SELECT g, 'u' || (g % 3), now(), localtimestamp, g % 2 FROM generate_series(1, 20) g`)
	c := e.engine()
	defs := map[string]string{
		"by_user":    `TRANSFORM by_user FROM events SELECT "User Name" AS who, count(*) AS n GROUP BY "User Name"`,
		"by_day":     `TRANSFORM by_day FROM events e SELECT date_trunc('day', e.day) AS d, count(*) AS n GROUP BY date_trunc('day', e.day)`,
		"by_day_tz":  `TRANSFORM by_day_tz FROM events e SELECT date_trunc('day', e.at) AS d, count(*) AS n GROUP BY date_trunc('day', e.at)`,
		"with_kinds": `TRANSFORM with_kinds FROM events e JOIN kinds k ON e."Kind" = k."Kind Code" SELECT k.label AS label`,
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	for target := range defs {
		st, err := c.Status(e.ctx, target)
		require.NoError(t, err)
		require.NotEmpty(t, st.SourceIndexGaps, target)
		for _, g := range st.SourceIndexGaps {
			if target == "by_day_tz" {
				require.Empty(t, g.Fix, target)
				require.Contains(t, g.NoFix, "IMMUTABLE", target)
				continue
			}
			require.Empty(t, g.NoFix, target)
			e.exec(g.Fix)
		}
	}
	for target := range defs {
		st, err := c.Status(e.ctx, target)
		require.NoError(t, err)
		if target == "by_day_tz" {
			require.Len(t, st.SourceIndexGaps, 1)
			continue
		}
		require.Empty(t, st.SourceIndexGaps, "%s: the fixes closed its gaps", target)
	}
}

// waitMatches waits until target equals a fresh recompute (a correction
// may start and finish between two polls of its status), and is live with
// nothing left to correct.
func (e *env) waitMatches(c *trellis.Client, target, recompute string) {
	e.t.Helper()
	q := fmt.Sprintf("SELECT NOT EXISTS ((%[1]s) EXCEPT ALL (TABLE %[2]s)) AND NOT EXISTS ((TABLE %[2]s) EXCEPT ALL (%[1]s))", recompute, target)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var same bool
		require.NoError(e.t, e.db.QueryRow(e.ctx, q).Scan(&same))
		st, err := c.Status(e.ctx, target)
		require.NoError(e.t, err)
		if same && st.State == trellis.StateLive && len(st.Correcting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.assertMatches(target, recompute)
			e.t.Fatalf("%s matches but is %s, correcting %v", target, st.State, st.Correcting)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Partitions are tracked by identity, not by name: one detached, changed
// and attached again under the same name (all between two passes of the
// staging worker) is corrected; and a TRUNCATE of a new partition made
// before the staging worker gave it a TRUNCATE trigger is not lost.
func TestPartitionsTrackedByIdentity(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE readings (id int, site int, value int, PRIMARY KEY (id, site)) PARTITION BY LIST (site)`)
	e.exec(`CREATE TABLE readings_1 PARTITION OF readings FOR VALUES IN (1)`)
	e.exec(`CREATE TABLE readings_2 PARTITION OF readings FOR VALUES IN (2)`)
	e.exec(`INSERT INTO readings SELECT g, 1 + g % 2, g FROM generate_series(1, 100) g`)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	s := e.connect(trellis.Options{Staging: true})
	d := e.connect(trellis.Options{DrainWorkers: 1})
	_, err := s.Define(e.ctx, `TRANSFORM reading_values FROM readings SELECT value * 10 AS v10`)
	require.NoError(t, err)
	e.waitState(s, "reading_values", trellis.StateLive)
	const recompute = "SELECT id, site, value * 10 AS v10 FROM readings"

	// Detached, changed and attached again in one transaction: no pass of
	// the staging worker sees it detached.
	e.exec(`BEGIN;
ALTER TABLE readings DETACH PARTITION readings_2;
UPDATE readings_2 SET value = value + 1000;
DELETE FROM readings_2 WHERE id % 4 = 1;
ALTER TABLE readings ATTACH PARTITION readings_2 FOR VALUES IN (2);
COMMIT`)
	e.waitMatches(s, "reading_values", recompute)

	// A new partition whose rows were applied, then truncated while no
	// staging worker ran (so before it had a TRUNCATE trigger).
	require.NoError(t, s.Close())
	e.exec(`CREATE TABLE readings_3 PARTITION OF readings FOR VALUES IN (3)`)
	e.exec(`INSERT INTO readings SELECT g, 3, g FROM generate_series(1, 20) g`)
	e.converge(d)
	require.Equal(t, [][]string{{"20"}}, e.rows(`SELECT count(*) FROM reading_values WHERE site = 3`))
	e.exec(`TRUNCATE readings_3`)
	s2 := e.connect(trellis.Options{Staging: true})
	e.waitMatches(s2, "reading_values", recompute)
	// Its TRUNCATE trigger is there now.
	e.exec(`INSERT INTO readings SELECT g, 3, g FROM generate_series(1, 5) g`)
	e.converge(d)
	e.exec(`TRUNCATE readings_3`)
	e.converge(d)
	e.assertMatches("reading_values", recompute)
}
