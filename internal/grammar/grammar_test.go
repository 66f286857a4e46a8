package grammar

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	pg_query "github.com/wasilibs/go-pgquery"
)

func parseTransform(t *testing.T, stmt string) *Transform {
	t.Helper()
	st, err := Parse(stmt)
	require.NoError(t, err)
	tr, ok := st.(*Transform)
	require.Truef(t, ok, "got %T", st)
	requireRoundTrip(t, tr)
	return tr
}

// requireRoundTrip checks that every canonical expression parses back
// (as `SELECT <expr>`) into one unnamed target that deparses to itself.
func requireRoundTrip(t *testing.T, tr *Transform) {
	t.Helper()
	exprs := append([]string{}, tr.GroupBy...)
	for _, s := range tr.Select {
		if !s.Star {
			exprs = append(exprs, s.Expr)
		}
	}
	if tr.Having != "" {
		exprs = append(exprs, tr.Having)
	}
	if tr.Where != "" {
		exprs = append(exprs, tr.Where)
	}
	for _, e := range exprs {
		tree, err := pg_query.Parse("SELECT " + e)
		require.NoError(t, err, e)
		require.Len(t, tree.GetStmts(), 1, e)
		targets := tree.GetStmts()[0].GetStmt().GetSelectStmt().GetTargetList()
		require.Len(t, targets, 1, e)
		require.Empty(t, targets[0].GetResTarget().GetName(), e)
		out, err := pg_query.Deparse(tree)
		require.NoError(t, err, e)
		require.Equal(t, "SELECT "+e, out)
	}
}

func col(q, c string) ColumnRef { return ColumnRef{Qualifier: q, Column: c} }

func TestParseTransformBasic(t *testing.T) {
	t.Parallel()
	got := parseTransform(t, "TRANSFORM order_totals FROM orders SELECT price + tax AS total")
	require.Equal(t, &Transform{
		Target: Name{Name: "order_totals"},
		From:   TableRef{Table: Name{Name: "orders"}},
		Select: []SelectItem{{Expr: "price + tax", Name: "total", Columns: []ColumnRef{col("", "price"), col("", "tax")}}},
	}, got)
}

func TestParseTransformFull(t *testing.T) {
	t.Parallel()
	got := parseTransform(t, `transform Reports."Order Totals" from shop.Orders AS o
		inner join customers c on o.customer_id = c.id
		LEFT OUTER JOIN regions AS r ON r.id = c.region_id AND r.country = o.country
		select o.id as id, lower(c.name) as Name, r.name AS region,
		       CAST(o.total AS numeric(10, 2)) AS total
		where o.total > 10 and c.active and lower(c.name) <> ''
		without source index;`)
	require.Equal(t, &Transform{
		Target: Name{Schema: "reports", Name: "Order Totals"},
		From:   TableRef{Table: Name{Schema: "shop", Name: "orders"}, Alias: "o"},
		Joins: []Join{
			{Kind: JoinInner, Table: TableRef{Table: Name{Name: "customers"}, Alias: "c"},
				On: []JoinCond{{Left: col("o", "customer_id"), Right: col("c", "id")}}},
			{Kind: JoinLeft, Table: TableRef{Table: Name{Name: "regions"}, Alias: "r"},
				On: []JoinCond{{Left: col("r", "id"), Right: col("c", "region_id")}, {Left: col("r", "country"), Right: col("o", "country")}}},
		},
		Select: []SelectItem{
			{Expr: "o.id", Name: "id", Columns: []ColumnRef{col("o", "id")}},
			{Expr: "lower(c.name)", Name: "name", Columns: []ColumnRef{col("c", "name")}},
			{Expr: "r.name", Name: "region", Columns: []ColumnRef{col("r", "name")}},
			{Expr: "o.total::numeric(10, 2)", Name: "total", Columns: []ColumnRef{col("o", "total")}},
		},
		Where:              "o.total > 10 AND c.active AND lower(c.name) <> ''",
		WhereColumns:       []ColumnRef{col("o", "total"), col("c", "active"), col("c", "name")},
		WithoutSourceIndex: true,
		Functions:          []string{"lower"},
	}, got)
}

func TestParseTransformGroupBy(t *testing.T) {
	t.Parallel()
	got := parseTransform(t, `TRANSFORM daily_sales FROM sales
		SELECT date_trunc('day', created_at) AS day, region AS region,
		       count(*) AS n, sum(amount) FILTER (WHERE amount > 0) AS gross,
		       count(DISTINCT customer_id) AS customers,
		       percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) AS median,
		       sum(amount) / count(*) + region_weight AS weighted
		WHERE NOT refunded
		GROUP BY date_trunc('day', created_at), region, region_weight`)
	require.Equal(t, []string{"date_trunc('day', created_at)", "region", "region_weight"}, got.GroupBy)
	require.Equal(t, []ColumnRef{col("", "created_at"), col("", "region"), col("", "region_weight")}, got.GroupByColumns)
	require.Equal(t, "NOT refunded", got.Where)
	require.Equal(t, []string{"date_trunc", "count", "sum", "percentile_cont"}, got.Functions)
	wantAgg := map[string]bool{"day": false, "region": false, "n": true, "gross": true, "customers": true, "median": true, "weighted": true}
	require.Len(t, got.Select, len(wantAgg))
	for _, s := range got.Select {
		require.Equalf(t, wantAgg[s.Name], s.HasAggregate, "item %s", s.Name)
	}
	require.Equal(t, "count(*)", got.Select[2].Expr)
	require.Nil(t, got.Select[2].Columns)
	require.Equal(t, "sum(amount) FILTER (WHERE amount > 0)", got.Select[3].Expr)
	require.Equal(t, "count(DISTINCT customer_id)", got.Select[4].Expr)
	require.Equal(t, []ColumnRef{col("", "amount"), col("", "region_weight")}, got.Select[6].Columns)
}

func TestParseTransformVariants(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		stmt  string
		check func(t *testing.T, tr *Transform)
	}{
		{"lower-case keywords", "transform t from s select a as b", func(t *testing.T, tr *Transform) {
			require.Equal(t, Name{Name: "t"}, tr.Target)
			require.Equal(t, "a", tr.Select[0].Expr)
		}},
		{"mixed-case keywords and names fold", "TrAnSfOrM TGT FrOm SRC SeLeCt COL aS OUT", func(t *testing.T, tr *Transform) {
			require.Equal(t, Name{Name: "tgt"}, tr.Target)
			require.Equal(t, Name{Name: "src"}, tr.From.Table)
			require.Equal(t, SelectItem{Expr: "col", Name: "out", Columns: []ColumnRef{col("", "col")}}, tr.Select[0])
		}},
		{"quoted identifiers keep case and unescape quotes", `TRANSFORM "Order""Totals" FROM "Orders" AS "O" SELECT "O"."Price" AS "Total Price"`, func(t *testing.T, tr *Transform) {
			require.Equal(t, Name{Name: `Order"Totals`}, tr.Target)
			require.Equal(t, TableRef{Table: Name{Name: "Orders"}, Alias: "O"}, tr.From)
			require.Equal(t, SelectItem{Expr: `"O"."Price"`, Name: "Total Price", Columns: []ColumnRef{col("O", "Price")}}, tr.Select[0])
		}},
		{"quoted keywords are names", `TRANSFORM "select" FROM "from" SELECT "where" AS "group"`, func(t *testing.T, tr *Transform) {
			require.Equal(t, Name{Name: "select"}, tr.Target)
			require.Equal(t, Name{Name: "from"}, tr.From.Table)
			require.Equal(t, "group", tr.Select[0].Name)
			require.Equal(t, `"where"`, tr.Select[0].Expr)
		}},
		{"unicode identifier", `TRANSFORM t FROM s SELECT U&"d\0061t" AS x, U&"!00e9" UESCAPE '!' AS "é"`, func(t *testing.T, tr *Transform) {
			require.Equal(t, []ColumnRef{col("", "dat")}, tr.Select[0].Columns)
			require.Equal(t, []ColumnRef{col("", "é")}, tr.Select[1].Columns)
			require.Equal(t, "é", tr.Select[1].Name)
		}},
		{"non-ASCII names are not folded", "TRANSFORM Été FROM Ünits SELECT Ä AS Ö", func(t *testing.T, tr *Transform) {
			require.Equal(t, "Été", tr.Target.Name)
			require.Equal(t, "Ünits", tr.From.Table.Name)
			require.Equal(t, "Ö", tr.Select[0].Name)
		}},
		{"schema-qualified target and source", "TRANSFORM reports.totals FROM shop.orders o SELECT o.id AS id", func(t *testing.T, tr *Transform) {
			require.Equal(t, Name{Schema: "reports", Name: "totals"}, tr.Target)
			require.Equal(t, TableRef{Table: Name{Schema: "shop", Name: "orders"}, Alias: "o"}, tr.From)
		}},
		{"keywords as names", "TRANSFORM transform FROM source AS index SELECT index.year AS order, value AS select, x AS where WHERE y", func(t *testing.T, tr *Transform) {
			require.Equal(t, Name{Name: "transform"}, tr.Target)
			require.Equal(t, TableRef{Table: Name{Name: "source"}, Alias: "index"}, tr.From)
			require.Equal(t, "order", tr.Select[0].Name)
			require.Equal(t, "select", tr.Select[1].Name)
			require.Equal(t, "where", tr.Select[2].Name)
			require.Equal(t, "y", tr.Where)
		}},
		{"plain JOIN is inner", "TRANSFORM t FROM a JOIN b ON a.id = b.a_id SELECT a.x AS x, b.y AS y", func(t *testing.T, tr *Transform) {
			require.Equal(t, []Join{{Kind: JoinInner, Table: TableRef{Table: Name{Name: "b"}}, On: []JoinCond{{Left: col("a", "id"), Right: col("b", "a_id")}}}}, tr.Joins)
		}},
		{"LEFT JOIN with schema, alias and three equalities", "TRANSFORM t FROM a LEFT JOIN s.b bb ON (a.k1 = bb.k1) AND a.k2 = bb.k2 AND (a.k3 = bb.k3) SELECT a.x AS x", func(t *testing.T, tr *Transform) {
			require.Equal(t, JoinLeft, tr.Joins[0].Kind)
			require.Equal(t, TableRef{Table: Name{Schema: "s", Name: "b"}, Alias: "bb"}, tr.Joins[0].Table)
			require.Len(t, tr.Joins[0].On, 3)
			require.Equal(t, JoinCond{Left: col("a", "k3"), Right: col("bb", "k3")}, tr.Joins[0].On[2])
		}},
		{"several joins", "TRANSFORM t FROM a JOIN b ON a.id = b.id LEFT JOIN c ON c.id = b.cid INNER JOIN d ON d.id = c.did SELECT d.x AS x", func(t *testing.T, tr *Transform) {
			require.Len(t, tr.Joins, 3)
			require.Equal(t, []JoinKind{JoinInner, JoinLeft, JoinInner}, []JoinKind{tr.Joins[0].Kind, tr.Joins[1].Kind, tr.Joins[2].Kind})
		}},
		{"last top-level AS names the column", "TRANSFORM t FROM s SELECT CAST(a AS int) AS b, x::timestamp without time zone AS ts", func(t *testing.T, tr *Transform) {
			require.Equal(t, "a::int", tr.Select[0].Expr)
			require.Equal(t, "b", tr.Select[0].Name)
			require.Equal(t, "x::timestamp", tr.Select[1].Expr)
			require.False(t, tr.WithoutSourceIndex)
		}},
		{"comments and newlines", "TRANSFORM t -- target\nFROM s /* source */\nSELECT a /* , b */ + 1 AS b -- done\n; -- trailing\n", func(t *testing.T, tr *Transform) {
			require.Equal(t, "a + 1", tr.Select[0].Expr)
		}},
		{"semicolon inside a string is data", "TRANSFORM t FROM s SELECT 'a; DROP TABLE x' AS b WHERE c <> ';'", func(t *testing.T, tr *Transform) {
			require.Equal(t, "'a; DROP TABLE x'", tr.Select[0].Expr)
			require.Equal(t, "c <> ';'", tr.Where)
		}},
		{"functions deduplicated, qualified as written", "TRANSFORM t FROM s SELECT lower(a) AS a, Pg_Catalog.LOWER(b) AS b, lower(upper(c)) AS c WHERE coalesce(d, 0) > abs(e)", func(t *testing.T, tr *Transform) {
			require.Equal(t, []string{"lower", "pg_catalog.lower", "upper", "abs"}, tr.Functions)
			require.Equal(t, "pg_catalog.lower(b)", tr.Select[1].Expr)
		}},
		{"columns deduplicated in order", "TRANSFORM t FROM s SELECT b + a + b + s.a AS x", func(t *testing.T, tr *Transform) {
			require.Equal(t, []ColumnRef{col("", "b"), col("", "a"), col("s", "a")}, tr.Select[0].Columns)
		}},
		{"SQL syntax forms", "TRANSFORM t FROM s SELECT x IS DISTINCT FROM y AS d, extract(day FROM z) AS e, CASE WHEN a THEN 1 ELSE 2 END AS c, ARRAY[a, b] AS arr, a BETWEEN 1 AND 2 AS btw", func(t *testing.T, tr *Transform) {
			require.Equal(t, "x IS DISTINCT FROM y", tr.Select[0].Expr)
			require.Equal(t, "CASE WHEN a THEN 1 ELSE 2 END", tr.Select[2].Expr)
			require.Equal(t, "ARRAY[a, b]", tr.Select[3].Expr)
			require.Equal(t, "a BETWEEN 1 AND 2", tr.Select[4].Expr)
			require.Equal(t, []string{"pg_catalog.extract"}, tr.Functions)
		}},
		{"WITHOUT SOURCE INDEX after WHERE", "TRANSFORM t FROM s SELECT a AS a WHERE b WITHOUT SOURCE INDEX", func(t *testing.T, tr *Transform) {
			require.True(t, tr.WithoutSourceIndex)
			require.Equal(t, "b", tr.Where)
		}},
		{"LEFT and RIGHT as functions", "TRANSFORM t FROM a LEFT JOIN b ON a.id = b.id SELECT left(a.name, 3) AS l, right(b.name, 2) AS r WHERE left(a.code, 1) = 'x'", func(t *testing.T, tr *Transform) {
			require.Len(t, tr.Joins, 1)
			require.Equal(t, `"left"(a.name, 3)`, tr.Select[0].Expr)
			require.Equal(t, `"right"(b.name, 2)`, tr.Select[1].Expr)
			require.Equal(t, `"left"(a.code, 1) = 'x'`, tr.Where)
			require.Equal(t, []string{"left", "right"}, tr.Functions)
		}},
		{"RIGHT JOIN is the LEFT JOIN with the tables swapped", "TRANSFORM t FROM a x RIGHT OUTER JOIN b y ON x.id = y.a_id JOIN c ON c.id = x.c_id SELECT x.n, y.m", func(t *testing.T, tr *Transform) {
			require.True(t, tr.Swapped)
			require.Equal(t, TableRef{Table: Name{Name: "b"}, Alias: "y"}, tr.From)
			require.Len(t, tr.Joins, 2)
			require.Equal(t, JoinLeft, tr.Joins[0].Kind)
			require.Equal(t, TableRef{Table: Name{Name: "a"}, Alias: "x"}, tr.Joins[0].Table)
			require.Equal(t, []JoinCond{{Left: col("x", "id"), Right: col("y", "a_id")}}, tr.Joins[0].On)
			require.Equal(t, JoinInner, tr.Joins[1].Kind)
		}},
		{"RIGHT JOIN USING reads the preserved table's column", "TRANSFORM t FROM a RIGHT JOIN b USING (k) SELECT k, a.v", func(t *testing.T, tr *Transform) {
			require.True(t, tr.Swapped)
			require.Equal(t, Name{Name: "b"}, tr.From.Table)
			require.Equal(t, []ColumnRef{col("b", "k")}, tr.Select[0].Columns)
		}},
		{"FULL JOIN of two tables", "TRANSFORM t FROM a FULL OUTER JOIN b ON b.x = a.x SELECT a.n, b.m", func(t *testing.T, tr *Transform) {
			require.False(t, tr.Swapped)
			require.Equal(t, Name{Name: "a"}, tr.From.Table)
			require.Equal(t, []Join{{Kind: JoinFull, Table: TableRef{Table: Name{Name: "b"}}, On: []JoinCond{{Left: col("b", "x"), Right: col("a", "x")}}}}, tr.Joins)
		}},
		{"RIGHT and FULL JOIN after the second table keep their place", "TRANSFORM t FROM a LEFT JOIN b ON a.x = b.x RIGHT OUTER JOIN c ON c.x = a.x FULL JOIN d ON d.x = c.x SELECT a.n", func(t *testing.T, tr *Transform) {
			require.False(t, tr.Swapped)
			require.Equal(t, Name{Name: "a"}, tr.From.Table)
			require.Len(t, tr.Joins, 3)
			require.Equal(t, []JoinKind{JoinLeft, JoinRight, JoinFull}, []JoinKind{tr.Joins[0].Kind, tr.Joins[1].Kind, tr.Joins[2].Kind})
			require.Equal(t, Name{Name: "c"}, tr.Joins[1].Table.Table)
		}},
		{"63-byte identifier", "TRANSFORM t FROM s SELECT a AS " + strings.Repeat("x", 63), func(t *testing.T, tr *Transform) {
			require.Equal(t, strings.Repeat("x", 63), tr.Select[0].Name)
		}},
		{"grouped by expression and plain column", "TRANSFORM t FROM s SELECT a AS a, lower(b) AS lb, max(c) AS mc GROUP BY a, lower(b)", func(t *testing.T, tr *Transform) {
			require.Equal(t, []string{"a", "lower(b)"}, tr.GroupBy)
			require.True(t, tr.Select[2].HasAggregate)
			require.False(t, tr.Select[1].HasAggregate)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.check(t, parseTransform(t, c.stmt))
		})
	}
}

func TestParseOtherForms(t *testing.T) {
	t.Parallel()
	cases := []struct {
		stmt string
		want Statement
	}{
		{"PAUSE TRANSFORM order_totals", &Pause{Address{[]string{"order_totals"}}}},
		{"pause transform Order_Totals.Total", &Pause{Address{[]string{"order_totals", "total"}}}},
		{`PAUSE TRANSFORM public."Order Totals"."Sum";`, &Pause{Address{[]string{"public", "Order Totals", "Sum"}}}},
		{"RESUME TRANSFORM t", &Resume{Address{[]string{"t"}}}},
		{"Resume Transform s.t.c", &Resume{Address{[]string{"s", "t", "c"}}}},
		{"DROP TRANSFORM t", &Drop{Name{Name: "t"}}},
		{`drop transform Reports."T" -- bye`, &Drop{Name{Schema: "reports", Name: "T"}}},
		{"ALTER TRANSFORM t ADD COLUMN lower(name) AS lname", &Alter{Target: Name{Name: "t"}, Action: AlterAddColumn,
			Column:    SelectItem{Expr: "lower(name)", Name: "lname", Columns: []ColumnRef{col("", "name")}},
			Functions: []string{"lower"}, Bare: []ColumnRef{col("", "name")}}},
		{"alter transform s.t add a + b as c", &Alter{Target: Name{Schema: "s", Name: "t"}, Action: AlterAddColumn,
			Column: SelectItem{Expr: "a + b", Name: "c", Columns: []ColumnRef{col("", "a"), col("", "b")}},
			Bare:   []ColumnRef{col("", "a"), col("", "b")}}},
		{"ALTER TRANSFORM t ADD COLUMN sum(x) AS total", &Alter{Target: Name{Name: "t"}, Action: AlterAddColumn,
			Column:    SelectItem{Expr: "sum(x)", Name: "total", HasAggregate: true, Columns: []ColumnRef{col("", "x")}},
			Functions: []string{"sum"}}},
		{"ALTER TRANSFORM t ADD COLUMN sum(x) + max(y) * z AS w", &Alter{Target: Name{Name: "t"}, Action: AlterAddColumn,
			Column:    SelectItem{Expr: "sum(x) + (max(y) * z)", Name: "w", HasAggregate: true, Columns: []ColumnRef{col("", "x"), col("", "y"), col("", "z")}},
			Functions: []string{"sum", "max"}, Bare: []ColumnRef{col("", "z")}}},
		{"ALTER TRANSFORM t DROP COLUMN lname", &Alter{Target: Name{Name: "t"}, Action: AlterDropColumn, Column: SelectItem{Name: "lname"}}},
		{`alter transform t drop "LName"`, &Alter{Target: Name{Name: "t"}, Action: AlterDropColumn, Column: SelectItem{Name: "LName"}}},
		{"ALTER TRANSFORM t DROP COLUMN order", &Alter{Target: Name{Name: "t"}, Action: AlterDropColumn, Column: SelectItem{Name: "order"}}},
	}
	for _, c := range cases {
		t.Run(c.stmt, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(c.stmt)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			require.Equal(t, KindOf(c.want), KindOf(got))
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 64)
	cases := []struct {
		name   string
		stmt   string
		kind   ErrorKind
		line   int
		column int
		token  string
		msg    string // a substring of the message
	}{
		// Syntax: off the grammar.
		{"empty", "", Syntax, 1, 1, "end of input", "empty statement"},
		{"only a comment", "  -- nothing\n", Syntax, 1, 1, "end of input", "empty statement"},
		{"unknown verb", "CREATE TRANSFORM t", Syntax, 1, 1, "CREATE", "expected TRANSFORM, PAUSE"},
		{"second statement", "TRANSFORM t FROM s SELECT a; DROP TABLE x AS b", Syntax, 1, 28, ";", "only one statement"},
		{"two trailing semicolons", "TRANSFORM t FROM s SELECT a AS b;;", Syntax, 1, 33, ";", "only one statement"},
		{"missing FROM", "TRANSFORM t SELECT a AS b", Syntax, 1, 13, "SELECT", "expected FROM"},
		{"missing SELECT", "TRANSFORM t FROM s", Syntax, 1, 19, "end of input", "expected SELECT after the source table"},
		{"missing SELECT before semicolon", "TRANSFORM t FROM s;", Syntax, 1, 19, ";", "expected SELECT"},
		{"unnamed expression", "TRANSFORM t FROM s SELECT a + 1", Invalid, 1, 27, "a", "?column?"},
		{"unnamed expression before comma", "TRANSFORM t FROM s SELECT a, b + 1, c", Invalid, 1, 30, "b", "select item 2 needs a name"},
		{"unnamed constant", "TRANSFORM t FROM s SELECT 1", Invalid, 1, 27, "1", "?column?"},
		{"duplicate implied names", "TRANSFORM t FROM s SELECT lower(a), lower(b)", Invalid, 1, 37, "lower", "duplicate output column name"},
		{"duplicate alias and implied name", "TRANSFORM t FROM s SELECT a, b a", Invalid, 1, 32, "a", "duplicate output column name"},
		{"two bare aliases", "TRANSFORM t FROM s SELECT a b c", Syntax, 1, 31, "c", "syntax error"},
		{"star with GROUP BY", "TRANSFORM t FROM s SELECT *, count(*) AS n GROUP BY a", Invalid, 1, 27, "*", "* cannot be selected with GROUP BY"},
		{"star with an aggregate", "TRANSFORM t FROM s SELECT s.*, count(*) AS n", Invalid, 1, 27, "s", "* cannot be selected with aggregates"},
		{"star of a schema-qualified name", "TRANSFORM t FROM s SELECT a.b.*", Invalid, 1, 27, "a", "* is not allowed"},
		{"HAVING reads an ungrouped column", "TRANSFORM t FROM s SELECT a, count(*) AS n GROUP BY a HAVING b > 1", Invalid, 1, 62, "b", "in HAVING must be inside an aggregate"},
		{"HAVING before GROUP BY", "TRANSFORM t FROM s SELECT a, count(*) AS n HAVING count(*) > 1 GROUP BY a", Syntax, 1, 64, "GROUP", "after HAVING"},
		{"empty HAVING", "TRANSFORM t FROM s SELECT a, count(*) AS n GROUP BY a HAVING", Syntax, 1, 61, "end of input", "expected a condition after HAVING"},
		{"USING without parenthesis", "TRANSFORM t FROM a JOIN b USING x SELECT x", Syntax, 1, 33, "x", "expected ( and column names after USING"},
		{"USING twice the column", "TRANSFORM t FROM a JOIN b USING (x, x) SELECT x", Invalid, 1, 37, "x", "appears twice in USING"},
		{"USING unclosed", "TRANSFORM t FROM a JOIN b USING (x SELECT x", Syntax, 1, 36, "SELECT", "expected , or )"},
		{"comma without a table", "TRANSFORM t FROM a, SELECT x", Syntax, 1, 21, "SELECT", "a table name after ','"},
		{"natural join", "TRANSFORM t FROM a NATURAL JOIN b SELECT x", Invalid, 1, 20, "NATURAL", "JOIN ... USING"},
		{"parenthesized join on the right", "TRANSFORM t FROM a FULL JOIN (b JOIN c ON c.x = b.x) ON a.x = b.x SELECT x", Invalid, 1, 30, "(", "write the joins one after another"},
		{"right outer without join", "TRANSFORM t FROM a RIGHT OUTER b ON a.x = b.x SELECT x", Syntax, 1, 32, "b", "expected JOIN after RIGHT OUTER"},
		{"cross join", "TRANSFORM t FROM a CROSS JOIN b SELECT x", Invalid, 1, 20, "CROSS", "CROSS JOIN is not supported"},
		{"missing output name", "TRANSFORM t FROM s SELECT a AS", Syntax, 1, 31, "end of input", "expected an output column name"},
		{"junk after output name", "TRANSFORM t FROM s SELECT a AS b c", Syntax, 1, 34, "c", "after the output column name"},
		{"two AS", "TRANSFORM t FROM s SELECT a AS b AS c", Syntax, 1, 29, "AS", "unexpected"},
		{"implicit alias in WHERE", "TRANSFORM t FROM s SELECT a AS b WHERE c d", Syntax, 1, 42, "d", "unexpected"},
		{"empty select item", "TRANSFORM t FROM s SELECT a AS b, , c AS d", Syntax, 1, 35, ",", "expected an expression"},
		{"trailing comma", "TRANSFORM t FROM s SELECT a AS b, WHERE c", Syntax, 1, 35, "WHERE", "expected an expression"},
		{"expression syntax error at AS", "TRANSFORM t FROM s SELECT a + AS b", Syntax, 1, 31, "AS", "syntax error in select item"},
		{"expression syntax error on line 3", "TRANSFORM t FROM s\nSELECT a AS x,\n  lower(b,) AS y", Syntax, 3, 11, ")", "syntax error"},
		{"columns count characters", "TRANSFORM t FROM s SELECT 'ééé' || b c d AS x", Syntax, 1, 40, "d", "syntax error"},
		{"unterminated string", "TRANSFORM t FROM s SELECT 'abc AS b", Syntax, 1, 27, "'abc", "unterminated quoted string"},
		{"unterminated quoted identifier", "TRANSFORM t FROM s\nSELECT \"abc AS b", Syntax, 2, 8, `"abc`, "unterminated quoted identifier"},
		{"unclosed parenthesis", "TRANSFORM t FROM s SELECT lower(a AS b", Syntax, 1, 32, "(", "never closed"},
		{"unmatched parenthesis", "TRANSFORM t FROM s SELECT a) AS b", Syntax, 1, 28, ")", "unmatched"},
		{"JOIN without ON", "TRANSFORM t FROM a JOIN b SELECT a.x AS x", Syntax, 1, 27, "SELECT", "expected ON"},
		{"ON without condition", "TRANSFORM t FROM a JOIN b ON SELECT a.x AS x", Syntax, 1, 30, "SELECT", "expected a join condition"},
		{"NATURAL JOIN", "TRANSFORM t FROM a NATURAL JOIN b SELECT a.x AS x", Invalid, 1, 20, "NATURAL", "NATURAL JOIN is not supported: name the columns with JOIN ... USING"},
		{"FULL OUTER without JOIN", "TRANSFORM t FROM a FULL OUTER b ON a.x = b.x SELECT x", Syntax, 1, 31, "b", "expected JOIN after FULL OUTER"},
		{"reserved word as table", "TRANSFORM select FROM s SELECT a AS b", Syntax, 1, 11, "select", "reserved word"},
		{"too many name parts", "DROP TRANSFORM a.b.c", Syntax, 1, 19, ".", "too many dotted parts"},
		{"too many address parts", "PAUSE TRANSFORM a.b.c.d", Syntax, 1, 22, ".", "too many dotted parts"},
		{"PAUSE without TRANSFORM", "PAUSE t", Syntax, 1, 7, "t", "expected TRANSFORM after PAUSE"},
		{"RESUME junk", "RESUME TRANSFORM t now", Syntax, 1, 20, "now", "unexpected"},
		{"ALTER unknown action", "ALTER TRANSFORM t RENAME TO u", Syntax, 1, 19, "RENAME", "expected ADD COLUMN or DROP COLUMN"},
		{"ALTER ADD unnamed", "ALTER TRANSFORM t ADD COLUMN x + 1", Invalid, 1, 30, "x", "?column?"},
		{"WHERE after GROUP BY", "TRANSFORM t FROM s SELECT a AS a, count(*) AS n GROUP BY a WHERE b", Syntax, 1, 60, "WHERE", "WHERE must come before GROUP BY"},
		{"junk after WITHOUT SOURCE INDEX", "TRANSFORM t FROM s SELECT a AS a WITHOUT SOURCE INDEX now", Syntax, 1, 55, "now", "unexpected"},
		{"empty WHERE", "TRANSFORM t FROM s SELECT a AS b WHERE", Syntax, 1, 39, "end of input", "expected a condition"},
		{"empty GROUP BY item", "TRANSFORM t FROM s SELECT a AS a GROUP BY a,", Syntax, 1, 45, "end of input", "expected an expression"},
		{"invalid UTF-8", "TRANSFORM t FROM s SELECT a\xff AS b", Syntax, 1, 28, `\xff`, "not valid UTF-8"},
		{"NUL character", "TRANSFORM t FROM s SELECT a\x00 AS b", Syntax, 1, 28, "", "NUL"},

		// Invalid: parses, but not allowed.
		{"subquery in select", "TRANSFORM t FROM s SELECT (SELECT max(x) FROM u) AS b", Invalid, 1, 27, "(", "subqueries are not allowed"},
		{"subquery in WHERE", "TRANSFORM t FROM s SELECT a AS b\nWHERE a = 1 OR a IN (SELECT x FROM u)", Invalid, 2, 18, "IN", "subqueries are not allowed"},
		{"EXISTS", "TRANSFORM t FROM s SELECT a AS b WHERE EXISTS (SELECT 1)", Invalid, 1, 40, "EXISTS", "the subquery of EXISTS must read exactly one table"},
		{"EXISTS uncorrelated", "TRANSFORM t FROM s SELECT a AS b WHERE EXISTS (SELECT 1 FROM u WHERE u.x > 1)", Invalid, 1, 40, "EXISTS", "needs an equality between a column of u and a qualified column of the outer tables"},
		{"EXISTS over a join", "TRANSFORM t FROM s SELECT a AS b WHERE EXISTS (SELECT 1 FROM u JOIN v ON true WHERE u.x = s.a)", Invalid, 1, 40, "EXISTS", "must read exactly one table"},
		{"EXISTS with GROUP BY", "TRANSFORM t FROM s SELECT a AS b WHERE EXISTS (SELECT 1 FROM u WHERE u.x = s.a GROUP BY u.y)", Invalid, 1, 40, "EXISTS", "must be a plain SELECT"},
		{"EXISTS reading the outer table apart from equalities", "TRANSFORM t FROM s SELECT a AS b WHERE EXISTS (SELECT 1 FROM u WHERE u.x = s.a AND u.y > s.b)", Invalid, 1, 40, "EXISTS", "may read only u's columns (s.b is not)"},
		{"EXISTS with the outer alias", "TRANSFORM t FROM s SELECT a AS b WHERE EXISTS (SELECT 1 FROM u s WHERE s.x = 1)", Invalid, 1, 40, "EXISTS", "needs an alias different from the outer tables' (s)"},
		{"IN of an expression", "TRANSFORM t FROM s SELECT a AS b WHERE a + 1 IN (SELECT u.x FROM u)", Invalid, 1, 46, "IN", "must compare a column of the outer tables with one column"},
		{"ALL subquery", "TRANSFORM t FROM s SELECT a AS b WHERE a > ALL (SELECT u.x FROM u)", Invalid, 1, 42, ">", "subqueries are not allowed"},
		{"WITH in a subquery", "TRANSFORM t FROM s SELECT (WITH q AS (SELECT 1) SELECT * FROM q) AS b", Invalid, 1, 27, "(", "WITH queries are not allowed"},
		{"WITH before the statement", "WITH q AS (SELECT 1) TRANSFORM t FROM q SELECT a AS b", Invalid, 1, 1, "WITH", "WITH queries are not allowed"},
		{"window function in WHERE", "TRANSFORM t FROM s SELECT\n  a AS b\n  WHERE sum(x) OVER (PARTITION BY a) > 1", Invalid, 3, 9, "sum", "window functions are allowed only in the select list"},
		{"named window", "TRANSFORM t FROM s SELECT a, sum(x) OVER w AS c", Invalid, 1, 30, "sum", "named windows are not supported"},
		{"nested window", "TRANSFORM t FROM s SELECT a, sum(rank() OVER (ORDER BY a)) OVER () AS c", Invalid, 1, 34, "rank", "cannot be nested"},
		{"window with GROUP BY", "TRANSFORM t FROM s SELECT a, sum(count(*)) OVER () AS c GROUP BY a", Invalid, 1, 30, "sum", "cannot be combined with GROUP BY"},
		{"windows partitioned apart", "TRANSFORM t FROM s SELECT a, rank() OVER (PARTITION BY a ORDER BY b) AS r, sum(x) OVER (PARTITION BY b) AS c", Invalid, 1, 30, "rank", "the same PARTITION BY"},
		{"ORDER BY without LIMIT", "TRANSFORM t FROM s SELECT a AS b WHERE c ORDER BY a", Invalid, 1, 42, "ORDER", "ORDER BY without LIMIT"},
		{"LIMIT without ORDER BY", "TRANSFORM t FROM s SELECT a AS b LIMIT 3", Invalid, 1, 34, "LIMIT", "LIMIT without ORDER BY"},
		{"LIMIT 0", "TRANSFORM t FROM s SELECT a AS b ORDER BY a LIMIT 0", Invalid, 1, 51, "0", "LIMIT 0 keeps no row"},
		{"LIMIT not a number", "TRANSFORM t FROM s SELECT a AS b ORDER BY a LIMIT x", Syntax, 1, 51, "x", "expected a number of rows"},
		{"ORDER BY a position", "TRANSFORM t FROM s SELECT a AS b ORDER BY 1 LIMIT 2", Invalid, 1, 43, "1", "not constants or column positions"},
		{"ORDER BY with GROUP BY", "TRANSFORM t FROM s SELECT a, count(*) AS n GROUP BY a ORDER BY a LIMIT 2", Invalid, 1, 55, "ORDER", "cannot be combined with GROUP BY"},
		{"DISTINCT ON without ORDER BY", "TRANSFORM t FROM s SELECT DISTINCT ON (a) a, b", Invalid, 1, 27, "DISTINCT", "DISTINCT ON without ORDER BY"},
		{"DISTINCT ON not leading ORDER BY", "TRANSFORM t FROM s SELECT DISTINCT ON (a) a, b ORDER BY b, a", Invalid, 1, 57, "b", "must come first in ORDER BY"},
		{"DISTINCT ON with LIMIT", "TRANSFORM t FROM s SELECT DISTINCT ON (a) a, b ORDER BY a, b LIMIT 3", Invalid, 1, 62, "LIMIT", "DISTINCT ON with LIMIT"},
		{"DISTINCT ON an aggregate", "TRANSFORM t FROM s SELECT DISTINCT ON (max(a)) a ORDER BY a", Invalid, 1, 40, "max", "aggregates are not allowed in DISTINCT ON"},
		{"ORDER BY USING", "TRANSFORM t FROM s SELECT a ORDER BY a USING < LIMIT 1", Invalid, 1, 38, "a", "USING is not supported"},
		{"two expressions in WHERE", "TRANSFORM t FROM s SELECT a AS b WHERE c, d", Invalid, 1, 43, "d", "exactly one expression"},
		{"FROM in a select item", "TRANSFORM t FROM s SELECT a FROM u AS b", Invalid, 1, 29, "FROM", "exactly one expression"},
		{"aggregate in WHERE", "TRANSFORM t FROM s SELECT a AS b WHERE count(*) > 1", Invalid, 1, 40, "count", "aggregates are not allowed in WHERE"},
		{"aggregate in GROUP BY", "TRANSFORM t FROM s SELECT a AS a, count(*) AS n GROUP BY a, max(b)", Invalid, 1, 61, "max", "aggregates are not allowed in GROUP BY"},
		{"aggregate in JOIN condition", "TRANSFORM t FROM a JOIN b ON a.x = max(b.x) SELECT a.x AS x", Invalid, 1, 36, "max", "aggregates are not allowed in a JOIN condition"},
		{"column beside an aggregate without GROUP BY", "TRANSFORM t FROM s SELECT a AS a, 1 + sum(x) AS b", Invalid, 1, 27, "a", "must be inside an aggregate: without GROUP BY"},
		{"column inside an expression beside an aggregate", "TRANSFORM t FROM s SELECT sum(x) + y AS z", Invalid, 1, 36, "y", "must be inside an aggregate"},
		{"HAVING without GROUP BY reads a column", "TRANSFORM t FROM s SELECT count(*) AS n HAVING a > 1", Invalid, 1, 48, "a", "in HAVING must be inside an aggregate"},
		{"nested aggregate", "TRANSFORM t FROM s SELECT a AS a, sum(count(x)) AS b GROUP BY a", Invalid, 1, 39, "count", "cannot be nested"},
		{"ungrouped output", "TRANSFORM t FROM s SELECT a AS a, b AS b, count(*) AS n GROUP BY a", Invalid, 1, 35, "b", "neither an aggregate nor one of the GROUP BY expressions"},
		{"expression of a group key", "TRANSFORM t FROM s SELECT a + 1 AS a1, count(*) AS n GROUP BY a", Invalid, 1, 27, "a", "neither an aggregate"},
		{"ungrouped column next to an aggregate", "TRANSFORM t FROM s SELECT a AS a, sum(x) + b AS s GROUP BY a", Invalid, 1, 44, "b", `column "b" must be inside an aggregate`},
		{"clock function", "TRANSFORM t FROM s SELECT a AS b WHERE a > now() - interval '1 day'", Invalid, 1, 44, "now", "now() reads the clock"},
		{"clock value function", "TRANSFORM t FROM s SELECT\n  current_date - a AS b", Invalid, 2, 3, "current_date", "CURRENT_DATE reads the clock"},
		{"clock literal", "TRANSFORM t FROM s SELECT a AS b WHERE a > 'today'::date", Invalid, 1, 44, "'today'", "'today' reads the clock"},
		{"one-argument age", "TRANSFORM t FROM s SELECT age(a) AS b", Invalid, 1, 27, "age", "age() with one argument reads the clock"},
		{"session function", "TRANSFORM t FROM s SELECT a AS b WHERE a = current_setting('app.tenant')", Invalid, 1, 44, "current_setting", "current_setting() depends on the session"},
		{"privilege function", "TRANSFORM t FROM s SELECT has_table_privilege('s', 'SELECT') AS b", Invalid, 1, 27, "has_table_privilege", "has_table_privilege() depends on the session"},
		{"session value", "TRANSFORM t FROM s SELECT session_user AS b", Invalid, 1, 27, "session_user", "SESSION_USER depends on the session"},
		{"GROUP BY position", "TRANSFORM t FROM s SELECT a AS a, count(*) AS n GROUP BY 1", Invalid, 1, 58, "1", "not constants or column positions"},
		{"GROUP BY ROLLUP", "TRANSFORM t FROM s SELECT a AS a, count(*) AS n GROUP BY rollup(a)", Invalid, 1, 58, "rollup", "grouping sets"},
		{"duplicate output name", "TRANSFORM t FROM s SELECT a AS x,\n b AS X", Invalid, 2, 7, "X", `duplicate output column name "x"`},
		{"identifier too long", "TRANSFORM t FROM s SELECT a AS " + long, Invalid, 1, 32, long, "longer than 63 bytes"},
		{"quoted identifier too long", `TRANSFORM "` + long + `" FROM s SELECT a AS b`, Invalid, 1, 11, `"` + long + `"`, "longer than 63 bytes"},
		{"identifier with semicolon", `TRANSFORM t FROM s SELECT "a;b" AS c`, Invalid, 1, 27, `"a;b"`, "may not contain ';'"},
		{"identifier with control character", "TRANSFORM t FROM s SELECT a AS \"x\ty\"", Invalid, 1, 32, "\"x\ty\"", "control characters"},
		{"identifier with NUL", "TRANSFORM t FROM \"s\x00\" SELECT a AS b", Invalid, 1, 18, "\"s\x00\"", "NUL"},
		{"empty select list", "TRANSFORM t FROM s SELECT WHERE a", Invalid, 1, 27, "WHERE", "select list is empty"},
		{"empty select list at the end", "TRANSFORM t FROM s SELECT", Invalid, 1, 26, "end of input", "select list is empty"},
		{"join with OR", "TRANSFORM t FROM a JOIN b ON a.x = b.x OR a.y = b.y SELECT a.x AS x", Invalid, 1, 30, "a", "column = column equalities"},
		{"join with constant", "TRANSFORM t FROM a JOIN b ON a.x = b.x AND a.y = 1 SELECT a.x AS x", Invalid, 1, 44, "a", "column = column equalities"},
		{"join with inequality", "TRANSFORM t FROM a LEFT JOIN b ON a.x < b.x SELECT a.x AS x", Invalid, 1, 35, "a", "column = column equalities"},
		{"star", "TRANSFORM t FROM s SELECT * AS b", Invalid, 1, 27, "*", "* is not allowed"},
		{"qualified star", "TRANSFORM t FROM s SELECT count(s.*) AS b", Invalid, 1, 33, "s", "* is not allowed"},
		{"parameter", "TRANSFORM t FROM s SELECT a AS b WHERE c = $1", Invalid, 1, 44, "$1", "parameters"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, err := Parse(c.stmt)
			require.Nil(t, st)
			require.Error(t, err)
			var pe *Error
			require.True(t, errors.As(err, &pe), "error is %T", err)
			require.Equal(t, c.kind, pe.Kind, pe.Error())
			require.Equal(t, c.line, pe.Line, pe.Error())
			require.Equal(t, c.column, pe.Column, pe.Error())
			if c.token != "" {
				require.Equal(t, c.token, pe.Token, pe.Error())
			}
			require.Contains(t, pe.Msg, c.msg)
			require.Contains(t, pe.Error(), "at line ")
		})
	}
}

func TestParseConcurrent(t *testing.T) {
	t.Parallel()
	const stmt = "TRANSFORM t FROM s JOIN u ON s.id = u.sid SELECT s.a AS a, lower(u.b) AS b WHERE s.c > 1"
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				if _, err := Parse(stmt); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestErrorString(t *testing.T) {
	t.Parallel()
	e := &Error{Kind: Syntax, Line: 2, Column: 5, Token: "end of input", Msg: "expected SELECT"}
	require.Equal(t, "expected SELECT at line 2, column 5 (near end of input)", e.Error())
	e = &Error{Kind: Invalid, Line: 1, Column: 12, Token: "sum", Msg: "aggregates need GROUP BY"}
	require.Equal(t, `aggregates need GROUP BY at line 1, column 12 (near "sum")`, e.Error())
}

func TestKindOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, "transform", KindOf(&Transform{}))
	require.Equal(t, "pause", KindOf(&Pause{}))
	require.Equal(t, "resume", KindOf(&Resume{}))
	require.Equal(t, "drop", KindOf(&Drop{}))
	require.Equal(t, "alter", KindOf(&Alter{}))
	require.Equal(t, "", KindOf(nil))
}

// A time word beside a JSON or text operator is a string, not the clock.
func TestTimeWordsAsText(t *testing.T) {
	t.Parallel()
	for _, stmt := range []string{
		"TRANSFORM t FROM s SELECT body->>'today' AS b",
		"TRANSFORM t FROM s SELECT body #> '{now}' AS b WHERE body ? 'now'",
		"TRANSFORM t FROM s SELECT label || 'now' AS b WHERE label LIKE 'today'",
	} {
		_, err := Parse(stmt)
		require.NoError(t, err, stmt)
	}
	_, err := Parse("TRANSFORM t FROM s SELECT body->>'x' AS b WHERE ts > 'now'")
	require.ErrorContains(t, err, "'now' reads the clock")
}

func TestClockIn(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"SELECT p * 0.1":                              "",
		"SELECT now() - p":                            "now()",
		" SELECT pg_catalog.statement_timestamp()":    "pg_catalog.statement_timestamp()",
		"SELECT other.now()":                          "",
		"BEGIN RETURN p > CURRENT_DATE; END":          "CURRENT_DATE",
		"BEGIN -- now()\n RETURN 'now()'; END":        "",
		"BEGIN RETURN x.current_date; END":            "",
		"DECLARE t timestamptz := clock_timestamp();": "clock_timestamp()",
		"SELECT localtimestamp":                       "LOCALTIMESTAMP",
		"SELECT \"now\"()":                            "",
		"SELECT 'unterminated":                        "",
		"SELECT timeofday ()":                         "timeofday()",
		"SELECT now":                                  "",
	}
	for body, want := range cases {
		require.Equal(t, want, ClockIn(body), body)
	}
}
