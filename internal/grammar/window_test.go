package grammar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A window function call is recorded with its partition, its ORDER BY's
// plain columns and its frame; its aggregate does not make the transform
// an aggregate.
func TestWindowCalls(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM s SELECT k, g, sum(v) OVER (PARTITION BY g) AS total,
		rank() OVER (PARTITION BY g ORDER BY v DESC, lower(w)) AS r,
		count(*) OVER (PARTITION BY g ORDER BY v ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS c`)
	require.False(t, tr.Aggregated())
	require.Len(t, tr.Windows, 3)
	v := col("", "v")
	require.Equal(t, WindowCall{Output: "total", Func: "sum", Name: "sum", Partition: []string{"g"}, PartitionColumns: []ColumnRef{col("", "g")}, Aggregate: true}, tr.Windows[0])
	require.Equal(t, WindowCall{Output: "r", Func: "rank", Name: "rank", Partition: []string{"g"}, PartitionColumns: []ColumnRef{col("", "g")},
		OrderColumns: []*ColumnRef{&v, nil}, Ordered: true}, tr.Windows[1])
	require.True(t, tr.Windows[2].Rows)
	require.Equal(t, "rank() OVER (PARTITION BY g ORDER BY v DESC, lower(w))", tr.Select[3].Expr)
	require.Equal(t, []ColumnRef{col("", "g"), col("", "v"), col("", "w")}, tr.Select[3].Columns)
}

// The top-k pattern over a derived table keeps its filter on the rank
// apart, as the rank's limit.
func TestTopKOverDerivedTable(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM top3 FROM (SELECT k, g, v, row_number() OVER (PARTITION BY g ORDER BY v DESC, k) AS rn FROM t) s SELECT * WHERE rn <= 3`)
	require.Equal(t, "rn", tr.RankOutput)
	require.Equal(t, int64(3), tr.Limit)
	require.Empty(t, tr.Where)
	require.Len(t, tr.Windows, 1)
	tr = parseTransform(t, `TRANSFORM firsts FROM (SELECT k, g, rank() OVER (PARTITION BY g ORDER BY v) AS r FROM t WHERE v > 0) AS s SELECT s.k, s.g, s.r WHERE s.r < 2`)
	require.Equal(t, "r", tr.RankOutput)
	require.Equal(t, int64(1), tr.Limit)
	for _, c := range []struct{ stmt, msg string }{
		{`TRANSFORM x FROM (SELECT k, g, sum(v) OVER (PARTITION BY g) AS s FROM t) d SELECT * WHERE s <= 3`, "reads row_number(), rank() or dense_rank()"},
		{`TRANSFORM x FROM (SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY k) AS rn FROM t) d SELECT k, g WHERE rn <= 3`, "selects its rank column"},
		{`TRANSFORM x FROM (SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY k) AS rn FROM t) d SELECT * WHERE rn = 2`, "rn = 2 alone is not supported"},
		{`TRANSFORM x FROM (SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY k) AS rn FROM t) d SELECT * WHERE rn < 1`, "keeps no row"},
		{`TRANSFORM x FROM (SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY k) AS rn FROM t) d SELECT * WHERE rn <= 3 AND g <> 'a'`, "computes window functions"},
	} {
		_, err := Parse(c.stmt)
		require.ErrorContains(t, err, c.msg, c.stmt)
	}
}

// Window functions, top-k (per group over a derived table, global) and
// DISTINCT ON read a join as they read a table (decision 0045): the
// statement parses with its joins, and a derived table joining tables
// keeps its filter on the rank apart.
func TestWindowsOverJoins(t *testing.T) {
	t.Parallel()
	tr := parseTransform(t, `TRANSFORM t FROM s JOIN u ON u.a = s.a SELECT s.a, rank() OVER (PARTITION BY u.g ORDER BY s.a) AS r`)
	require.Len(t, tr.Joins, 1)
	require.Equal(t, []ColumnRef{col("u", "g")}, tr.Windows[0].PartitionColumns)
	tr = parseTransform(t, `TRANSFORM t FROM (SELECT s.k, u.g, row_number() OVER (PARTITION BY u.g ORDER BY s.k) AS rn FROM s JOIN u ON u.a = s.a) d SELECT * WHERE rn <= 2`)
	require.Equal(t, "rn", tr.RankOutput)
	require.Equal(t, int64(2), tr.Limit)
	require.Len(t, tr.Joins, 1)
	tr = parseTransform(t, `TRANSFORM t FROM s LEFT JOIN u ON u.a = s.a SELECT s.k, u.g ORDER BY u.g, s.k LIMIT 3`)
	require.Equal(t, int64(3), tr.Limit)
	tr = parseTransform(t, `TRANSFORM t FROM s JOIN u ON u.a = s.a SELECT DISTINCT ON (u.g) u.g, s.k ORDER BY u.g, s.k`)
	require.Equal(t, []string{"u.g"}, tr.DistinctOn)
}
