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
	// Over says the transform reads the set operation as its FROM table
	// (a derived table, CTE or view, named SetOpAlias) and aggregates its
	// rows: Branches are then every branch, the first one too.
	Over bool
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
	if t.SetOp != nil {
		return nil, p.errAt(Invalid, at, "a set operation over a derived table, CTE or view that is a set operation is not supported: write every branch in one set operation")
	}
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
	leaf := func(n int, sel *pg.SelectStmt) *Error {
		if n == 1 {
			return nil // the placeholder
		}
		b, e := p.parseBranch(sel, n, at, p, true)
		if e != nil {
			return e
		}
		op.Branches = append(op.Branches, b)
		return nil
	}
	root, e := p.setOpTree(tree.GetStmts()[0].GetStmt().GetSelectStmt(), at, leaf)
	if e != nil {
		return nil, e
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

// setOpTree walks a parsed set operation, refusing what no set operation
// may hold (ORDER BY, LIMIT, WITH in a branch), and
// calls leaf with each branch's 1-based ordinal in the text.
func (p *stmtParser) setOpTree(root *pg.SelectStmt, at int, leaf func(n int, sel *pg.SelectStmt) *Error) (*SetNode, *Error) {
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
			if e := leaf(n, sel); e != nil {
				return nil, e
			}
			return &SetNode{Branch: n}, nil
		case pg.SetOperation_SETOP_UNION, pg.SetOperation_SETOP_INTERSECT, pg.SetOperation_SETOP_EXCEPT:
		default:
			return nil, p.errAt(Syntax, at, "unexpected set operation")
		}
		kind := map[pg.SetOperation]SetOpKind{pg.SetOperation_SETOP_UNION: SetUnion, pg.SetOperation_SETOP_INTERSECT: SetIntersect, pg.SetOperation_SETOP_EXCEPT: SetExcept}[sel.GetOp()]
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
	return walk(root, true)
}

// parseBranch parses branch n of a set operation (plain SQL) as a statement of
// its own, seeing scope's CTEs; rename gives its outputs internal names
// (a later branch's outputs take the first branch's names).
func (p *stmtParser) parseBranch(sel *pg.SelectStmt, n, at int, scope *stmtParser, rename bool) (*Transform, *Error) {
	if rename {
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
	}
	q, err := deparseSelect(sel)
	if err != nil {
		return nil, p.errAt(Syntax, at, "branch "+itoa(n)+" of the set operation: "+err.Error())
	}
	what := "branch " + itoa(n) + " of the set operation"
	was := scope.branching
	scope.branching = true
	b, e := p.subParse(q, at, what, scope)
	scope.branching = was
	if e != nil {
		return nil, e
	}
	if e := checkBranch(b, n); e != nil {
		return nil, p.errAt(Invalid, at, e.Error())
	}
	return b, nil
}

// OnlyUnionAll tells whether n is a branch or a UNION ALL of UNION ALLs
// of branches: its rows are every branch's rows, each kept.
func (n *SetNode) OnlyUnionAll() bool {
	return n == nil || n.Op == "" || (n.Op == SetUnion && n.All && n.Left.OnlyUnionAll() && n.Right.OnlyUnionAll())
}

// Counted says the set operation keeps duplicates by count (decision
// 0050): its root has ALL and some node below is not UNION ALL (INTERSECT
// ALL, EXCEPT ALL, or a UNION ALL over a set operation without ALL), so a
// row appears as many times as the tree's counts say.
func (n *SetNode) Counted() bool { return n.All && !n.OnlyUnionAll() }

// HasCounts tells whether n or a node below it is INTERSECT ALL or EXCEPT
// ALL, whose rows depend on how many times each branch holds a row.
func (n *SetNode) HasCounts() bool {
	if n == nil || n.Op == "" {
		return false
	}
	return (n.All && n.Op != SetUnion) || n.Left.HasCounts() || n.Right.HasCounts()
}

// Distinct says the set operation has set semantics: its root is not
// UNION ALL, so each distinct row is kept once.
func (s *SetOp) Distinct() bool { return !s.Tree.All }

// checkBranch refuses a branch that is not a projection or aggregate of
// one table or of a join (INNER or LEFT, with EXISTS/IN semi-joins):
// FULL JOIN, DISTINCT ON, windows, ORDER BY and LIMIT. Which aggregating
// branches a set operation keeps is the plan's to say (decision 0044).
func checkBranch(t *Transform, n int) error {
	what := ""
	switch {
	case slices.ContainsFunc(t.Joins, func(j Join) bool { return j.Kind == JoinFull }):
		what = "a FULL JOIN"
	case len(t.DistinctOn) > 0:
		what = "DISTINCT ON"
	case len(t.Windows) > 0:
		what = "a window function"
	case len(t.OrderBy) > 0, t.Limit > 0, t.RankOutput != "":
		what = "ORDER BY or LIMIT"
	case t.SetOp != nil:
		what = "a set operation (in a derived table, CTE or view)"
	case t.From.Table.Name == setOpPlaceholder:
		what = "the name " + setOpPlaceholder
	}
	if what == "" {
		return nil
	}
	return fmt.Errorf("%s in branch %d of a set operation is not supported: each branch reads one table or an INNER or LEFT join of tables (SELECT ... FROM t [JOIN u ON ...] WHERE ...); define that branch as a transform and read its target in the branch", what, n)
}

// SetOpAlias names the rows of a set operation a transform reads as its
// FROM table (SetOp.Over): the statement's references to the derived
// table, CTE or view are qualified by it.
const SetOpAlias = "trellis_u"

// derivedSetOp reads the query of a derived table, CTE or view when it is
// a set operation (decision 0044): each branch is a statement of its own,
// the first is the returned transform and SetOp holds the others, as for
// a set operation written as the transform itself. ok is false when the
// query is no set operation.
func (p *stmtParser) derivedSetOp(d *derivedRef) (t *Transform, ok bool, e *Error) {
	tree, err := pgParse(d.query)
	if err != nil || len(tree.GetStmts()) != 1 {
		return nil, false, nil // subParse says why
	}
	sel := tree.GetStmts()[0].GetStmt().GetSelectStmt()
	if sel == nil || sel.GetOp() == pg.SetOperation_SETOP_NONE {
		return nil, false, nil
	}
	in := func(e *Error) *Error {
		e.Msg += " in " + d.what
		return e
	}
	if sel.GetWithClause() != nil {
		return nil, true, p.errAt(Invalid, d.at, "WITH inside a set operation is not supported in "+d.what+": write the CTEs in the statement's WITH clause")
	}
	op := &SetOp{}
	var first *Transform
	leaf := func(n int, s *pg.SelectStmt) *Error {
		b, e := p.parseBranch(s, n, d.at, d.scope, n > 1)
		if e != nil {
			return e
		}
		if n == 1 {
			first = b
			return nil
		}
		op.Branches = append(op.Branches, b)
		return nil
	}
	root, e := p.setOpTree(sel, d.at, leaf)
	if e != nil {
		return nil, true, in(e)
	}
	op.Tree = root
	first.SetOp = op
	for _, b := range op.Branches {
		for _, f := range b.Functions {
			first.Functions = appendUnique(first.Functions, f)
		}
	}
	return first, true, nil
}

// inlineSetOp reads a statement whose FROM table is a derived table, CTE
// or view d whose query is a set operation (decision 0044). An aggregate
// (GROUP BY, a global aggregate, DISTINCT) over a set operation (UNION
// ALL, or any other tree: decision 0050) becomes a
// transform over the set operation's rows: its FROM table is SetOpAlias,
// its clauses read that table's columns (the set operation's outputs),
// and SetOp.Over holds every branch. Other statements over a set
// operation are refused with the rewrite.
func (p *stmtParser) inlineSetOp(t *Transform, d *derivedRef) (*Transform, *Error) {
	fail := func(msg string) *Error { return p.errAt(Invalid, d.at, msg) }
	in := d.inner
	switch {
	case len(p.derived) > 1 || d.slot != 0 || len(t.Joins) > 0:
		return nil, fail("joining " + d.what + ", a set operation, is not supported: read it alone in FROM, or define it as a transform and join its target")
	case len(t.Windows) > 0 || len(t.DistinctOn) > 0 || len(t.OrderBy) > 0 || t.Limit > 0 || t.RankOutput != "":
		return nil, fail("window functions, DISTINCT ON, ORDER BY and LIMIT over " + d.what + ", a set operation, are not supported: define the set operation as a transform and read its target")
	case !t.Aggregated() && !t.Distinct:
		return p.distributeSetOp(t, d)
	}
	var err error
	rq := func(sql *string) {
		if *sql != "" && err == nil {
			*sql, err = requalify(*sql, d.alias, SetOpAlias)
		}
	}
	refs := func(cols []ColumnRef) []ColumnRef {
		out := slices.Clone(cols)
		for i, c := range out {
			if c.Qualifier == "" || c.Qualifier == d.alias {
				out[i].Qualifier = SetOpAlias
			}
		}
		return out
	}
	out := *t
	out.From = TableRef{Table: Name{Name: SetOpAlias}, Alias: SetOpAlias}
	out.Select = slices.Clone(t.Select)
	for i := range out.Select {
		rq(&out.Select[i].Expr)
		out.Select[i].Columns = refs(out.Select[i].Columns)
	}
	rq(&out.Where)
	rq(&out.Having)
	out.GroupBy = slices.Clone(t.GroupBy)
	for i := range out.GroupBy {
		rq(&out.GroupBy[i])
	}
	if err != nil {
		return nil, fail("cannot read " + d.what + ": " + err.Error())
	}
	out.WhereColumns, out.HavingColumns, out.GroupByColumns = refs(t.WhereColumns), refs(t.HavingColumns), refs(t.GroupByColumns)
	first := *in
	first.SetOp = nil
	out.SetOp = &SetOp{Over: true, Tree: in.SetOp.Tree, Branches: append([]*Transform{&first}, in.SetOp.Branches...)}
	for _, f := range in.Functions {
		out.Functions = appendUnique(out.Functions, f)
	}
	return &out, nil
}

// distributeSetOp reads a statement that filters and projects the rows of
// a derived table, CTE or view d whose query is a set operation: it is
// the set operation of the statement over each branch (a filter and a
// projection of a UNION ALL are those of each branch). Without ALL the
// statement must select every output once, unchanged: a filter commutes
// with UNION, INTERSECT and EXCEPT, a projection does not.
func (p *stmtParser) distributeSetOp(t *Transform, d *derivedRef) (*Transform, *Error) {
	fail := func(msg string) *Error { return p.errAt(Invalid, d.at, msg) }
	in := d.inner
	branches := append([]*Transform{in}, in.SetOp.Branches...)
	for _, b := range branches {
		if slices.ContainsFunc(b.Select, func(it SelectItem) bool { return it.Star }) {
			return nil, fail("* in a branch of " + d.what + ", a set operation read by the statement, is not supported: name the branch's columns")
		}
	}
	if !in.SetOp.Tree.OnlyUnionAll() {
		seen := map[string]bool{}
		for _, it := range t.Select {
			if it.Star && (it.StarOf == "" || it.StarOf == d.alias) {
				for _, o := range in.Select {
					seen[o.Name] = true
				}
				continue
			}
			n, err := parseExpr(it.Expr)
			c, ok := plainColumn(n)
			if err != nil || !ok || (c.Qualifier != "" && c.Qualifier != d.alias) || seen[c.Column] {
				return nil, fail("selecting " + quoteToken(it.Name) + " from " + d.what + ", a set operation other than UNION ALL, is not supported: select each of its columns once, unchanged (a filter is kept), or write the set operation as the transform itself")
			}
			seen[c.Column] = true
		}
		if len(seen) != len(in.Select) {
			return nil, fail("selecting some columns of " + d.what + ", a set operation other than UNION ALL, is not supported (its rows are whole rows): select each of its columns once, or write the set operation as the transform itself")
		}
	}
	saved, was := p.derived, p.branching
	defer func() { p.derived, p.branching = saved, was }()
	var merged []*Transform
	for i, b := range branches {
		bb := *b
		bb.SetOp = nil
		bb.Select = slices.Clone(b.Select)
		for j := range bb.Select {
			bb.Select[j].Name = in.Select[j].Name
		}
		dd := *d
		dd.inner = &bb
		p.derived, p.branching = []derivedRef{dd}, true
		m, e := p.inline(t)
		if e != nil {
			return nil, e
		}
		if e := checkBranch(m, i+1); e != nil {
			return nil, fail(e.Error())
		}
		merged = append(merged, m)
	}
	out := merged[0]
	out.SetOp = &SetOp{Tree: in.SetOp.Tree, Branches: merged[1:]}
	for _, b := range merged[1:] {
		for _, f := range b.Functions {
			out.Functions = appendUnique(out.Functions, f)
		}
	}
	return out, nil
}
