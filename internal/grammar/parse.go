package grammar

import (
	"fmt"
	"slices"
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
	p := &stmtParser{source: src, counting: true}
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
	// parent is the statement this one is a derived table or CTE of (nil
	// at the top), depth how deep it is; ctes are its WITH queries by
	// name, derived its FROM and JOIN tables that are queries (inline.go).
	// counting says references to CTEs are counted (not in a statement
	// that inlining printed).
	parent   *stmtParser
	depth    int
	views    Views // the root's: how views are read (ParseWithViews)
	ctes     map[string]*cte
	derived  []derivedRef
	counting bool
	// subOuter are the qualifiers of the statement's tables, which a
	// WHERE subquery's correlations name.
	subOuter map[string]bool
	// using maps the columns of a JOIN ... USING to the qualifiers their
	// unqualified references are given: one (the FROM table's, or a RIGHT
	// JOIN's table), or two for a FULL JOIN, whose merged column is
	// COALESCE of both, as PostgreSQL defines it.
	using map[string][]string
	// branching is set while a set operation's branch is parsed
	// (setop.go), branch on that branch's parser: a statement of its own,
	// not merged into its parent as a derived table is.
	branching, branch bool
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
		return nil, p.errAt(Invalid, 0, "WITH queries are not allowed before TRANSFORM: write the WITH clause after the target (TRANSFORM t WITH x AS (SELECT ...) FROM x SELECT ...)")
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

// sourceRef reads a table of FROM or JOIN: a table, a CTE's name, or a
// derived table (inline.go). slot is its place: 0 for the FROM table, k
// for the k-th joined one.
func (p *stmtParser) sourceRef(what string, slot int) (TableRef, *Error) {
	if p.isKind(p.pos, pg.Token_ASCII_40) {
		return p.derivedTable(slot)
	}
	if p.is(p.pos, "lateral") {
		return TableRef{}, p.errAt(Invalid, p.pos, "LATERAL is not supported")
	}
	at := p.pos
	ref, e := p.tableRef(what)
	if e != nil {
		return TableRef{}, e
	}
	if r, ok, e := p.cteRef(ref, slot, at); e != nil || ok {
		return r, e
	}
	if r, ok, e := p.viewRef(ref, slot, at); e != nil || ok {
		return r, e
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
		what := "the new column " + quoteToken(item.name)
		if item.nameAt < 0 {
			what = "the new column"
		}
		x, e := p.analyse(from, item.exprTo, partAlter, what)
		if e != nil {
			return nil, e
		}
		if item.nameAt < 0 {
			if item.name = x.colname; item.name == "" {
				return nil, p.errAt(Invalid, from, "the new column needs a name (PostgreSQL would call it ?column?): add AS name")
			}
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
	case "where", "select", "union", "intersect", "except":
		return true
	case "join":
		return !p.isKind(i+1, pg.Token_ASCII_40) // join(...) would be a function call
	case "group":
		return p.is(i+1, "by")
	case "having", "limit":
		return true
	case "order":
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

// commaAfterJoin refuses `FROM a JOIN b ON ..., c`: comma-separated
// tables come first, before the JOINs.
const commaAfterJoin = "a comma-separated table after a JOIN is not supported: join it with JOIN ... ON, its equality moved from WHERE to ON"

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
// tokens [from, exprTo), the name token is at nameAt (-1 when the item has
// no AS: the name is a bare alias or the one PostgreSQL gives it). A star
// item (`*`, `t.*`) has star set.
type item struct {
	from, exprTo, nameAt int
	name                 string
	star                 bool
	starOf               string
}

// starItem reads `*` or `name.*` when that is all of [from, to).
func (p *stmtParser) starItem(from, to int) (item, bool, *Error) {
	switch {
	case to-from == 1 && p.isKind(from, pg.Token_ASCII_42):
		return item{from: from, exprTo: to, nameAt: -1, star: true}, true, nil
	case to-from == 3 && p.isKind(from+1, pg.Token_ASCII_46) && p.isKind(from+2, pg.Token_ASCII_42):
		p.pos = from
		q, e := p.name(false, "a table name before .*")
		if e != nil {
			return item{}, false, e
		}
		return item{from: from, exprTo: to, nameAt: -1, star: true, starOf: q}, true, nil
	}
	return item{}, false, nil
}

// usingList reads `( col [, col ...] )` after USING.
func (p *stmtParser) usingList() ([]string, *Error) {
	if !p.isKind(p.pos, pg.Token_ASCII_40) {
		return nil, p.errAt(Syntax, p.pos, "expected ( and column names after USING")
	}
	p.pos++
	var cols []string
	for {
		c, e := p.name(false, "a column name in USING")
		if e != nil {
			return nil, e
		}
		if slices.Contains(cols, c) {
			return nil, p.errAt(Invalid, p.pos-1, "column "+quoteToken(c)+" appears twice in USING")
		}
		cols = append(cols, c)
		if p.isKind(p.pos, pg.Token_ASCII_44) {
			p.pos++
			continue
		}
		if !p.isKind(p.pos, pg.Token_ASCII_41) {
			return nil, p.errAt(Syntax, p.pos, "expected , or ) in USING")
		}
		p.pos++
		return cols, nil
	}
}

// qualifier is the name a table's columns are qualified with: its alias,
// or its name.
func qualifier(r TableRef) string {
	if r.Alias != "" {
		return r.Alias
	}
	return r.Table.Name
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
		// No AS: PostgreSQL names the output (or the item ends with a
		// bare alias); analyse finds out.
		return item{from: from, exprTo: to, nameAt: -1}, nil
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
	case p.is(i, "right") && p.is(i+1, "join"):
		p.pos += 2
		return JoinRight, true, nil
	case p.is(i, "right") && p.is(i+1, "outer"):
		if !p.is(i+2, "join") {
			return "", false, p.errAt(Syntax, i+2, "expected JOIN after RIGHT OUTER")
		}
		p.pos += 3
		return JoinRight, true, nil
	case p.is(i, "full") && p.is(i+1, "join"):
		p.pos += 2
		return JoinFull, true, nil
	case p.is(i, "full") && p.is(i+1, "outer"):
		if !p.is(i+2, "join") {
			return "", false, p.errAt(Syntax, i+2, "expected JOIN after FULL OUTER")
		}
		p.pos += 3
		return JoinFull, true, nil
	case p.is(i, "cross"):
		return "", false, p.errAt(Invalid, i, "CROSS JOIN is not supported (a join is on equalities): write JOIN ... ON a.x = b.y")
	case p.is(i, "natural"):
		return "", false, p.errAt(Invalid, i, "NATURAL JOIN is not supported: name the columns with JOIN ... USING (...)")
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
	if p.is(p.pos, "with") {
		if e := p.withClause(); e != nil {
			return nil, e
		}
	}
	if e := p.expect("from", "expected FROM after the target table"); e != nil {
		return nil, e
	}
	if _, e := p.flattenParenJoins(); e != nil {
		return nil, e
	}
	if t.From, e = p.sourceRef("the source table name after FROM", 0); e != nil {
		return nil, e
	}

	// Skeleton first: every syntax error of the skeleton is reported before
	// the SQL parts are parsed.
	type joinSpan struct{ from, to int }
	var joinSpans []joinSpan
	comma := false
	for p.isKind(p.pos, pg.Token_ASCII_44) {
		p.pos++
		ref, e := p.sourceRef("a table name after ','", len(t.Joins)+1)
		if e != nil {
			return nil, e
		}
		t.Joins = append(t.Joins, Join{Kind: JoinInner, Table: ref, Comma: true})
		joinSpans = append(joinSpans, joinSpan{-1, -1})
		comma = true
	}
	for {
		if p.isKind(p.pos, pg.Token_ASCII_44) {
			// The leading commas were read above: this one follows a JOIN.
			return nil, p.errAt(Invalid, p.pos, commaAfterJoin)
		}
		kind, ok, e := p.joinKind()
		if e != nil {
			return nil, e
		}
		if !ok {
			break
		}
		j := Join{Kind: kind}
		if j.Table, e = p.sourceRef("the table name after JOIN", len(t.Joins)+1); e != nil {
			return nil, e
		}
		if p.is(p.pos, "using") {
			p.pos++
			if j.Using, e = p.usingList(); e != nil {
				return nil, e
			}
			if p.using == nil {
				p.using = map[string][]string{}
			}
			fq, merged := qualifier(t.From), []string{qualifier(t.From)}
			switch kind {
			case JoinRight:
				merged = []string{qualifier(j.Table)} // the preserved side's, as PostgreSQL reads it
			case JoinFull:
				merged = []string{fq, qualifier(j.Table)} // COALESCE(a.x, b.x)
			}
			for _, c := range j.Using {
				j.On = append(j.On, JoinCond{Left: ColumnRef{Qualifier: fq, Column: c}, Right: ColumnRef{Qualifier: qualifier(j.Table), Column: c}})
				if _, ok := p.using[c]; !ok {
					p.using[c] = merged
				}
			}
			t.Joins = append(t.Joins, j)
			joinSpans = append(joinSpans, joinSpan{-1, -1})
			continue
		}
		if e := p.expect("on", "expected ON or USING after the joined table"); e != nil {
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
		if cuts := p.split(from, to); len(cuts) > 2 {
			return nil, p.errAt(Invalid, cuts[1]-1, commaAfterJoin)
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
	var distinctOn [][2]int
	if p.is(p.pos, "distinct") {
		if p.is(p.pos+1, "on") {
			p.pos += 2
			if distinctOn, e = p.parenList("DISTINCT ON"); e != nil {
				return nil, e
			}
		} else {
			t.Distinct = true
			p.pos++
		}
	}
	selFrom := p.pos
	selTo, e := p.span()
	if e != nil {
		return nil, e
	}
	if selFrom == selTo {
		return nil, p.errAt(Invalid, selTo, "the select list is empty: a transform needs at least one output")
	}
	var items []item
	cuts := p.split(selFrom, selTo)
	for k := 0; k+1 < len(cuts); k++ {
		a, b := cuts[k], cuts[k+1]-1
		it, star, e := p.starItem(a, b)
		if e != nil {
			return nil, e
		}
		if !star {
			if it, e = p.selectItem(a, b); e != nil {
				return nil, e
			}
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
	havingFrom, havingTo := -1, -1
	if p.is(p.pos, "having") {
		p.pos++
		havingFrom = p.pos
		if havingTo, e = p.span(); e != nil {
			return nil, e
		}
		if havingFrom == havingTo {
			return nil, p.errAt(Syntax, havingTo, "expected a condition after HAVING")
		}
		after = "HAVING"
	}
	orderFrom, orderTo := -1, -1
	if p.is(p.pos, "order") && p.is(p.pos+1, "by") {
		p.pos += 2
		orderFrom = p.pos
		if orderTo, e = p.span(); e != nil {
			return nil, e
		}
		if orderFrom == orderTo {
			return nil, p.errAt(Syntax, orderTo, "expected an expression after ORDER BY")
		}
		after = "ORDER BY"
	}
	limitAt := -1
	if p.is(p.pos, "limit") {
		limitAt = p.pos
		p.pos++
		if t.Limit, e = p.limitCount(); e != nil {
			return nil, e
		}
		after = "LIMIT"
	}
	if p.is(p.pos, "without") && p.is(p.pos+1, "source") && p.is(p.pos+2, "index") {
		p.pos += 3
		t.WithoutSourceIndex = true
		after = "WITHOUT SOURCE INDEX"
	}
	setAt, setEnd := -1, 0
	if p.isSetOp(p.pos) {
		setAt, setEnd = p.pos, len(p.text)
		if p.n < len(p.toks) {
			setEnd = p.toks[p.n].start // the closing ';'
		}
		if p.n-3 > setAt && p.is(p.n-3, "without") && p.is(p.n-2, "source") && p.is(p.n-1, "index") {
			t.WithoutSourceIndex = true
			setEnd = p.toks[p.n-3].start
		}
		if orderFrom >= 0 || limitAt >= 0 {
			return nil, p.errAt(Invalid, p.pos, "ORDER BY and LIMIT before "+upper(p.toks[p.pos].word)+" are not supported: a set operation's branches are not ordered")
		}
		p.pos = p.n
	}
	if p.pos < p.n {
		switch {
		case p.is(p.pos, "where") && whereFrom >= 0:
			return nil, p.errAt(Syntax, p.pos, "only one WHERE clause is allowed")
		case p.is(p.pos, "where"):
			return nil, p.errAt(Syntax, p.pos, "WHERE must come before "+after)
		case p.clauseStart(p.pos) && p.toks[p.pos].word != "select":
			return nil, p.errAt(Syntax, p.pos, "unexpected "+quoteToken(p.toks[p.pos].text)+" after "+after+" (the order is JOIN, SELECT, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT, WITHOUT SOURCE INDEX)")
		}
		return nil, p.atEnd(after)
	}

	// The SQL parts, in the order of the text.
	var funcs []located[string]
	for k, js := range joinSpans {
		if js.from < 0 {
			continue
		}
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
	firstWindow := -1 // byte offset of the first window function call
	for k, it := range items {
		if it.star {
			t.Select = append(t.Select, SelectItem{Star: true, StarOf: it.starOf})
			continue
		}
		kind, what := partSelect, "select item "+quoteToken(it.name)
		if it.nameAt < 0 {
			kind, what = partSelectBare, fmt.Sprintf("select item %d", k+1)
		}
		x, e := p.analyse(it.from, it.exprTo, kind, what)
		if e != nil {
			return nil, e
		}
		if it.nameAt < 0 {
			items[k].name, items[k].nameAt = x.alias, x.to-1
			if x.alias == "" {
				items[k].name, items[k].nameAt = x.colname, it.from
			}
			if items[k].name == "" {
				return nil, p.errAt(Invalid, it.from, fmt.Sprintf("select item %d needs a name (PostgreSQL would call it ?column?): add AS name", k+1))
			}
		}
		selects[k] = x
		funcs = append(funcs, x.funcs...)
		t.Select = append(t.Select, SelectItem{Expr: x.sql, Name: items[k].name, HasAggregate: x.aggOff >= 0, Columns: x.cols})
		for _, w := range x.windows {
			w.val.Output = items[k].name
			t.Windows = append(t.Windows, w.val)
			if firstWindow < 0 {
				firstWindow = w.loc
			}
		}
	}
	if whereFrom >= 0 {
		p.subOuter = map[string]bool{qualifier(t.From): true}
		for _, j := range t.Joins {
			p.subOuter[qualifier(j.Table)] = true
		}
		x, e := p.analyse(whereFrom, whereTo, partWhere, "the WHERE clause")
		if e != nil {
			return nil, e
		}
		t.Where, t.WhereColumns, t.SubJoins = x.sql, x.cols, x.subs
		funcs = append(funcs, x.funcs...)
		for _, sj := range x.subs {
			funcs = append(funcs, sj.funcs...)
			for _, c := range sj.On {
				t.WhereColumns = appendUnique(t.WhereColumns, c.Right)
			}
		}
		if len(x.subs) > 0 && ((p.parent != nil && !p.branch) || len(p.derived) > 0) {
			return nil, p.errAt(Invalid, whereFrom, "EXISTS and IN subqueries are not supported together with derived tables or CTEs: define the derived table as a transform and read its target")
		}
		if comma && x.val != nil {
			if t.WhereConjuncts, e = p.conjuncts(x); e != nil {
				return nil, e
			}
		}
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
	for k, d := range distinctOn {
		x, e := p.analyse(d[0], d[1], partDistinctOn, fmt.Sprintf("DISTINCT ON expression %d", k+1))
		if e != nil {
			return nil, e
		}
		if e := p.checkGroupKey(x); e != nil {
			return nil, e
		}
		t.DistinctOn = append(t.DistinctOn, x.sql)
		for _, c := range x.cols {
			t.DistinctOnColumns = appendUnique(t.DistinctOnColumns, c)
		}
		if c, ok := plainColumn(x.val); ok {
			t.DistinctOnPlain = append(t.DistinctOnPlain, &c)
		} else {
			t.DistinctOnPlain = append(t.DistinctOnPlain, nil)
		}
		funcs = append(funcs, x.funcs...)
	}
	var orderExprs []string
	if orderFrom >= 0 {
		o, e := p.orderBy(orderFrom, orderTo)
		if e != nil {
			return nil, e
		}
		t.OrderBy, t.OrderByColumns, t.OrderByPlain, orderExprs = o.items, o.cols, o.plain, o.exprs
		funcs = append(funcs, o.funcs...)
	}
	var having *expr
	if havingFrom >= 0 {
		if having, e = p.analyse(havingFrom, havingTo, partHaving, "the HAVING clause"); e != nil {
			return nil, e
		}
		t.Having, t.HavingColumns = having.sql, having.cols
		funcs = append(funcs, having.funcs...)
	}

	// Rules across parts.
	seen := map[string]bool{}
	for _, it := range items {
		if it.star {
			continue
		}
		if seen[it.name] {
			return nil, p.errAt(Invalid, it.nameAt, "duplicate output column name "+quoteToken(it.name))
		}
		seen[it.name] = true
	}
	if firstWindow >= 0 {
		if e := p.checkWindows(t, firstWindow); e != nil {
			return nil, e
		}
	}
	if e := p.checkOrder(t, orderFrom, limitAt, firstWindow, orderExprs); e != nil {
		return nil, e
	}
	if e := p.checkGrouping(items, selects, groups, having); e != nil {
		return nil, e
	}
	sort.SliceStable(funcs, func(i, j int) bool { return funcs[i].loc < funcs[j].loc })
	for _, f := range funcs {
		t.Functions = appendUnique(t.Functions, f.val)
	}
	for _, w := range t.Windows {
		t.WindowFunctions = appendUnique(t.WindowFunctions, w.Name)
	}
	if len(p.derived) > 0 {
		// The merged statement is parsed again, RIGHT JOIN included.
		if t, e = p.inline(t); e != nil {
			return nil, e
		}
	} else {
		swapRight(t)
	}
	if setAt >= 0 {
		return p.setOp(t, setAt, setEnd)
	}
	return t, nil
}

// swapRight turns `a RIGHT JOIN b` into the `b LEFT JOIN a` it stands
// for, so that the FROM table is the one every row keeps (decision 0033).
// Only the first two tables can be written so (later RIGHT JOINs are
// refused), and the later joins' ON clauses name their tables, so the
// swap keeps their meaning.
func swapRight(t *Transform) {
	if len(t.Joins) == 0 || t.Joins[0].Kind != JoinRight {
		return
	}
	t.From, t.Joins[0].Table = t.Joins[0].Table, t.From
	t.Joins[0].Kind = JoinLeft
	t.Swapped = true
}

// checkWindows applies the rules of window functions: they make one row
// per row of the FROM clause (a table or a join), so no GROUP BY, HAVING,
// aggregates or DISTINCT; and every call partitions alike, since a change
// recomputes the partitions its rows were and are in.
func (p *stmtParser) checkWindows(t *Transform, at int) *Error {
	switch {
	case t.Aggregated():
		return p.errAtByte(Invalid, at, "window functions cannot be combined with GROUP BY, HAVING or aggregates in a transform: define the aggregate as a transform and the window over its target", "")
	case t.Distinct:
		return p.errAtByte(Invalid, at, "window functions cannot be combined with SELECT DISTINCT in a transform", "")
	}
	for _, w := range t.Windows[1:] {
		if !slices.Equal(w.Partition, t.Windows[0].Partition) {
			return p.errAtByte(Invalid, at, "every window function of a transform must have the same PARTITION BY (a change recomputes the partitions of its rows): define the others as another transform", "")
		}
	}
	return nil
}

// checkOrder applies the rules of DISTINCT ON, ORDER BY and LIMIT: ORDER
// BY keeps the top LIMIT rows, or picks each DISTINCT ON row, over one
// table or join without aggregates or window functions. The token positions are
// -1 for an absent clause.
func (p *stmtParser) checkOrder(t *Transform, orderAt, limitAt, windowAt int, orderExprs []string) *Error {
	if len(t.DistinctOn) == 0 && orderAt < 0 && limitAt < 0 {
		return nil
	}
	at := orderAt - 2 // the ORDER token
	what := "ORDER BY ... LIMIT"
	switch {
	case len(t.DistinctOn) > 0:
		at, what = 2, "DISTINCT ON"
		for i := 0; i < p.n; i++ {
			if p.is(i, "distinct") {
				at = i
				break
			}
		}
	case orderAt < 0:
		return p.errAt(Invalid, limitAt, "LIMIT without ORDER BY keeps arbitrary rows: add ORDER BY, with the key as a tie-breaker")
	}
	switch {
	case t.Aggregated():
		return p.errAt(Invalid, at, what+" cannot be combined with GROUP BY, HAVING or aggregates in a transform")
	case windowAt >= 0:
		return p.errAtByte(Invalid, windowAt, "window functions cannot be combined with "+what+" in a transform", "")
	case t.Distinct:
		return p.errAt(Invalid, at, "SELECT DISTINCT cannot be combined with ORDER BY ... LIMIT in a transform")
	case len(t.DistinctOn) > 0 && limitAt >= 0:
		return p.errAt(Invalid, limitAt, "DISTINCT ON with LIMIT is not supported: a transform keeps one row per DISTINCT ON value")
	case len(t.DistinctOn) > 0 && orderAt < 0:
		return p.errAt(Invalid, at, "DISTINCT ON without ORDER BY keeps an arbitrary row of each: add ORDER BY with the DISTINCT ON expressions first, then what picks the row, then the key as a tie-breaker")
	case len(t.DistinctOn) == 0 && limitAt < 0:
		return p.errAt(Invalid, at, "ORDER BY without LIMIT: a target is a table and keeps no order; drop ORDER BY (order when you read it), or add LIMIT to keep the top rows")
	}
	if len(t.DistinctOn) > 0 {
		// As PostgreSQL requires: the DISTINCT ON expressions lead ORDER BY.
		lead := orderExprs[:min(len(t.DistinctOn), len(orderExprs))]
		for _, d := range t.DistinctOn {
			if !slices.Contains(lead, d) {
				return p.errAt(Invalid, orderAt, "the DISTINCT ON expressions must come first in ORDER BY (in any order), as PostgreSQL requires")
			}
		}
	}
	return nil
}

// parenList reads `( expr [, ...] )` and returns each expression's token
// span; what names the clause for messages.
func (p *stmtParser) parenList(what string) ([][2]int, *Error) {
	if !p.isKind(p.pos, pg.Token_ASCII_40) {
		return nil, p.errAt(Syntax, p.pos, "expected ( after "+what)
	}
	open := p.pos
	depth, end := 0, -1
	for i := p.pos; i < p.n && end < 0; i++ {
		switch p.toks[i].kind {
		case pg.Token_ASCII_40, pg.Token_ASCII_91:
			depth++
		case pg.Token_ASCII_41, pg.Token_ASCII_93:
			depth--
			if depth == 0 {
				end = i
			}
		}
	}
	if end < 0 {
		return nil, p.errAt(Syntax, open, quoteToken(p.toks[open].text)+" is never closed")
	}
	if end == open+1 {
		return nil, p.errAt(Syntax, end, "expected an expression in "+what)
	}
	var out [][2]int
	cuts := p.split(open+1, end)
	for k := 0; k+1 < len(cuts); k++ {
		a, b := cuts[k], cuts[k+1]-1
		if a >= b {
			return nil, p.errAt(Syntax, a, "expected an expression in "+what)
		}
		out = append(out, [2]int{a, b})
	}
	p.pos = end + 1
	return out, nil
}

// limitCount reads LIMIT's row count: a positive integer.
func (p *stmtParser) limitCount() (int64, *Error) {
	if p.pos >= p.n || p.toks[p.pos].kind != pg.Token_ICONST {
		return 0, p.errAt(Syntax, p.pos, "expected a number of rows after LIMIT")
	}
	var n int64
	for _, c := range p.toks[p.pos].text {
		if c < '0' || c > '9' || n > 1<<40 {
			return 0, p.errAt(Invalid, p.pos, "LIMIT takes a whole number of rows, at most 2^40")
		}
		n = n*10 + int64(c-'0')
	}
	if n == 0 {
		return 0, p.errAt(Invalid, p.pos, "LIMIT 0 keeps no row: a target needs LIMIT 1 or more")
	}
	p.pos++
	return n, nil
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

// checkGrouping applies the aggregate rules. With GROUP BY every output is
// a GROUP BY expression or an aggregate whose columns outside the
// aggregate calls are grouped. Without GROUP BY, an aggregate (or HAVING)
// makes the transform one group of every row: no column may then be read
// outside an aggregate. HAVING reads grouped columns and aggregates only.
func (p *stmtParser) checkGrouping(items []item, selects, groups []*expr, having *expr) *Error {
	global := having != nil && len(groups) == 0
	for _, x := range selects {
		if x != nil && x.aggOff >= 0 && len(groups) == 0 {
			global = true
		}
	}
	if len(groups) == 0 && !global {
		return nil
	}
	keys := map[string]bool{}
	vals := make([]*pg.Node, len(groups))
	for k, g := range groups {
		keys[g.sql] = true
		vals[k] = g.val
	}
	refName := func(ref *pg.ColumnRef) string {
		c, _ := plainColumn(&pg.Node{Node: &pg.Node_ColumnRef{ColumnRef: ref}})
		return c.String()
	}
	for k, x := range selects {
		if x == nil {
			if global {
				return p.errAt(Invalid, items[k].from, "* cannot be selected with aggregates: without GROUP BY an aggregate makes one row, so select only aggregates")
			}
			return p.errAt(Invalid, items[k].from, "* cannot be selected with GROUP BY: select the GROUP BY expressions and aggregates by name")
		}
		if keys[x.sql] {
			continue
		}
		if x.aggOff < 0 && !global {
			return p.errAt(Invalid, x.from, "column "+quoteToken(items[k].name)+" is neither an aggregate nor one of the GROUP BY expressions")
		}
		if ref, loc := ungrouped(x.val.ProtoReflect(), vals, len(selectPrefix)); ref != nil {
			msg := "column " + quoteToken(refName(ref)) + " must be inside an aggregate or be one of the GROUP BY expressions"
			if global {
				msg = "column " + quoteToken(refName(ref)) + " must be inside an aggregate: without GROUP BY, aggregates make one row of every row (add GROUP BY to keep it per group)"
			}
			return p.errAtByte(Invalid, x.offset(loc, p.toks[x.to-1].end), msg, "")
		}
	}
	if having != nil {
		if ref, loc := ungrouped(having.val.ProtoReflect(), vals, len(selectPrefix)); ref != nil {
			return p.errAtByte(Invalid, having.offset(loc, p.toks[having.to-1].end),
				"column "+quoteToken(refName(ref))+" in HAVING must be inside an aggregate or be one of the GROUP BY expressions", "")
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
