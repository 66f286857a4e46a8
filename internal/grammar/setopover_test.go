package grammar

import (
	"strings"
	"testing"
)

// An aggregate over a set operation in a derived table, CTE or view reads
// the set operation's rows (decision 0044).
func TestAggregateOverSetOperation(t *testing.T) {
	st, err := Parse(`TRANSFORM t WITH u AS (SELECT g, v FROM a WHERE v > 0 UNION ALL SELECT h, w * 2 FROM b) FROM u SELECT g, sum(v) AS total, count(*) AS n WHERE u.v < 100 GROUP BY g HAVING count(*) > 1`)
	if err != nil {
		t.Fatal(err)
	}
	tr := st.(*Transform)
	so := tr.SetOp
	if so == nil || !so.Over || len(so.Branches) != 2 || !so.Tree.All {
		t.Fatalf("set op %+v", so)
	}
	if tr.From.Alias != SetOpAlias || tr.GroupBy[0] != "trellis_u.g" || tr.Where != "trellis_u.v < 100" || tr.Select[1].Expr != "sum(trellis_u.v)" {
		t.Fatalf("outer %+v", tr)
	}
	if b := so.Branches[0]; b.From.Table.Name != "a" || b.Where != "v > 0" || b.Select[0].Name != "g" || b.SetOp != nil {
		t.Fatalf("branch 1 %+v", b)
	}
	if b := so.Branches[1]; b.From.Table.Name != "b" || len(b.Select) != 2 {
		t.Fatalf("branch 2 %+v", b)
	}
	if _, err := Parse(`TRANSFORM t FROM (SELECT g FROM a UNION ALL SELECT g FROM b UNION ALL SELECT x FROM c) s (k) SELECT k, count(*) AS n GROUP BY k`); err != nil {
		t.Fatal(err)
	}
	// Over any set operation (decision 0050): its tree is kept.
	for _, stmt := range []string{
		`TRANSFORM t FROM (SELECT g FROM a UNION SELECT g FROM b) s SELECT g, count(*) AS n GROUP BY g`,
		`TRANSFORM t FROM (SELECT g FROM a INTERSECT ALL SELECT g FROM b) s SELECT g, count(*) AS n GROUP BY g`,
		`TRANSFORM t WITH u AS (SELECT g FROM a EXCEPT SELECT g FROM b) FROM u SELECT count(*) AS n`,
	} {
		st, err := Parse(stmt)
		if err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		if so := st.(*Transform).SetOp; so == nil || !so.Over || so.Tree.OnlyUnionAll() || len(so.Branches) != 2 {
			t.Fatalf("%s: set op %+v", stmt, so)
		}
	}
	for _, c := range []struct{ stmt, want string }{
		{`TRANSFORM t FROM (SELECT g FROM a UNION ALL SELECT g FROM b) s JOIN c ON c.id = s.g SELECT g, count(*) AS n GROUP BY g`, "joining derived table \"s\", a set operation, is not supported"},
		{`TRANSFORM t FROM (SELECT g FROM a UNION ALL SELECT g FROM b ORDER BY g) s SELECT g, count(*) AS n GROUP BY g`, "ORDER BY on a set operation is not supported"},
		{`TRANSFORM t FROM (SELECT g FROM a UNION ALL SELECT g FROM b) s SELECT g, count(*) AS n GROUP BY g UNION ALL SELECT g, 1 FROM c`, "a set operation over a derived table, CTE or view that is a set operation is not supported"},
		{`TRANSFORM t FROM c SELECT g UNION ALL SELECT g FROM (SELECT g FROM a UNION ALL SELECT g FROM b) s`, "in branch 2 of a set operation is not supported"},
	} {
		_, err := Parse(c.stmt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.stmt, err, c.want)
		}
	}
}

// A filter and projection of a set operation in a derived table, CTE or
// view is the set operation of the statement over each branch.
func TestStatementOverSetOperationIsDistributed(t *testing.T) {
	st, err := Parse(`TRANSFORM t WITH u AS (SELECT id, v FROM a WHERE v > 0 UNION ALL SELECT id, w FROM b) FROM u SELECT id, v * 2 AS dbl WHERE v < 10`)
	if err != nil {
		t.Fatal(err)
	}
	tr := st.(*Transform)
	if tr.SetOp == nil || tr.SetOp.Over || len(tr.SetOp.Branches) != 1 || !tr.SetOp.Tree.All {
		t.Fatalf("set op %+v", tr.SetOp)
	}
	if tr.From.Table.Name != "a" || tr.Select[1].Name != "dbl" || !strings.Contains(tr.Where, "v > 0") || !strings.Contains(tr.Where, "< 10") {
		t.Fatalf("branch 1 %+v", tr)
	}
	b := tr.SetOp.Branches[0]
	if b.From.Table.Name != "b" || !strings.Contains(b.Select[1].Expr, "w") || !strings.Contains(b.Where, "w") {
		t.Fatalf("branch 2 %+v", b)
	}
	if _, err := Parse(`TRANSFORM t FROM (SELECT id, v FROM a EXCEPT SELECT id, w FROM b) s SELECT v, id WHERE v > 1`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ stmt, want string }{
		{`TRANSFORM t FROM (SELECT id, v FROM a UNION SELECT id, w FROM b) s SELECT id`, "selecting some columns of derived table \"s\", a set operation other than UNION ALL"},
		{`TRANSFORM t FROM (SELECT id, v FROM a UNION SELECT id, w FROM b) s SELECT id, v + 1 AS v1`, "select each of its columns once, unchanged"},
		{`TRANSFORM t FROM (SELECT * FROM a UNION ALL SELECT id, w FROM b) s SELECT id`, "* in a branch of derived table \"s\""},
	} {
		_, err := Parse(c.stmt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.stmt, err, c.want)
		}
	}
}
