package grammar

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/trellis-pg/trellis/internal/ident"
)

// Derived tables and CTEs are inlined while the statement is parsed
// (decision 0028): a query in FROM or JOIN, written in plain SQL, is read
// as a TRANSFORM of its own, merged into the statement around it, and the
// merged statement, printed as TRANSFORM text, is parsed again. What Parse
// returns is then an ordinary transform of base tables: drain, build,
// quarantine and self-check never see a derived table.

// derivedRef is a table of FROM or JOIN that is a query: `(SELECT ...)
// alias`, or the name of a CTE.
type derivedRef struct {
	slot  int    // 0: the FROM table; k: t.Joins[k-1]
	query string // the query, plain SQL
	// cte is the name of the CTE referenced ("" for a derived table), and
	// scope what its query sees.
	cte   string
	scope *stmtParser
	alias string // the name the statement reads it by
	cols  []string
	at    int    // token of the reference, for errors
	what  string // "derived table s" or "CTE x", for messages
	inner *Transform
}

// cte is one query of a WITH clause.
type cte struct {
	query string
	uses  int
	// scope sees the CTEs defined before this one (and the enclosing
	// statements'): what the query may read by name.
	scope *stmtParser
}

// maxDepth bounds how deeply derived tables and CTEs nest.
const maxDepth = 32

// Views expands a view a statement reads: for a table name, the view's
// query (plain SQL) and true when the name is a view, false when it is
// not. An error refuses the view; its text is the message.
type Views func(Name) (query string, ok bool, err error)

// ParseWithViews parses like Parse, and reads every view the statement
// names (in FROM, JOIN, a derived table, a CTE or another view) as a
// derived table of its query, inlined as one (decision 0028).
func ParseWithViews(text string, views Views) (Statement, error) {
	src, e := lex(text)
	if e != nil {
		return nil, e
	}
	p := &stmtParser{source: src, counting: true, views: views}
	st, e := p.statement()
	if e != nil {
		return nil, e
	}
	return st, nil
}

// viewRef turns a reference to a view into a derived table; ok is false
// when the name is no view.
func (p *stmtParser) viewRef(ref TableRef, slot, at int) (TableRef, bool, *Error) {
	var views Views
	for q := p; q != nil && views == nil; q = q.parent {
		views = q.views
	}
	if views == nil {
		return ref, false, nil
	}
	q, ok, err := views(ref.Table)
	if err != nil {
		return ref, false, p.errAt(Invalid, at, err.Error())
	}
	if !ok {
		return ref, false, nil
	}
	// A view's query sees no CTE of the statement, only tables and views.
	scope := &stmtParser{views: views, depth: p.depth}
	d := derivedRef{slot: slot, query: strings.TrimRight(strings.TrimSpace(q), ";"), alias: qualifier(ref), at: at,
		what: "view " + quoteToken(ref.Table.String()), scope: scope}
	if e := p.addDerived(&d); e != nil {
		return ref, false, e
	}
	return TableRef{Table: Name{Name: derivedPlaceholder}, Alias: d.alias}, true, nil
}

// derivedPlaceholder names the source of a query's TRANSFORM text; it is
// never a table.
const derivedPlaceholder = "trellis_derived"

// withClause reads `WITH name [(cols)] AS [[NOT] MATERIALIZED] (query) [, ...]`
// after the target.
func (p *stmtParser) withClause() *Error {
	p.pos++ // WITH
	if p.is(p.pos, "recursive") {
		return p.errAt(Invalid, p.pos, "recursive CTEs are not supported; define the non-recursive part as a transform")
	}
	for {
		at := p.pos
		name, e := p.name(false, "a CTE name after WITH")
		if e != nil {
			return e
		}
		if p.isKind(p.pos, pg.Token_ASCII_40) {
			return p.errAt(Invalid, p.pos, "column names after a CTE's name are not supported: name the columns inside its query (AS)")
		}
		if e := p.expect("as", "expected AS after the CTE name"); e != nil {
			return e
		}
		if p.is(p.pos, "materialized") {
			p.pos++
		} else if p.is(p.pos, "not") && p.is(p.pos+1, "materialized") {
			p.pos += 2
		}
		q, e := p.parenthesized("the CTE's query")
		if e != nil {
			return e
		}
		if p.ctes == nil {
			p.ctes = map[string]*cte{}
		}
		if _, dup := p.ctes[name]; dup {
			return p.errAt(Invalid, at, "CTE "+quoteToken(name)+" is defined twice")
		}
		if e := p.checkQuery(q, at, "CTE "+quoteToken(name)); e != nil {
			return e
		}
		scope := &stmtParser{parent: p.parent, ctes: maps.Clone(p.ctes), depth: p.depth}
		p.ctes[name] = &cte{query: q, scope: scope}
		if !p.isKind(p.pos, pg.Token_ASCII_44) {
			return nil
		}
		p.pos++
	}
}

// parenthesized reads a balanced `( ... )` and returns the text inside.
func (p *stmtParser) parenthesized(what string) (string, *Error) {
	if !p.isKind(p.pos, pg.Token_ASCII_40) {
		return "", p.errAt(Syntax, p.pos, "expected ( and "+what)
	}
	open := p.pos
	depth := 0
	for i := p.pos; i < p.n; i++ {
		switch p.toks[i].kind {
		case pg.Token_ASCII_40:
			depth++
		case pg.Token_ASCII_41:
			depth--
			if depth == 0 {
				p.pos = i + 1
				if i == open+1 {
					return "", p.errAt(Syntax, i, "expected "+what+" inside the parentheses")
				}
				return p.text[p.toks[open+1].start:p.toks[i-1].end], nil
			}
		}
	}
	return "", p.errAt(Syntax, open, "\"(\" is never closed")
}

// derivedTable reads `(query) [AS] alias [(col, ...)]` where a table name
// is expected.
func (p *stmtParser) derivedTable(slot int) (TableRef, *Error) {
	at := p.pos
	if p.is(at-1, "lateral") {
		return TableRef{}, p.errAt(Invalid, at-1, "LATERAL is not supported")
	}
	if at+1 < p.n && !p.is(at+1, "select") && !p.is(at+1, "with") && !p.is(at+1, "values") && !p.isKind(at+1, pg.Token_ASCII_40) {
		return TableRef{}, p.errAt(Invalid, at, "a parenthesized join ((a JOIN b ON ...) JOIN ...) is not supported: write the joins one after another, each ON comparing its table with one table before it (FROM a JOIN b ON ... FULL JOIN c ON ...), or define the parenthesized join as a transform and join its target")
	}
	q, e := p.parenthesized("a query")
	if e != nil {
		return TableRef{}, e
	}
	d := derivedRef{slot: slot, query: q, at: at, scope: p}
	if p.is(p.pos, "as") {
		p.pos++
	}
	if p.pos < p.n && !p.clauseStart(p.pos) && !p.is(p.pos, "on") && !p.is(p.pos, "using") && !p.isKind(p.pos, pg.Token_ASCII_44) {
		if d.alias, e = p.name(false, "an alias for the derived table"); e != nil {
			return TableRef{}, e
		}
	}
	if d.alias == "" {
		return TableRef{}, p.errAt(Syntax, p.pos, "a derived table needs an alias: (SELECT ...) AS name")
	}
	if p.isKind(p.pos, pg.Token_ASCII_40) {
		cols, e := p.usingList()
		if e != nil {
			return TableRef{}, e
		}
		d.cols = cols
	}
	d.what = "derived table " + quoteToken(d.alias)
	if e := p.addDerived(&d); e != nil {
		return TableRef{}, e
	}
	return TableRef{Table: Name{Name: derivedPlaceholder}, Alias: d.alias}, nil
}

// cteRef turns a reference to a CTE into a derived table; ok is false when
// the name is no CTE.
func (p *stmtParser) cteRef(ref TableRef, slot, at int) (TableRef, bool, *Error) {
	if ref.Table.Schema != "" {
		return ref, false, nil
	}
	c := p.lookupCTE(ref.Table.Name)
	if c == nil {
		return ref, false, nil
	}
	if p.counting {
		c.uses++
		if c.uses > 1 {
			return ref, false, p.errAt(Invalid, at, "CTE "+quoteToken(ref.Table.Name)+" is read twice: a CTE may be read once (define it as a transform and read its target twice)")
		}
	}
	d := derivedRef{slot: slot, query: c.query, alias: qualifier(ref), at: at, what: "CTE " + quoteToken(ref.Table.Name),
		cte: ref.Table.Name, scope: c.scope}
	if e := p.addDerived(&d); e != nil {
		return ref, false, e
	}
	return TableRef{Table: Name{Name: derivedPlaceholder}, Alias: d.alias}, true, nil
}

func (p *stmtParser) lookupCTE(name string) *cte {
	for q := p; q != nil; q = q.parent {
		if c, ok := q.ctes[name]; ok {
			return c
		}
	}
	return nil
}

// addDerived parses a derived table's query and records it.
func (p *stmtParser) addDerived(d *derivedRef) *Error {
	inner, ok, e := p.derivedSetOp(d)
	if !ok && e == nil {
		inner, e = p.subParse(d.query, d.at, d.what, d.scope)
	}
	if e != nil {
		return e
	}
	if len(d.cols) > 0 {
		if slices.ContainsFunc(inner.Select, func(it SelectItem) bool { return it.Star }) {
			return p.errAt(Invalid, d.at, "column names for "+d.what+" need its query to name its outputs (no *)")
		}
		if len(d.cols) > len(inner.Select) {
			return p.errAt(Invalid, d.at, fmt.Sprintf("%s has %d columns but %d names are given", d.what, len(inner.Select), len(d.cols)))
		}
		for i, c := range d.cols {
			inner.Select[i].Name = c
		}
	}
	d.inner = inner
	p.derived = append(p.derived, *d)
	return nil
}

// checkQuery refuses what a CTE's query may not be before it is read:
// INSERT, UPDATE, DELETE and MERGE.
func (p *stmtParser) checkQuery(q string, at int, what string) *Error {
	tree, err := pgParse(q)
	if err != nil {
		return p.errAt(Syntax, at, what+": "+strings.TrimSuffix(err.Error(), " at end of input"))
	}
	if len(tree.GetStmts()) != 1 || tree.GetStmts()[0].GetStmt().GetSelectStmt() == nil {
		return p.errAt(Invalid, at, what+" is not a SELECT: data-modifying statements (INSERT, UPDATE, DELETE, MERGE) in WITH are not supported")
	}
	return nil
}

// subParse reads a query (plain SQL) as a TRANSFORM of its own. Errors are
// reported at token at of this statement, naming what.
func (p *stmtParser) subParse(q string, at int, what string, scope *stmtParser) (*Transform, *Error) {
	fail := func(kind ErrorKind, msg string) *Error { return p.errAt(kind, at, msg+" in "+what) }
	text, e := queryText(q, fail)
	if e != nil {
		return nil, e
	}
	t, e := scope.parseChild(text, p.counting)
	if e != nil {
		return nil, fail(e.Kind, e.Msg)
	}
	return t, nil
}

// parseChild parses TRANSFORM text made by this parser, seeing this
// statement's CTEs.
func (p *stmtParser) parseChild(text string, counting bool) (*Transform, *Error) {
	src, e := lex(text)
	if e != nil {
		return nil, e
	}
	if p.depth >= maxDepth {
		return nil, &Error{Kind: Invalid, Msg: "derived tables and CTEs nest too deeply"}
	}
	c := &stmtParser{source: src, parent: p, counting: counting, depth: p.depth + 1, branch: p.branching}
	st, e := c.transform()
	if e != nil {
		return nil, e
	}
	return st.(*Transform), nil
}

// queryText prints a plain SQL query as the TRANSFORM text it stands for:
// `TRANSFORM trellis_derived [WITH ...] FROM ... SELECT ... [WHERE ...]
// [GROUP BY ...] [HAVING ...]`.
func queryText(q string, fail func(ErrorKind, string) *Error) (string, *Error) {
	tree, err := pgParse(q)
	if err != nil {
		return "", fail(Syntax, strings.TrimSuffix(err.Error(), " at end of input"))
	}
	if len(tree.GetStmts()) != 1 || tree.GetStmts()[0].GetStmt().GetSelectStmt() == nil {
		return "", fail(Invalid, "expected one SELECT query")
	}
	sel := tree.GetStmts()[0].GetStmt().GetSelectStmt()
	switch {
	case sel.GetOp() != pg.SetOperation_SETOP_NONE:
		return "", fail(Invalid, "UNION, INTERSECT and EXCEPT are not supported")
	case len(sel.GetValuesLists()) > 0:
		return "", fail(Invalid, "VALUES is not supported: a transform reads tables")
	case sel.GetIntoClause() != nil:
		return "", fail(Invalid, "SELECT INTO is not supported")
	case len(sel.GetLockingClause()) > 0:
		return "", fail(Invalid, "FOR UPDATE and FOR SHARE are not supported")
	case sel.GetLimitCount() != nil || sel.GetLimitOffset() != nil || sel.GetLimitOption() == pg.LimitOption_LIMIT_OPTION_WITH_TIES:
		return "", fail(Invalid, "LIMIT, OFFSET and FETCH are not supported")
	case len(sel.GetWindowClause()) > 0:
		return "", fail(Invalid, "WINDOW clauses are not supported")
	case sel.GetGroupDistinct():
		return "", fail(Invalid, "GROUP BY DISTINCT is not supported")
	case len(sel.GetDistinctClause()) > 0 && sel.GetDistinctClause()[0] != nil && sel.GetDistinctClause()[0].GetNode() != nil:
		return "", fail(Invalid, "DISTINCT ON is not supported")
	case len(sel.GetFromClause()) == 0:
		return "", fail(Invalid, "a query without FROM is not supported: a transform reads tables")
	}
	var b strings.Builder
	b.WriteString("TRANSFORM " + derivedPlaceholder)
	if w := sel.GetWithClause(); w != nil {
		if w.GetRecursive() {
			return "", fail(Invalid, "recursive CTEs are not supported; define the non-recursive part as a transform")
		}
		b.WriteString(" WITH ")
		for i, n := range w.GetCtes() {
			c := n.GetCommonTableExpr()
			if c.GetCtequery().GetSelectStmt() == nil {
				return "", fail(Invalid, "CTE "+quoteToken(c.GetCtename())+" is not a SELECT: data-modifying statements (INSERT, UPDATE, DELETE, MERGE) in WITH are not supported")
			}
			if len(c.GetAliascolnames()) > 0 {
				return "", fail(Invalid, "column names after a CTE's name are not supported: name the columns inside its query (AS)")
			}
			body, err := deparseSelect(c.GetCtequery().GetSelectStmt())
			if err != nil {
				return "", fail(Invalid, "PostgreSQL cannot print CTE "+quoteToken(c.GetCtename())+" back as SQL")
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(ident.Quote(c.GetCtename()) + " AS (" + body + ")")
		}
	}
	star := &pg.Node{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: &pg.Node{Node: &pg.Node_ColumnRef{ColumnRef: &pg.ColumnRef{
		Fields: []*pg.Node{{Node: &pg.Node_AStar{AStar: &pg.A_Star{}}}}}}}}}}
	from, err := deparseSelect(&pg.SelectStmt{TargetList: []*pg.Node{star}, FromClause: sel.GetFromClause()})
	const fromPrefix = "SELECT * FROM "
	if err != nil || !strings.HasPrefix(from, fromPrefix) {
		return "", fail(Invalid, "PostgreSQL cannot print the FROM clause back as SQL")
	}
	b.WriteString(" FROM " + strings.TrimPrefix(from, fromPrefix))
	list, err := deparseSelect(&pg.SelectStmt{TargetList: sel.GetTargetList(), DistinctClause: sel.GetDistinctClause()})
	if err != nil || !strings.HasPrefix(list, selectPrefix) {
		return "", fail(Invalid, "PostgreSQL cannot print the select list back as SQL")
	}
	b.WriteString(" " + list)
	part := func(kw string, nodes ...*pg.Node) *Error {
		if len(nodes) == 0 || nodes[0] == nil {
			return nil
		}
		texts := make([]string, len(nodes))
		for i, n := range nodes {
			s, err := deparseExpr(n)
			if err != nil {
				return fail(Invalid, "PostgreSQL cannot print "+kw+" back as SQL")
			}
			texts[i] = s
		}
		b.WriteString(" " + kw + " " + strings.Join(texts, ", "))
		return nil
	}
	if e := part("WHERE", sel.GetWhereClause()); e != nil {
		return "", e
	}
	if e := part("GROUP BY", sel.GetGroupClause()...); e != nil {
		return "", e
	}
	if e := part("HAVING", sel.GetHavingClause()); e != nil {
		return "", e
	}
	// ORDER BY without LIMIT orders nothing in a table: it is left out.
	return b.String(), nil
}

func deparseSelect(sel *pg.SelectStmt) (string, error) {
	sel = proto.Clone(sel).(*pg.SelectStmt)
	if sel.LimitOption == pg.LimitOption_LIMIT_OPTION_UNDEFINED {
		sel.LimitOption = pg.LimitOption_LIMIT_OPTION_DEFAULT
	}
	if sel.Op == pg.SetOperation_SET_OPERATION_UNDEFINED {
		sel.Op = pg.SetOperation_SETOP_NONE
	}
	return pgDeparse(&pg.ParseResult{Stmts: []*pg.RawStmt{{Stmt: &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sel}}}}})
}

// parseExpr parses canonical SQL of one expression.
func parseExpr(sql string) (*pg.Node, error) {
	tree, err := pgParse(selectPrefix + sql)
	if err != nil {
		return nil, err
	}
	sel := tree.GetStmts()[0].GetStmt().GetSelectStmt()
	if sel == nil || len(sel.GetTargetList()) != 1 {
		return nil, fmt.Errorf("%q is not one expression", sql)
	}
	return sel.GetTargetList()[0].GetResTarget().GetVal(), nil
}

// output is what a reference to a derived table's column stands for.
type output struct {
	node *pg.Node // the expression (qualified by the inner table)
}

// inliner merges one derived table into the statement around it.
type inliner struct {
	d     *derivedRef
	outer *Transform
	inner *Transform
	// outs are the inner's named outputs; starOf is the qualifier of the
	// inner's `*` ("" for none; "*" for a `*` over several tables).
	outs   map[string]output
	order  []string
	starOf string
	// nullable says the derived table is on the nullable side of an outer
	// join: only its plain columns may be read.
	nullable bool
	err      string
}

// inline merges the first derived table of t into t and parses the
// merged statement again (which merges the next one, if any).
func (p *stmtParser) inline(t *Transform) (*Transform, *Error) {
	d := &p.derived[0]
	if d.inner.SetOp != nil {
		return p.inlineSetOp(t, d)
	}
	fail := func(msg string) *Error { return p.errAt(Invalid, d.at, msg) }
	in := d.inner
	m := &inliner{d: d, outer: t, inner: in, outs: map[string]output{}}
	single := len(in.Joins) == 0
	// A query of one table lends that table the derived table's name, and
	// its parts are qualified by it: they move into a statement that may
	// read more tables, and the target's key columns are named after the
	// alias the statement gave.
	q, was := d.alias, qualifier(in.From)
	if single {
		in.From.Alias = d.alias
	} else {
		q = ""
	}
	qual := func(sql string) (string, error) {
		if !single || sql == "" {
			return sql, nil
		}
		return requalify(sql, was, q)
	}
	for _, it := range in.Select {
		if it.Star {
			switch {
			case m.starOf != "":
				return nil, fail(d.what + " selects * twice: name its columns")
			case single:
				m.starOf = q
			case it.StarOf != "":
				m.starOf = it.StarOf
			default:
				m.starOf = "*"
			}
			m.order = append(m.order, "")
			continue
		}
		sql, err := qual(it.Expr)
		if err != nil {
			return nil, fail("cannot inline " + d.what + ": " + err.Error())
		}
		n, err := parseExpr(sql)
		if err != nil {
			return nil, fail("cannot inline " + d.what + ": " + err.Error())
		}
		if _, dup := m.outs[it.Name]; dup {
			return nil, fail(d.what + " has two columns named " + quoteToken(it.Name))
		}
		m.outs[it.Name] = output{node: n}
		m.order = append(m.order, it.Name)
	}
	where, err := qual(in.Where)
	if err != nil {
		return nil, fail("cannot inline " + d.what + ": " + err.Error())
	}
	having, err := qual(in.Having)
	if err != nil {
		return nil, fail("cannot inline " + d.what + ": " + err.Error())
	}
	groupBy := make([]string, len(in.GroupBy))
	for i, g := range in.GroupBy {
		if groupBy[i], err = qual(g); err != nil {
			return nil, fail("cannot inline " + d.what + ": " + err.Error())
		}
	}
	aggregated := in.Aggregated() || in.Distinct
	if in.Distinct && len(in.GroupBy) == 0 && !in.Aggregated() {
		// DISTINCT is a GROUP BY of the outputs that read a column.
		if m.starOf != "" {
			return nil, fail("SELECT DISTINCT * in " + d.what + " is not supported: name its columns")
		}
		for _, it := range in.Select {
			if len(it.Columns) > 0 {
				s, err := deparseExpr(m.outs[it.Name].node)
				if err != nil {
					return nil, fail("cannot inline " + d.what + ": " + err.Error())
				}
				groupBy = append(groupBy, s)
			}
		}
	}

	// Which tables the merged statement reads, and where the inner goes.
	for k, j := range t.Joins {
		slot := k + 1
		switch {
		case slot == d.slot && j.Kind != JoinInner:
			m.nullable = true
		case d.slot < slot && (j.Kind == JoinRight || j.Kind == JoinFull):
			m.nullable = true // a RIGHT or FULL join null-extends every table before it
		}
	}
	rankOut, limit, e := m.topK(t, d, fail)
	if e != nil {
		return nil, e
	}
	if rankOut != "" {
		// Top-k per partition: the filter on the rank is kept apart, as
		// the rank's limit (it applies after the windows, not in WHERE).
		outer := *t
		outer.Where, outer.WhereColumns, outer.WhereConjuncts = "", nil, nil
		t, m.outer = &outer, &outer
	}
	switch {
	case len(t.DistinctOn) > 0 || len(t.OrderBy) > 0 || t.Limit > 0:
		return nil, fail("DISTINCT ON, ORDER BY and LIMIT over " + d.what + " are not supported: write them in a transform over its tables")
	case len(in.DistinctOn) > 0 || len(in.OrderBy) > 0 || in.Limit > 0:
		return nil, fail("DISTINCT ON, ORDER BY and LIMIT in " + d.what + " are not supported: define it as a transform of its own and read its target")
	case len(in.Windows) > 0 && (t.Where != "" || len(t.Joins) > 0 || d.slot != 0 || t.Aggregated() || t.Distinct):
		return nil, fail(d.what + " computes window functions: the statement around it may only select its columns (a filter, join or aggregate would apply before the windows once it is inlined); define it as a transform of its own and read its target")
	case aggregated && (len(t.Joins) > 0 || d.slot != 0):
		return nil, fail("joining " + d.what + ", which aggregates, is not supported: define it as a transform of its own and join its target")
	case aggregated && (t.Aggregated() || t.Distinct):
		return nil, fail("aggregating over " + d.what + ", which aggregates already, is not supported: define it as a transform of its own and read its target")
	case d.slot != 0 && !single:
		return nil, fail(d.what + " is joined and reads a join: only a derived table in FROM may join tables (write the join in the outer statement)")
	case m.nullable && where != "":
		return nil, fail(d.what + " is on the nullable side of an outer join and has a WHERE: write the filter in the outer statement's ON or WHERE instead")
	}
	for _, other := range t.Joins {
		if !single && qualifier(other.Table) == qualifier(in.From) {
			return nil, fail("table name " + quoteToken(qualifier(in.From)) + " is used inside and outside " + d.what + ": give one of them another alias")
		}
		for _, ij := range in.Joins {
			if qualifier(other.Table) == qualifier(ij.Table) {
				return nil, fail("table name " + quoteToken(qualifier(ij.Table)) + " is used inside and outside " + d.what + ": give one of them another alias")
			}
		}
	}

	if d.slot == 0 && slices.ContainsFunc(in.Joins, func(j Join) bool { return !j.Comma }) &&
		slices.ContainsFunc(t.Joins, func(j Join) bool { return j.Comma }) {
		return nil, fail(d.what + " reads a JOIN and is part of a comma-separated FROM: write the outer join as JOIN ... ON")
	}
	var b strings.Builder
	b.WriteString("TRANSFORM " + renderName(t.Target) + " FROM ")
	if d.slot == 0 {
		b.WriteString(renderTables(in))
	} else {
		b.WriteString(m.renderRef(0, t.From, p))
	}
	for k, j := range t.Joins {
		slot := k + 1
		ref := m.renderRef(slot, j.Table, p)
		if slot == d.slot {
			ref = renderRef(in.From)
		}
		if j.Comma {
			b.WriteString(", " + ref)
			continue
		}
		b.WriteString(" " + renderKind(j.Kind) + " JOIN " + ref + " ON ")
		for i, c := range j.On {
			if i > 0 {
				b.WriteString(" AND ")
			}
			l, err := m.substRef(c.Left)
			if err != nil {
				return nil, fail(err.Error())
			}
			r, err := m.substRef(c.Right)
			if err != nil {
				return nil, fail(err.Error())
			}
			b.WriteString(l + " = " + r)
		}
	}
	b.WriteString(" SELECT ")
	if t.Distinct {
		b.WriteString("DISTINCT ")
	}
	var items []string
	for _, it := range t.Select {
		if it.Star {
			star, err := m.star(it.StarOf, p)
			if err != nil {
				return nil, fail(err.Error())
			}
			items = append(items, star...)
			continue
		}
		s, err := m.subst(it.Expr)
		if err != nil {
			return nil, fail(err.Error())
		}
		items = append(items, s+" AS "+ident.Quote(it.Name))
	}
	b.WriteString(strings.Join(items, ", "))
	outerWhere, err := m.subst(t.Where)
	if err != nil {
		return nil, fail(err.Error())
	}
	var wheres, havings []string
	if where != "" {
		wheres = append(wheres, "("+where+")")
	}
	if aggregated {
		if having != "" {
			havings = append(havings, "("+having+")")
		}
		if outerWhere != "" {
			havings = append(havings, "("+outerWhere+")")
		}
	} else if outerWhere != "" {
		wheres = append(wheres, "("+outerWhere+")")
	}
	if len(wheres) > 0 {
		b.WriteString(" WHERE " + strings.Join(wheres, " AND "))
	}
	if aggregated {
		if len(groupBy) > 0 {
			b.WriteString(" GROUP BY " + strings.Join(groupBy, ", "))
		}
	} else if len(t.GroupBy) > 0 {
		gs := make([]string, len(t.GroupBy))
		for i, g := range t.GroupBy {
			if gs[i], err = m.subst(g); err != nil {
				return nil, fail(err.Error())
			}
		}
		b.WriteString(" GROUP BY " + strings.Join(gs, ", "))
	}
	if !aggregated && t.Having != "" {
		h, err := m.subst(t.Having)
		if err != nil {
			return nil, fail(err.Error())
		}
		havings = append(havings, "("+h+")")
	}
	if len(havings) > 0 {
		b.WriteString(" HAVING " + strings.Join(havings, " AND "))
	}
	if t.WithoutSourceIndex {
		b.WriteString(" WITHOUT SOURCE INDEX")
	}
	merged, e := p.parseChild(b.String(), false)
	if e != nil {
		return nil, p.errAt(e.Kind, d.at, e.Msg+" (once "+d.what+" is inlined: "+b.String()+")")
	}
	if rankOut != "" {
		merged.RankOutput, merged.Limit = rankOut, limit
	}
	return merged, nil
}

// ranks are the window functions a top-k filter may read: the row's
// place in its partition.
var ranks = map[string]bool{"row_number": true, "rank": true, "dense_rank": true}

// topK recognises the top-k pattern, `FROM (SELECT ..., row_number()
// OVER (PARTITION BY g ORDER BY ...) AS rn FROM t) s SELECT * WHERE rn <=
// k` (also rank and dense_rank, `rn < k`, `rn = 1`): it returns the rank
// output's name and the limit k, or "" when the statement is not one.
func (m *inliner) topK(t *Transform, d *derivedRef, fail func(string) *Error) (string, int64, *Error) {
	in := m.inner
	if len(in.Windows) == 0 || t.Where == "" || d.slot != 0 || len(t.Joins) > 0 || t.Aggregated() || t.Distinct {
		return "", 0, nil
	}
	cond, err := parseExpr(t.Where)
	if err != nil {
		return "", 0, nil
	}
	a := cond.GetAExpr()
	if a == nil || a.GetKind() != pg.A_Expr_Kind_AEXPR_OP || len(a.GetName()) != 1 {
		return "", 0, nil
	}
	ref, ok := plainColumn(a.GetLexpr())
	k := a.GetRexpr().GetAConst()
	if !ok || (ref.Qualifier != "" && ref.Qualifier != d.alias) || k == nil || k.GetIval() == nil {
		return "", 0, nil
	}
	out, ok := m.outs[ref.Column]
	fc := out.node.GetFuncCall()
	if !ok || fc == nil || fc.GetOver() == nil {
		return "", 0, nil
	}
	parts := funcNameParts(fc)
	n := int64(k.GetIval().GetIval())
	switch a.GetName()[0].GetString_().GetSval() {
	case "<=":
	case "<":
		n--
	case "=":
		if n != 1 {
			return "", 0, fail("a top-k filter keeps the first rows: write " + ref.Column + " <= " + fmt.Sprint(n) + " (" + ref.Column + " = " + fmt.Sprint(n) + " alone is not supported)")
		}
	default:
		return "", 0, nil
	}
	if !ranks[parts[len(parts)-1]] {
		return "", 0, fail("a top-k filter reads row_number(), rank() or dense_rank(); " + quoteToken(ref.Column) + " is " + strings.Join(parts, ".") + "()")
	}
	if n < 1 {
		return "", 0, fail("the top-k filter on " + quoteToken(ref.Column) + " keeps no row")
	}
	if !slices.ContainsFunc(t.Select, func(it SelectItem) bool {
		return it.Star || (len(it.Columns) == 1 && it.Columns[0].Column == ref.Column && it.Name == ref.Column)
	}) {
		return "", 0, fail("a top-k transform selects its rank column " + quoteToken(ref.Column) + " (SELECT * or SELECT ..., " + ref.Column + ")")
	}
	return ref.Column, n, nil
}

// renderRef prints the table of slot: a base table, or a derived table
// not merged yet as its query.
func (m *inliner) renderRef(slot int, ref TableRef, p *stmtParser) string {
	for _, d := range p.derived {
		if d.slot == slot && d.cte != "" {
			return renderName(Name{Name: d.cte}) + " AS " + ident.Quote(d.alias)
		}
		if d.slot == slot {
			s := "(" + d.query + ") AS " + ident.Quote(d.alias)
			if len(d.cols) > 0 {
				s += " (" + ident.List(d.cols) + ")"
			}
			return s
		}
	}
	return renderRef(ref)
}

// renderTables prints a transform's FROM table and joins.
func renderTables(t *Transform) string {
	var b strings.Builder
	b.WriteString(renderRef(t.From))
	if t.Swapped {
		// As written (a RIGHT JOIN b), so that * lists the columns in
		// that order once merged.
		b.Reset()
		b.WriteString(renderRef(t.Joins[0].Table))
	}
	for k, j := range t.Joins {
		if j.Comma {
			b.WriteString(", " + renderRef(j.Table))
			continue
		}
		if k == 0 && t.Swapped {
			j.Kind, j.Table = JoinRight, t.From
		}
		b.WriteString(" " + renderKind(j.Kind) + " JOIN " + renderRef(j.Table))
		if len(j.Using) > 0 {
			b.WriteString(" USING (" + ident.List(j.Using) + ")")
			continue
		}
		b.WriteString(" ON ")
		for i, c := range j.On {
			if i > 0 {
				b.WriteString(" AND ")
			}
			b.WriteString(renderCol(c.Left) + " = " + renderCol(c.Right))
		}
	}
	return b.String()
}

func renderKind(k JoinKind) string { return upper(string(k)) }

func renderName(n Name) string {
	if n.Schema == "" {
		return ident.Quote(n.Name)
	}
	return ident.Qualified(n.Schema, n.Name)
}

func renderRef(r TableRef) string {
	s := renderName(r.Table)
	if r.Alias != "" {
		s += " AS " + ident.Quote(r.Alias)
	}
	return s
}

func renderCol(c ColumnRef) string {
	if c.Qualifier == "" {
		return ident.Quote(c.Column)
	}
	return ident.Quote(c.Qualifier) + "." + ident.Quote(c.Column)
}

// star prints what `*` (q "") or `q.*` stands for in the merged statement.
func (m *inliner) star(q string, p *stmtParser) ([]string, error) {
	mine := func() []string {
		var out []string
		for _, name := range m.order {
			if name == "" {
				if m.starOf == "*" {
					out = append(out, "*")
				} else {
					out = append(out, ident.Quote(m.starOf)+".*")
				}
				continue
			}
			s, _ := deparseExpr(m.outs[name].node)
			out = append(out, s+" AS "+ident.Quote(name))
		}
		return out
	}
	if q == m.d.alias {
		if m.starOf == "*" && len(m.outer.Joins) > 0 {
			return nil, fmt.Errorf("%s.* reads a * over several tables: name the columns of %s", q, m.d.what)
		}
		return mine(), nil
	}
	if q != "" {
		return []string{ident.Quote(q) + ".*"}, nil
	}
	for _, j := range m.outer.Joins {
		if len(j.Using) > 0 {
			return nil, fmt.Errorf("* with JOIN ... USING and %s is not supported: name the columns", m.d.what)
		}
	}
	if m.starOf == "*" && len(m.outer.Joins) > 0 {
		return nil, fmt.Errorf("* reads a * over several tables in %s: name its columns", m.d.what)
	}
	var out []string
	for slot := 0; slot <= len(m.outer.Joins); slot++ {
		ref := m.outer.From
		if slot > 0 {
			ref = m.outer.Joins[slot-1].Table
		}
		if slot == m.d.slot {
			out = append(out, mine()...)
			continue
		}
		out = append(out, ident.Quote(qualifier(ref))+".*")
	}
	return out, nil
}

// resolve returns what a column reference of the outer statement stands
// for: nil when it reads another table.
func (m *inliner) resolve(ref ColumnRef) (*pg.Node, error) {
	switch {
	case ref.Qualifier == m.d.alias:
	case ref.Qualifier == "" && len(m.outer.Joins) == 0:
	case ref.Qualifier == "":
		if _, ok := m.outs[ref.Column]; !ok {
			return nil, nil
		}
	default:
		return nil, nil
	}
	if o, ok := m.outs[ref.Column]; ok {
		if m.nullable && o.node.GetColumnRef() == nil {
			return nil, fmt.Errorf("%s is on the nullable side of an outer join, and its column %s is an expression: only its plain columns can be read there (compute the expression in the outer statement)", m.d.what, quoteToken(ref.Column))
		}
		return proto.Clone(o.node).(*pg.Node), nil
	}
	switch m.starOf {
	case "":
		return nil, fmt.Errorf("column %s does not exist in %s", quoteToken(ref.String()), m.d.what)
	case "*":
		if len(m.outer.Joins) > 0 {
			return nil, fmt.Errorf("%s reads * over several tables: name its columns", m.d.what)
		}
		return columnNode("", ref.Column), nil
	}
	return columnNode(m.starOf, ref.Column), nil
}

func columnNode(q, col string) *pg.Node {
	fields := []*pg.Node{pg.MakeStrNode(col)}
	if q != "" {
		fields = append([]*pg.Node{pg.MakeStrNode(q)}, fields...)
	}
	return &pg.Node{Node: &pg.Node_ColumnRef{ColumnRef: &pg.ColumnRef{Fields: fields}}}
}

// substRef prints a JOIN column of the outer statement; it must stay a
// column.
func (m *inliner) substRef(ref ColumnRef) (string, error) {
	n, err := m.resolve(ref)
	if err != nil {
		return "", err
	}
	if n == nil {
		return renderCol(ref), nil
	}
	c, ok := plainColumn(n)
	if !ok {
		return "", fmt.Errorf("the JOIN condition reads %s, an expression of %s: a JOIN condition compares columns", quoteToken(ref.String()), m.d.what)
	}
	return renderCol(c), nil
}

// subst rewrites an SQL part of the outer statement so that it reads the
// derived table's expressions instead of its columns.
func (m *inliner) subst(sql string) (string, error) {
	if sql == "" {
		return "", nil
	}
	tree, err := pgParse(selectPrefix + sql)
	if err != nil {
		return "", err
	}
	var visit func(msg protoreflect.Message)
	visit = func(msg protoreflect.Message) {
		fields := msg.Descriptor().Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if fd.Message() == nil || fd.IsMap() || !msg.Has(fd) {
				continue
			}
			replace := func(v protoreflect.Message) (protoreflect.Message, bool) {
				n, ok := v.Interface().(*pg.Node)
				if !ok || n.GetColumnRef() == nil {
					return nil, false
				}
				ref, ok := plainColumn(n)
				if !ok {
					return nil, false
				}
				r, e := m.resolve(ref)
				if e != nil && m.err == "" {
					m.err = e.Error()
				}
				if r == nil {
					return nil, false
				}
				return r.ProtoReflect(), true
			}
			if fd.IsList() {
				l := msg.Mutable(fd).List()
				for j := 0; j < l.Len(); j++ {
					if r, ok := replace(l.Get(j).Message()); ok {
						l.Set(j, protoreflect.ValueOfMessage(r))
						continue
					}
					visit(l.Get(j).Message())
				}
				continue
			}
			v := msg.Get(fd).Message()
			if r, ok := replace(v); ok {
				msg.Set(fd, protoreflect.ValueOfMessage(r))
				continue
			}
			visit(v)
		}
	}
	visit(tree.ProtoReflect())
	if m.err != "" {
		return "", fmt.Errorf("%s", m.err)
	}
	out, err := pgDeparse(tree)
	if err != nil || !strings.HasPrefix(out, selectPrefix) {
		return "", fmt.Errorf("PostgreSQL cannot print the inlined form of %s back as SQL", m.d.what)
	}
	return strings.TrimPrefix(out, selectPrefix), nil
}

// requalify gives the column references of an expression that are
// unqualified or qualified by from the qualifier to.
func requalify(sql, from, to string) (string, error) {
	tree, err := pgParse(selectPrefix + sql)
	if err != nil {
		return "", err
	}
	var visit func(msg protoreflect.Message)
	visit = func(msg protoreflect.Message) {
		if c, ok := msg.Interface().(*pg.ColumnRef); ok {
			f := c.GetFields()
			switch {
			case len(f) == 1 && f[0].GetString_() != nil:
				c.Fields = append([]*pg.Node{pg.MakeStrNode(to)}, f...)
			case len(f) == 2 && f[0].GetString_().GetSval() == from:
				c.Fields[0] = pg.MakeStrNode(to)
			}
			return
		}
		children(msg, visit)
	}
	visit(tree.ProtoReflect())
	out, err := pgDeparse(tree)
	if err != nil || !strings.HasPrefix(out, selectPrefix) {
		return "", fmt.Errorf("PostgreSQL cannot print %q back as SQL", sql)
	}
	return strings.TrimPrefix(out, selectPrefix), nil
}
