package grammar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A parenthesized join that equals the flat join list is read as that
// list (decision 0045); the others are refused naming the rewrite.
func TestParenthesizedJoins(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ stmt, kinds, froms string }{
		{`TRANSFORM t FROM a JOIN (b JOIN c ON c.x = b.x) ON b.y = a.y SELECT a.k, c.v`, "inner inner", "b c"},
		{`TRANSFORM t FROM a LEFT JOIN (b LEFT JOIN c ON c.x = b.x) ON b.y = a.y SELECT a.k, c.v`, "left left", "b c"},
		{`TRANSFORM t FROM a JOIN (b LEFT JOIN c ON c.x = b.x JOIN d ON d.z = b.z) ON b.y = a.y SELECT a.k, d.w`, "inner left inner", "b c d"},
		{`TRANSFORM t FROM (a JOIN b ON b.y = a.y) JOIN c ON c.x = b.x SELECT a.k`, "inner inner", "b c"},
	} {
		tr := parseTransform(t, c.stmt)
		var kinds, froms []string
		for _, j := range tr.Joins {
			kinds = append(kinds, string(j.Kind))
			froms = append(froms, j.Table.Table.Name)
		}
		require.Equal(t, c.kinds, join(kinds), c.stmt)
		require.Equal(t, c.froms, join(froms), c.stmt)
		require.Equal(t, "a", tr.From.Table.Name, c.stmt)
	}
	for _, c := range []struct{ stmt, msg string }{
		{`TRANSFORM t FROM a LEFT JOIN (b JOIN c ON c.x = b.x) ON b.y = a.y SELECT a.k`, "a LEFT JOIN of a parenthesized inner join is not supported"},
		{`TRANSFORM t FROM a JOIN (b FULL JOIN c ON c.x = b.x) ON b.y = a.y SELECT a.k`, "a RIGHT or FULL JOIN inside a parenthesized join"},
		{`TRANSFORM t FROM a FULL JOIN (b JOIN c ON c.x = b.x) ON b.y = a.y SELECT a.k`, "a RIGHT or FULL JOIN of a parenthesized join"},
		{`TRANSFORM t FROM a JOIN (b JOIN c ON c.x = b.x) ON c.y = a.y SELECT a.k`, "only with its first table (c is another)"},
		{`TRANSFORM t FROM a JOIN (b JOIN c ON c.x = b.x) ON y = a.y SELECT a.k`, "must qualify its columns"},
	} {
		_, err := Parse(c.stmt)
		require.ErrorContains(t, err, c.msg, c.stmt)
		require.ErrorContains(t, err, "define the parenthesized join as a transform and join its target", c.stmt)
	}
}

func join(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}
