package grammar

import (
	"fmt"
	"slices"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// SetOpKind is the operator of a set operation.
type SetOpKind string

// Set operators.
const (
	SetUnion     SetOpKind = "union"
	SetIntersect SetOpKind = "intersect"
	SetExcept    SetOpKind = "except"
)

// SetOp is a transform's set operation (`TRANSFORM t FROM a SELECT ...
// UNION ALL SELECT ... FROM b ...`): the transform itself is its first
// branch, Branches are the others in the order of the text, and Tree says
// how they combine, with SQL's precedence (INTERSECT binds tighter).
type SetOp struct {
	Branches []*Transform
	Tree     *SetNode
}

// SetNode is one node of a set operation: a branch (Op "", Branch its
// 1-based ordinal in the text) or an operator over two nodes.
type SetNode struct {
	Op     SetOpKind `json:"op,omitempty"`
	All    bool      `json:"all,omitempty"`
	Left   *SetNode  `json:"left,omitempty"`
	Right  *SetNode  `json:"right,omitempty"`
	Branch int       `json:"branch,omitempty"`
}

// setOpPlaceholder stands for the first branch in the SQL text the other
// branches are parsed from; it is never a table.
const setOpPlaceholder = "trellis_first_branch"

// isSetOp tells whether token i starts a set operation.
func (p *stmtParser) isSetOp(i int) bool {
	return p.is(i, "union") || p.is(i, "intersect") || p.is(i, "except")
}

// setOp reads the set operation starting at token at (the first branch,
// t, is parsed already) up to byte end of the text.
func (p *stmtParser) setOp(t *Transform, at, end int) (*Transform, *Error) {
	if p.parent != nil {
		return nil, p.errAt(Invalid, at, "UNION, INTERSECT and EXCEPT are not supported inside a derived table, CTE or view: make the set operation the transform itself, or define it as a transform and read its target")
	}
	if e := checkBranch(t, 1); e != nil {
		return nil, p.errAt(Invalid, at, e.Error())
	}
	tree, err := pgParse("SELECT FROM " + setOpPlaceholder + " " + p.text[p.toks[at].start:end])
	if err != nil {
		return nil, p.errAt(Syntax, at, "the set operation does not parse: "+err.Error())
	}
	if len(tree.GetStmts()) != 1 || tree.GetStmts()[0].GetStmt().GetSelectStmt() == nil {
		return nil, p.errAt(Syntax, at, "expected SELECT queries after UNION, INTERSECT or EXCEPT")
	}
	op := &SetOp{}
	n := 0
	var walk func(sel *pg.SelectStmt, top bool) (*SetNode, *Error)
	walk = func(sel *pg.SelectStmt, top bool) (*SetNode, *Error) {
		if len(sel.GetSortClause()) > 0 || sel.GetLimitCount() != nil || sel.GetLimitOffset() != nil {
			what := "ORDER BY"
			if len(sel.GetSortClause()) == 0 {
				what = "LIMIT and OFFSET"
			}
			if sel.GetOp() == pg.SetOperation_SETOP_NONE && !top {
				what += " in a branch"
			}
			return nil, p.errAt(Invalid, at, what+" on a set operation is not supported (a table keeps no order, and top-k over a set operation is not maintained): define the set operation as a transform and order or limit when reading it")
		}
		if sel.GetWithClause() != nil && sel.GetOp() != pg.SetOperation_SETOP_NONE {
			return nil, p.errAt(Invalid, at, "WITH inside a set operation is not supported: write the WITH clause after the target")
		}
		switch sel.GetOp() {
		case pg.SetOperation_SETOP_NONE:
			n++
			if n == 1 {
				return &SetNode{Branch: 1}, nil // the placeholder
			}
			// A later branch's outputs take the first branch's names:
			// its own need none (nor need they differ).
			sel = proto.Clone(sel).(*pg.SelectStmt)
			for j, n := range sel.GetTargetList() {
				rt := n.GetResTarget()
				if rt == nil {
					continue
				}
				if cr := rt.GetVal().GetColumnRef(); cr != nil && len(cr.GetFields()) > 0 && cr.GetFields()[len(cr.GetFields())-1].GetAStar() != nil {
					continue // * and t.* keep their columns' names
				}
				rt.Name = fmt.Sprintf("trellis_c%d", j+1)
			}
			q, err := deparseSelect(sel)
			if err != nil {
				return nil, p.errAt(Syntax, at, "branch "+itoa(n)+" of the set operation: "+err.Error())
			}
			what := "branch " + itoa(n) + " of the set operation"
			p.branching = true
			b, e := p.subParse(q, at, what, p)
			p.branching = false
			if e != nil {
				return nil, e
			}
			if e := checkBranch(b, n); e != nil {
				return nil, p.errAt(Invalid, at, e.Error())
			}
			op.Branches = append(op.Branches, b)
			return &SetNode{Branch: n}, nil
		case pg.SetOperation_SETOP_UNION, pg.SetOperation_SETOP_INTERSECT, pg.SetOperation_SETOP_EXCEPT:
		default:
			return nil, p.errAt(Syntax, at, "unexpected set operation")
		}
		kind := map[pg.SetOperation]SetOpKind{pg.SetOperation_SETOP_UNION: SetUnion, pg.SetOperation_SETOP_INTERSECT: SetIntersect, pg.SetOperation_SETOP_EXCEPT: SetExcept}[sel.GetOp()]
		if sel.GetAll() && kind != SetUnion {
			return nil, p.errAt(Invalid, at, upper(string(kind))+" ALL is not supported (it keeps duplicates by count, which a keyed target does not hold): use "+upper(string(kind))+", which keeps each distinct row once")
		}
		l, e := walk(sel.GetLarg(), false)
		if e != nil {
			return nil, e
		}
		r, e := walk(sel.GetRarg(), false)
		if e != nil {
			return nil, e
		}
		return &SetNode{Op: kind, All: sel.GetAll(), Left: l, Right: r}, nil
	}
	root, e := walk(tree.GetStmts()[0].GetStmt().GetSelectStmt(), true)
	if e != nil {
		return nil, e
	}
	if root.All && root.hasDistinct() {
		return nil, p.errAt(Invalid, at, "UNION ALL over a UNION, INTERSECT or EXCEPT is not supported: define the set operation without ALL as a transform and UNION ALL its target")
	}
	op.Tree = root
	t.SetOp = op
	for _, b := range op.Branches {
		for _, f := range b.Functions {
			t.Functions = appendUnique(t.Functions, f)
		}
	}
	return t, nil
}

// hasDistinct tells whether a node below the root is a set operation
// without ALL (UNION, INTERSECT, EXCEPT).
func (n *SetNode) hasDistinct() bool {
	if n == nil || n.Op == "" {
		return false
	}
	return !n.All || n.Left.hasDistinct() || n.Right.hasDistinct()
}

// Distinct says the set operation has set semantics: its root is not
// UNION ALL, so each distinct row is kept once.
func (s *SetOp) Distinct() bool { return !s.Tree.All }

// checkBranch refuses a branch that is not a projection of one table or
// of a join (INNER or LEFT, with EXISTS/IN semi-joins): FULL JOIN,
// aggregates, DISTINCT, windows, ORDER BY and LIMIT.
func checkBranch(t *Transform, n int) error {
	what := ""
	switch {
	case slices.ContainsFunc(t.Joins, func(j Join) bool { return j.Kind == JoinFull }):
		what = "a FULL JOIN"
	case t.Aggregated():
		what = "GROUP BY, HAVING or an aggregate"
	case t.Distinct, len(t.DistinctOn) > 0:
		what = "DISTINCT"
	case len(t.Windows) > 0:
		what = "a window function"
	case len(t.OrderBy) > 0, t.Limit > 0, t.RankOutput != "":
		what = "ORDER BY or LIMIT"
	case t.From.Table.Name == setOpPlaceholder:
		what = "the name " + setOpPlaceholder
	}
	if what == "" {
		return nil
	}
	return fmt.Errorf("%s in branch %d of a set operation is not supported: each branch reads one table or an INNER or LEFT join of tables (SELECT ... FROM t [JOIN u ON ...] WHERE ...); define that branch as a transform and read its target in the branch", what, n)
}
