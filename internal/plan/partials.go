package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
)

// Partials is how a global aggregate over one table with an integer key
// is maintained through partial aggregates (decision 0051): a table next
// to the target holds, for each range of 2^Shift source keys (key >>
// Shift), the partial aggregates of its rows; a page recomputes the
// partials of the ranges its changed keys fall in, through the source's
// key index, and then the target's one row from every range's partials.
// The table is a cache: a row at the range PartialsMeta says for which
// set of parts it is complete, and a page that finds it missing (a new
// table, a rebuild, a column paused or resumed since) fills it from the
// whole source first.
type Partials struct {
	// Table is the partials table, in the target's schema.
	Table string `json:"table"`
	Shift int    `json:"shift"`
	// Parts are the table's partial aggregates, columns trellis_p1...
	Parts []Part `json:"parts"`
	// Calls are the aggregate calls of the columns and HAVING; call i is
	// named trellis_a<i+1> in their expressions over the totals.
	Calls []PartialCall `json:"calls"`
	// Columns are the target's columns as expressions over the calls, in
	// the order of Spec.Columns; Having is HAVING's (Expr "" without one).
	Columns []PartialExpr `json:"columns"`
	Having  PartialExpr   `json:"having"`
}

// Part is one partial aggregate: Kind (count, sum, min, max, bool_and,
// bool_or) of Arg ("" for count(*)), of type Type as PostgreSQL infers it.
type Part struct {
	Kind string `json:"kind"`
	Arg  string `json:"arg,omitempty"`
	Type string `json:"type,omitempty"`
}

// PartialCall is one aggregate call (count, sum, avg, min, max, bool_and,
// bool_or) and the parts its total is taken from (an avg's sum and count).
type PartialCall struct {
	Func  string `json:"func"`
	Parts []int  `json:"parts"`
}

// PartialExpr is an expression over the calls' totals, and the calls it
// reads.
type PartialExpr struct {
	Name  string `json:"name,omitempty"`
	Expr  string `json:"expr,omitempty"`
	Calls []int  `json:"calls,omitempty"`
}

// GlobalKeyText is GlobalKey as the key's text.
const GlobalKeyText = "all"

// PartialsShift is the size of a key range, 2^8 keys, when the source's
// size is not known.
const PartialsShift = 8

// ShiftFor is the size of a key range (2^shift keys) for a source of
// about rows rows: a page of k changed keys reads about k·2^shift source
// rows through the key index and rows/2^shift partials rows. Measured at
// 1M rows, ten changed keys a page: 22 ms a page with 2^10, 12 ms with
// 2^8, 8 ms with 2^7, so sqrt(rows)/4 (2^7 at 1M, 2^9 at 10M), between
// 2^6 and 2^12. An unknown size (rows < 0) gets PartialsShift.
func ShiftFor(rows float64) int {
	if rows < 0 {
		return PartialsShift
	}
	s := int(math.Floor(math.Log2(math.Sqrt(rows) / 4)))
	return min(max(s, 6), 12)
}

// PartialsMeta is the range of the row saying which parts the partials
// table is complete for: below every bigint key >> 6 (ShiftFor's least).
const PartialsMeta = "'-9223372036854775808'::pg_catalog.int8"

// integerKey are the key types whose values fall into ranges by a shift.
var integerKey = map[string]bool{"smallint": true, "integer": true, "bigint": true}

// PartialsFor is how the global aggregate of spec, writing target, can be
// maintained through partial aggregates, or nil when it cannot: its
// source is not one table with an integer key, or a column or HAVING holds
// an aggregate a total cannot be taken of from partial results (DISTINCT,
// string_agg, ...). The parts' types are left to the caller to record.
func PartialsFor(spec Spec, target Target) *Partials {
	src := spec.Source
	if !spec.Global || spec.Join != nil || len(spec.Semis) > 0 || spec.SetOp != nil || spec.Window != nil ||
		len(src.KeyCols) != 1 || !integerKey[src.KeyTypes[0]] {
		return nil
	}
	table := target.Name + "_trellis_partials"
	if len(table) > 63 {
		return nil
	}
	ps := &Partials{Table: table, Shift: PartialsShift}
	var calls []grammar.AggregateCall
	// One parse of each expression: its calls are numbered among every
	// expression's as they are found (trellis_a<i+1>, i in calls).
	split := func(name, expr string) (PartialExpr, bool) {
		var idx []int
		outer, _, ok := grammar.SplitAggregates(expr, func(_ int, c grammar.AggregateCall) string {
			i := slices.Index(calls, c)
			if i < 0 {
				i = len(calls)
				calls = append(calls, c)
			}
			if !slices.Contains(idx, i) {
				idx = append(idx, i)
			}
			return fmt.Sprintf("trellis_a%d", i+1)
		})
		if !ok {
			return PartialExpr{}, false
		}
		return PartialExpr{Name: name, Expr: outer, Calls: idx}, true
	}
	for _, c := range spec.Columns {
		e, ok := split(c.Name, c.Expr)
		if !ok {
			return nil
		}
		ps.Columns = append(ps.Columns, e)
	}
	if spec.Having != "" {
		e, ok := split("", spec.Having)
		if !ok {
			return nil
		}
		ps.Having = e
	}
	part := func(kind, arg string) int {
		i := slices.Index(ps.Parts, Part{Kind: kind, Arg: arg})
		if i < 0 {
			i = len(ps.Parts)
			ps.Parts = append(ps.Parts, Part{Kind: kind, Arg: arg})
		}
		return i
	}
	for _, c := range calls {
		pc := PartialCall{Func: c.Func}
		if c.Func == "avg" {
			pc.Parts = []int{part("sum", c.Arg), part("count", c.Arg)}
		} else {
			pc.Parts = []int{part(c.Func, c.Arg)}
		}
		ps.Calls = append(ps.Calls, pc)
	}
	return ps
}

// ExactTypes says whether every sum the partials hold is of a type whose
// sum of sums is the sum (bigint, numeric): a float's is not (its
// addition rounds), nor is PostgreSQL's avg of one a sum over a count.
func (ps *Partials) ExactTypes() bool {
	for _, p := range ps.Parts {
		if p.Type == "" || p.Kind == "sum" && p.Type != "bigint" && p.Type != "numeric" {
			return false
		}
	}
	return true
}

// Partial says the plan maintains its global aggregate through partials:
// the spec records them, with their types, for its columns as they are.
func (p *Plan) Partial() bool {
	ps := p.Spec.Partials
	if ps == nil || !p.Spec.Global || len(ps.Columns) != len(p.Spec.Columns) || !ps.ExactTypes() {
		return false
	}
	for i, c := range p.Spec.Columns {
		if ps.Columns[i].Name != c.Name {
			return false
		}
	}
	return (p.Spec.Having == "") == (ps.Having.Expr == "")
}

// PartialsTable is the partials table of the plan, qualified and quoted.
func (p *Plan) PartialsTable() string {
	return ident.Qualified(p.Target.Schema, p.Spec.Partials.Table)
}

// PartColumn is the partials table's column of part i.
func PartColumn(i int) string { return fmt.Sprintf("trellis_p%d", i+1) }

// activeParts says which parts a page computes: those a column that is
// not paused, or HAVING, reads (a paused column's may be what fails).
func (p *Plan) activeParts() []bool {
	ps := p.Spec.Partials
	on := make([]bool, len(ps.Parts))
	mark := func(e PartialExpr) {
		for _, c := range e.Calls {
			for _, pi := range ps.Calls[c].Parts {
				on[pi] = true
			}
		}
	}
	for i, c := range p.Spec.Columns {
		if !c.Paused {
			mark(ps.Columns[i])
		}
	}
	mark(ps.Having)
	return on
}

// partialsMask is the meta row's mark of the parts computed: one 1 or 0
// a part, then a digest of the parts' definitions, so that partials
// written under another definition (a worker still on the one before an
// ALTER TRANSFORM) are never taken for complete.
func (p *Plan) partialsMask() string {
	var b strings.Builder
	h := sha256.New()
	for i, on := range p.activeParts() {
		if on {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
		pt := p.Spec.Partials.Parts[i]
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", pt.Kind, pt.Arg, pt.Type)
	}
	return b.String() + ":" + hex.EncodeToString(h.Sum(nil)[:8])
}

// partsSelect is the select list of the parts over the source rows, each
// named as its column; a part no column reads is a typed NULL.
func (p *Plan) partsSelect() string {
	ps := p.Spec.Partials
	on := p.activeParts()
	out := make([]string, len(ps.Parts))
	for i, pt := range ps.Parts {
		expr := pt.expr()
		if !on[i] && pt.Type != "" {
			expr = "NULL::" + pt.Type
		}
		out[i] = expr + " AS " + PartColumn(i)
	}
	return strings.Join(out, ", ")
}

// expr is the part's aggregate call over the source rows.
func (pt Part) expr() string {
	if pt.Arg == "" {
		return "pg_catalog.count(*)"
	}
	return fmt.Sprintf("pg_catalog.%s((%s))", pt.Kind, pt.Arg)
}

// rangeOf is the range of the source key of alias.
func (p *Plan) rangeOf() string {
	return fmt.Sprintf("(%s >> %d)::pg_catalog.int8", p.srcKey()[0], p.Spec.Partials.Shift)
}

// CreatePartials is the DDL of the partials table: the range, the meta
// row's mark, and the parts as PostgreSQL types them.
func (p *Plan) CreatePartials() string {
	t := p.PartialsTable()
	return fmt.Sprintf("CREATE TABLE %s AS SELECT NULL::pg_catalog.int8 AS trellis_range, NULL::pg_catalog.text AS trellis_fp, %s FROM %s%s WITH NO DATA;\n"+
		"ALTER TABLE %s ADD PRIMARY KEY (trellis_range);\n"+
		"COMMENT ON TABLE %s IS %s",
		t, p.partsSelectUntyped(), p.from(), p.where(), t, t,
		ident.Literal("Trellis's partial aggregates of "+p.Target.String()+" by range of source keys; dropped with it"))
}

// partsSelectUntyped is partsSelect before the parts' types are known.
func (p *Plan) partsSelectUntyped() string {
	ps := p.Spec.Partials
	out := make([]string, len(ps.Parts))
	for i, pt := range ps.Parts {
		out[i] = pt.expr() + " AS " + PartColumn(i)
	}
	return strings.Join(out, ", ")
}

// DropPartials drops the partials table.
func (p *Plan) DropPartials() string {
	return "DROP TABLE IF EXISTS " + p.PartialsTable()
}

// partialsComplete is the condition that the partials table is complete
// for the parts this plan computes.
func (p *Plan) partialsComplete() string {
	return fmt.Sprintf("EXISTS (SELECT FROM %s AS m WHERE m.trellis_range = %s AND m.trellis_fp = %s)",
		p.PartialsTable(), PartialsMeta, ident.Literal(p.partialsMask()))
}

// partialsFill are the statements that fill the partials from the whole
// source when they are not complete for the plan's parts, or when the keys
// ($1) hold the one group's key (GlobalKey: a key-by-key re-derivation of
// the whole target): the table is emptied, then each range's partials and
// the meta row are inserted.
func (p *Plan) partialsFill() []string {
	t := p.PartialsTable()
	active := "cardinality($1::text[]) > 0"
	noMeta := fmt.Sprintf("NOT EXISTS (SELECT FROM %s AS m WHERE m.trellis_range = %s)", t, PartialsMeta)
	var nulls []string
	for range p.Spec.Partials.Parts {
		nulls = append(nulls, "NULL")
	}
	return []string{
		fmt.Sprintf("DELETE FROM %s WHERE %s AND (NOT %s OR %s = ANY ($1::text[]))", t, active, p.partialsComplete(), GlobalKey),
		fmt.Sprintf("INSERT INTO %s (trellis_range, trellis_fp, %s) SELECT %s, NULL, %s FROM %s WHERE %s AND %s%s GROUP BY 1 UNION ALL SELECT %s, %s, %s WHERE %s AND %s",
			t, p.partCols(), p.rangeOf(), p.partsSelect(), p.from(), active, noMeta, whereAnd(p.Spec.Where),
			PartialsMeta, ident.Literal(p.partialsMask()), strings.Join(nulls, ", "), active, noMeta),
	}
}

func whereAnd(where string) string {
	if where == "" {
		return ""
	}
	return " AND (" + where + ")"
}

func (p *Plan) partCols() string {
	cols := make([]string, len(p.Spec.Partials.Parts))
	for i := range cols {
		cols[i] = PartColumn(i)
	}
	return strings.Join(cols, ", ")
}

// total is the total of call i over the partials rows of alias x.
func (p *Plan) total(i int) string {
	ps := p.Spec.Partials
	c := ps.Calls[i]
	col := func(j int) string { return "x." + PartColumn(c.Parts[j]) }
	switch c.Func {
	case "count":
		return fmt.Sprintf("COALESCE(pg_catalog.sum(%s), 0)::pg_catalog.int8", col(0))
	case "sum":
		return fmt.Sprintf("(pg_catalog.sum(%s))::%s", col(0), ps.Parts[c.Parts[0]].Type)
	case "avg":
		// As PostgreSQL's avg of an integer or numeric: the numeric sum
		// divided by the numeric count (numeric_div), NULL over no rows.
		return fmt.Sprintf("(pg_catalog.sum(%s))::pg_catalog.numeric OPERATOR(pg_catalog./) (NULLIF(pg_catalog.sum(%s), 0))::pg_catalog.numeric", col(0), col(1))
	}
	return fmt.Sprintf("pg_catalog.%s(%s)", c.Func, col(0))
}

// partialGroups are, for the keyed recompute of a global aggregate
// through partials ($1: the ranges changed, as text, or GlobalKey for
// every range, which the fill before it recomputed), the CTEs of the page's ranges (g) and their fresh partials
// (np) and of every range's partials (allp: the table's, but the page's
// ranges, whose are np's; an anti-join, not <> ALL, which compares every
// range with every page's range), the condition selecting the target's row, and
// the definition's row computed from allp.
func (p *Plan) partialGroups() (pre, rows, query string) {
	ps := p.Spec.Partials
	t := p.PartialsTable()
	key := p.srcKey()[0]
	width := int64(1)<<ps.Shift - 1
	// The one group's key (GlobalKey) names no range: the statements
	// before this one refilled every range's partials for it.
	pre = fmt.Sprintf("g AS (SELECT DISTINCT u.r::pg_catalog.int8 AS r FROM pg_catalog.unnest($1::text[]) AS u(r) WHERE u.r <> %s), "+
		"np AS (SELECT g.r AS trellis_range, x.* FROM g CROSS JOIN LATERAL (SELECT %s FROM %s WHERE %s BETWEEN g.r << %d AND (g.r << %d) + %d%s) AS x), "+
		"allp AS (SELECT %s FROM %s AS o WHERE o.trellis_range <> %s AND NOT EXISTS (SELECT FROM g WHERE g.r = o.trellis_range) UNION ALL SELECT %s FROM np)",
		GlobalKey, p.partsSelect(), p.from(), key, ps.Shift, ps.Shift, width, whereAnd(p.Spec.Where),
		p.partCols(), t, PartialsMeta, p.partCols())
	rows = "cardinality($1::text[]) > 0"
	return pre, rows, p.totalsQuery(rows)
}

// totalsQuery is the definition's row computed from the partials rows of
// allp, when cond holds (and HAVING).
func (p *Plan) totalsQuery(cond string) string {
	ps := p.Spec.Partials
	totals := make([]string, len(ps.Calls))
	for i := range ps.Calls {
		totals[i] = fmt.Sprintf("%s AS trellis_a%d", p.total(i), i+1)
	}
	sel := make([]string, len(p.Spec.Columns))
	for i, c := range p.Spec.Columns {
		e := "(" + ps.Columns[i].Expr + ")"
		if c.Paused && c.Type != "" {
			e = "NULL::" + c.Type
		}
		sel[i] = e + " AS " + ident.Quote(c.Name)
	}
	if ps.Having.Expr != "" {
		cond += " AND (" + ps.Having.Expr + ")"
	}
	return fmt.Sprintf("SELECT %s FROM (SELECT %s FROM allp AS x) AS trellis_t WHERE %s", strings.Join(sel, ", "), strings.Join(totals, ", "), cond)
}

// partialResync re-derives a global aggregate kept through partials: the
// partials emptied with the target, filled again from the whole source
// (one GROUP BY by range, and the meta row), then the target's row taken
// from them, so that the first page after a build or a TRUNCATE finds them
// complete. The fill runs without JIT: PostgreSQL estimates as many
// ranges as source keys (it has no statistics of key >> shift), so the
// GROUP BY looked dear enough to compile (140 ms of a 1M-row build, which
// the plain aggregate it replaces never paid). No parameters; the first
// statement empties the target, the last one writes it.
func (p *Plan) partialResync() []string {
	t := p.PartialsTable()
	var nulls []string
	for range p.Spec.Partials.Parts {
		nulls = append(nulls, "NULL")
	}
	return []string{
		"WITH trellis_partials AS (DELETE FROM " + t + ") DELETE FROM " + p.Target.Quoted(),
		"SET LOCAL jit = off",
		fmt.Sprintf("INSERT INTO %s (trellis_range, trellis_fp, %s) SELECT %s, NULL, %s FROM %s%s GROUP BY 1 UNION ALL SELECT %s, %s, %s",
			t, p.partCols(), p.rangeOf(), p.partsSelect(), p.from(), p.where(), PartialsMeta, ident.Literal(p.partialsMask()), strings.Join(nulls, ", ")),
		"SET LOCAL jit TO DEFAULT",
		fmt.Sprintf("WITH allp AS (SELECT %s FROM %s WHERE trellis_range <> %s) INSERT INTO %s (%s) %s",
			p.partCols(), t, PartialsMeta, p.Target.Quoted(), ident.List(p.columnNamesShape()), p.totalsQuery("true")),
	}
}

// partialRecompute is the keyed recompute of a global aggregate through
// partials: the partials filled if they are not complete, then, in one
// statement, the page's ranges' partials upserted (a range's row is
// rewritten only when its parts changed) and the target's row recomputed
// from every range's.
func (p *Plan) partialRecompute() []string {
	pre, rows, query := p.partialGroups()
	t := p.PartialsTable()
	var set, cur, exc []string
	on := p.activeParts()
	for i, pt := range p.Spec.Partials.Parts {
		if !on[i] {
			continue
		}
		q := PartColumn(i)
		set = append(set, q+" = EXCLUDED."+q)
		cur = append(cur, identity(t+"."+q, pt.Type))
		exc = append(exc, identity("EXCLUDED."+q, pt.Type))
	}
	up := fmt.Sprintf("up AS (INSERT INTO %s (trellis_range, %s) SELECT trellis_range, %s FROM np ON CONFLICT (trellis_range) DO NOTHING)", t, p.partCols(), p.partCols())
	if len(set) > 0 {
		up = fmt.Sprintf("up AS (INSERT INTO %s (trellis_range, %s) SELECT trellis_range, %s FROM np ON CONFLICT (trellis_range) DO UPDATE SET %s WHERE (%s) IS DISTINCT FROM (%s))",
			t, p.partCols(), p.partCols(), strings.Join(set, ", "), strings.Join(cur, ", "), strings.Join(exc, ", "))
	}
	return append(p.partialsFill(), p.shapeRecompute(pre+", "+up, query, rows, false))
}

// partialAffected finds the ranges of the changed source keys: every
// range in the one group's bucket, so that the pages of a global
// aggregate still take one key lock and run one at a time (each
// recomputes the target's row from every range's partials).
func (p *Plan) partialAffected(c Changes, buckets int) string {
	k := fromKeyParam("chg.k1", p.Spec.Source.KeyTypes[0])
	return fmt.Sprintf("WITH %s SELECT DISTINCT ((%s >> %d)::pg_catalog.int8)::text, hashtext(ARRAY[(%s)::text]::text) & %d FROM chg WHERE chg.k1 IS NOT NULL",
		c.cte(), k, p.Spec.Partials.Shift, GlobalKey, buckets-1)
}
