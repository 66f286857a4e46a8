package grammar

import (
	"strings"
	"testing"
)

func TestSetOperations(t *testing.T) {
	st, err := Parse(`TRANSFORM u FROM a SELECT id, x * 2 AS v WHERE x > 1 UNION ALL SELECT id, y FROM b WHERE y < 3`)
	if err != nil {
		t.Fatal(err)
	}
	tr := st.(*Transform)
	if tr.SetOp == nil || len(tr.SetOp.Branches) != 1 || !tr.SetOp.Tree.All || tr.SetOp.Distinct() {
		t.Fatalf("set op %+v", tr.SetOp)
	}
	if b := tr.SetOp.Branches[0]; b.From.Table.Name != "b" || b.Where != "y < 3" || len(b.Select) != 2 {
		t.Fatalf("branch 2: %+v", b)
	}
	if tr.Where != "x > 1" || tr.From.Table.Name != "a" {
		t.Fatalf("branch 1: %+v", tr)
	}
	st, err = Parse(`TRANSFORM u FROM a SELECT id UNION SELECT id FROM b INTERSECT SELECT id FROM c EXCEPT SELECT id FROM d WITHOUT SOURCE INDEX`)
	if err != nil {
		t.Fatal(err)
	}
	tr = st.(*Transform)
	// ((a UNION (b INTERSECT c)) EXCEPT d)
	root := tr.SetOp.Tree
	if root.Op != SetExcept || root.Right.Branch != 4 || root.Left.Op != SetUnion || root.Left.Right.Op != SetIntersect || root.Left.Right.Left.Branch != 2 || !tr.WithoutSourceIndex {
		t.Fatalf("tree %+v", root)
	}
	for _, c := range []struct{ stmt, want string }{
		{`TRANSFORM u FROM a SELECT id INTERSECT ALL SELECT id FROM b`, ""},
		{`TRANSFORM u FROM a SELECT id EXCEPT ALL SELECT id FROM b`, ""},
		{`TRANSFORM u FROM a SELECT id UNION SELECT id FROM b ORDER BY id LIMIT 3`, "ORDER BY on a set operation is not supported"},
		{`TRANSFORM u FROM a SELECT id UNION ALL SELECT b.id FROM b JOIN c ON c.id = b.id`, ""},
		{`TRANSFORM u FROM a SELECT id UNION ALL SELECT b.id FROM b FULL JOIN c ON c.id = b.id`, "a FULL JOIN in branch 2 of a set operation is not supported"},
		{`TRANSFORM u FROM a SELECT g, count(*) AS n GROUP BY g UNION ALL SELECT g, count(*) FROM b GROUP BY g`, ""},
		{`TRANSFORM u FROM a SELECT DISTINCT id UNION ALL SELECT DISTINCT id FROM b`, ""},
		{`TRANSFORM u FROM a SELECT id UNION ALL SELECT id FROM b UNION SELECT id FROM c`, ""},
		{`TRANSFORM u FROM a SELECT id UNION SELECT id FROM b UNION ALL SELECT id FROM c`, ""},
		{`TRANSFORM u FROM (SELECT id FROM x UNION SELECT id FROM y) s SELECT *`, ""},
		{`TRANSFORM u FROM a SELECT id UNION ALL SELECT id FROM b WHERE EXISTS (SELECT 1 FROM c WHERE c.id = b.id)`, ""},
		{`TRANSFORM u FROM a SELECT id WHERE a.id IN (SELECT c.id FROM c) UNION SELECT id FROM b`, ""},
		{`TRANSFORM u FROM a SELECT id UNION ALL SELECT id FROM (SELECT id FROM b) d WHERE EXISTS (SELECT 1 FROM c WHERE c.id = d.id)`, "EXISTS and IN subqueries are not supported together with derived tables"},
	} {
		_, err := Parse(c.stmt)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.stmt, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.stmt, err, c.want)
		}
	}
}
