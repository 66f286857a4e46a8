package grammar

import (
	"fmt"
	"sort"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Parse parses one Trellis statement. The error, when not nil, is always *Error.
//
// The statement is tokenised by PostgreSQL's scanner; the Trellis skeleton
// (TRANSFORM ... FROM ... JOIN ... SELECT ... WHERE ... GROUP BY ...) is read
// from the tokens, and every SQL part in it is checked by PostgreSQL's parser
// and carried as the canonical text of its deparser. Parse is safe for
// concurrent use; its first call in a process initialises the parser (about
// two seconds).
func Parse(text string) (Statement, error) {
	src, e := lex(text)
	if e != nil {
		return nil, e
	}
	p := &stmtParser{source: src}
	st, e := p.statement()
	if e != nil {
		return nil, e
	}
	return st, nil
}

// KindOf names the form of a statement: "transform", "pause", "resume",
// "drop" or "alter" ("" for nil or an unknown type).
func KindOf(s Statement) string {
	switch s.(type) {
	case *Transform:
		return "transform"
	case *Pause:
		return "pause"
	case *Resume:
		return "resume"
	case *Drop:
		return "drop"
	case *Alter:
		return "alter"
	}
	return ""
}

// stmtParser reads the Trellis skeleton of a statement from its tokens.
type stmtParser struct {
	*source
	pos int
}

// is tells whether token i is the keyword or unquoted identifier w.
func (p *stmtParser) is(i int, w string) bool {
	return i >= 0 && i < p.n && p.toks[i].word == w
}

func (p *stmtParser) isKind(i int, k pg.Token) bool {
	return i >= 0 && i < p.n && p.toks[i].kind == k
}

// expect consumes the keyword w or fails with msg.
func (p *stmtParser) expect(w, msg string) *Error {
	if !p.is(p.pos, w) {
		return p.errAt(Syntax, p.pos, msg)
	}
	p.pos++
	return nil
}

// atEnd fails unless every token has been consumed.
func (p *stmtParser) atEnd(after string) *Error {
	if p.pos < p.n {
		return p.errAt(Syntax, p.pos, "unexpected "+quoteToken(p.toks[p.pos].text)+" after "+after)
	}
	return nil
}

func (p *stmtParser) statement() (Statement, *Error) {
	switch {
	case p.n == 0:
		return nil, p.errAt(Syntax, 0, "empty statement: expected TRANSFORM, PAUSE, RESUME, DROP or ALTER")
	case p.is(0, "transform"):
		return p.transform()
	case p.is(0, "pause"), p.is(0, "resume"):
		return p.pauseResume()
	case p.is(0, "drop"):
		return p.drop()
	case p.is(0, "alter"):
		return p.alter()
	case p.is(0, "with"):
		return nil, p.errAt(Invalid, 0, "WITH queries are not allowed in a transform")
	}
	return nil, p.errAt(Syntax, 0, "expected TRANSFORM, PAUSE, RESUME, DROP or ALTER at the start of the statement")
}

// name reads one identifier. label allows every keyword (PostgreSQL's
// ColLabel, used after a dot and for output names); otherwise reserved
// keywords are refused (ColId). what names the expected thing for messages.
func (p *stmtParser) name(label bool, what string) (string, *Error) {
	if p.pos >= p.n {
		return "", p.errAt(Syntax, p.pos, "expected "+what)
	}
	t := p.toks[p.pos]
	switch {
	case t.kind == pg.Token_IDENT, t.kind == pg.Token_UIDENT:
	case t.kw == pg.KeywordKind_UNRESERVED_KEYWORD, t.kw == pg.KeywordKind_COL_NAME_KEYWORD:
	case t.kw != pg.KeywordKind_NO_KEYWORD && label:
	case t.kw != pg.KeywordKind_NO_KEYWORD:
		return "", p.errAt(Syntax, p.pos, "expected "+what+" ("+t.word+" is a reserved word: quote it to use it as a name)")
	default:
		return "", p.errAt(Syntax, p.pos, "expected "+what)
	}
	s, next, e := p.identAt(p.pos)
	if e != nil {
		return "", e
	}
	p.pos = next
	return s, nil
}

// dotted reads 1 to maxParts identifiers separated by dots.
func (p *stmtParser) dotted(maxParts int, what string) ([]string, *Error) {
	first, e := p.name(false, what)
	if e != nil {
		return nil, e
	}
	parts := []string{first}
	for p.isKind(p.pos, pg.Token_ASCII_46) {
		if len(parts) == maxParts {
			return nil, p.errAt(Syntax, p.pos, fmt.Sprintf("too many dotted parts in %s (at most %d)", what, maxParts))
		}
		p.pos++
		s, e := p.name(true, "a name after '.'")
		if e != nil {
			return nil, e
		}
		parts = append(parts, s)
	}
	return parts, nil
}

// tableName reads [schema.]table.
func (p *stmtParser) tableName(what string) (Name, *Error) {
	parts, e := p.dotted(2, what)
	if e != nil {
		return Name{}, e
	}
	if len(parts) == 2 {
		return Name{Schema: parts[0], Name: parts[1]}, nil
	}
	return Name{Name: parts[0]}, nil
}

// tableRef reads a table name and its optional [AS] alias.
func (p *stmtParser) tableRef(what string) (TableRef, *Error) {
	n, e := p.tableName(what)
	if e != nil {
		return TableRef{}, e
	}
	ref := TableRef{Table: n}
	if p.is(p.pos, "as") {
		p.pos++
		if ref.Alias, e = p.name(false, "an alias after AS"); e != nil {
			return TableRef{}, e
		}
		return ref, nil
	}
	if p.pos < p.n {
		t := p.toks[p.pos]
		if t.kind == pg.Token_IDENT || t.kind == pg.Token_UIDENT ||
			t.kw == pg.KeywordKind_UNRESERVED_KEYWORD || t.kw == pg.KeywordKind_COL_NAME_KEYWORD {
			if ref.Alias, e = p.name(false, "an alias"); e != nil {
				return TableRef{}, e
			}
		}
	}
	return ref, nil
}

func (p *stmtParser) pauseResume() (Statement, *Error) {
	verb := p.toks[0].word
	p.pos = 1
	if e := p.expect("transform", "expected TRANSFORM after "+upper(verb)); e != nil {
		return nil, e
	}
	parts, e := p.dotted(3, "the transform name")
	if e != nil {
		return nil, e
	}
	if e := p.atEnd("the transform name"); e != nil {
		return nil, e
	}
	if verb == "pause" {
		return &Pause{Address: Address{Parts: parts}}, nil
	}
	return &Resume{Address: Address{Parts: parts}}, nil
}

func (p *stmtParser) drop() (Statement, *Error) {
	p.pos = 1
	if e := p.expect("transform", "expected TRANSFORM after DROP"); e != nil {
		return nil, e
	}
	target, e := p.tableName("the transform's target table name")
	if e != nil {
		return nil, e
	}
	if e := p.atEnd("the transform name"); e != nil {
		return nil, e
	}
	return &Drop{Target: target}, nil
}

func (p *stmtParser) alter() (Statement, *Error) {
	p.pos = 1
	if e := p.expect("transform", "expected TRANSFORM after ALTER"); e != nil {
		return nil, e
	}
	target, e := p.tableName("the transform's target table name")
	if e != nil {
		return nil, e
	}
	alt := &Alter{Target: target}
	switch {
	case p.is(p.pos, "add"):
		p.pos++
		if p.is(p.pos, "column") {
			p.pos++
		}
		from := p.pos
		to, e := p.span()
		if e != nil {
			return nil, e
		}
		if e := p.atEnd("the column definition"); e != nil {
			return nil, e
		}
		item, e := p.selectItem(from, to)
		if e != nil {
			return nil, e
		}
		x, e := p.analyse(from, item.exprTo, partAlter, "the new column "+quoteToken(item.name))
		if e != nil {
			return nil, e
		}
		alt.Action = AlterAddColumn
		alt.Column = SelectItem{Expr: x.sql, Name: item.name, HasAggregate: x.aggOff >= 0, Columns: x.cols}
		for _, f := range x.funcs {
			alt.Functions = appendUnique(alt.Functions, f.val)
		}
		alt.Bare = bareColumns(x.val.ProtoReflect(), nil)
	case p.is(p.pos, "drop"):
		p.pos++
		if p.is(p.pos, "column") && p.pos+1 < p.n {
			p.pos++
		}
		n, e := p.name(true, "the name of the column to drop")
		if e != nil {
			return nil, e
		}
		if e := p.atEnd("the column name"); e != nil {
			return nil, e
		}
		alt.Action = AlterDropColumn
		alt.Column = SelectItem{Name: n}
	default:
		return nil, p.errAt(Syntax, p.pos, "expected ADD COLUMN or DROP COLUMN after the transform name")
	}
	return alt, nil
}

// clauseStart tells whether token i starts a clause of the TRANSFORM
// skeleton; SQL parts end there (at parenthesis depth 0).
func (p *stmtParser) clauseStart(i int) bool {
	switch p.toks[i].word {
	case "where", "select":
		return true
	case "join":
		return !p.isKind(i+1, pg.Token_ASCII_40) // join(...) would be a function call
	case "group":
		return p.is(i+1, "by")
	case "without":
		return p.is(i+1, "source") && p.is(i+2, "index")
	case "inner", "cross":
		return p.is(i+1, "join")
	case "natural":
		for _, w := range []string{"join", "inner", "left", "right", "full"} {
			if p.is(i+1, w) {
				return true
			}
		}
	case "left", "right", "full":
		return p.is(i+1, "join") || p.is(i+1, "outer")
	}
	return false
}

// span consumes the tokens of an SQL part: from p.pos up to the first
// clause keyword at parenthesis depth 0, or the end. It returns the end
// (exclusive) and leaves p.pos there.
func (p *stmtParser) span() (int, *Error) {
	var open []int
	for i := p.pos; i < p.n; i++ {
		switch p.toks[i].kind {
		case pg.Token_ASCII_40, pg.Token_ASCII_91:
			open = append(open, i)
		case pg.Token_ASCII_41, pg.Token_ASCII_93:
			if len(open) == 0 {
				return 0, p.errAt(Syntax, i, "unmatched "+quoteToken(p.toks[i].text))
			}
			o := p.toks[open[len(open)-1]].kind
			if (o == pg.Token_ASCII_40) != (p.toks[i].kind == pg.Token_ASCII_41) {
				return 0, p.errAt(Syntax, i, "mismatched "+quoteToken(p.toks[i].text))
			}
			open = open[:len(open)-1]
		default:
			// The word after AS is always a name (`expr AS where` is fine).
			if len(open) == 0 && !(i > p.pos && p.toks[i-1].word == "as") && p.clauseStart(i) {
				p.pos = i
				return i, nil
			}
		}
	}
	if len(open) > 0 {
		return 0, p.errAt(Syntax, open[len(open)-1], quoteToken(p.toks[open[len(open)-1]].text)+" is never closed")
	}
	p.pos = p.n
	return p.n, nil
}

// split cuts [from, to) at the commas of parenthesis depth 0 (the span is
// balanced); it returns the start of each piece and to as the last element.
func (p *stmtParser) split(from, to int) []int {
	cuts := []int{from}
	depth := 0
	for i := from; i < to; i++ {
		switch p.toks[i].kind {
		case pg.Token_ASCII_40, pg.Token_ASCII_91:
			depth++
		case pg.Token_ASCII_41, pg.Token_ASCII_93:
			depth--
		case pg.Token_ASCII_44:
			if depth == 0 {
				cuts = append(cuts, i+1)
			}
		}
	}
	return append(cuts, to+1)
}

// item is one `expr AS name` of a select list: the expression is the
// tokens [from, exprTo), the name token is at nameAt.
type item struct {
	from, exprTo, nameAt int
	name                 string
}

// selectItem reads `expr AS name` from [from, to): the name follows the
// last AS at parenthesis depth 0.
func (p *stmtParser) selectItem(from, to int) (item, *Error) {
	if from >= to {
		return item{}, p.errAt(Syntax, from, "expected an expression")
	}
	as, depth := -1, 0
	for i := from; i < to; i++ {
		switch p.toks[i].kind {
		case pg.Token_ASCII_40, pg.Token_ASCII_91:
			depth++
		case pg.Token_ASCII_41, pg.Token_ASCII_93:
			depth--
		default:
			if depth == 0 && p.toks[i].word == "as" {
				as = i
			}
		}
	}
	switch {
	case as < 0:
		return item{}, p.errAt(Syntax, to, "expected AS and an output column name after the expression")
	case as == from:
		return item{}, p.errAt(Syntax, from, "expected an expression before AS")
	}
	p.pos = as + 1
	if p.pos >= to {
		return item{}, p.errAt(Syntax, p.pos, "expected an output column name after AS")
	}
	name, e := p.name(true, "an output column name after AS")
	if e != nil {
		return item{}, e
	}
	if p.pos < to {
		return item{}, p.errAt(Syntax, p.pos, "unexpected "+quoteToken(p.toks[p.pos].text)+" after the output column name (separate select items with commas)")
	}
	return item{from: from, exprTo: as, nameAt: as + 1, name: name}, nil
}

// joinKind consumes the start of a JOIN clause, if one is next.
func (p *stmtParser) joinKind() (JoinKind, bool, *Error) {
	i := p.pos
	switch {
	case p.is(i, "join"):
		p.pos++
		return JoinInner, true, nil
	case p.is(i, "inner") && p.is(i+1, "join"):
		p.pos += 2
		return JoinInner, true, nil
	case p.is(i, "left") && p.is(i+1, "join"):
		p.pos += 2
		return JoinLeft, true, nil
	case p.is(i, "left") && p.is(i+1, "outer"):
		if !p.is(i+2, "join") {
			return "", false, p.errAt(Syntax, i+2, "expected JOIN after LEFT OUTER")
		}
		p.pos += 3
		return JoinLeft, true, nil
	case p.is(i, "right"), p.is(i, "full"), p.is(i, "cross"), p.is(i, "natural"):
		return "", false, p.errAt(Syntax, i, "only INNER and LEFT joins are supported")
	}
	return "", false, nil
}

func (p *stmtParser) transform() (Statement, *Error) {
	p.pos = 1
	t := &Transform{}
	var e *Error
	if t.Target, e = p.tableName("the target table name after TRANSFORM"); e != nil {
		return nil, e
	}
	if e := p.expect("from", "expected FROM after the target table"); e != nil {
		return nil, e
	}
	if t.From, e = p.tableRef("the source table name after FROM"); e != nil {
		return nil, e
	}

	// Skeleton first: every syntax error of the skeleton is reported before
	// the SQL parts are parsed.
	type joinSpan struct{ from, to int }
	var joinSpans []joinSpan
	for {
		kind, ok, e := p.joinKind()
		if e != nil {
			return nil, e
		}
		if !ok {
			break
		}
		j := Join{Kind: kind}
		if j.Table, e = p.tableRef("the table name after JOIN"); e != nil {
			return nil, e
		}
		if e := p.expect("on", "expected ON after the joined table"); e != nil {
			return nil, e
		}
		from := p.pos
		to, e := p.span()
		if e != nil {
			return nil, e
		}
		if from == to {
			return nil, p.errAt(Syntax, to, "expected a join condition after ON")
		}
		t.Joins = append(t.Joins, j)
		joinSpans = append(joinSpans, joinSpan{from, to})
	}
	selectMsg := "expected SELECT after the source table"
	if len(t.Joins) > 0 {
		selectMsg = "expected SELECT after the join condition"
	}
	if e := p.expect("select", selectMsg); e != nil {
		return nil, e
	}
	selFrom := p.pos
	selTo, e := p.span()
	if e != nil {
		return nil, e
	}
	if selFrom == selTo {
		return nil, p.errAt(Invalid, selTo, "the select list is empty: a transform needs at least one `expr AS name`")
	}
	var items []item
	cuts := p.split(selFrom, selTo)
	for k := 0; k+1 < len(cuts); k++ {
		it, e := p.selectItem(cuts[k], cuts[k+1]-1)
		if e != nil {
			return nil, e
		}
		items = append(items, it)
	}
	p.pos = selTo
	after := "the select list"

	whereFrom, whereTo := -1, -1
	if p.is(p.pos, "where") {
		p.pos++
		whereFrom = p.pos
		if whereTo, e = p.span(); e != nil {
			return nil, e
		}
		if whereFrom == whereTo {
			return nil, p.errAt(Syntax, whereTo, "expected a condition after WHERE")
		}
		after = "the WHERE clause"
	}
	var groupSpans [][2]int
	if p.is(p.pos, "group") && p.is(p.pos+1, "by") {
		p.pos += 2
		from := p.pos
		to, e := p.span()
		if e != nil {
			return nil, e
		}
		if from == to {
			return nil, p.errAt(Syntax, to, "expected an expression after GROUP BY")
		}
		cuts := p.split(from, to)
		for k := 0; k+1 < len(cuts); k++ {
			a, b := cuts[k], cuts[k+1]-1
			if a >= b {
				return nil, p.errAt(Syntax, a, "expected an expression in GROUP BY")
			}
			groupSpans = append(groupSpans, [2]int{a, b})
		}
		p.pos = to
		after = "GROUP BY"
	}
	if p.is(p.pos, "without") && p.is(p.pos+1, "source") && p.is(p.pos+2, "index") {
		p.pos += 3
		t.WithoutSourceIndex = true
		after = "WITHOUT SOURCE INDEX"
	}
	if p.pos < p.n {
		switch {
		case p.is(p.pos, "where") && whereFrom >= 0:
			return nil, p.errAt(Syntax, p.pos, "only one WHERE clause is allowed")
		case p.is(p.pos, "where"):
			return nil, p.errAt(Syntax, p.pos, "WHERE must come before "+after)
		case p.clauseStart(p.pos) && p.toks[p.pos].word != "select":
			return nil, p.errAt(Syntax, p.pos, "unexpected "+quoteToken(p.toks[p.pos].text)+" after "+after+" (the order is JOIN, SELECT, WHERE, GROUP BY, WITHOUT SOURCE INDEX)")
		}
		return nil, p.atEnd(after)
	}

	// The SQL parts, in the order of the text.
	var funcs []located[string]
	for k, js := range joinSpans {
		x, e := p.analyse(js.from, js.to, partJoin, "the JOIN condition")
		if e != nil {
			return nil, e
		}
		if t.Joins[k].On, e = p.joinConds(x); e != nil {
			return nil, e
		}
		funcs = append(funcs, x.funcs...)
	}
	selects := make([]*expr, len(items))
	for k, it := range items {
		x, e := p.analyse(it.from, it.exprTo, partSelect, "select item "+quoteToken(it.name))
		if e != nil {
			return nil, e
		}
		selects[k] = x
		funcs = append(funcs, x.funcs...)
		t.Select = append(t.Select, SelectItem{Expr: x.sql, Name: it.name, HasAggregate: x.aggOff >= 0, Columns: x.cols})
	}
	if whereFrom >= 0 {
		x, e := p.analyse(whereFrom, whereTo, partWhere, "the WHERE clause")
		if e != nil {
			return nil, e
		}
		t.Where, t.WhereColumns = x.sql, x.cols
		funcs = append(funcs, x.funcs...)
	}
	groups := make([]*expr, 0, len(groupSpans))
	for k, gs := range groupSpans {
		x, e := p.analyse(gs[0], gs[1], partGroupBy, fmt.Sprintf("GROUP BY expression %d", k+1))
		if e != nil {
			return nil, e
		}
		if e := p.checkGroupKey(x); e != nil {
			return nil, e
		}
		groups = append(groups, x)
		t.GroupBy = append(t.GroupBy, x.sql)
		for _, c := range x.cols {
			t.GroupByColumns = appendUnique(t.GroupByColumns, c)
		}
		funcs = append(funcs, x.funcs...)
	}

	// Rules across parts.
	seen := map[string]bool{}
	for _, it := range items {
		if seen[it.name] {
			return nil, p.errAt(Invalid, it.nameAt, "duplicate output column name "+quoteToken(it.name))
		}
		seen[it.name] = true
	}
	if e := p.checkGrouping(items, selects, groups); e != nil {
		return nil, e
	}
	sort.SliceStable(funcs, func(i, j int) bool { return funcs[i].loc < funcs[j].loc })
	for _, f := range funcs {
		t.Functions = appendUnique(t.Functions, f.val)
	}
	return t, nil
}

// checkGroupKey refuses GROUP BY items that PostgreSQL would not read as a
// plain grouping expression: positions and constants, ROLLUP and CUBE.
func (p *stmtParser) checkGroupKey(x *expr) *Error {
	if x.val.GetAConst() != nil {
		return p.errAt(Invalid, x.from, "GROUP BY takes expressions, not constants or column positions")
	}
	if fc := x.val.GetFuncCall(); fc != nil && len(fc.GetFuncname()) == 1 {
		switch fc.GetFuncname()[0].GetString_().GetSval() {
		case "rollup", "cube":
			return p.errAt(Invalid, x.from, "grouping sets (ROLLUP, CUBE) are not supported")
		}
	}
	return nil
}

// checkGrouping applies the aggregate rules: aggregates need GROUP BY, and
// with GROUP BY every output is a GROUP BY expression or an aggregate
// whose columns outside the aggregate calls are grouped.
func (p *stmtParser) checkGrouping(items []item, selects, groups []*expr) *Error {
	if len(groups) == 0 {
		for _, x := range selects {
			if x.aggOff >= 0 {
				return p.errAtByte(Invalid, x.aggOff, "aggregates need GROUP BY", "")
			}
		}
		return nil
	}
	keys := map[string]bool{}
	vals := make([]*pg.Node, len(groups))
	for k, g := range groups {
		keys[g.sql] = true
		vals[k] = g.val
	}
	for k, x := range selects {
		if keys[x.sql] {
			continue
		}
		if x.aggOff < 0 {
			return p.errAt(Invalid, x.from, "column "+quoteToken(items[k].name)+" is neither an aggregate nor one of the GROUP BY expressions")
		}
		if ref, loc := ungrouped(x.val.ProtoReflect(), vals, len(selectPrefix)); ref != nil {
			c, _ := plainColumn(&pg.Node{Node: &pg.Node_ColumnRef{ColumnRef: ref}})
			name := c.Column
			if c.Qualifier != "" {
				name = c.Qualifier + "." + name
			}
			return p.errAtByte(Invalid, x.offset(loc, p.toks[x.to-1].end),
				"column "+quoteToken(name)+" must be inside an aggregate or be one of the GROUP BY expressions", "")
		}
	}
	return nil
}

// upper returns an ASCII word in upper case.
func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
