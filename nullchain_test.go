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

// The upstreams of nullChains, whose keys may be NULL, as fresh recomputes
// over the base tables (their targets' columns, key first).
const (
	ncLeftRec = `SELECT o.id AS o_id, c.id AS c_id, o.amount, c.region FROM nc_orders o LEFT JOIN nc_customers c ON c.id = o.customer_id`
	ncFullRec = `SELECT o.id AS o_id, c.id AS c_id, o.amount, c.region FROM nc_orders o FULL JOIN nc_customers c ON c.id = o.customer_id`
	ncRankRec = `SELECT o.customer_id, o.id, o.amount, rank() OVER (PARTITION BY o.customer_id ORDER BY o.amount DESC) AS r
		FROM nc_orders o LEFT JOIN nc_customers c ON c.id = o.customer_id`
	ncUnionRec = `SELECT 1::smallint AS branch, o.id, c.id AS c_id, o.amount FROM nc_orders o LEFT JOIN nc_customers c ON c.id = o.customer_id
		UNION ALL SELECT 2, r.id, NULL, -r.amount FROM nc_refunds r`
	ncByCustRec = `SELECT customer_id, count(*) AS n, sum(amount) AS amount FROM nc_orders GROUP BY customer_id`
)

// nullChains are transforms reading targets whose key may be NULL
// (decision 0049): a LEFT JOIN's, a FULL JOIN's, a window's over a LEFT
// JOIN, a UNION ALL's whose key column one branch leaves NULL, and an
// aggregate's grouped by a nullable column; each reader with the fresh
// recompute it must equal, its definition composed over its upstream's.
var nullChains = []struct{ stmt, target, recompute string }{
	{`TRANSFORM nc_left FROM nc_orders o LEFT JOIN nc_customers c ON c.id = o.customer_id SELECT o.amount, c.region`, "nc_left", ncLeftRec},
	{`TRANSFORM nc_full FROM nc_orders o FULL JOIN nc_customers c ON c.id = o.customer_id SELECT o.amount, c.region`, "nc_full", ncFullRec},
	{`TRANSFORM nc_rank FROM nc_orders o LEFT JOIN nc_customers c ON c.id = o.customer_id SELECT o.customer_id, o.id, o.amount, rank() OVER (PARTITION BY o.customer_id ORDER BY o.amount DESC) AS r`, "nc_rank", ncRankRec},
	{`TRANSFORM nc_union FROM nc_orders o LEFT JOIN nc_customers c ON c.id = o.customer_id SELECT o.id, o.amount UNION ALL SELECT id, -amount FROM nc_refunds`, "nc_union", ncUnionRec},
	{`TRANSFORM nc_by_cust FROM nc_orders SELECT customer_id, count(*) AS n, sum(amount) AS amount GROUP BY customer_id`, "nc_by_cust", ncByCustRec},

	// Readers. Grouped by a key column that may be NULL (rows move into
	// and out of the NULL group), by another column, globally.
	{`TRANSFORM nc_left_by_c FROM nc_left SELECT c_id, count(*) AS n, sum(amount) AS amount GROUP BY c_id`, "nc_left_by_c",
		`SELECT c_id, count(*) AS n, sum(amount) AS amount FROM (` + ncLeftRec + `) u GROUP BY c_id`},
	{`TRANSFORM nc_left_by_region FROM nc_left SELECT region, count(*) AS n, sum(amount) AS amount GROUP BY region`, "nc_left_by_region",
		`SELECT region, count(*) AS n, sum(amount) AS amount FROM (` + ncLeftRec + `) u GROUP BY region`},
	{`TRANSFORM nc_full_by_region FROM nc_full SELECT region, count(*) AS n, count(o_id) AS orders, sum(amount) AS amount GROUP BY region`, "nc_full_by_region",
		`SELECT region, count(*) AS n, count(o_id) AS orders, sum(amount) AS amount FROM (` + ncFullRec + `) u GROUP BY region`},
	{`TRANSFORM nc_full_total FROM nc_full SELECT count(*) AS n, count(c_id) AS customers, sum(amount) AS amount`, "nc_full_total",
		`SELECT count(*) AS n, count(c_id) AS customers, sum(amount) AS amount FROM (` + ncFullRec + `) u`},
	{`TRANSFORM nc_rank_counts FROM nc_rank SELECT r, count(*) AS n, count(customer_id) AS known GROUP BY r`, "nc_rank_counts",
		`SELECT r, count(*) AS n, count(customer_id) AS known FROM (` + ncRankRec + `) u GROUP BY r`},
	{`TRANSFORM nc_union_by_c FROM nc_union SELECT c_id, branch, count(*) AS n, sum(amount) AS amount GROUP BY c_id, branch`, "nc_union_by_c",
		`SELECT c_id, branch, count(*) AS n, sum(amount) AS amount FROM (` + ncUnionRec + `) u GROUP BY c_id, branch`},
	{`TRANSFORM nc_by_n FROM nc_by_cust SELECT n, count(*) AS customers, sum(amount) AS amount GROUP BY n`, "nc_by_n",
		`SELECT n, count(*) AS customers, sum(amount) AS amount FROM (` + ncByCustRec + `) u GROUP BY n`},
	{`TRANSFORM nc_by_known FROM nc_by_cust SELECT customer_id IS NULL AS unknown, sum(n) AS n GROUP BY customer_id IS NULL`, "nc_by_known",
		`SELECT customer_id IS NULL AS unknown, sum(n) AS n FROM (` + ncByCustRec + `) u GROUP BY customer_id IS NULL`},
	// The rewrite a projection's refusal names: grouped by every column
	// it selects, its key included.
	{`TRANSFORM nc_left_copy FROM nc_left SELECT o_id, c_id, amount, region GROUP BY o_id, c_id, amount, region`, "nc_left_copy", ncLeftRec},
	// A window and a top-k over a LEFT JOIN's target: their keys hold
	// the upstream's, NULL parts and all.
	{`TRANSFORM nc_left_ranked FROM nc_left SELECT c_id, o_id, amount, rank() OVER (PARTITION BY c_id ORDER BY amount DESC) AS r`, "nc_left_ranked",
		`SELECT c_id, o_id, amount, rank() OVER (PARTITION BY c_id ORDER BY amount DESC) AS r FROM (` + ncLeftRec + `) u`},
	{`TRANSFORM nc_left_top FROM nc_left SELECT o_id, c_id, amount ORDER BY amount DESC, o_id, c_id LIMIT 6`, "nc_left_top",
		`SELECT o_id, c_id, amount FROM (` + ncLeftRec + `) u ORDER BY amount DESC, o_id, c_id LIMIT 6`},
	// Projections and joins driven by such a target (decision 0054):
	// their keys are the upstream's, NULL parts and all; rows move into
	// and out of their WHERE as they move into and out of NULL keys.
	{`TRANSFORM nc_left_proj FROM nc_left SELECT amount, region WHERE amount > 4`, "nc_left_proj",
		`SELECT o_id, c_id, amount, region FROM (` + ncLeftRec + `) u WHERE amount > 4`},
	{`TRANSFORM nc_full_proj FROM nc_full f SELECT f.amount * 2 AS double, f.region WHERE f.region IS DISTINCT FROM 'r1'`, "nc_full_proj",
		`SELECT o_id, c_id, amount * 2, region FROM (` + ncFullRec + `) u WHERE region IS DISTINCT FROM 'r1'`},
	{`TRANSFORM nc_rank_proj FROM nc_rank SELECT r, amount WHERE r <= 3`, "nc_rank_proj",
		`SELECT customer_id, id, r, amount FROM (` + ncRankRec + `) u WHERE r <= 3`},
	{`TRANSFORM nc_union_proj FROM nc_union SELECT amount WHERE branch = 1 OR amount < -2`, "nc_union_proj",
		`SELECT branch, id, c_id, amount FROM (` + ncUnionRec + `) u WHERE branch = 1 OR amount < -2`},
	{`TRANSFORM nc_by_cust_proj FROM nc_by_cust SELECT n, amount WHERE n > 1`, "nc_by_cust_proj",
		`SELECT customer_id, n, amount FROM (` + ncByCustRec + `) u WHERE n > 1`},
	{`TRANSFORM nc_left_refunds FROM nc_left l JOIN nc_refunds rf ON rf.id = l.o_id SELECT l.amount, rf.amount AS refund`, "nc_left_refunds",
		`SELECT u.o_id, u.c_id, rf.id, u.amount, rf.amount FROM (` + ncLeftRec + `) u JOIN nc_refunds rf ON rf.id = u.o_id`},
	{`TRANSFORM nc_full_cust FROM nc_full f LEFT JOIN nc_customers cu ON cu.id = f.c_id SELECT f.o_id, f.c_id, f.amount, cu.region`, "nc_full_cust",
		`SELECT u.o_id, u.c_id, cu.id, u.amount, cu.region FROM (` + ncFullRec + `) u LEFT JOIN nc_customers cu ON cu.id = u.c_id`},
	// Joins of two tables whose joined table is such a target (decision
	// 0062): their keys hold the joined target's, NULL parts and all (an
	// inner join, LEFT JOINs, and one whose both tables are such targets).
	{`TRANSFORM nc_refunds_left FROM nc_refunds rf JOIN nc_left l ON l.o_id = rf.id SELECT rf.amount AS refund, l.amount, l.region`, "nc_refunds_left",
		`SELECT rf.id, u.o_id, u.c_id, rf.amount, u.amount, u.region FROM nc_refunds rf JOIN (` + ncLeftRec + `) u ON u.o_id = rf.id`},
	{`TRANSFORM nc_refunds_full FROM nc_refunds rf LEFT JOIN nc_full f ON f.o_id = rf.id SELECT rf.amount AS refund, f.region`, "nc_refunds_full",
		`SELECT rf.id, u.o_id, u.c_id, rf.amount, u.region FROM nc_refunds rf LEFT JOIN (` + ncFullRec + `) u ON u.o_id = rf.id`},
	{`TRANSFORM nc_refunds_by_cust FROM nc_refunds rf LEFT JOIN nc_by_cust b ON b.n = rf.amount SELECT rf.amount AS refund, b.amount AS total`, "nc_refunds_by_cust",
		`SELECT rf.id, u.customer_id, rf.amount, u.amount FROM nc_refunds rf LEFT JOIN (` + ncByCustRec + `) u ON u.n = rf.amount`},
	{`TRANSFORM nc_left_union FROM nc_left l JOIN nc_union u ON u.id = l.o_id SELECT l.region, u.amount AS uamount`, "nc_left_union",
		`SELECT a.o_id, a.c_id, b.branch, b.id, b.c_id, a.region, b.amount FROM (` + ncLeftRec + `) a JOIN (` + ncUnionRec + `) b ON b.id = a.o_id`},
	{`TRANSFORM nc_rank_left FROM nc_customers cu LEFT JOIN nc_rank k ON k.customer_id = cu.id SELECT cu.region AS cregion, k.r`, "nc_rank_left",
		`SELECT cu.id, u.customer_id, u.id, cu.region, u.r FROM nc_customers cu LEFT JOIN (` + ncRankRec + `) u ON u.customer_id = cu.id`},
	// Joins of three tables reading such targets (decision 0062): as the
	// FROM table, the last table, and a table between two others.
	{`TRANSFORM nc_left_cust_ref FROM nc_left l LEFT JOIN nc_customers cu ON cu.id = l.c_id LEFT JOIN nc_refunds rf ON rf.id = l.o_id SELECT l.amount, cu.region AS cregion, rf.amount AS refund`, "nc_left_cust_ref",
		`SELECT u.o_id, u.c_id, cu.id, rf.id, u.amount, cu.region, rf.amount FROM (` + ncLeftRec + `) u LEFT JOIN nc_customers cu ON cu.id = u.c_id LEFT JOIN nc_refunds rf ON rf.id = u.o_id`},
	{`TRANSFORM nc_ord_ref_left FROM nc_orders o JOIN nc_refunds rf ON rf.id = o.id JOIN nc_left l ON l.o_id = rf.id SELECT o.customer_id, rf.amount AS refund, l.region`, "nc_ord_ref_left",
		`SELECT o.id, rf.id, u.o_id, u.c_id, o.customer_id, rf.amount, u.region FROM nc_orders o JOIN nc_refunds rf ON rf.id = o.id JOIN (` + ncLeftRec + `) u ON u.o_id = rf.id`},
	{`TRANSFORM nc_ref_full_cust FROM nc_refunds rf JOIN nc_full f ON f.o_id = rf.id LEFT JOIN nc_customers cu ON cu.id = f.c_id SELECT rf.amount AS refund, f.region, cu.region AS cregion`, "nc_ref_full_cust",
		`SELECT rf.id, u.o_id, u.c_id, cu.id, rf.amount, u.region, cu.region FROM nc_refunds rf JOIN (` + ncFullRec + `) u ON u.o_id = rf.id LEFT JOIN nc_customers cu ON cu.id = u.c_id`},
	// A window over an inner join whose joined table is such a target,
	// and its reader: the window's key holds the joined target's, NULL
	// parts and all, so its reader must leave it nullable (defined NOT
	// NULL, a row without a customer was held as a failing key).
	{`TRANSFORM nc_ref_left_ranked FROM nc_refunds rf JOIN nc_left l ON l.amount = rf.amount SELECT rf.amount AS refund, l.region, rank() OVER (PARTITION BY rf.amount ORDER BY l.region) AS rk`, "nc_ref_left_ranked",
		`SELECT rf.amount, rf.id, u.o_id, u.c_id, u.region, rank() OVER (PARTITION BY rf.amount ORDER BY u.region) FROM nc_refunds rf JOIN (` + ncLeftRec + `) u ON u.amount = rf.amount`},
	{`TRANSFORM nc_ref_left_ranked_by FROM nc_ref_left_ranked SELECT rk, count(*) AS n, count(l_c_id) AS known GROUP BY rk`, "nc_ref_left_ranked_by",
		`SELECT rk, count(*), count(c_id) FROM (SELECT u.c_id, rank() OVER (PARTITION BY rf.amount ORDER BY u.region) AS rk FROM nc_refunds rf JOIN (` + ncLeftRec + `) u ON u.amount = rf.amount) w GROUP BY rk`},
	// Chains over those: a projection of a projection, an aggregate of a
	// join, and (decision 0062) an aggregate and a projection of joins
	// whose joined table is such a target, and a join of one as its
	// joined table.
	{`TRANSFORM nc_left_proj2 FROM nc_left_proj SELECT region`, "nc_left_proj2",
		`SELECT o_id, c_id, region FROM (` + ncLeftRec + `) u WHERE amount > 4`},
	{`TRANSFORM nc_full_cust_by_c FROM nc_full_cust SELECT c_id, count(*) AS n, count(region) AS regions GROUP BY c_id`, "nc_full_cust_by_c",
		`SELECT u.c_id, count(*), count(cu.region) FROM (` + ncFullRec + `) u LEFT JOIN nc_customers cu ON cu.id = u.c_id GROUP BY u.c_id`},
	{`TRANSFORM nc_refunds_left_by_c FROM nc_refunds_left SELECT l_c_id, count(*) AS n, sum(refund) AS refund GROUP BY l_c_id`, "nc_refunds_left_by_c",
		`SELECT u.c_id, count(*), sum(rf.amount) FROM nc_refunds rf JOIN (` + ncLeftRec + `) u ON u.o_id = rf.id GROUP BY u.c_id`},
	{`TRANSFORM nc_refunds_full_proj FROM nc_refunds_full SELECT region WHERE refund > 2`, "nc_refunds_full_proj",
		`SELECT rf.id, u.o_id, u.c_id, u.region FROM nc_refunds rf LEFT JOIN (` + ncFullRec + `) u ON u.o_id = rf.id WHERE rf.amount > 2`},
	{`TRANSFORM nc_orders_refunds FROM nc_orders o JOIN nc_refunds_left x ON x.l_o_id = o.id SELECT o.customer_id, x.refund`, "nc_orders_refunds",
		`SELECT o.id, rf.id, u.o_id, u.c_id, o.customer_id, rf.amount FROM nc_orders o JOIN nc_refunds rf ON rf.id = o.id JOIN (` + ncLeftRec + `) u ON u.o_id = rf.id AND u.o_id = o.id`},
	{`TRANSFORM nc_ord_ref_left_by_c FROM nc_ord_ref_left SELECT l_c_id, count(*) AS n, sum(refund) AS refund GROUP BY l_c_id`, "nc_ord_ref_left_by_c",
		`SELECT u.c_id, count(*), sum(rf.amount) FROM nc_orders o JOIN nc_refunds rf ON rf.id = o.id JOIN (` + ncLeftRec + `) u ON u.o_id = rf.id GROUP BY u.c_id`},
	{`TRANSFORM nc_ref_full_cust_proj FROM nc_ref_full_cust SELECT cregion WHERE refund < 10`, "nc_ref_full_cust_proj",
		`SELECT rf.id, u.o_id, u.c_id, cu.id, cu.region FROM nc_refunds rf JOIN (` + ncFullRec + `) u ON u.o_id = rf.id LEFT JOIN nc_customers cu ON cu.id = u.c_id WHERE rf.amount < 10`},
	// EXISTS / IN over such a target, and readers of one with EXISTS
	// (decision 0064): the rows are found by their correlation.
	{`TRANSFORM nc_refunds_exist FROM nc_refunds r SELECT r.amount WHERE EXISTS (SELECT 1 FROM nc_left l WHERE l.amount = r.amount AND l.region IS NULL)`, "nc_refunds_exist",
		`SELECT r.id, r.amount FROM nc_refunds r WHERE EXISTS (SELECT 1 FROM (` + ncLeftRec + `) l WHERE l.amount = r.amount AND l.region IS NULL)`},
	{`TRANSFORM nc_left_refunded FROM nc_left l SELECT l.amount WHERE EXISTS (SELECT 1 FROM nc_refunds r WHERE r.id = l.o_id)`, "nc_left_refunded",
		`SELECT l.o_id, l.c_id, l.amount FROM (` + ncLeftRec + `) l WHERE EXISTS (SELECT 1 FROM nc_refunds r WHERE r.id = l.o_id)`},
	{`TRANSFORM nc_left_unmatched FROM nc_left l SELECT l.amount WHERE NOT EXISTS (SELECT 1 FROM nc_refunds r WHERE r.amount = l.amount)`, "nc_left_unmatched",
		`SELECT l.o_id, l.c_id, l.amount FROM (` + ncLeftRec + `) l WHERE NOT EXISTS (SELECT 1 FROM nc_refunds r WHERE r.amount = l.amount)`},
	{`TRANSFORM nc_full_in_by FROM nc_customers cu SELECT cu.region, count(*) AS n WHERE cu.id IN (SELECT f.c_id FROM nc_full f WHERE f.amount > 3) GROUP BY cu.region`, "nc_full_in_by",
		`SELECT cu.region, count(*) FROM nc_customers cu WHERE cu.id IN (SELECT f.c_id FROM (` + ncFullRec + `) f WHERE f.amount > 3) GROUP BY cu.region`},
	// UNION ALLs of one-table branches reading such targets (decision
	// 0064): keyed by the branch and each branch's key columns, NULL
	// parts and all; a branch beside a table's, two branches of one
	// target (one scan of it), two targets' branches sharing key columns
	// by the derived table's alias.
	{`TRANSFORM nc_left_or_refund FROM nc_left l SELECT l.amount, l.region UNION ALL SELECT r.amount, NULL FROM nc_refunds r`, "nc_left_or_refund",
		`SELECT 1::smallint, l.o_id, l.c_id, NULL::int, l.amount, l.region FROM (` + ncLeftRec + `) l UNION ALL SELECT 2, NULL, NULL, r.id, r.amount, NULL FROM nc_refunds r`},
	{`TRANSFORM nc_full_twice FROM nc_full a SELECT a.amount WHERE a.c_id IS NULL UNION ALL SELECT b.amount FROM nc_full b WHERE b.amount > 5`, "nc_full_twice",
		`SELECT 1::smallint, a.o_id, a.c_id, NULL::int, NULL::int, a.amount FROM (` + ncFullRec + `) a WHERE a.c_id IS NULL
		UNION ALL SELECT 2, NULL, NULL, b.o_id, b.c_id, b.amount FROM (` + ncFullRec + `) b WHERE b.amount > 5`},
	{`TRANSFORM nc_left_split FROM nc_left l SELECT l.amount WHERE l.amount > 5 UNION ALL SELECT l.amount FROM nc_left l WHERE l.region IS NULL`, "nc_left_split",
		`SELECT 1::smallint, l.o_id, l.c_id, l.amount FROM (` + ncLeftRec + `) l WHERE l.amount > 5 UNION ALL SELECT 2, l.o_id, l.c_id, l.amount FROM (` + ncLeftRec + `) l WHERE l.region IS NULL`},
	{`TRANSFORM nc_left_full FROM (SELECT l.amount, l.region FROM nc_left l UNION ALL SELECT f.amount, f.region FROM nc_full f) u SELECT amount * 2 AS a2 WHERE region IS DISTINCT FROM 'r1'`, "nc_left_full",
		`SELECT b, o_id, c_id, a2 FROM (SELECT 1::smallint AS b, o_id, c_id, amount * 2 AS a2, region FROM (` + ncLeftRec + `) l
		UNION ALL SELECT 2, o_id, c_id, amount * 2, region FROM (` + ncFullRec + `) f) x WHERE region IS DISTINCT FROM 'r1'`},
}

// writeNullChainSources changes orders (their customer set to none and
// back), customers (their region too) and refunds at random, several in
// one transaction at times, until stop closes.
func writeNullChainSources(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, seed*5+3))
	customer := func() any {
		if r.IntN(4) == 0 {
			return nil
		}
		return r.IntN(30) // 25..29 are never customers at first
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
				switch r.IntN(10) {
				case 0, 1:
					q, args = `INSERT INTO nc_orders VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET customer_id = EXCLUDED.customer_id`, []any{r.IntN(200), customer(), r.IntN(50)}
				case 2:
					q, args = `UPDATE nc_orders SET amount = $2 WHERE id = $1`, []any{r.IntN(200), r.IntN(50)}
				case 3:
					q, args = `UPDATE nc_orders SET customer_id = $2 WHERE id = $1`, []any{r.IntN(200), customer()}
				case 4:
					q, args = `DELETE FROM nc_orders WHERE id = $1`, []any{r.IntN(200)}
				case 5:
					var region any = "r" + string(rune('a'+r.IntN(4)))
					if r.IntN(5) == 0 {
						region = nil
					}
					q, args = `UPDATE nc_customers SET region = $2 WHERE id = $1`, []any{r.IntN(30), region}
				case 6:
					q, args = `DELETE FROM nc_customers WHERE id = $1`, []any{r.IntN(30)}
				case 7:
					q, args = `INSERT INTO nc_customers VALUES ($1, 'r' || $2::int) ON CONFLICT (id) DO NOTHING`, []any{r.IntN(30), r.IntN(4)}
				case 8:
					q, args = `INSERT INTO nc_refunds VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount`, []any{r.IntN(60), r.IntN(20)}
				case 9:
					q, args = `DELETE FROM nc_refunds WHERE id = $1`, []any{r.IntN(60)}
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

// TestChainsOverNullableKeys proves chains over targets whose key may be
// NULL (decision 0049): every reader of nullChains stays equal to its
// definition composed over its upstream's, both ways, with a strict
// self-check, while writers move rows into and out of NULL keys with two
// clients' drain workers; a NULL key appearing in an upstream fails none
// of its rebuilds (the upstream's key is left nullable).
func TestChainsOverNullableKeys(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE nc_customers (id int PRIMARY KEY, region text);
CREATE TABLE nc_orders (id int PRIMARY KEY, customer_id int, amount int NOT NULL);
CREATE TABLE nc_refunds (id int PRIMARY KEY, amount int NOT NULL);
CREATE INDEX ON nc_orders (customer_id);
INSERT INTO nc_customers SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE 'r' || (g % 3) END FROM generate_series(0, 24) g;
INSERT INTO nc_orders SELECT g, CASE WHEN g % 5 = 0 THEN NULL ELSE g % 28 END, g % 11 FROM generate_series(1, 150) g;
INSERT INTO nc_refunds SELECT g, g % 6 FROM generate_series(1, 40) g`)
	c := e.engine()
	for _, d := range nullChains {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	for _, d := range nullChains {
		e.fixIndexGaps(c, d.target)
	}
	// The readers hold NULL keys of their upstreams' (nc_left_by_c's NULL
	// group: orders without a customer).
	require.NotEmpty(t, e.rows(`SELECT n FROM nc_left_by_c WHERE c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT r FROM nc_left_ranked WHERE c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT o_id FROM nc_left_proj WHERE c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT o_id FROM nc_full_proj WHERE c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT n FROM nc_by_cust_proj WHERE customer_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT rf_id FROM nc_refunds_left WHERE l_c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT rf_id FROM nc_refunds_full WHERE f_c_id IS NULL AND f_o_id IS NOT NULL`))
	require.NotEmpty(t, e.rows(`SELECT rf_id FROM nc_refunds_by_cust WHERE b_customer_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT x_rf_id FROM nc_orders_refunds WHERE x_l_c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT o_id FROM nc_ord_ref_left WHERE l_c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT rf_id FROM nc_ref_full_cust WHERE f_c_id IS NULL AND f_o_id IS NOT NULL`))
	require.NotEmpty(t, e.rows(`SELECT amount FROM nc_left_or_refund WHERE branch = 1 AND l_c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT amount FROM nc_full_twice WHERE branch = 1 AND a_c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT amount FROM nc_left_split WHERE branch = 2 AND l_c_id IS NULL`))
	require.NotEmpty(t, e.rows(`SELECT a2 FROM nc_left_full WHERE branch = 2 AND u_c_id IS NULL`))
	// The upstream's key stays nullable: a TRUNCATE rebuilds it whole,
	// NULL keys and all, and its readers follow.
	e.exec(`TRUNCATE nc_refunds; INSERT INTO nc_refunds SELECT g, g % 5 FROM generate_series(1, 30) g`)
	e.converge(c)
	e.converge(c)

	e.connect(trellis.Options{DrainWorkers: 2})
	writes := e.writeConcurrently(3, 91, 300, writeNullChainSources)
	e.converge(c)
	e.converge(c) // a chain's upstream writes are changes of its own
	for _, d := range nullChains {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)
}
