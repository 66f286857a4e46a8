package trellis_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// shapeCase is one shape of issue 11 over docsSetup's tables, with what
// Status says of it and what ALTER TRANSFORM and a transform reading its
// target do: "" accepted, else a part of the CodeValidation message.
type shapeCase struct {
	name, stmt string
	// sources and views are what Status and Definitions list (sorted).
	sources, views []string
	// gaps are the source indexes it needs, "table(columns) role"
	// (sorted), before any is created.
	gaps []string
	// add and drop are ALTER TRANSFORM ... ADD COLUMN / DROP COLUMN
	// clauses ("" skips), refusedAdd and refusedDrop what refuses them.
	add, refusedAdd, drop, refusedDrop string
	// chain selects from the target (FROM <target> t SELECT ...);
	// refusedChain is what refuses it. A target whose key may be NULL is
	// read by an aggregate (decision 0049) or a projection (0054).
	chain, refusedChain string
	// bad is a column ALTER TRANSFORM adds that fails on some rows (""
	// where ALTER is refused): it is quarantined until they are fixed.
	bad string
}

var shapeCases = []shapeCase{
	{name: "projection", stmt: "FROM orders SELECT *, price * qty AS amount WHERE status = 'paid'",
		sources: []string{"public.orders"}, bad: "100 / (qty - 2) AS bad",
		add: "upper(status) AS st", drop: "amount", chain: "t.id, t.price"},
	{name: "join", stmt: "FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id, c.region, o.price",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) join_from"}, bad: "100 / (o.qty - 2) AS bad",
		add: "upper(c.name) AS cname", drop: "price", chain: "t.id, t.c_id, t.region"},
	{name: "left join", stmt: "FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT o.id, c.region",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) join_from"}, bad: "100 / (o.qty - 2) AS bad",
		add: "c.name", drop: "region", chain: "t.id, t.c_id, t.name WHERE t.id % 2 = 0"},
	{name: "comma join", stmt: "FROM orders o, customers c SELECT o.id, c.region WHERE o.customer_id = c.id AND c.active",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) join_from"}, bad: "100 / (o.qty - 2) AS bad",
		add: "o.price", drop: "region", chain: "t.id, t.c_id"},
	{name: "USING", stmt: "FROM order_items JOIN notes USING (order_id) SELECT *",
		sources: []string{"public.notes", "public.order_items"}, gaps: []string{"public.order_items(order_id) join_from"}, bad: "100 / (order_items.qty - 3) AS bad",
		add: "notes.note || '!' AS loud", drop: "note", chain: "t.id, t.qty"},
	{name: "right join", stmt: "FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id SELECT c.region, o.id AS order_id",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) join_joined"}, bad: "100 / (o.qty - 2) AS bad",
		add: "o.price", drop: "region", chain: "t.price"},
	{name: "full join", stmt: "FROM orders o FULL JOIN customers c ON c.id = o.customer_id SELECT o.id, c.region",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) join_from"}, bad: "100 / (o.qty - 2) AS bad",
		add: "o.price", drop: "region", chain: "t.price WHERE t.price > 1"},
	{name: "star join", stmt: "FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN products p ON p.id = o.product_id SELECT o.id, c.name, p.title",
		sources: []string{"public.customers", "public.orders", "public.products"}, bad: "100 / (o.qty - 2) AS bad",
		gaps: []string{"public.orders(customer_id) join_from", "public.orders(product_id) join_from"},
		add:  "p.price", drop: "title", chain: "t.name, t.price"},
	{name: "chain join grouped", stmt: "FROM order_items i JOIN orders o ON o.id = i.order_id JOIN customers c ON c.id = o.customer_id SELECT c.region, sum(i.qty) AS qty GROUP BY c.region",
		sources: []string{"public.customers", "public.order_items", "public.orders"}, bad: "sum(100 / (i.qty - 3)) AS bad",
		gaps: []string{"public.customers(region) group_by", "public.order_items(order_id) join_from", "public.orders(customer_id) join_from"},
		add:  "count(*) AS n", drop: "qty", chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "EXISTS", stmt: "FROM customers c SELECT c.id, c.name WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) join_joined"}, bad: "100 / (c.region_id - 2) AS bad",
		add: "c.region", drop: "name", chain: "t.id"},
	{name: "NOT EXISTS grouped", stmt: "FROM customers c SELECT c.region, count(*) AS n WHERE NOT EXISTS (SELECT FROM orders WHERE customer_id = c.id AND status = 'gone') GROUP BY c.region",
		sources: []string{"public.customers", "public.orders"}, bad: "sum(100 / (c.region_id - 2)) AS bad",
		gaps: []string{"public.customers(region) group_by", "public.orders(customer_id) join_joined"},
		add:  "max(c.id) AS top", drop: "n", chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "IN", stmt: "FROM orders o SELECT o.id, o.qty WHERE o.product_id IN (SELECT p.id FROM products p WHERE p.price > 10)",
		sources: []string{"public.orders", "public.products"}, gaps: []string{"public.orders(product_id) join_from"}, bad: "100 / (o.qty - 2) AS bad",
		add: "o.price", drop: "qty", chain: "t.id"},
	{name: "GROUP BY", stmt: "FROM orders SELECT region, sum(price) AS revenue GROUP BY region",
		sources: []string{"public.orders"}, gaps: []string{"public.orders(region) group_by"}, bad: "sum(100 / (qty - 2)) AS bad",
		add: "count(*) AS n", drop: "revenue", chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "HAVING", stmt: "FROM orders SELECT customer_id, count(*) AS n GROUP BY customer_id HAVING count(*) > 1",
		sources: []string{"public.orders"}, gaps: []string{"public.orders(customer_id) group_by"}, bad: "sum(100 / (qty - 2)) AS bad",
		add: "sum(price) AS total", drop: "n", chain: "t.customer_id, count(*) AS n GROUP BY t.customer_id"},
	{name: "DISTINCT", stmt: "FROM orders SELECT DISTINCT region, status",
		sources: []string{"public.orders"}, gaps: []string{"public.orders(region, status) group_by"}, bad: "sum(100 / (qty - 2)) AS bad",
		add: "count(*) AS n", drop: "status", refusedDrop: "key", chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "no GROUP BY", stmt: "FROM orders SELECT count(*), sum(price) AS revenue",
		sources: []string{"public.orders"}, bad: "sum(100 / (qty - 2)) AS bad",
		add: "max(price) AS top", drop: "revenue", chain: "t.count", refusedChain: "no key column"},
	{name: "window", stmt: "FROM orders SELECT customer_id, price, rank() OVER (PARTITION BY customer_id ORDER BY price DESC) AS r",
		sources: []string{"public.orders"}, gaps: []string{"public.orders(customer_id) partition_by"}, bad: "100 / (qty - 2) AS bad",
		add: "status", drop: "price", chain: "t.id, count(*) AS n GROUP BY t.id"},
	{name: "window over the whole table", stmt: "FROM orders SELECT id, sum(price) OVER (ORDER BY placed_at, id) AS running_total",
		sources: []string{"public.orders"}, bad: "100 / (qty - 2) AS bad",
		add: "status", drop: "running_total", chain: "t.id"},
	{name: "top-k", stmt: "FROM orders SELECT id, price ORDER BY price DESC, id LIMIT 10",
		sources: []string{"public.orders"}, gaps: []string{"public.orders(price DESC, id) order_by"}, bad: "100 / (qty - 2) AS bad",
		add: "status", drop: "price", chain: "t.id"},
	{name: "top-k per group", stmt: "FROM (SELECT id, customer_id, price, row_number() OVER (PARTITION BY customer_id ORDER BY price DESC, id) AS rn FROM orders) s SELECT * WHERE rn <= 3",
		sources: []string{"public.orders"}, gaps: []string{"public.orders(customer_id) partition_by"}, bad: "100 / (s.qty - 2) AS bad",
		add: "s.status", drop: "price", chain: "t.id, count(*) AS n GROUP BY t.id"},
	{name: "DISTINCT ON", stmt: "FROM orders SELECT DISTINCT ON (customer_id) customer_id, price ORDER BY customer_id, placed_at DESC, id",
		sources: []string{"public.orders"}, gaps: []string{"public.orders(customer_id) partition_by"}, bad: "100 / (qty - 2) AS bad",
		add: "status", drop: "price", chain: "t.customer_id, count(*) AS n GROUP BY t.customer_id"},
	{name: "full join USING", stmt: "FROM orders o FULL JOIN vip v USING (customer_id) SELECT customer_id, o.price",
		sources: []string{"public.orders", "public.vip"}, gaps: []string{"public.orders(customer_id) join_from"}, bad: "100 / (o.qty - 2) AS bad",
		add: "o.status", drop: "price", chain: "t.o_id, count(*) AS n GROUP BY t.o_id"},
	{name: "window over a join", stmt: "FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.region, o.id, o.price, rank() OVER (PARTITION BY c.region ORDER BY o.price DESC) AS r",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.customers(region) partition_by", "public.orders(customer_id) join_from"}, bad: "100 / (o.qty - 2) AS bad",
		add: "o.status", drop: "price", chain: "t.id, count(*) AS n GROUP BY t.id"},
	{name: "top-k over a join", stmt: "FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id, o.price, c.name ORDER BY o.price DESC, o.id LIMIT 10",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) join_from"}, bad: "100 / (o.qty - 2) AS bad",
		add: "c.region", drop: "name", chain: "t.id"},
	{name: "DISTINCT ON over a join", stmt: "FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT DISTINCT ON (o.customer_id) o.customer_id, c.name, o.price ORDER BY o.customer_id, o.placed_at DESC, o.id",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) partition_by"}, bad: "100 / (o.qty - 2) AS bad",
		add: "c.region", drop: "price", chain: "t.customer_id, count(*) AS n GROUP BY t.customer_id"},
	{name: "UNION ALL", stmt: "FROM sales s SELECT s.id, s.amount WHERE s.amount > 0 UNION ALL SELECT id, -amount FROM refunds",
		sources: []string{"public.refunds", "public.sales"},
		add:     "s.region", refusedAdd: "set operation", drop: "amount", refusedDrop: "set operation", chain: "t.id"},
	{name: "UNION", stmt: "FROM sales SELECT region UNION SELECT region FROM refunds",
		sources: []string{"public.refunds", "public.sales"}, gaps: []string{"public.refunds(region) group_by", "public.sales(region) group_by"},
		add: "amount", refusedAdd: "set operation", chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "INTERSECT and EXCEPT", stmt: "FROM sales SELECT region INTERSECT SELECT region FROM refunds EXCEPT SELECT region FROM closed",
		sources: []string{"public.closed", "public.refunds", "public.sales"}, gaps: []string{"public.refunds(region) group_by", "public.sales(region) group_by"},
		chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "INTERSECT ALL and EXCEPT ALL", stmt: "FROM sales SELECT region INTERSECT ALL SELECT region FROM refunds EXCEPT ALL SELECT region FROM closed",
		sources: []string{"public.closed", "public.refunds", "public.sales"}, gaps: []string{"public.refunds(region) group_by", "public.sales(region) group_by"},
		add: "amount", refusedAdd: "set operation", chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "aggregate over UNION ALL", stmt: "WITH u AS (SELECT region, amount FROM sales WHERE amount > 0 UNION ALL SELECT region, -amount FROM refunds) FROM u SELECT region, sum(amount) AS total, count(*) AS n GROUP BY region",
		sources: []string{"public.refunds", "public.sales"}, gaps: []string{"public.refunds(region) group_by", "public.sales(region) group_by"},
		add: "max(amount) AS top", refusedAdd: "aggregates over a set operation", drop: "n", refusedDrop: "aggregates over a set operation",
		chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "aggregate over UNION and EXCEPT ALL", stmt: "WITH u AS (SELECT region, amount FROM sales UNION SELECT region, amount FROM refunds EXCEPT ALL SELECT region, 0 FROM closed) FROM u SELECT region, sum(amount) AS total, count(*) AS n GROUP BY region",
		sources: []string{"public.closed", "public.refunds", "public.sales"}, gaps: []string{"public.refunds(region) group_by", "public.sales(region) group_by"},
		add: "max(amount) AS top", refusedAdd: "aggregates over a set operation", drop: "n", refusedDrop: "aggregates over a set operation",
		chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "UNION ALL of aggregating branches over joins", stmt: "FROM order_items i JOIN orders o ON o.id = i.order_id SELECT o.region, sum(i.qty) AS qty, count(*) AS n GROUP BY o.region UNION ALL SELECT c.region, count(o.id), count(*) FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.region",
		sources: []string{"public.customers", "public.order_items", "public.orders"},
		gaps:    []string{"public.customers(region) group_by", "public.order_items(order_id) join_from", "public.orders(customer_id) join_joined", "public.orders(region) group_by"},
		add:     "max(i.qty) AS top", refusedAdd: "set operation", drop: "n", refusedDrop: "set operation",
		chain: "t.region, sum(t.n) AS n GROUP BY t.region"},
	{name: "filter of a UNION ALL in a derived table", stmt: "FROM (SELECT id, amount FROM sales UNION ALL SELECT id, amount FROM refunds) m SELECT id, amount * 2 AS twice WHERE amount > 1",
		sources: []string{"public.refunds", "public.sales"},
		add:     "amount", refusedAdd: "set operation", chain: "t.id"},
	{name: "derived table", stmt: "FROM (SELECT id, price * qty AS amount FROM orders WHERE status = 'paid') p SELECT p.id, p.amount WHERE p.amount > 10",
		sources: []string{"public.orders"}, bad: "100 / (p.qty - 2) AS bad",
		add: "p.price", drop: "amount", chain: "t.id"},
	{name: "aggregating derived table", stmt: "FROM (SELECT region, sum(price) AS revenue FROM orders GROUP BY region) r SELECT region, revenue WHERE revenue > 1000",
		sources: []string{"public.orders"}, gaps: []string{"public.orders(region) group_by"}, bad: "sum(100 / (r.qty - 2)) AS bad",
		add: "count(*) AS n", drop: "revenue", chain: "t.region, count(*) AS n GROUP BY t.region"},
	{name: "CTE", stmt: "WITH paid AS (SELECT id, customer_id FROM orders WHERE status = 'paid') FROM paid p JOIN customers c ON c.id = p.customer_id SELECT p.id, c.region",
		sources: []string{"public.customers", "public.orders"}, gaps: []string{"public.orders(customer_id) join_from"}, bad: "100 / (p.qty - 2) AS bad",
		add: "p.price", drop: "region", chain: "t.id"},
	{name: "view", stmt: "FROM paid_orders p JOIN customers c ON c.id = p.customer_id SELECT p.id, c.region",
		sources: []string{"public.customers", "public.orders"}, views: []string{"public.paid_orders"}, gaps: []string{"public.orders(customer_id) join_from"}, bad: "100 / (p.qty - 2) AS bad",
		add: "p.price", drop: "region", chain: "t.id"},
}

// Every shape of issue 11 is first class: Status and Definitions list
// every source table (and view), SourceIndexGaps lists the indexes its
// recompute needs with fixes PostgreSQL accepts (and once they run, no
// gap is left), ALTER TRANSFORM ... ADD/DROP COLUMN works or is refused
// with CodeValidation saying why, a transform reading its target works or
// is refused naming why, and after writes a strict self-check agrees.
func TestShapesFirstClass(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, q := range docsSetup {
		e.exec(q)
	}
	fillDocsTables(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	target := func(i int) string { return fmt.Sprintf("s%02d", i) }
	for i, s := range shapeCases {
		_, err := c.Define(e.ctx, "TRANSFORM "+target(i)+" "+s.stmt)
		require.NoError(t, err, s.name)
	}
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	byTarget := map[string]trellis.DefinitionSummary{}
	for _, d := range defs {
		byTarget[d.Target] = d
	}
	for i, s := range shapeCases {
		st := e.waitState(c, target(i), trellis.StateLive)
		require.Equal(t, s.sources, sorted(st.Sources), "%s: Status.Sources", s.name)
		require.Equal(t, s.views, sorted(st.Views), "%s: Status.Views", s.name)
		d := byTarget["public."+target(i)]
		require.Equal(t, s.sources, sorted(d.Sources), "%s: Definitions' Sources", s.name)
		require.Equal(t, s.views, sorted(d.Views), "%s: Definitions' Views", s.name)
		var gaps []string
		for _, g := range st.SourceIndexGaps {
			require.NotEmpty(t, g.Fix, "%s: gap %+v has no fix", s.name, g)
			gaps = append(gaps, fmt.Sprintf("%s(%s) %s", g.Table, strings.Join(g.Columns, ", "), g.Role))
		}
		require.Equal(t, s.gaps, sorted(gaps), "%s: SourceIndexGaps", s.name)
	}

	alter := func(s shapeCase, i int, clause, refused string) {
		t.Helper()
		_, err := c.Apply(e.ctx, "ALTER TRANSFORM "+target(i)+" "+clause)
		checkRefusal(t, fmt.Sprintf("%s: ALTER TRANSFORM ... %s", s.name, clause), err, refused)
		if err == nil {
			e.waitState(c, target(i), trellis.StateLive)
		}
	}
	for i, s := range shapeCases {
		if s.add != "" {
			alter(s, i, "ADD COLUMN "+s.add, s.refusedAdd)
		}
		if s.drop != "" {
			alter(s, i, "DROP COLUMN "+s.drop, s.refusedDrop)
		}
	}
	for i, s := range shapeCases {
		_, err := c.Define(e.ctx, fmt.Sprintf("TRANSFORM %s_reader FROM %s t SELECT %s", target(i), target(i), s.chain))
		checkRefusal(t, s.name+": a transform reading its target", err, s.refusedChain)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Every fix is a statement PostgreSQL accepts, and closes its gap (a
	// self-check needs them).
	for i := range shapeCases {
		st, err := c.Status(e.ctx, target(i))
		require.NoError(t, err)
		for _, g := range st.SourceIndexGaps {
			e.exec(g.Fix)
		}
	}
	for i, s := range shapeCases {
		st, err := c.Status(e.ctx, target(i))
		require.NoError(t, err)
		require.Empty(t, st.SourceIndexGaps, "%s: its fixes ran", s.name)
	}

	// Writes to every table, then every target agrees with its definition.
	e.exec(`UPDATE orders SET price = price + 1, customer_id = customer_id + 1 WHERE id % 7 = 0`)
	e.exec(`UPDATE orders SET status = 'paid', region = 'r9' WHERE id % 5 = 1`)
	e.exec(`DELETE FROM orders WHERE id % 13 = 0`)
	e.exec(`UPDATE customers SET region = 'r7', active = NOT active WHERE id % 4 = 1`)
	e.exec(`DELETE FROM customers WHERE id = 5`)
	e.exec(`UPDATE products SET price = price * 4 WHERE id % 3 = 0`)
	e.exec(`UPDATE order_items SET qty = qty + 2, order_id = order_id + 1 WHERE id % 6 = 0`)
	e.exec(`DELETE FROM notes WHERE line % 9 = 0`)
	e.exec(`UPDATE sales SET amount = -amount, region = 'r1' WHERE id % 4 = 0`)
	e.exec(`INSERT INTO refunds VALUES (100, 5, 'r8')`)
	e.exec(`DELETE FROM closed WHERE region = 'r6'`)
	e.converge(c)
	for i, s := range shapeCases {
		st, err := c.Status(e.ctx, target(i))
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, s.name)
		requireConsistent(t, s.name, e.selfCheck(c, target(i), trellis.SelfCheckStrict))
	}

	// A column that fails on some rows is quarantined alone, with its
	// failed rows as samples, in every shape ALTER TRANSFORM takes; once
	// the rows are fixed and the column resumed, the target is exact.
	for i, s := range shapeCases {
		if s.bad != "" {
			_, err := c.Apply(e.ctx, "ALTER TRANSFORM "+target(i)+" ADD COLUMN "+s.bad)
			require.NoError(t, err, s.name)
		}
	}
	for i, s := range shapeCases {
		if s.bad != "" {
			q := e.waitQuarantine(c, target(i)+".bad", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
			require.Positive(t, q.Rows, "%s: %+v", s.name, q)
			require.Equal(t, pgerrcode.DivisionByZero, q.SQLState, s.name)
		}
	}
	e.exec(`UPDATE orders SET qty = 7 WHERE qty = 2`)
	e.exec(`UPDATE customers SET region_id = 7 WHERE region_id = 2`)
	e.exec(`UPDATE order_items SET qty = 8 WHERE qty = 3`)
	for i, s := range shapeCases {
		if s.bad != "" {
			_, err := c.Apply(e.ctx, "RESUME TRANSFORM "+target(i)+".bad")
			require.NoError(t, err, s.name)
		}
	}
	e.converge(c)
	for i, s := range shapeCases {
		e.pollStatus(c, target(i), stateWaitCap, 20*time.Millisecond, s.name+" did not come back live with every column",
			func(st *trellis.Status) bool { return st.State == trellis.StateLive && len(st.BackfillingColumns) == 0 })
		requireConsistent(t, s.name, e.selfCheck(c, target(i), trellis.SelfCheckStrict))
	}

	// A schema dump loads every shape: defined again in a fresh database,
	// each is built from its rows and agrees with its definition. A view
	// there has another OID: the transform reading it follows the view of
	// its name whose definition is the one it inlined.
	res := e.structureDump(c, nil)
	e2 := e.fresh()
	e2.load(res.SQL)
	fillDocsTables(e2)
	c2 := e2.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	for i, s := range shapeCases {
		st := e2.waitState(c2, target(i), trellis.StateLive)
		require.Equal(t, s.sources, sorted(st.Sources), "%s: loaded from the dump", s.name)
		requireConsistent(t, s.name, e2.selfCheck(c2, target(i), trellis.SelfCheckStrict))
	}
}

// fillDocsTables inserts rows into docsSetup's tables.
func fillDocsTables(e *env) {
	e.t.Helper()
	e.exec(`INSERT INTO customers SELECT g, 'c' || g, 'r' || (g % 3), g % 4, g % 2 = 0 FROM generate_series(1, 20) g`)
	e.exec(`INSERT INTO products SELECT g, 'p' || g, g * 3 FROM generate_series(1, 10) g`)
	e.exec(`INSERT INTO orders SELECT g, g % 23, g % 11, g % 40, g % 5, CASE WHEN g % 3 = 0 THEN 'paid' ELSE 'open' END, 'r' || (g % 4),
		timestamptz '2026-01-01' + g * interval '1 hour' FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO order_items SELECT g, g % 210, g % 12, g % 7 FROM generate_series(1, 300) g`)
	e.exec(`INSERT INTO notes SELECT g % 150, g, 'n' || g FROM generate_series(1, 100) g`)
	e.exec(`INSERT INTO sales SELECT g, g - 30, 'r' || (g % 5) FROM generate_series(1, 60) g`)
	e.exec(`INSERT INTO refunds SELECT g, g, 'r' || (g % 7) FROM generate_series(1, 40) g`)
	e.exec(`INSERT INTO closed VALUES ('r1'), ('r6')`)
}

// checkRefusal reports (without stopping the test) unless err is nil when
// refused is "", or a CodeValidation error saying refused.
func checkRefusal(t *testing.T, what string, err error, refused string) {
	t.Helper()
	switch {
	case refused == "" && err != nil:
		t.Errorf("%s: refused: %v", what, err)
	case refused == "":
	case err == nil:
		t.Errorf("%s: accepted, want it refused saying %q", what, refused)
	case trellis.CodeOf(err) != trellis.CodeValidation || !strings.Contains(err.Error(), refused):
		t.Errorf("%s: refused with %v, want CodeValidation saying %q", what, err, refused)
	}
}

func sorted(xs []string) []string {
	if len(xs) == 0 {
		return nil
	}
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}
