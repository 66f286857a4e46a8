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
