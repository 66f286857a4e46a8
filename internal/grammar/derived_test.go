package grammar

import (
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// A derived table or CTE that only projects and filters is merged into
// the statement around it: its table takes the derived table's name, its
// WHERE joins the outer one, and the outer parts read its expressions.
func TestDerivedTableInlined(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM (SELECT id, price * 2 AS p FROM orders o WHERE o.status = 'paid') s SELECT s.id, p + 1 AS q WHERE s.p > 10`)
	require.Equal(t, TableRef{Table: Name{Name: "orders"}, Alias: "s"}, tr.From)
	require.Empty(t, tr.Joins)
	require.Equal(t, []SelectItem{
		{Expr: "s.id", Name: "id", Columns: []ColumnRef{col("s", "id")}},
		{Expr: "(s.price * 2) + 1", Name: "q", Columns: []ColumnRef{col("s", "price")}},
	}, tr.Select)
	require.Equal(t, "s.status = 'paid' AND (s.price * 2) > 10", tr.Where)

	// * of a derived table is its outputs; * inside it stays a star of its table.
	tr = parseTransform(t, `TRANSFORM t FROM (SELECT *, v + 1 AS w FROM items WHERE v > 0) s SELECT *`)
	require.Equal(t, []SelectItem{{Star: true, StarOf: "s"}, {Expr: "s.v + 1", Name: "w", Columns: []ColumnRef{col("s", "v")}}}, tr.Select)

	// A CTE read once is a derived table; later CTEs read earlier ones.
	tr = parseTransform(t, `TRANSFORM t WITH a AS (SELECT id, x FROM t1), b AS NOT MATERIALIZED (SELECT id, x + 1 AS y FROM a WHERE x > 0)
		FROM b JOIN owners o ON o.id = b.id SELECT b.y, o.name`)
	require.Equal(t, TableRef{Table: Name{Name: "t1"}, Alias: "b"}, tr.From)
	require.Equal(t, []JoinCond{{Left: col("o", "id"), Right: col("b", "id")}}, tr.Joins[0].On)
	require.Equal(t, "b.x + 1", tr.Select[0].Expr)
	require.Equal(t, "b.x > 0", tr.Where)

	// A joined derived table: its WHERE filters the join (an inner one).
	tr = parseTransform(t, `TRANSFORM t FROM orders o JOIN (SELECT id, region FROM customers WHERE active) c ON c.id = o.customer_id SELECT o.id, c.region`)
	require.Equal(t, TableRef{Table: Name{Name: "customers"}, Alias: "c"}, tr.Joins[0].Table)
	require.Equal(t, "c.active", tr.Where)

	// Column names after the alias rename the outputs; nested derived tables merge too.
	tr = parseTransform(t, `TRANSFORM t FROM (SELECT a.id, b.v FROM (SELECT id FROM a WHERE id > 1) a JOIN b ON a.id = b.aid) s (k, w) SELECT k, w`)
	require.Equal(t, "a.id", tr.Select[0].Expr)
	require.Equal(t, "k", tr.Select[0].Name)
	require.Equal(t, "a.id > 1", tr.Where)
}

// An aggregating derived table whose outer statement only projects and
// filters its groups is that aggregate: the outer WHERE becomes HAVING.
func TestAggregatedDerivedTableInlined(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM (SELECT region, sum(price) AS total FROM orders GROUP BY region) s SELECT region, total * 2 AS dbl WHERE total > 100`)
	require.Equal(t, []string{"s.region"}, tr.GroupBy)
	require.Equal(t, "sum(s.price) * 2", tr.Select[1].Expr)
	require.True(t, tr.Select[1].HasAggregate)
	require.Equal(t, "", tr.Where)
	require.Equal(t, "sum(s.price) > 100", tr.Having)

	tr = parseTransform(t, `TRANSFORM t FROM (SELECT DISTINCT region, status FROM orders) s SELECT region, status`)
	require.Equal(t, []string{"s.region", "s.status"}, tr.GroupBy)

	tr = parseTransform(t, `TRANSFORM t FROM (SELECT count(*) AS n FROM orders) s SELECT n WHERE n > 0`)
	require.Empty(t, tr.GroupBy)
	require.Equal(t, "count(*) > 0", tr.Having)
	require.True(t, tr.Aggregated())
}

// What cannot be merged is refused, naming the construct.
func TestDerivedTableRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ stmt, msg string }{
		{`TRANSFORM t WITH RECURSIVE a AS (SELECT id FROM t1) FROM a SELECT *`, "recursive CTEs are not supported; define the non-recursive part as a transform"},
		{`TRANSFORM t FROM (WITH RECURSIVE a AS (SELECT id FROM t1) SELECT id FROM a) s SELECT *`, "recursive CTEs are not supported"},
		{`TRANSFORM t WITH a AS (SELECT id FROM t1) FROM a JOIN a a2 ON a.id = a2.id SELECT a.id`, `CTE "a" is read twice`},
		{`TRANSFORM t WITH a AS (SELECT id FROM t1), b AS (SELECT id FROM a) FROM a JOIN b ON a.id = b.id SELECT a.id`, `CTE "a" is read twice`},
		{`TRANSFORM t WITH d AS (DELETE FROM x RETURNING *) FROM d SELECT *`, "data-modifying statements"},
		{`TRANSFORM t FROM (SELECT id FROM x LIMIT 3) s SELECT *`, "LIMIT, OFFSET and FETCH are not supported"},
		{`TRANSFORM t FROM (SELECT id, now() AS n FROM x) s SELECT *`, "now() reads the clock"},
		{`TRANSFORM t FROM (SELECT id FROM x) SELECT *`, "a derived table needs an alias"},
		{`TRANSFORM t FROM (SELECT 1 AS one) s SELECT *`, "a query without FROM"},
		{`TRANSFORM t FROM (VALUES (1)) s SELECT *`, "VALUES is not supported"},
		{`TRANSFORM t FROM x JOIN LATERAL (SELECT id FROM y) s ON s.id = x.id SELECT x.id`, "LATERAL is not supported"},
		{`TRANSFORM t FROM (SELECT g, count(*) AS n FROM x GROUP BY g) s JOIN y ON y.g = s.g SELECT s.n`, "define it as a transform of its own and join its target"},
		{`TRANSFORM t FROM (SELECT g, count(*) AS n FROM x GROUP BY g) s SELECT sum(n) AS total`, "aggregates already"},
		{`TRANSFORM t FROM x LEFT JOIN (SELECT id, v FROM y WHERE v > 0) s ON s.id = x.id SELECT x.id, s.v`, "nullable side of an outer join and has a WHERE"},
		{`TRANSFORM t FROM x LEFT JOIN (SELECT id, coalesce(v, 0) AS v FROM y) s ON s.id = x.id SELECT x.id, s.v`, `column "v" is an expression`},
		{`TRANSFORM t FROM x JOIN (SELECT id, v + 1 AS w FROM y) s ON s.w = x.id SELECT x.id`, "a JOIN condition compares columns"},
		{`TRANSFORM t FROM (SELECT id FROM x) s SELECT s.nope`, `column "s.nope" does not exist in derived table "s"`},
		{`TRANSFORM t FROM (SELECT id, v FROM x) s (a, b, c) SELECT a`, "has 2 columns but 3 names are given"},
		{`WITH a AS (SELECT id FROM t1) TRANSFORM t FROM a SELECT *`, "write the WITH clause after the target"},
		{`TRANSFORM t FROM (SELECT DISTINCT ON (g) g, v FROM x) s SELECT *`, "DISTINCT ON is not supported"},
		{`TRANSFORM t FROM (SELECT id, sum(v) OVER (PARTITION BY g) AS total FROM x) s SELECT id, total WHERE total > 3`, "computes window functions"},
	} {
		_, err := Parse(tc.stmt)
		var pe *Error
		require.True(t, errors.As(err, &pe), "%s: %v", tc.stmt, err)
		require.Contains(t, pe.Msg, tc.msg, tc.stmt)
	}
}

// inline prints a merged statement from the fields of Transform: a field
// added to Transform must be printed there too (or inlining would drop
// it silently). This list is what inline.go handles.
func TestInlinePrintsEveryTransformField(t *testing.T) {
	t.Parallel()
	known := []string{"Target", "From", "Joins", "Select", "Where", "WhereColumns", "GroupBy", "GroupByColumns",
		"Having", "HavingColumns", "Distinct", "WhereConjuncts", "WithoutSourceIndex", "Functions",
		// Read again from the select list of the printed statement:
		"Windows", "WindowFunctions",
		// A derived table's RIGHT JOIN is printed as written (renderTables);
		// the statement around it is swapped once it is parsed again:
		"Swapped",
		// Refused over and inside a derived table:
		"DistinctOn", "DistinctOnColumns", "OrderBy", "OrderByColumns", "OrderByPlain", "Limit", "RankOutput", "DistinctOnPlain", "SubJoins",
		// Attached after the first branch is inlined (setop.go):
		"SetOp"}
	var fields []string
	rt := reflect.TypeOf(Transform{})
	for i := 0; i < rt.NumField(); i++ {
		fields = append(fields, rt.Field(i).Name)
	}
	require.ElementsMatch(t, known, fields, "a new field of Transform: print it in (*stmtParser).inline, then list it here")
}
