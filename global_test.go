package trellis_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// An aggregate without GROUP BY is one row of every source row, as SQL
// says: on an empty source count is 0 and sum NULL; HAVING may leave no
// row at all.
func TestGlobalAggregates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric, status text)`)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, tier int)`)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM totals FROM orders SELECT count(*), sum(price) AS revenue, avg(price), max(status) AS last_status, count(DISTINCT customer_id) AS customers`,
			"totals", `SELECT count(*), sum(price) AS revenue, avg(price), max(status) AS last_status, count(DISTINCT customer_id) AS customers FROM orders`},
		{`TRANSFORM open_totals FROM orders SELECT count(*) AS n, sum(price) AS s WHERE status = 'open'`,
			"open_totals", `SELECT count(*) AS n, sum(price) AS s FROM orders WHERE status = 'open'`},
		{`TRANSFORM busy FROM orders SELECT count(*) AS n HAVING count(*) > 5`,
			"busy", `SELECT count(*) AS n FROM orders HAVING count(*) > 5`},
		{`TRANSFORM tiered FROM orders o JOIN customers c ON c.id = o.customer_id SELECT sum(o.price * c.tier) AS weighted, count(*) AS n`,
			"tiered", `SELECT sum(o.price * c.tier) AS weighted, count(*) AS n FROM orders o JOIN customers c ON c.id = o.customer_id`},
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range defs {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	require.Equal(t, [][]string{{"0", "<nil>"}}, e.rows(`SELECT count, revenue FROM totals`))
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM busy`))
	st, err := c.Status(e.ctx, "tiered")
	require.NoError(t, err)
	require.Empty(t, st.SourceIndexGaps, "a global aggregate reads every row; no index serves it")
	require.Equal(t, []string{"public.orders", "public.customers"}, st.Sources)

	e.exec(`INSERT INTO customers SELECT g, g % 3 FROM generate_series(1, 10) g`)
	e.exec(`INSERT INTO orders SELECT g, g % 12, g, CASE WHEN g % 2 = 0 THEN 'open' ELSE 'paid' END FROM generate_series(1, 40) g`)
	e.converge(c)
	for _, d := range defs {
		e.assertMatches(d.target, d.recompute)
	}
	require.Equal(t, [][]string{{"40"}}, e.rows(`SELECT n FROM busy`))

	// Concurrent writers, and a second client's drain workers.
	e.connect(trellis.Options{DrainWorkers: 2})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := int64(w*1000 + i%60)
				_, err := e.db.Exec(e.ctx, `INSERT INTO orders VALUES ($1, $2, $3, 'open') ON CONFLICT (id) DO UPDATE SET price = orders.price + 1, status = 'paid'`, id, i%12, i)
				if err == nil && i%5 == 0 {
					_, err = e.db.Exec(e.ctx, `DELETE FROM orders WHERE id = $1`, id-3)
				}
				if err == nil && i%7 == 0 {
					_, err = e.db.Exec(e.ctx, `UPDATE customers SET tier = tier + 1 WHERE id = $1`, i%10)
				}
				if err != nil && !isExpectedWriteConflict(err) {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	require.Eventually(t, func() bool { return writes.Load() > 400 }, time.Minute, 10*time.Millisecond)
	close(stop)
	wg.Wait()
	e.converge(c)
	for _, d := range defs {
		e.assertMatches(d.target, d.recompute)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	// Back to empty: the row stays, with count 0 (busy has none).
	e.exec(`DELETE FROM orders WHERE id % 2 = 0`)
	e.exec(`TRUNCATE orders`)
	e.converge(c)
	for _, d := range defs {
		e.assertMatches(d.target, d.recompute)
	}
	require.Equal(t, [][]string{{"0", "<nil>"}}, e.rows(`SELECT count, revenue FROM totals`))
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM busy`))

	// ALTER adds an aggregate; a bare column is refused.
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM totals ADD COLUMN min(price) AS cheapest`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM totals ADD COLUMN price AS p`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))
	e.exec(`INSERT INTO orders VALUES (1, 1, 7, 'open'), (2, 1, 3, 'open')`)
	e.waitState(c, "totals", trellis.StateLive)
	e.converge(c)
	e.assertMatches("totals", `SELECT count(*), sum(price) AS revenue, avg(price), max(status) AS last_status, count(DISTINCT customer_id) AS customers, min(price) AS cheapest FROM orders`)
}

// A column of a global aggregate that fails on a row is quarantined; the
// other columns keep applying, and RESUME re-derives it once fixed.
func TestGlobalAggregateQuarantine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, 1 FROM generate_series(1, 50) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM stats FROM items SELECT count(*) AS n, sum(a / b) AS ratio_sum`)
	require.NoError(t, err)
	e.waitState(c, "stats", trellis.StateLive)
	e.exec(`INSERT INTO items VALUES (51, 5, 0)`)
	e.converge(c)
	q := e.waitQuarantine(c, "stats.ratio_sum", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	require.Contains(t, q.Error, "division by zero")
	e.exec(`INSERT INTO items VALUES (52, 1, 1)`)
	e.converge(c)
	require.Equal(t, [][]string{{"52"}}, e.rows(`SELECT n FROM stats`), "count keeps applying")
	page, err := c.SampleQuarantined(e.ctx, "stats.ratio_sum", trellis.SampleOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Samples, 1)
	require.Equal(t, "all", page.Samples[0].Key, "the one group of a global aggregate")

	e.exec(`UPDATE items SET b = 1 WHERE b = 0`)
	e.converge(c)
	_, err = c.Apply(e.ctx, `RESUME TRANSFORM stats.ratio_sum`)
	require.NoError(t, err)
	e.waitState(c, "stats", trellis.StateLive)
	e.converge(c)
	e.assertMatches("stats", `SELECT count(*) AS n, sum(a / b) AS ratio_sum FROM items`)
}
