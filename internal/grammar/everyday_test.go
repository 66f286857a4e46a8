package grammar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Outputs without AS are named as PostgreSQL names them.
func TestOutputNamesAsPostgreSQLGivesThem(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM s x SELECT a, x.b, lower(c), pg_catalog.upper(c), d::int, 1::integer, 'z'::text,
		coalesce(e, 0), nullif(e, 0), greatest(e, 1), CASE WHEN e > 0 THEN 1 END, CASE WHEN e > 0 THEN 1 ELSE f END, ARRAY[e],
		ROW(e, f), e "Bare", g AS h, (x.k)`)
	var names []string
	for _, it := range tr.Select {
		names = append(names, it.Name)
	}
	require.Equal(t, []string{"a", "b", "lower", "upper", "d", "int4", "text", "coalesce", "nullif", "greatest", "case", "f",
		"array", "row", "Bare", "h", "k"}, names)
	require.Equal(t, "e", tr.Select[14].Expr) // the bare alias is not part of the expression
}

func TestStarItems(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id SELECT *, o.*, "c".*, c.name AS n`)
	require.Equal(t, []SelectItem{{Star: true}, {Star: true, StarOf: "o"}, {Star: true, StarOf: "c"},
		{Expr: "c.name", Name: "n", Columns: []ColumnRef{col("c", "name")}}}, tr.Select)
}

func TestCommaJoinConjuncts(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM orders o, customers c SELECT o.id WHERE o.customer_id = c.id AND (c.tier > 1 OR o.price IS NULL) AND c.region = o.region`)
	require.Equal(t, []Join{{Kind: JoinInner, Table: TableRef{Table: Name{Name: "customers"}, Alias: "c"}, Comma: true}}, tr.Joins)
	eq := func(a, b ColumnRef) *JoinCond { return &JoinCond{Left: a, Right: b} }
	require.Equal(t, []Conjunct{
		{SQL: "o.customer_id = c.id", Columns: []ColumnRef{col("o", "customer_id"), col("c", "id")}, Equality: eq(col("o", "customer_id"), col("c", "id"))},
		{SQL: "c.tier > 1 OR o.price IS NULL", Columns: []ColumnRef{col("c", "tier"), col("o", "price")}},
		{SQL: "c.region = o.region", Columns: []ColumnRef{col("c", "region"), col("o", "region")}, Equality: eq(col("c", "region"), col("o", "region"))},
	}, tr.WhereConjuncts)
	// Without a comma join WHERE is not split.
	require.Empty(t, parseTransform(t, `TRANSFORM t FROM o SELECT id WHERE a = b AND c`).WhereConjuncts)
}

// USING stands for equalities, and an unqualified USING column reads the
// FROM table's, in every part of the statement.
func TestJoinUsing(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM orders LEFT JOIN notes n USING (order_id, line) SELECT order_id, n.line, count(*) AS k WHERE line > 0 GROUP BY order_id, n.line HAVING max(line) > 1`)
	require.Equal(t, []Join{{Kind: JoinLeft, Table: TableRef{Table: Name{Name: "notes"}, Alias: "n"}, Using: []string{"order_id", "line"},
		On: []JoinCond{{Left: col("orders", "order_id"), Right: col("n", "order_id")}, {Left: col("orders", "line"), Right: col("n", "line")}}}}, tr.Joins)
	require.Equal(t, "orders.order_id", tr.Select[0].Expr)
	require.Equal(t, "order_id", tr.Select[0].Name)
	require.Equal(t, "n.line", tr.Select[1].Expr)
	require.Equal(t, "orders.line > 0", tr.Where)
	require.Equal(t, []string{"orders.order_id", "n.line"}, tr.GroupBy)
	require.Equal(t, "max(orders.line) > 1", tr.Having)
	require.Equal(t, []ColumnRef{col("orders", "line")}, tr.HavingColumns)
}

// A FULL JOIN's USING column is merged as PostgreSQL defines it:
// COALESCE of both tables' columns (decision 0045), named as the column,
// in every part of the statement; a qualified reference reads its table.
func TestFullJoinUsing(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM lefts l FULL JOIN rights r USING (g) SELECT g, r.g AS rg, l.v WHERE g > 0 AND l.v IS NOT NULL`)
	require.Equal(t, []JoinCond{{Left: col("l", "g"), Right: col("r", "g")}}, tr.Joins[0].On)
	require.Equal(t, "COALESCE(l.g, r.g)", tr.Select[0].Expr)
	require.Equal(t, "g", tr.Select[0].Name)
	require.Equal(t, []ColumnRef{col("l", "g"), col("r", "g")}, tr.Select[0].Columns)
	require.Equal(t, "r.g", tr.Select[1].Expr)
	require.Equal(t, "COALESCE(l.g, r.g) > 0 AND l.v IS NOT NULL", tr.Where)
}

func TestDistinctAndGlobalAggregates(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM s SELECT DISTINCT a, b + 1 AS c`)
	require.True(t, tr.Distinct)
	require.Empty(t, tr.GroupBy) // resolved into a GROUP BY once the columns are known
	tr = parseTransform(t, `TRANSFORM t FROM s SELECT count(*), sum(v) AS total, 1 AS one HAVING count(*) > 2`)
	require.Equal(t, []string{"count", "total", "one"}, []string{tr.Select[0].Name, tr.Select[1].Name, tr.Select[2].Name})
	require.Equal(t, "count(*) > 2", tr.Having)
	require.Empty(t, tr.GroupBy)
}
