package grammar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSubJoins checks that the semi- and anti-joins of WHERE are taken out
// of it with their table, correlations and other conditions.
func TestSubJoins(t *testing.T) {
	t.Parallel()
	st, err := Parse("TRANSFORM x FROM orders o SELECT o.id WHERE o.price > 1 AND EXISTS (SELECT 1 FROM items i WHERE i.order_id = o.id AND i.qty > 2) " +
		"AND o.cid NOT IN (SELECT c.id FROM app.customers c WHERE c.bad) AND NOT EXISTS (SELECT FROM notes WHERE order_id = o.id)")
	require.NoError(t, err)
	tr := st.(*Transform)
	require.Equal(t, "o.price > 1", tr.Where)
	require.Equal(t, []ColumnRef{{"o", "price"}, {"o", "id"}, {"o", "cid"}}, tr.WhereColumns)
	require.Len(t, tr.SubJoins, 3)
	require.Equal(t, SubJoin{Table: TableRef{Table: Name{Name: "items"}, Alias: "i"}, On: []JoinCond{{Left: ColumnRef{"i", "order_id"}, Right: ColumnRef{"o", "id"}}},
		Where: "i.qty > 2", WhereColumns: []ColumnRef{{"i", "qty"}}}, tr.SubJoins[0])
	require.Equal(t, SubJoin{Anti: true, In: true, Table: TableRef{Table: Name{Schema: "app", Name: "customers"}, Alias: "c"},
		On: []JoinCond{{Left: ColumnRef{"c", "id"}, Right: ColumnRef{"o", "cid"}}}, Where: "c.bad", WhereColumns: []ColumnRef{{"c", "bad"}}}, tr.SubJoins[1])
	require.Equal(t, SubJoin{Anti: true, Table: TableRef{Table: Name{Name: "notes"}}, On: []JoinCond{{Left: ColumnRef{"", "order_id"}, Right: ColumnRef{"o", "id"}}}}, tr.SubJoins[2])

	// Inside a derived table, or over one, they are refused (inlining
	// would not carry them).
	_, err = Parse("TRANSFORM x FROM (SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM items i WHERE i.order_id = o.id)) d SELECT d.id")
	require.ErrorContains(t, err, "not supported together with derived tables or CTEs")
	_, err = Parse("TRANSFORM x FROM (SELECT o.id FROM orders o) d SELECT d.id WHERE EXISTS (SELECT 1 FROM items i WHERE i.order_id = d.id)")
	require.ErrorContains(t, err, "not supported together with derived tables or CTEs")
}
