package grammar

import (
	"sort"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// selectPrefix turns one SQL part of a statement into a query PostgreSQL
// can parse: every part is an expression, parsed as `SELECT <part>`.
const selectPrefix = "SELECT "

// partKind tells where in a statement an SQL part is.
type partKind int

const (
	partSelect partKind = iota
	partWhere
	partGroupBy
	partJoin
	partAlter
	partSelectBare // a select item without AS: it may end with a bare alias
	partHaving
	partDistinctOn
	partOrderBy
)

// aggregateMsg is the refusal for an aggregate in this part; "" when
// aggregates are allowed.
func (k partKind) aggregateMsg() string {
	switch k {
	case partWhere:
		return "aggregates are not allowed in WHERE"
	case partGroupBy:
		return "aggregates are not allowed in GROUP BY"
	case partJoin:
		return "aggregates are not allowed in a JOIN condition"
	case partDistinctOn:
		return "aggregates are not allowed in DISTINCT ON"
	case partOrderBy:
		return "aggregates are not allowed in ORDER BY"
	}
	return ""
}

// expr is one analysed SQL part.
type expr struct {
	from, to int // token span [from, to) in the statement
	start    int // byte offset of the part in the statement text
	val      *pg.Node
	sql      string // canonical text; "" for JOIN conditions
	cols     []ColumnRef
	funcs    []located[string]     // located by byte offset in the statement text
	aggOff   int                   // byte offset of the first aggregate call, -1 when none
	windows  []located[WindowCall] // located by byte offset in the statement text
	alias    string                // a bare alias ending a partSelectBare item, "" when none
	subs     []SubJoin             // a WHERE clause's semi- and anti-joins, taken out of val
	// colname is the name PostgreSQL gives the expression as an output
	// without AS (figureColname), as written: before a FULL JOIN's USING
	// column is merged into COALESCE, which keeps the column's name.
	colname string
}

// offset maps a location in the parsed query back to the statement text.
func (x *expr) offset(loc, end int) int {
	if loc < len(selectPrefix) {
		return x.start
	}
	return min(x.start+loc-len(selectPrefix), end)
}

// analyse parses the tokens [from, to) as one PostgreSQL expression,
// refuses what a transform does not allow, and returns what it reads and
// calls with its canonical text.
func (p *stmtParser) analyse(from, to int, kind partKind, what string) (*expr, *Error) {
	start, end := p.toks[from].start, p.toks[to-1].end
	x := &expr{from: from, to: to, start: start, aggOff: -1}
	if w := p.toks[from].word; w == "all" {
		return nil, p.errAt(Syntax, from, "unexpected ALL at the start of "+what)
	}
	tree, err := pgParse(selectPrefix + p.text[start:end])
	if err != nil {
		return nil, p.pgError(err, start, end, selectPrefix, what)
	}
	rt, e := p.single(tree, x, end, what, kind == partSelectBare)
	if e != nil {
		return nil, e
	}
	x.val = rt.GetVal()
	x.colname = figureColname(x.val)
	if len(p.using) > 0 {
		qualifyUsing(x.val.ProtoReflect(), p.using)
	}
	if kind == partWhere {
		if x.subs, e = p.subJoins(rt, x, end); e != nil {
			return nil, e
		}
		if x.val = rt.GetVal(); x.val == nil {
			return x, nil // nothing but semi- and anti-joins
		}
	}

	w := newWalker(kind.aggregateMsg())
	w.windowsOK = kind == partSelect || kind == partSelectBare
	w.alter = kind == partAlter
	w.walk(x.val.ProtoReflect(), int(rt.GetLocation()), false)
	if w.errMsg != "" {
		return nil, p.errAtByte(Invalid, x.offset(w.errLoc, end), w.errMsg, "")
	}
	sort.SliceStable(w.cols, func(i, j int) bool { return w.cols[i].loc < w.cols[j].loc })
	for _, c := range w.cols {
		x.cols = appendUnique(x.cols, c.val)
	}
	for _, f := range w.funcs {
		x.funcs = append(x.funcs, located[string]{x.offset(f.loc, end), f.val})
	}
	if w.aggLoc >= 0 {
		x.aggOff = x.offset(w.aggLoc, end)
	}
	for _, c := range w.windows {
		x.windows = append(x.windows, located[WindowCall]{x.offset(c.loc, end), c.val})
	}

	if kind == partJoin {
		return x, nil
	}
	out, err := pgDeparse(tree)
	if err != nil || !strings.HasPrefix(out, selectPrefix) {
		return nil, p.errAtByte(Invalid, start, "PostgreSQL cannot print "+what+" back as SQL; write it differently", "")
	}
	x.sql = strings.TrimPrefix(out, selectPrefix)
	// The text is embedded in generated SQL later: make sure it means
	// exactly what was written.
	again, err := pgParse(out)
	if err != nil || len(again.GetStmts()) != 1 ||
		!equalIgnoringLocation(again.GetStmts()[0].GetStmt().ProtoReflect(), tree.GetStmts()[0].GetStmt().ProtoReflect()) {
		return nil, p.errAtByte(Invalid, start, "PostgreSQL cannot print "+what+" back as SQL with the same meaning; write it differently", "")
	}
	return x, nil
}

// orderItems is an analysed ORDER BY: each item's canonical SQL (with
// its direction) and expression, plain column (nil when not one), and
// what the items read and call.
type orderItems struct {
	items, exprs []string
	plain        []*ColumnRef
	cols         []ColumnRef
	funcs        []located[string]
}

// orderByPrefix turns ORDER BY's items into a query PostgreSQL parses.
const orderByPrefix = "SELECT 1 ORDER BY "

// orderBy parses the tokens [from, to) as ORDER BY's items.
func (p *stmtParser) orderBy(from, to int) (*orderItems, *Error) {
	start, end := p.toks[from].start, p.toks[to-1].end
	const what = "ORDER BY"
	tree, err := pgParse(orderByPrefix + p.text[start:end])
	if err != nil {
		return nil, p.pgError(err, start, end, orderByPrefix, what)
	}
	offset := func(loc int) int {
		if loc < len(orderByPrefix) {
			return start
		}
		return min(start+loc-len(orderByPrefix), end)
	}
	stmts := tree.GetStmts()
	var sel *pg.SelectStmt
	if len(stmts) == 1 {
		sel = stmts[0].GetStmt().GetSelectStmt()
	}
	if sel == nil || len(sel.GetSortClause()) == 0 || sel.GetLimitCount() != nil || sel.GetLimitOffset() != nil ||
		len(sel.GetLockingClause()) > 0 || sel.GetWithClause() != nil || sel.GetOp() != pg.SetOperation_SETOP_NONE {
		return nil, p.errAt(Invalid, from, "expected expressions, each with ASC or DESC and NULLS FIRST or LAST, in "+what)
	}
	o := &orderItems{}
	for _, n := range sel.GetSortClause() {
		sb := n.GetSortBy()
		if sb == nil || len(sb.GetUseOp()) > 0 {
			return nil, p.errAt(Invalid, from, "ORDER BY ... USING is not supported: write ASC or DESC")
		}
		w := newWalker(partOrderBy.aggregateMsg())
		w.walk(sb.GetNode().ProtoReflect(), int(sb.GetLocation()), false)
		if w.errMsg != "" {
			return nil, p.errAtByte(Invalid, offset(w.errLoc), w.errMsg, "")
		}
		if c := sb.GetNode().GetAConst(); c != nil {
			return nil, p.errAtByte(Invalid, offset(minLocation(sb.ProtoReflect())), "ORDER BY takes expressions, not constants or column positions", "")
		}
		sort.SliceStable(w.cols, func(i, j int) bool { return w.cols[i].loc < w.cols[j].loc })
		for _, c := range w.cols {
			o.cols = appendUnique(o.cols, c.val)
		}
		for _, f := range w.funcs {
			o.funcs = append(o.funcs, located[string]{offset(f.loc), f.val})
		}
		item, err := pgDeparse(&pg.ParseResult{Stmts: []*pg.RawStmt{{Stmt: &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: &pg.SelectStmt{
			TargetList:  sel.GetTargetList(),
			SortClause:  []*pg.Node{n},
			LimitOption: pg.LimitOption_LIMIT_OPTION_DEFAULT, Op: pg.SetOperation_SETOP_NONE,
		}}}}}})
		ex, err2 := deparseExpr(sb.GetNode())
		if err != nil || err2 != nil || !strings.HasPrefix(item, orderByPrefix) {
			return nil, p.errAt(Invalid, from, "PostgreSQL cannot print ORDER BY back as SQL; write it differently")
		}
		o.items = append(o.items, strings.TrimPrefix(item, orderByPrefix))
		o.exprs = append(o.exprs, ex)
		if c, ok := plainColumn(sb.GetNode()); ok {
			o.plain = append(o.plain, &c)
		} else {
			o.plain = append(o.plain, nil)
		}
	}
	return o, nil
}

// single checks that a parsed `SELECT <part>` is exactly one expression and
// returns its target.
func (p *stmtParser) single(tree *pg.ParseResult, x *expr, end int, what string, bareAlias bool) (*pg.ResTarget, *Error) {
	notOne := "expected exactly one expression in " + what
	stmts := tree.GetStmts()
	if len(stmts) != 1 {
		return nil, p.errAt(Syntax, x.from, notOne)
	}
	sel := stmts[0].GetStmt().GetSelectStmt()
	if sel == nil {
		return nil, p.errAt(Invalid, x.from, notOne)
	}
	if wc := sel.GetWithClause(); wc != nil {
		return nil, p.errAtByte(Invalid, x.offset(int(wc.GetLocation()), end), "WITH queries are not allowed in a transform", "")
	}
	clauses := []struct {
		present bool
		words   []string
	}{
		{sel.GetOp() != pg.SetOperation_SETOP_NONE, []string{"union", "intersect", "except"}},
		{len(sel.GetDistinctClause()) > 0, []string{"distinct"}},
		{sel.GetIntoClause() != nil, []string{"into"}},
		{len(sel.GetFromClause()) > 0, []string{"from"}},
		{sel.GetWhereClause() != nil, []string{"where"}},
		{len(sel.GetGroupClause()) > 0 || sel.GetGroupDistinct(), []string{"group"}},
		{sel.GetHavingClause() != nil, []string{"having"}},
		{len(sel.GetWindowClause()) > 0, []string{"window"}},
		{len(sel.GetValuesLists()) > 0, []string{"values"}},
		{len(sel.GetSortClause()) > 0, []string{"order"}},
		{sel.GetLimitOffset() != nil || sel.GetLimitCount() != nil ||
			sel.GetLimitOption() == pg.LimitOption_LIMIT_OPTION_WITH_TIES, []string{"limit", "offset", "fetch"}},
		{len(sel.GetLockingClause()) > 0, []string{"for"}},
	}
	for _, c := range clauses {
		if c.present {
			return nil, p.errAt(Invalid, p.clauseToken(x.from, x.to, c.words), notOne)
		}
	}
	targets := sel.GetTargetList()
	if len(targets) == 0 {
		return nil, p.errAt(Invalid, x.from, notOne)
	}
	if len(targets) > 1 {
		loc := int(targets[1].GetResTarget().GetLocation())
		return nil, p.errAtByte(Invalid, x.offset(loc, end), notOne, "")
	}
	rt := targets[0].GetResTarget()
	if rt == nil || rt.GetVal() == nil || len(rt.GetIndirection()) > 0 {
		return nil, p.errAt(Invalid, x.from, notOne)
	}
	if rt.GetName() != "" && bareAlias && !p.is(x.to-2, "as") {
		// `expr alias`: the alias names the item; the expression is
		// carried without it.
		x.alias = rt.GetName()
		rt.Name = ""
		return rt, nil
	}
	if rt.GetName() != "" {
		// `expr alias` or `expr AS alias`: the alias is the last token.
		at := x.to - 1
		if at-1 > x.from && p.toks[at-1].word == "as" {
			at--
		}
		return nil, p.errAt(Syntax, at, "unexpected "+quoteToken(p.toks[at].text)+" after the expression in "+what)
	}
	return rt, nil
}

// clauseToken finds the first token at parenthesis depth 0 in [from, to)
// that is one of words (a FROM right after DISTINCT belongs to IS
// DISTINCT FROM and is skipped); from when there is none.
func (p *stmtParser) clauseToken(from, to int, words []string) int {
	depth := 0
	for i := from; i < to; i++ {
		switch p.toks[i].kind {
		case pg.Token_ASCII_40, pg.Token_ASCII_91:
			depth++
		case pg.Token_ASCII_41, pg.Token_ASCII_93:
			depth--
		default:
			if depth != 0 {
				continue
			}
			for _, w := range words {
				if p.toks[i].word == w && (w != "from" || i == from || p.toks[i-1].word != "distinct") {
					return i
				}
			}
		}
	}
	return from
}

func appendUnique[T comparable](list []T, v T) []T {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}

// joinConds checks that a JOIN condition is column = column equalities
// joined by AND and returns them.
func (p *stmtParser) joinConds(x *expr) ([]JoinCond, *Error) {
	end := p.toks[x.to-1].end
	var conds []JoinCond
	var visit func(n *pg.Node) *Error
	visit = func(n *pg.Node) *Error {
		if b := n.GetBoolExpr(); b != nil && b.GetBoolop() == pg.BoolExprType_AND_EXPR {
			for _, a := range b.GetArgs() {
				if e := visit(a); e != nil {
					return e
				}
			}
			return nil
		}
		refuse := func() *Error {
			return p.errAtByte(Invalid, x.offset(minLocation(n.ProtoReflect()), end),
				"a JOIN condition must be column = column equalities joined by AND", "")
		}
		a := n.GetAExpr()
		if a == nil || a.GetKind() != pg.A_Expr_Kind_AEXPR_OP || len(a.GetName()) != 1 || a.GetName()[0].GetString_().GetSval() != "=" {
			return refuse()
		}
		l, lok := plainColumn(a.GetLexpr())
		r, rok := plainColumn(a.GetRexpr())
		if !lok || !rok {
			return refuse()
		}
		conds = append(conds, JoinCond{Left: l, Right: r})
		return nil
	}
	if e := visit(x.val); e != nil {
		return nil, e
	}
	return conds, nil
}

// plainColumn returns the column a node refers to when it is a bare column reference.
func plainColumn(n *pg.Node) (ColumnRef, bool) {
	c := n.GetColumnRef()
	if c == nil || len(c.GetFields()) == 0 {
		return ColumnRef{}, false
	}
	parts := make([]string, 0, len(c.GetFields()))
	for _, f := range c.GetFields() {
		s := f.GetString_()
		if s == nil {
			return ColumnRef{}, false
		}
		parts = append(parts, s.GetSval())
	}
	return ColumnRef{Qualifier: strings.Join(parts[:len(parts)-1], "."), Column: parts[len(parts)-1]}, true
}

// qualifyUsing gives the unqualified references to a USING column the
// qualifier of the table whose column they read (the FROM table's: for
// an inner join the two are equal, for a left join it is the one kept;
// a RIGHT JOIN's table for a right join), or, for a FULL JOIN, replaces
// them with COALESCE of both tables' columns, the merged column
// PostgreSQL defines.
func qualifyUsing(m protoreflect.Message, using map[string][]string) {
	if n, ok := m.Interface().(*pg.Node); ok {
		if c := n.GetColumnRef(); c != nil {
			f := c.GetFields()
			if len(f) == 1 && f[0].GetString_() != nil {
				col := f[0].GetString_().GetSval()
				switch qs := using[col]; len(qs) {
				case 1:
					c.Fields = append([]*pg.Node{pg.MakeStrNode(qs[0])}, f...)
				case 2:
					ref := func(q string) *pg.Node {
						return pg.MakeColumnRefNode([]*pg.Node{pg.MakeStrNode(q), pg.MakeStrNode(col)}, c.GetLocation())
					}
					n.Node = &pg.Node_CoalesceExpr{CoalesceExpr: &pg.CoalesceExpr{Args: []*pg.Node{ref(qs[0]), ref(qs[1])}, Location: c.GetLocation()}}
				}
			}
			return
		}
	}
	children(m, func(c protoreflect.Message) { qualifyUsing(c, using) })
}

// andParts are the top-level AND parts of a condition (n itself when it
// is no AND), nested ANDs flattened, in order.
func andParts(n *pg.Node) []*pg.Node {
	if b := n.GetBoolExpr(); b != nil && b.GetBoolop() == pg.BoolExprType_AND_EXPR {
		var out []*pg.Node
		for _, a := range b.GetArgs() {
			out = append(out, andParts(a)...)
		}
		return out
	}
	return []*pg.Node{n}
}

// conjuncts splits an analysed WHERE into its top-level AND parts, each
// with its canonical SQL and columns, and whether it is column = column.
func (p *stmtParser) conjuncts(x *expr) ([]Conjunct, *Error) {
	parts := andParts(x.val)
	out := make([]Conjunct, 0, len(parts))
	for _, n := range parts {
		tree := &pg.ParseResult{Stmts: []*pg.RawStmt{{Stmt: &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: &pg.SelectStmt{
			TargetList:  []*pg.Node{{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: n}}}},
			LimitOption: pg.LimitOption_LIMIT_OPTION_DEFAULT, Op: pg.SetOperation_SETOP_NONE,
		}}}}}}
		sql, err := pgDeparse(tree)
		if err != nil || !strings.HasPrefix(sql, selectPrefix) {
			return nil, p.errAtByte(Invalid, x.start, "PostgreSQL cannot print a part of the WHERE clause back as SQL; write it differently", "")
		}
		w := newWalker("")
		w.walk(n.ProtoReflect(), -1, false)
		sort.SliceStable(w.cols, func(i, j int) bool { return w.cols[i].loc < w.cols[j].loc })
		c := Conjunct{SQL: strings.TrimPrefix(sql, selectPrefix)}
		for _, r := range w.cols {
			c.Columns = appendUnique(c.Columns, r.val)
		}
		if a := n.GetAExpr(); a != nil && a.GetKind() == pg.A_Expr_Kind_AEXPR_OP && len(a.GetName()) == 1 && a.GetName()[0].GetString_().GetSval() == "=" {
			l, lok := plainColumn(a.GetLexpr())
			r, rok := plainColumn(a.GetRexpr())
			if lok && rok {
				c.Equality = &JoinCond{Left: l, Right: r}
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// figureColname is the name PostgreSQL gives an output without AS (its
// FigureColname): a column reference's column, a function's name, a few
// constructs' keywords, a cast's type when nothing better; "" where
// PostgreSQL would say ?column?.
func figureColname(n *pg.Node) string {
	name, _ := figureColnameStrength(n)
	return name
}

func figureColnameStrength(n *pg.Node) (string, int) {
	if n == nil {
		return "", 0
	}
	switch v := n.GetNode().(type) {
	case *pg.Node_ColumnRef:
		f := v.ColumnRef.GetFields()
		if len(f) > 0 && f[len(f)-1].GetString_() != nil {
			return f[len(f)-1].GetString_().GetSval(), 2
		}
	case *pg.Node_AIndirection:
		ind := v.AIndirection.GetIndirection()
		if len(ind) > 0 && ind[len(ind)-1].GetString_() != nil {
			return ind[len(ind)-1].GetString_().GetSval(), 2
		}
		return figureColnameStrength(v.AIndirection.GetArg())
	case *pg.Node_FuncCall:
		parts := funcNameParts(v.FuncCall)
		if len(parts) > 0 {
			return parts[len(parts)-1], 2
		}
	case *pg.Node_AExpr:
		if v.AExpr.GetKind() == pg.A_Expr_Kind_AEXPR_NULLIF {
			return "nullif", 2
		}
	case *pg.Node_TypeCast:
		name, strength := figureColnameStrength(v.TypeCast.GetArg())
		if strength <= 1 {
			if names := v.TypeCast.GetTypeName().GetNames(); len(names) > 0 {
				return names[len(names)-1].GetString_().GetSval(), 1
			}
		}
		return name, strength
	case *pg.Node_CollateClause:
		return figureColnameStrength(v.CollateClause.GetArg())
	case *pg.Node_CaseExpr:
		name, strength := figureColnameStrength(v.CaseExpr.GetDefresult())
		if strength <= 1 {
			return "case", 1
		}
		return name, strength
	case *pg.Node_AArrayExpr:
		return "array", 2
	case *pg.Node_RowExpr:
		return "row", 2
	case *pg.Node_CoalesceExpr:
		return "coalesce", 2
	case *pg.Node_MinMaxExpr:
		if v.MinMaxExpr.GetOp() == pg.MinMaxOp_IS_GREATEST {
			return "greatest", 2
		}
		return "least", 2
	case *pg.Node_XmlSerialize:
		return "xmlserialize", 2
	case *pg.Node_XmlExpr:
		switch v.XmlExpr.GetOp() {
		case pg.XmlExprOp_IS_XMLCONCAT:
			return "xmlconcat", 2
		case pg.XmlExprOp_IS_XMLELEMENT:
			return "xmlelement", 2
		case pg.XmlExprOp_IS_XMLFOREST:
			return "xmlforest", 2
		case pg.XmlExprOp_IS_XMLPARSE:
			return "xmlparse", 2
		case pg.XmlExprOp_IS_XMLPI:
			return "xmlpi", 2
		case pg.XmlExprOp_IS_XMLROOT:
			return "xmlroot", 2
		case pg.XmlExprOp_IS_XMLSERIALIZE:
			return "xmlserialize", 2
		}
	}
	return "", 0
}
