package trellis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// quarantineShape is one transform of TestQuarantineShapesUnderConcurrentWrites.
// A column case selects a column bad that raises (division by zero) on
// some rows: the column is quarantined alone. A held case raises in its
// WHERE or HAVING: the keys of the failing units are held alone, heldKey
// being the SQL text of a target row's key (as samples name it).
type quarantineShape struct {
	name, stmt string
	// cols are the target's columns compared (bad is compared once
	// fixed), healthy the recompute of those columns (for a held case, of
	// the units outside the held keys, %s being that filter), fixed the
	// recompute of cols and bad (or, for a held case, of cols once the
	// values that raise are gone).
	cols           string
	healthy, fixed string
	heldKey        string
}

var quarantineShapes = []quarantineShape{
	{name: "q_comma", stmt: "FROM orders o, customers c SELECT o.id, c.region, 100 / (o.qty - 2) AS bad WHERE o.customer_id = c.id AND c.active",
		cols:    "id, c_id, region",
		healthy: "SELECT o.id, c.id, c.region FROM orders o, customers c WHERE o.customer_id = c.id AND c.active",
		fixed:   "SELECT o.id, c.id, c.region, 100 / (o.qty - 2) FROM orders o, customers c WHERE o.customer_id = c.id AND c.active"},
	{name: "q_using", stmt: "FROM order_items i JOIN notes n USING (order_id) SELECT i.id, order_id, n.line, n.note, 100 / (i.qty - 3) AS bad",
		cols:    "id, order_id, n_order_id, line, note",
		healthy: "SELECT i.id, order_id, n.order_id, n.line, n.note FROM order_items i JOIN notes n USING (order_id)",
		fixed:   "SELECT i.id, order_id, n.order_id, n.line, n.note, 100 / (i.qty - 3) FROM order_items i JOIN notes n USING (order_id)"},
	{name: "q_having", stmt: "FROM orders SELECT customer_id, count(*) AS n, sum(100 / (qty - 2)) AS bad GROUP BY customer_id HAVING count(*) > 8",
		cols:    "customer_id, n",
		healthy: "SELECT customer_id, count(*) FROM orders GROUP BY customer_id HAVING count(*) > 8",
		fixed:   "SELECT customer_id, count(*), sum(100 / (qty - 2)) FROM orders GROUP BY customer_id HAVING count(*) > 8"},
	{name: "q_having_held", stmt: "FROM orders SELECT customer_id, sum(price) AS total GROUP BY customer_id HAVING min(100 / (qty - 2)) > -1000",
		cols: "customer_id, total", heldKey: "customer_id::text",
		healthy: "SELECT customer_id, sum(price) FROM orders WHERE %s GROUP BY customer_id HAVING min(100 / (qty - 2)) > -1000",
		fixed:   "SELECT customer_id, sum(price) FROM orders GROUP BY customer_id HAVING min(100 / (qty - 2)) > -1000"},
	{name: "q_distinct_held", stmt: "FROM orders SELECT DISTINCT region, status WHERE 100 / (qty - 2) > -1000",
		cols: "region, status", heldKey: "ROW(region, status)::text",
		healthy: "SELECT DISTINCT region, status FROM orders WHERE CASE WHEN %s THEN 100 / (qty - 2) > -1000 END",
		fixed:   "SELECT DISTINCT region, status FROM orders WHERE 100 / (qty - 2) > -1000"},
	{name: "q_topk", stmt: "FROM orders SELECT id, price, 100 / (qty - 2) AS bad ORDER BY price DESC, id LIMIT 10",
		cols:    "id, price",
		healthy: "SELECT id, price FROM orders ORDER BY price DESC, id LIMIT 10",
		fixed:   "SELECT id, price, 100 / (qty - 2) FROM orders ORDER BY price DESC, id LIMIT 10"},
	{name: "q_topk_group", stmt: "FROM (SELECT id, customer_id, price, qty, row_number() OVER (PARTITION BY customer_id ORDER BY price DESC, id) AS rn FROM orders) s SELECT s.id, s.customer_id, s.price, s.rn, 100 / (s.qty - 2) AS bad WHERE s.rn <= 3",
		cols:    "id, customer_id, price, rn",
		healthy: "SELECT id, customer_id, price, rn FROM (SELECT id, customer_id, price, row_number() OVER (PARTITION BY customer_id ORDER BY price DESC, id) AS rn FROM orders) s WHERE rn <= 3",
		fixed:   "SELECT id, customer_id, price, rn, 100 / (qty - 2) FROM (SELECT id, customer_id, price, qty, row_number() OVER (PARTITION BY customer_id ORDER BY price DESC, id) AS rn FROM orders) s WHERE rn <= 3"},
	{name: "q_distinct_on", stmt: "FROM orders SELECT DISTINCT ON (customer_id) customer_id, price, 100 / (qty - 2) AS bad ORDER BY customer_id, placed_at DESC, id",
		cols:    "customer_id, price",
		healthy: "SELECT DISTINCT ON (customer_id) customer_id, price FROM orders ORDER BY customer_id, placed_at DESC, id",
		fixed:   "SELECT DISTINCT ON (customer_id) customer_id, price, 100 / (qty - 2) FROM orders ORDER BY customer_id, placed_at DESC, id"},
	{name: "q_exists", stmt: "FROM customers c SELECT c.id, c.name, 100 / (c.region_id - 2) AS bad WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'paid')",
		cols:    "id, name",
		healthy: "SELECT c.id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'paid')",
		fixed:   "SELECT c.id, c.name, 100 / (c.region_id - 2) FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'paid')"},
	{name: "q_not_exists", stmt: "FROM customers c SELECT c.region, count(*) AS n, sum(100 / (c.region_id - 2)) AS bad WHERE NOT EXISTS (SELECT FROM orders WHERE customer_id = c.id AND status = 'gone') GROUP BY c.region",
		cols:    "region, n",
		healthy: "SELECT c.region, count(*) FROM customers c WHERE NOT EXISTS (SELECT FROM orders WHERE customer_id = c.id AND status = 'gone') GROUP BY c.region",
		fixed:   "SELECT c.region, count(*), sum(100 / (c.region_id - 2)) FROM customers c WHERE NOT EXISTS (SELECT FROM orders WHERE customer_id = c.id AND status = 'gone') GROUP BY c.region"},
	{name: "q_in", stmt: "FROM orders o SELECT o.id, o.qty, 100 / (o.qty - 2) AS bad WHERE o.product_id IN (SELECT p.id FROM products p WHERE p.price > 10)",
		cols:    "id, qty",
		healthy: "SELECT o.id, o.qty FROM orders o WHERE o.product_id IN (SELECT p.id FROM products p WHERE p.price > 10)",
		fixed:   "SELECT o.id, o.qty, 100 / (o.qty - 2) FROM orders o WHERE o.product_id IN (SELECT p.id FROM products p WHERE p.price > 10)"},
	{name: "q_view", stmt: "FROM paid_orders p JOIN customers c ON c.id = p.customer_id SELECT p.id, c.region, 100 / (p.price - 6) AS bad",
		cols:    "id, c_id, region",
		healthy: "SELECT p.id, c.id, c.region FROM paid_orders p JOIN customers c ON c.id = p.customer_id",
		fixed:   "SELECT p.id, c.id, c.region, 100 / (p.price - 6) FROM paid_orders p JOIN customers c ON c.id = p.customer_id"},
	{name: "q_join3", stmt: "FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN products p ON p.id = o.product_id SELECT o.id, c.name, p.title, 100 / (o.qty - 2) AS bad",
		cols:    "id, c_id, p_id, name, title",
		healthy: "SELECT o.id, c.id, p.id, c.name, p.title FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN products p ON p.id = o.product_id",
		fixed:   "SELECT o.id, c.id, p.id, c.name, p.title, 100 / (o.qty - 2) FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN products p ON p.id = o.product_id"},
}

// quarantineShapeWriter writes random rows to docsSetup's tables: with
// clean false some of the values make a quarantineShapes case raise
// (orders.qty 2 or price 6, order_items.qty 3, customers.region_id 2),
// with clean true none does.
func quarantineShapeWriter(clean *atomic.Bool) sourceWriter {
	return func(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
		rng := rand.New(rand.NewPCG(seed, 11))
		next := int64(10000 * (seed + 1))
		pick := func(bad, good int) int {
			// bad is a value that raises; good the values drawn.
			for {
				v := rng.IntN(good)
				if v != bad || !clean.Load() {
					return v
				}
			}
		}
		// About 40 writes a second from each writer: the drain keeps up on
		// a loaded machine.
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return nil
			case <-tick.C:
			}
			id := 1 + rng.IntN(220)
			var err error
			switch x := rng.IntN(100); {
			case x < 20:
				_, err = pool.Exec(ctx, `UPDATE orders SET qty = $2, price = $3 WHERE id = $1`, id, pick(2, 5), pick(6, 40))
			case x < 30:
				_, err = pool.Exec(ctx, `UPDATE orders SET customer_id = $2, status = $3, placed_at = placed_at + interval '1 day' WHERE id = $1`,
					id, rng.IntN(23), []string{"paid", "open", "gone"}[rng.IntN(3)])
			case x < 38:
				next++
				_, err = pool.Exec(ctx, `INSERT INTO orders VALUES ($1, $2, $3, $4, $5, 'paid', $6, now())`,
					next, rng.IntN(23), rng.IntN(11), pick(6, 40), pick(2, 5), fmt.Sprintf("r%d", rng.IntN(4)))
			case x < 44:
				_, err = pool.Exec(ctx, `DELETE FROM orders WHERE id = $1`, id)
			case x < 56:
				_, err = pool.Exec(ctx, `UPDATE customers SET region_id = $2, region = $3, active = NOT active WHERE id = $1`, 1+rng.IntN(20), pick(2, 4), fmt.Sprintf("r%d", rng.IntN(3)))
			case x < 62:
				_, err = pool.Exec(ctx, `UPDATE products SET price = $2 WHERE id = $1`, 1+rng.IntN(10), rng.IntN(30))
			case x < 80:
				_, err = pool.Exec(ctx, `UPDATE order_items SET qty = $2, order_id = $3 WHERE id = $1`, 1+rng.IntN(300), pick(3, 7), rng.IntN(210))
			case x < 90:
				next++
				_, err = pool.Exec(ctx, `INSERT INTO notes VALUES ($1, $2, $3)`, rng.IntN(150), next, fmt.Sprintf("w%d", next))
			default:
				_, err = pool.Exec(ctx, `DELETE FROM notes WHERE line % 17 = $1 AND order_id = $2`, rng.IntN(17), rng.IntN(150))
			}
			if err != nil {
				return err
			}
			writes.Add(1)
		}
	}
}

// Under concurrent writers and two clients' drain workers, a value that
// makes a recompute raise quarantines only its column (the other columns,
// keys and transforms keep applying) or, raising in WHERE or HAVING, holds
// only its keys (every other key is exact), in each shape of issue 11
// whose quarantine TestShapesFirstClass checks only without writers: comma
// joins, USING, HAVING, DISTINCT, top-k (global and per group), DISTINCT
// ON, semi- and anti-joins, views and joins of three tables. Once the
// values are fixed and the columns and keys resumed while writers still
// write, every target equals a fresh recompute.
func TestQuarantineShapesUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, q := range docsSetup {
		e.exec(q)
	}
	fillDocsTables(e)
	// Start clean: the writers bring the values that raise.
	e.exec(`UPDATE orders SET qty = 7 WHERE qty = 2`)
	e.exec(`UPDATE orders SET price = 7 WHERE price = 6`)
	e.exec(`UPDATE order_items SET qty = 8 WHERE qty = 3`)
	e.exec(`UPDATE customers SET region_id = 7 WHERE region_id = 2`)
	c := e.engine()
	other := e.connect(trellis.Options{DrainWorkers: 2})
	for _, s := range quarantineShapes {
		_, err := c.Define(e.ctx, "TRANSFORM "+s.name+" "+s.stmt)
		require.NoError(t, err, s.name)
	}
	for _, s := range quarantineShapes {
		e.waitState(c, s.name, trellis.StateLive)
	}

	// Writers bring values that raise; each shape is also given one on a
	// row it selects, until every column is quarantined and every held
	// case holds a key.
	var clean atomic.Bool
	var writes atomic.Int64
	quit := make(chan struct{})
	errc := make(chan error, 3)
	for i := range 3 {
		go func() {
			err := quarantineShapeWriter(&clean)(e.ctx, e.db, uint64(i), quit, &writes)
			if err != nil {
				t.Errorf("writer: %v", err)
			}
			errc <- err
		}()
	}
	stopWriters := func() {
		t.Helper()
		close(quit)
		for range 3 {
			require.NoError(t, <-errc)
		}
	}
	provoke := []string{
		`UPDATE orders SET qty = 2 WHERE id IN (SELECT id FROM orders ORDER BY price DESC, id LIMIT 2)`,
		`UPDATE orders SET qty = 2 WHERE id IN (SELECT DISTINCT ON (customer_id) id FROM orders ORDER BY customer_id, placed_at DESC, id LIMIT 3)`,
		`UPDATE orders SET price = 6 WHERE id IN (SELECT id FROM orders WHERE status = 'paid' ORDER BY id LIMIT 2)`,
		`UPDATE order_items SET qty = 3 WHERE id IN (SELECT i.id FROM order_items i JOIN notes n USING (order_id) ORDER BY i.id LIMIT 2)`,
		`UPDATE customers SET region_id = 2 WHERE id IN (SELECT customer_id FROM orders WHERE status = 'paid' ORDER BY id LIMIT 2)`,
	}
	quarantined := func(s quarantineShape) bool {
		if s.heldKey != "" {
			st, err := c.Status(e.ctx, s.name)
			require.NoError(t, err)
			return st.HeldKeys != nil
		}
		q, err := c.QuarantineStatus(e.ctx, s.name+".bad")
		require.NoError(t, err)
		return q.State == trellis.StatePaused
	}
	began, deadline := time.Now(), time.Now().Add(90*time.Second)
	for {
		var waiting []string
		for _, s := range quarantineShapes {
			if !quarantined(s) {
				waiting = append(waiting, s.name)
			}
		}
		if len(waiting) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "never quarantined under writes: %v", waiting)
		for _, p := range provoke {
			e.exec(p)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("every case quarantined after %s, %d writes", time.Since(began).Round(time.Millisecond), writes.Load())
	e.writesPast(&writes, 200)
	stopWriters()
	convergeRetrying(e, c)
	convergeRetrying(e, other)

	// Only the column, or the keys, of each case stopped.
	for _, s := range quarantineShapes {
		st, err := c.Status(e.ctx, s.name)
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, "%s: the transform keeps applying", s.name)
		require.Nil(t, st.DrainFailure, s.name)
		target := fmt.Sprintf("(SELECT %s FROM %s) x", s.cols, s.name)
		if s.heldKey == "" {
			require.Nil(t, st.HeldKeys, "%s holds keys", s.name)
			q, err := c.QuarantineStatus(e.ctx, s.name+".bad")
			require.NoError(t, err)
			require.Equal(t, trellis.StatePaused, q.State, s.name)
			require.Equal(t, pgerrcode.DivisionByZero, q.SQLState, s.name)
			require.Contains(t, q.Reason, "RESUME TRANSFORM "+s.name+".bad", s.name)
			e.assertMatches(target, s.healthy)
			continue
		}
		require.NotNil(t, st.HeldKeys, s.name)
		page, err := c.SampleQuarantined(e.ctx, s.name, trellis.SampleOptions{Limit: 10000})
		require.NoError(t, err)
		require.EqualValues(t, len(page.Samples), st.HeldKeys.Count, s.name)
		held := map[string]bool{}
		for _, p := range page.Samples {
			require.Contains(t, p.Error, "division by zero", s.name)
			held[p.Key] = true
		}
		var keys []string
		for k := range held {
			keys = append(keys, k)
		}
		// Every unit that raises now is held (a held unit may have been
		// fixed since), and every other unit is exact.
		raising := fmt.Sprintf("SELECT DISTINCT %s FROM orders WHERE qty = 2", s.heldKey)
		for _, r := range e.rows(raising) {
			require.True(t, held[r[0]], "%s: key %s raises but is not held (held: %v)", s.name, r[0], keys)
		}
		notHeld := fmt.Sprintf("NOT %s = ANY('%s')", s.heldKey, pgArray(quoteArrayElems(keys)))
		e.assertMatches(fmt.Sprintf("(SELECT %s FROM %s WHERE %s) x", s.cols, s.name, notHeld), fmt.Sprintf(s.healthy, notHeld))
	}
	all, err := c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Len(t, all, len(quarantineShapes), "only the cases' columns and keys are quarantined")

	// Fixed and resumed while writers (that no longer bring values that
	// raise) write: every target equals a fresh recompute, bad included.
	clean.Store(true)
	quit = make(chan struct{})
	errc = make(chan error, 3)
	for i := range 3 {
		go func() {
			err := quarantineShapeWriter(&clean)(e.ctx, e.db, uint64(10+i), quit, &writes)
			if err != nil {
				t.Errorf("writer: %v", err)
			}
			errc <- err
		}()
	}
	e.exec(`UPDATE orders SET qty = 7 WHERE qty = 2`)
	e.exec(`UPDATE orders SET price = 7 WHERE price = 6`)
	e.exec(`UPDATE order_items SET qty = 8 WHERE qty = 3`)
	e.exec(`UPDATE customers SET region_id = 7 WHERE region_id = 2`)
	for _, s := range quarantineShapes {
		address := s.name + ".bad"
		if s.heldKey != "" {
			address = s.name
		}
		_, err := c.Apply(e.ctx, "RESUME TRANSFORM "+address)
		require.NoError(t, err, address)
	}
	e.writesPast(&writes, 200)
	stopWriters()
	convergeRetrying(e, c)
	convergeRetrying(e, other)
	for _, s := range quarantineShapes {
		e.pollStatus(c, s.name, stateWaitCap, 20*time.Millisecond, s.name+" did not come back live with every column",
			func(st *trellis.Status) bool { return st.State == trellis.StateLive && len(st.BackfillingColumns) == 0 })
		cols := s.cols
		if s.heldKey == "" {
			cols += ", bad"
		}
		e.assertMatches(fmt.Sprintf("(SELECT %s FROM %s) x", cols, s.name), s.fixed)
		st, err := c.Status(e.ctx, s.name)
		require.NoError(t, err)
		require.Nil(t, st.HeldKeys, s.name)
	}
	all, err = c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Empty(t, all)
}

// quoteArrayElems double-quotes each element of a text[] literal's body.
func quoteArrayElems(vals []string) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `'`, `''`).Replace(v) + `"`
	}
	return out
}
