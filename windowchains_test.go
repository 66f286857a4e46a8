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

// windowChains are the rewrite the refusal of a window, top-k or DISTINCT
// ON over an aggregate names (define the aggregate as a transform and the
// window over its target; over a join, as it was named before decision
// 0045 took windows over joins), and transforms reading
// a window's or a top-k's target; each with the fresh recompute it must
// equal, written over the base tables.
var windowChains = []struct{ stmt, target, recompute string }{
	{`TRANSFORM wc_lines FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id, c.region, o.amount`,
		"wc_lines", `SELECT o.id, c.id AS c_id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id`},
	{`TRANSFORM wc_totals FROM orders SELECT customer_id, sum(amount) AS total, count(*) AS n GROUP BY customer_id`,
		"wc_totals", `SELECT customer_id, sum(amount) AS total, count(*) AS n FROM orders GROUP BY customer_id`},
	// top-k, window and DISTINCT ON over the join's target
	{`TRANSFORM wc_top_lines FROM wc_lines SELECT id, c_id, region, amount ORDER BY amount DESC, id, c_id LIMIT 7`,
		"wc_top_lines", `SELECT o.id, c.id AS c_id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY o.amount DESC, o.id, c.id LIMIT 7`},
	{`TRANSFORM wc_ranked FROM wc_lines SELECT c_id, id, region, amount, rank() OVER (PARTITION BY c_id ORDER BY amount DESC) AS r, sum(amount) OVER (PARTITION BY c_id) AS customer_total`,
		"wc_ranked", `SELECT c.id AS c_id, o.id, c.region, o.amount, rank() OVER (PARTITION BY c.id ORDER BY o.amount DESC) AS r, sum(o.amount) OVER (PARTITION BY c.id) AS customer_total FROM orders o JOIN customers c ON c.id = o.customer_id`},
	{`TRANSFORM wc_biggest FROM wc_lines SELECT DISTINCT ON (c_id) c_id, id, amount ORDER BY c_id, amount DESC, id`,
		"wc_biggest", `SELECT DISTINCT ON (c.id) c.id AS c_id, o.id, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY c.id, o.amount DESC, o.id`},
	// top-k per group over the aggregate's target, and top-k of it
	{`TRANSFORM wc_top_customers FROM wc_totals SELECT customer_id, total ORDER BY total DESC, customer_id LIMIT 4`,
		"wc_top_customers", `SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id ORDER BY total DESC, customer_id LIMIT 4`},
	{`TRANSFORM wc_top_by_n FROM (SELECT customer_id, total, n, row_number() OVER (PARTITION BY n ORDER BY total DESC, customer_id) AS rn FROM wc_totals) s SELECT * WHERE rn <= 2`,
		"wc_top_by_n", `SELECT n, customer_id, total, rn FROM (SELECT customer_id, sum(amount) AS total, count(*) AS n, row_number() OVER (PARTITION BY count(*) ORDER BY sum(amount) DESC, customer_id) AS rn FROM orders GROUP BY customer_id) s WHERE rn <= 2`},
	// transforms reading a top-k's and a window's target
	{`TRANSFORM wc_top_copy FROM wc_top_customers SELECT customer_id, total * 2 AS doubled`,
		"wc_top_copy", `SELECT customer_id, total * 2 AS doubled FROM (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id ORDER BY total DESC, customer_id LIMIT 4) t`},
	{`TRANSFORM wc_rank_counts FROM wc_ranked SELECT r, count(*) AS n, sum(amount) AS amount GROUP BY r`,
		"wc_rank_counts", `SELECT r, count(*) AS n, sum(amount) AS amount FROM (SELECT rank() OVER (PARTITION BY c.id ORDER BY o.amount DESC) AS r, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id) x GROUP BY r`},
	{`TRANSFORM wc_leaders FROM wc_biggest b JOIN customers c ON c.id = b.c_id SELECT b.c_id, c.id AS customer_id, b.id AS order_id, c.name, b.amount`,
		"wc_leaders", `SELECT b.c_id, c.id AS customer_id, b.id AS order_id, c.name, b.amount FROM (SELECT DISTINCT ON (c.id) c.id AS c_id, o.id, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY c.id, o.amount DESC, o.id) b JOIN customers c ON c.id = b.c_id`},
}

// writeWindowChainSources changes orders and customers at random, both in
// one transaction at times, until stop closes.
func writeWindowChainSources(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, seed*7+1))
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
				switch r.IntN(9) {
				case 0, 1:
					q, args = `INSERT INTO orders VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount`, []any{r.IntN(400), 1 + r.IntN(40), r.IntN(1000)}
				case 2:
					q, args = `UPDATE orders SET amount = $2 WHERE id = $1`, []any{r.IntN(400), r.IntN(1000)}
				case 3:
					q, args = `UPDATE orders SET customer_id = $2 WHERE id = $1`, []any{r.IntN(400), 1 + r.IntN(40)}
				case 4:
					q, args = `DELETE FROM orders WHERE id = $1`, []any{r.IntN(400)}
				case 5:
					q, args = `UPDATE customers SET region = 'r' || $2::int WHERE id = $1`, []any{1 + r.IntN(40), r.IntN(6)}
				case 6:
					q, args = `UPDATE customers SET name = 'n' || $2::int WHERE id = $1`, []any{1 + r.IntN(40), r.IntN(50)}
				case 7:
					q, args = `DELETE FROM customers WHERE id = $1`, []any{1 + r.IntN(40)}
				case 8:
					q, args = `INSERT INTO customers VALUES ($1, 'r' || $2::int, 'n') ON CONFLICT (id) DO NOTHING`, []any{1 + r.IntN(40), r.IntN(6)}
				}
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && ctx.Err() == nil && !errors.Is(err, errRollback) && !isExpectedWriteConflict(err) {
			return err
		}
		writes.Add(1)
	}
}

// TestWindowChainsConverge proves the rewrite the refusals name: a top-k,
// a window and a DISTINCT ON over a join's target and over an aggregate's,
// and transforms reading a top-k's, a window's and a DISTINCT ON's target,
// stay equal to a fresh recompute over the base tables, both ways, while
// writers change both tables with two clients' drain workers.
func TestWindowChainsConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text NOT NULL, name text)`)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, amount int NOT NULL)`)
	e.exec(`INSERT INTO customers SELECT g, 'r' || (g % 5), 'n' || g FROM generate_series(1, 40) g`)
	e.exec(`INSERT INTO orders SELECT g, 1 + g % 37, (g * 37) % 1000 FROM generate_series(1, 300) g`)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, d := range windowChains {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	for _, d := range windowChains {
		e.fixIndexGaps(c, d.target)
	}
	// The refusal names this rewrite (a window over a join is taken since
	// decision 0045: windowJoins).
	_, err := c.Define(e.ctx, `TRANSFORM x FROM orders SELECT customer_id, sum(amount) AS total, rank() OVER (ORDER BY sum(amount)) AS r GROUP BY customer_id`)
	requireCode(t, err, trellis.CodeValidation)
	require.Contains(t, err.Error(), "define the aggregate as a transform and the window over its target")

	writes := e.writeConcurrently(3, 70, 300, writeWindowChainSources)
	e.converge(c)
	for _, d := range windowChains {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)
}
