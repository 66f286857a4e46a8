package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
)

// Kinds of transform.
const (
	KindProjection = "projection"
	KindJoin       = "join"
	KindAggregate  = "aggregate"
	KindWindow     = "window"
)

// Kind tells projections, joins, aggregates (GROUP BY, with or without a
// join) and windows (window functions, top-k, DISTINCT ON) apart. A
// projection of a source whose key may be NULL is kept as a join of one
// table (it has a Key, decision 0054): its target is keyed by a unique
// index NULLS NOT DISTINCT, built whole and recomputed by the FROM key as
// a join's.
func (p *Plan) Kind() string {
	switch {
	case p.Spec.Window != nil:
		return KindWindow
	case len(p.Spec.GroupBy) > 0, p.Spec.Global:
		return KindAggregate
	case p.Spec.Join != nil, len(p.Spec.Key) > 0:
		return KindJoin
	}
	return KindProjection
}

func aliasOf(s Source) string {
	if s.Alias != "" {
		return s.Alias
	}
	return s.Table
}

// onClause renders the join's ON conditions between two aliases.
func (p *Plan) onClause(from, joined string) string {
	return onSQL(p.Spec.Join.On, from, joined)
}

// onSQL renders ON conditions between the aliases of the earlier table
// (from) and the joined one.
func onSQL(on []JoinOn, from, joined string) string {
	var parts []string
	for _, c := range on {
		parts = append(parts, cmp(ident.Quote(from)+"."+ident.Quote(c.From), "=", ident.Quote(joined)+"."+ident.Quote(c.Joined), c.Op))
	}
	return strings.Join(parts, " AND ")
}

// onOps are the operators of ON conditions, one per condition.
func onOps(on []JoinOn) []*Op {
	out := make([]*Op, len(on))
	for i, c := range on {
		out[i] = c.Op
	}
	return out
}

// keyOps are the operators of the target's key columns (KeyNames).
func (p *Plan) keyOps() []*Op {
	if p.Kind() == KindProjection {
		return p.Spec.Source.KeyOps
	}
	out := make([]*Op, len(p.Spec.Key))
	for i, k := range p.Spec.Key {
		out[i] = k.Op
	}
	return out
}

func (p *Plan) joinWord() string {
	if p.Spec.Join.Full {
		return " FULL JOIN "
	}
	if p.Spec.Join.Left {
		return " LEFT JOIN "
	}
	return " JOIN "
}

// fromClause is the FROM clause over the real tables.
func (p *Plan) fromClause() string {
	if p.Spec.SetOp != nil {
		return p.setOpFrom()
	}
	f := p.from()
	if j := p.Spec.Join; j != nil {
		ja := aliasOf(j.Source)
		f += p.joinWord() + ident.Qualified(j.Source.Schema, j.Source.Table) + " AS " + ident.Quote(ja) + " ON " + p.onClause(p.alias(), ja)
	}
	for _, j := range p.Spec.Joins {
		word := " JOIN "
		switch {
		case j.Full:
			word = " FULL JOIN "
		case j.Right:
			word = " RIGHT JOIN "
		case j.Left:
			word = " LEFT JOIN "
		}
		f += word + ident.Qualified(j.Source.Schema, j.Source.Table) + " AS " + ident.Quote(aliasOf(j.Source)) + " ON " + p.joinOn(j)
	}
	return f
}

// GlobalKey is the value of the one key of a global aggregate (no GROUP
// BY) as its keyed statements take it: the target has no key column, but
// the drain, the quarantine and the self-check handle the one group as a
// key of one value.
const GlobalKey = "'all'"

// unitExprs are the expressions whose values make one unit of an
// aggregate (its GROUP BY) or a window (its PARTITION BY): what a change
// recomputes, whose values lead the target's key.
func (p *Plan) unitExprs() []string {
	if w := p.Spec.Window; w != nil {
		return w.Partition
	}
	return p.Spec.GroupBy
}

// oneUnit says the whole source is one unit: an aggregate without GROUP
// BY, a window without PARTITION BY.
func (p *Plan) oneUnit() bool {
	return p.Spec.Global || (p.Spec.Window != nil && len(p.Spec.Window.Partition) == 0)
}

// KeyParams is how many key values (one text[] parameter each) the keyed
// statements of the plan take: a join's FROM key, an aggregate's groups
// (one value for a global aggregate), a window's partitions (one value
// without PARTITION BY), a projection's key.
func (p *Plan) KeyParams() int {
	switch {
	case p.FullUnits():
		return len(p.fullParams())
	case p.Kind() == KindJoin:
		return len(p.Spec.Source.KeyCols)
	case p.oneUnit():
		return 1
	case p.Kind() == KindWindow:
		return len(p.Spec.Window.Partition)
	}
	return len(p.KeyNames())
}

// KeyNames are the target's key columns.
func (p *Plan) KeyNames() []string {
	names, _ := p.keyColumns()
	return names
}

// keyColumns are the target's key columns and their types.
func (p *Plan) keyColumns() (names, types []string) {
	if p.Kind() == KindProjection {
		return p.Spec.Source.KeyCols, p.Spec.Source.KeyTypes
	}
	names, types = make([]string, len(p.Spec.Key)), make([]string, len(p.Spec.Key))
	for i, k := range p.Spec.Key {
		names[i], types[i] = k.Name, k.Type
	}
	return names, types
}

// colExpr is a column's expression, or a typed NULL for a paused column.
func colExpr(c Column) string {
	if c.Paused && c.Type != "" {
		return "NULL::" + c.Type
	}
	return "(" + c.Expr + ")"
}

// shapeSelect is the select list of a join or aggregate: key then columns.
func (p *Plan) shapeSelect() string {
	var parts []string
	for _, k := range p.Spec.Key {
		parts = append(parts, "("+k.Expr+") AS "+ident.Quote(k.Name))
	}
	for _, c := range p.Spec.Columns {
		parts = append(parts, colExpr(c)+" AS "+ident.Quote(c.Name))
	}
	return strings.Join(parts, ", ")
}

func (p *Plan) groupBy() string {
	var out string
	if len(p.Spec.GroupBy) > 0 {
		out = " GROUP BY " + strings.Join(p.Spec.GroupBy, ", ")
	}
	if p.Spec.Having != "" {
		out += " HAVING (" + p.Spec.Having + ")"
	}
	return out
}

// shapeQuery is the definition's query for joins, aggregates and
// windows, with extra conditions.
func (p *Plan) shapeQuery(extra ...string) string {
	if w := p.Spec.Window; w != nil && w.Rank != "" {
		names := p.columnNamesShape()
		sel := make([]string, len(names))
		for i, n := range names {
			sel[i] = "trellis_w." + ident.Quote(n)
		}
		return p.ranked(strings.Join(sel, ", "), p.shapeSelect(), p.where(extra...))
	}
	return fmt.Sprintf("SELECT %s FROM %s%s%s", p.shapeSelect(), p.fromClause(), p.where(extra...), p.groupBy())
}

// ranked is a top-k query: outer of the rows of inner (a select list)
// whose rank is within the window's limit. The conditions in where apply
// before the window functions, so they must keep or drop whole
// partitions.
//
// A global top-k (row_number() over the whole source) yields at most Limit
// rows, and says so with a LIMIT: the planner does not lower its estimate
// for the window's run condition, and hashed the source's row count for
// the keyed recompute's anti-join (16 batches to temporary files at 1M
// rows, for ten rows).
func (p *Plan) ranked(outer, inner, where string) string {
	w := p.Spec.Window
	q := fmt.Sprintf("SELECT %s FROM (SELECT %s, (%s) AS trellis_rank FROM %s%s) AS trellis_w WHERE trellis_w.trellis_rank <= %d",
		outer, inner, w.Rank, p.fromClause(), where, w.Limit)
	if len(w.Partition) == 0 && strings.HasPrefix(strings.TrimPrefix(w.Rank, "pg_catalog."), "row_number() OVER (ORDER BY ") {
		q += fmt.Sprintf(" LIMIT %d", w.Limit)
	}
	return q
}

// CreateShapeTarget creates the empty target of a join or aggregate with
// the types PostgreSQL infers, and its unique key (NULLS NOT DISTINCT: a
// NULL group, or a left join's missing side, is a key like any other).
//
// A global aggregate's key has no columns: an index on a constant keeps
// its target to one row.
func (p *Plan) CreateShapeTarget() string {
	if len(p.KeyNames()) == 0 {
		return fmt.Sprintf("CREATE TABLE %s AS %s WITH NO DATA;\nCREATE UNIQUE INDEX ON %s ((true))",
			p.Target.Quoted(), p.shapeQuery(), p.Target.Quoted())
	}
	return fmt.Sprintf("CREATE TABLE %s AS %s WITH NO DATA;\nCREATE UNIQUE INDEX ON %s (%s) NULLS NOT DISTINCT",
		p.Target.Quoted(), p.shapeQuery(), p.Target.Quoted(), ident.List(p.KeyNames()))
}

// KeyNotNull is the DDL that makes a join or aggregate target's key
// columns NOT NULL, so that its unique index identifies its rows for a
// transform reading it.
func (p *Plan) KeyNotNull() string {
	var alters []string
	for _, k := range p.KeyNames() {
		alters = append(alters, "ALTER COLUMN "+ident.Quote(k)+" SET NOT NULL")
	}
	return "ALTER TABLE " + p.Target.Quoted() + " " + strings.Join(alters, ", ")
}

// ShapeResync re-derives a whole join or aggregate target: it deletes every
// row and inserts the definition's result. No parameters.
func (p *Plan) ShapeResync() []string {
	if p.Partial() {
		return p.partialResync()
	}
	return []string{
		"DELETE FROM " + p.Target.Quoted(),
		fmt.Sprintf("INSERT INTO %s (%s) %s", p.Target.Quoted(), ident.List(p.columnNamesShape()), p.wholeQuery()),
	}
}

// wholeQuery is the definition's rows over the whole source, as a
// whole-target statement writes them: shapeQuery, or a set operation's
// own (setRowsQuery).
func (p *Plan) wholeQuery() string {
	if p.setRows() {
		return p.setRowsQuery()
	}
	return p.shapeQuery()
}

func (p *Plan) columnNamesShape() []string {
	names := append([]string(nil), p.KeyNames()...)
	for _, c := range p.Spec.Columns {
		names = append(names, c.Name)
	}
	return names
}

// RecomputeJoinKeys re-derives the target rows of a set of FROM-side keys
// of a join: one text[] parameter per FROM key column. One statement (see
// shapeRecompute): only the rows that changed are written.
func (p *Plan) RecomputeJoinKeys() []string {
	if p.FullUnits() {
		return p.recomputeFullKeys()
	}
	src := p.Spec.Source
	keys, query := p.joinKeysParts()
	// The target's columns that hold the FROM side's key.
	tcols := p.Spec.Key[:len(src.KeyCols)]
	var tk, kk []string
	for i, c := range tcols {
		tk = append(tk, "t."+ident.Quote(c.Name))
		kk = append(kk, ident.Quote(src.KeyCols[i]))
	}
	// The target's rows of the keys, found through its key index.
	unit := inQuery(tk, "SELECT "+strings.Join(kk, ", ")+" FROM k", src.KeyOps)
	if src.KeyMayBeNull() {
		// A key with NULL parts matches as the unique index does.
		names := make([]string, len(tcols))
		for i, c := range tcols {
			names[i] = c.Name
		}
		unit = "t.ctid = ANY (ARRAY(" + src.keyLookups(p.Target.Quoted(), names) + "))"
	} else if len(tcols) == 1 && !isArrayType(src.KeyTypes[0]) {
		// An array the planner cannot size keeps it on the target's key
		// index: joined with the keys, it hashed the whole target.
		o := opAt(src.KeyOps, 0)
		unit = anyOf(tk[0], "ARRAY(SELECT "+o.side(kk[0])+" FROM k)", o)
	}
	return []string{p.shapeRecompute(keys, query, unit, false)}
}

// joinKeysParts are the keys CTE of a join's keyed recompute and the
// definition's query for those keys.
func (p *Plan) joinKeysParts() (keys, query string) {
	if p.FullUnits() {
		return p.fullKeysParts()
	}
	src := p.Spec.Source
	keys = "k AS (" + unnestParams(1, src.KeyCols, src.KeyTypes) + ")"
	cond := inQuery(p.srcKey(), "SELECT "+ident.List(src.KeyCols)+" FROM k", src.KeyOps)
	if src.KeyMayBeNull() {
		cond = ident.Quote(p.alias()) + ".ctid = ANY (ARRAY(" + src.keyLookups(ident.Qualified(src.Schema, src.Table), src.KeyCols) + "))"
	}
	return keys, p.shapeQuery(cond)
}

// keyLookups is nullSafeLookups of the keys CTE k (columns named as the
// source's key columns, typed) in tbl, whose columns cols hold the
// source's key.
func (s Source) keyLookups(tbl string, cols []string) string {
	return nullSafeLookups(tbl, "k", cols, s.KeyNulls, s.KeyOps,
		func(i int) string { return "k." + ident.Quote(s.KeyCols[i]) },
		func(i int) string { return "k." + ident.Quote(s.KeyCols[i]) + " IS NULL" })
}

// RecomputeGroups re-derives a set of groups of an aggregate (or
// partitions of a window): one text[] parameter per key (GROUP BY) column,
// the groups' values as text. One statement (see shapeRecompute): only the
// rows that changed are written. The candidate rows are found through
// plain equalities (so a source index serves them), then matched exactly.
func (p *Plan) RecomputeGroups(withNulls bool) []string {
	if p.Partial() {
		return p.partialRecompute()
	}
	if p.countedCopies() {
		return []string{p.countedRecompute(withNulls)}
	}
	groups, unit, query := p.groupsStatements(withNulls)
	return []string{p.shapeRecompute(groups, query, unit, withNulls)}
}

// countedCopies says the plan's target holds a counted set operation's
// copies numbered by OrdinalColumn (INTERSECT ALL, EXCEPT ALL, UNION ALL
// over a set operation; not an aggregate over one).
func (p *Plan) countedCopies() bool {
	return p.Spec.SetOp != nil && p.Spec.SetOp.Counted && !p.Spec.SetOp.Over()
}

// countedRecompute is the keyed recompute of a counted set operation
// (countedCopies): a unit is a row value, whose copies 1..count the
// target holds. Each of the page's values (byUnits) reads its count from
// the source, grouped by value through the branches' index on it, and the
// highest ordinal the target holds for it (a backward probe of the
// target's key index). Ordinals past the count are deleted; ordinals
// from the highest held up to the count are inserted. A change of one of
// a value's rows thus writes one copy, whatever the value's count: the
// statement that regenerated every copy (decision 0050) upserted them all
// against the target and compared them all with the target's rows by
// EXCEPT (5 ms a unit of 100 copies at 1M rows, decision 0053). Copies
// are equal rows, so the target's copies are always 1..count; where a
// unit's column has an equality that is not identity (text, numeric),
// the values' spelling may change with no change of count, so every copy
// is upserted from 1, as before, and rewritten only when it differs.
func (p *Plan) countedRecompute(withNulls bool) string {
	names, types := p.keyColumns()
	vals := names[:len(names)-1] // the value's columns; then the ordinal
	ord := ident.Quote(names[len(names)-1])
	ops := p.keyOps()
	gcols := make([]string, len(vals))
	for i := range vals {
		gcols[i] = fmt.Sprintf("trellis_g%d", i+1)
	}
	groups, _, _ := p.groupsStatements(withNulls)
	t := p.Target.Quoted()
	counts := countedValues(p.setOpParts(), p.countedNames(), p.Spec.SetOp.Tree) + " AS " + ident.Quote(setOpAlias)
	from := "trellis_w.trellis_have + 1"
	for _, typ := range types[:len(vals)] {
		if !equalityIsIdentity[typ] {
			from = "1"
		}
	}
	want := p.byUnits(gcols, withNulls, func(eq func(i int, a, b string) string) string {
		sel := make([]string, 0, 2*len(vals)+2)
		cond := make([]string, len(vals))
		tcond := make([]string, len(vals))
		for i, n := range vals {
			q := ident.Quote(n)
			sel = append(sel, unitsAlias+"."+gcols[i])
			cond[i] = eq(i, setCol(n), unitsAlias+"."+gcols[i])
			tcond[i] = eq(i, "trellis_tt."+q, unitsAlias+"."+gcols[i])
		}
		for _, n := range vals {
			sel = append(sel, "trellis_c."+ident.Quote(n))
		}
		sel = append(sel, "coalesce(trellis_c.trellis_count, 0) AS trellis_want",
			fmt.Sprintf("coalesce((SELECT trellis_tt.%s FROM %s AS trellis_tt WHERE %s ORDER BY trellis_tt.%s DESC LIMIT 1), 0) AS trellis_have",
				ord, t, strings.Join(tcond, " AND "), ord))
		return fmt.Sprintf("SELECT %s FROM (SELECT) AS trellis_one LEFT JOIN (SELECT * FROM %s WHERE %s) AS trellis_c ON true",
			strings.Join(sel, ", "), counts, strings.Join(cond, " AND "))
	})
	// The copies past the count, each found through the target's key index.
	byUnit := make([]string, len(vals))
	for i := range vals {
		byUnit[i] = unitEq("trellis_tt."+ident.Quote(vals[i]), "trellis_w."+gcols[i], opAt(ops, i), withNulls)
	}
	del := fmt.Sprintf("DELETE FROM %s AS t WHERE t.ctid = ANY (ARRAY(SELECT trellis_x.ctid FROM trellis_w CROSS JOIN LATERAL (SELECT trellis_tt.ctid FROM %s AS trellis_tt WHERE %s AND trellis_tt.%s > trellis_w.trellis_want OFFSET 0) AS trellis_x WHERE trellis_w.trellis_have > trellis_w.trellis_want)) RETURNING 1",
		t, t, strings.Join(byUnit, " AND "), ord)
	cols := make([]string, len(vals))
	for i, n := range vals {
		cols[i] = "trellis_w." + ident.Quote(n)
	}
	src := fmt.Sprintf("SELECT %s, trellis_n.n AS %s FROM trellis_w CROSS JOIN LATERAL generate_series(%s, trellis_w.trellis_want) AS trellis_n(n) WHERE trellis_w.trellis_want >= %s",
		strings.Join(cols, ", "), ord, from, from)
	return fmt.Sprintf("WITH %s, trellis_w AS (%s), del AS (%s), src AS (%s), ins AS (%s RETURNING 1) SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)",
		groups, want, del, src, p.upsertRows("src", names, types, p.columnNamesShape()))
}

// shapeRecompute is the keyed recompute of a join, aggregate or window in
// one statement. pre are the keys' CTEs, query the definition's rows for
// the keys, unit the condition on the target (alias t) selecting the rows
// of the keys. The target rows of the keys that query no longer yields are
// deleted, and query's rows upserted: a row whose values are identical to
// the target's is not written, so an unchanged row costs no write, no WAL
// and no dead tuple. The rows deleted and the rows upserted are disjoint
// (the delete matches keys as the target's unique index does, NULLs equal),
// so no row is touched twice. It returns the counts deleted and upserted.
func (p *Plan) shapeRecompute(pre, query, unit string, withNulls bool) string {
	names, types := p.keyColumns()
	ops := p.keyOps()
	var match []string
	for i, n := range names {
		a, b, o := "src."+ident.Quote(n), "t."+ident.Quote(n), opAt(ops, i)
		switch {
		case !p.keyNullable(i, withNulls):
			match = append(match, cmp(a, "=", b, o))
		case o != nil || isArrayType(types[i]):
			// ARRAY[] of an array would flatten it (a NULL one to '{}'),
			// and a key with operators of its own is compared by them.
			match = append(match, cmp(a, "IS NOT DISTINCT FROM", b, o))
		default:
			// Array equality holds for two NULLs, and, unlike IS NOT
			// DISTINCT FROM, can be hashed: it compares the elements
			// with their type's default equality, as the unique index.
			// The definition's side is cast to the key's type: a source
			// column retyped since (integer to bigint) must still match.
			if types[i] != "" {
				a = "(" + a + ")::" + types[i]
			}
			match = append(match, "ARRAY["+a+"] = ARRAY["+b+"]")
		}
	}
	anti := "NOT EXISTS (SELECT 1 FROM src"
	if len(match) > 0 {
		anti += " WHERE " + strings.Join(match, " AND ")
	}
	anti += ")"
	delWhere := unit + " AND " + anti
	if gone, ok := p.goneGroups(withNulls); ok {
		delWhere = gone
	}
	if p.multiUnit() {
		delWhere = p.goneUnitRows(withNulls)
	}
	del := fmt.Sprintf("DELETE FROM %s AS t WHERE %s RETURNING 1", p.Target.Quoted(), delWhere)
	return fmt.Sprintf("WITH %s, src AS (%s), del AS (%s), ins AS (%s RETURNING 1) SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)",
		pre, query, del, p.upsertRows("src", names, types, p.columnNamesShape()))
}

// goneGroups is, for an aggregate grouped by one column of a type whose
// equality is identity (no collation, no operators of its own), the
// condition on the target (alias t) selecting the groups of the keys that
// src does not yield: they are found from the keys and src alone, then
// looked up in the target's key index, so a page whose groups all remain
// reads no target row to delete (the anti-join reads every group's row).
func (p *Plan) goneGroups(withNulls bool) (string, bool) {
	if p.Kind() != KindAggregate || p.oneUnit() || withNulls || len(p.Spec.Key) != 1 {
		return "", false
	}
	k := p.Spec.Key[0]
	if !equalityIsIdentity[k.Type] || k.Op != nil {
		return "", false
	}
	q := ident.Quote(k.Name)
	return fmt.Sprintf("t.%s = ANY (ARRAY(SELECT g.trellis_g1 FROM g EXCEPT SELECT src.%s FROM src))", q, q), true
}

// KeyNulls says, for each key column of a join's, aggregate's, window's or
// set operation's target (KeyNames), whether it may hold NULL: what a
// transform reading the target records of its key (decision 0049).
func (p *Plan) KeyNulls() []bool {
	out := make([]bool, len(p.KeyNames()))
	for i := range out {
		out[i] = p.keyNullable(i, true)
	}
	return out
}

// multiUnit says the plan's keyed recompute takes units of two columns or
// more: an aggregate's GROUP BY, a window's PARTITION BY, a set
// operation's (branch, key) or whole row. Matched as a relation (IN over
// the unnested units, NOT EXISTS over src), such units were joined by
// nested loops over CTE scans in a generic plan, whose unnest PostgreSQL
// estimates at 10 rows: a 10,000-key page of union_join took 176 s, one
// join filter removing 199,990,000 rows (decision 0048). Instead each
// unit drives its own index probes (unitProbes), whatever the estimates.
func (p *Plan) multiUnit() bool {
	k := p.Kind()
	return (k == KindAggregate || k == KindWindow) && !p.oneUnit() && len(p.unitExprs()) > 1
}

// unitsAlias names the page's distinct units in unitProbes.
const unitsAlias = "trellis_units"

// unitProbes is the rows query yields for each of the page's units
// (those of the groups CTE g, columns gcols, that filter keeps), each
// unit once: the units (alias unitsAlias) drive a LATERAL subquery in
// which query reads them, so PostgreSQL runs query once per unit with
// the unit's values as parameters, and finds its rows through an index
// on the unit's columns. The OFFSET 0 keeps the subquery from being
// flattened into a join the planner could order with the units inside
// (a nested loop over a CTE scan, in a generic plan: quadratic in the
// page's units), or hash with a scan of the whole source (a UNION ALL
// branch that joins takes the unit's values as an index condition only
// this way).
func unitProbes(gcols []string, filter, query string) string {
	g := make([]string, len(gcols))
	for i, c := range gcols {
		g[i] = "g." + c
	}
	return fmt.Sprintf("SELECT trellis_p.* FROM (SELECT DISTINCT %s FROM g%s) AS %s CROSS JOIN LATERAL (%s OFFSET 0) AS trellis_p",
		strings.Join(g, ", "), filter, unitsAlias, query)
}

// byUnits is unitProbes of the query query builds from its unit
// conditions: eq(i, a, b) matches the unit's column i (a, of the source
// or the target) with its value b. On a page with NULLs (withNulls), the
// units are probed apart by their pattern of NULL parts over the columns
// a unit can hold NULL in (unitNullable): each pattern's probe matches a
// column by = where its units have a value and by IS NULL where they have
// none, so every column is an index condition on the unit's index (a
// unit (NULL, b) finds its rows by a IS NULL AND b = ..., not by reading
// every row with a NULL a and filtering b: decision 0065). Beyond
// maxNullArms patterns the units with a NULL are probed together, each
// nullable column matched by (a = b OR (a IS NULL AND b IS NULL)).
func (p *Plan) byUnits(gcols []string, withNulls bool, query func(eq func(i int, a, b string) string) string) string {
	ops := p.keyOps()
	var nullable []int
	for i, ok := range p.unitNullable() {
		if ok {
			nullable = append(nullable, i)
		}
	}
	// probe is the probes of the units that filter keeps, a column i
	// matched by IS NULL where null(i), by = or else, or by either where
	// either(i).
	probe := func(filter []string, null, either func(i int) bool) string {
		where := ""
		if len(filter) > 0 {
			where = " WHERE " + strings.Join(filter, " AND ")
		}
		return unitProbes(gcols, where, query(func(i int, a, b string) string {
			switch {
			case null(i):
				return a + " IS NULL"
			case either(i):
				return unitEq(a, b, opAt(ops, i), true)
			}
			return cmp(a, "=", b, opAt(ops, i))
		}))
	}
	none := func(int) bool { return false }
	if !withNulls || len(nullable) == 0 {
		return probe(nil, none, none)
	}
	if 1<<len(nullable) > maxNullArms {
		var notNull, anyNull []string
		for _, i := range nullable {
			notNull = append(notNull, "g."+gcols[i]+" IS NOT NULL")
			anyNull = append(anyNull, "g."+gcols[i]+" IS NULL")
		}
		return probe(notNull, none, none) + " UNION ALL " +
			probe([]string{strings.Join(anyNull, " OR ")}, none, func(i int) bool { return slices.Contains(nullable, i) })
	}
	arms := make([]string, 0, 1<<len(nullable))
	for set := 0; set < 1<<len(nullable); set++ {
		null := map[int]bool{}
		filter := make([]string, len(nullable))
		for b, i := range nullable {
			null[i] = set&(1<<b) != 0
			filter[b] = "g." + gcols[i] + " IS NOT NULL"
			if null[i] {
				filter[b] = "g." + gcols[i] + " IS NULL"
			}
		}
		arms = append(arms, probe(filter, func(i int) bool { return null[i] }, none))
	}
	return strings.Join(arms, " UNION ALL ")
}

// unitNullable says, for each column of a multi-column unit, whether a
// unit can hold NULL in it: not a UNION ALL's branch number, nor a column
// every branch fills with its FROM table's key; any GROUP BY or PARTITION
// BY value can.
func (p *Plan) unitNullable() []bool {
	out := make([]bool, len(p.unitExprs()))
	so := p.Spec.SetOp
	for i := range out {
		if so == nil || !so.All || so.Over() {
			out[i] = true
			continue
		}
		for _, b := range so.Branches {
			if i > 0 && (b.Aggregated || i >= len(b.Keys) || b.Keys[i] == "NULL" || b.keyMayBeNull(b.Keys[i])) {
				out[i] = true
			}
		}
	}
	return out
}

// unitEq matches a unit's column a with its value b; nullable, a NULL
// value matches a NULL column, in a form whose each arm an index serves
// (a = b, a IS NULL).
func unitEq(a, b string, o *Op, nullable bool) string {
	eq := cmp(a, "=", b, o)
	if !nullable {
		return eq
	}
	return fmt.Sprintf("(%s OR (%s IS NULL AND %s IS NULL))", eq, a, b)
}

// goneUnitRows is, for a multi-column unit (multiUnit), the condition on
// the target (alias t) selecting the rows of the page's units that src no
// longer yields. The units' target rows, each unit probed through the
// target's key index (byUnits), with their ctids, and src's keys are
// grouped by key (hashed or sorted, never a nested loop, and NULLs match
// NULLs as in the target's unique index): a key that only the target has
// is a row gone, deleted by the ctid its probe found. (Found by EXCEPT,
// each row gone was probed through the index a second time for its ctid:
// a third of a page's target probes when every changed row's old value
// is a row gone, decision 0057.)
func (p *Plan) goneUnitRows(withNulls bool) string {
	names, _ := p.keyColumns()
	n := len(p.unitExprs())
	t := p.Target.Quoted()
	keys := make([]string, len(names))
	tkeys := make([]string, len(names))
	gcols := make([]string, n)
	for i, name := range names {
		q := ident.Quote(name)
		keys[i] = q
		tkeys[i] = "trellis_tt." + q
		if i < n {
			gcols[i] = fmt.Sprintf("trellis_g%d", i+1)
		}
	}
	var rows string
	if p.branchProbes() {
		// Each branch's target rows of the page in one scan of the key
		// index: the branch's number, then its keys (branchKeys).
		parts := make([]string, len(p.Spec.SetOp.Branches))
		for i := range parts {
			parts[i] = fmt.Sprintf("SELECT %s, trellis_tt.ctid AS trellis_ctid FROM %s AS trellis_tt WHERE trellis_tt.%s = %d::smallint AND %s",
				strings.Join(tkeys, ", "), t, ident.Quote(names[0]), i+1, p.branchKeys(i, "trellis_tt."+ident.Quote(names[1]), gcols))
		}
		rows = strings.Join(parts, " UNION ALL ")
	} else {
		rows = p.byUnits(gcols, withNulls, func(eq func(i int, a, b string) string) string {
			conds := make([]string, n)
			for i := range conds {
				conds[i] = eq(i, "trellis_tt."+ident.Quote(names[i]), unitsAlias+"."+gcols[i])
			}
			return fmt.Sprintf("SELECT %s, trellis_tt.ctid AS trellis_ctid FROM %s AS trellis_tt WHERE %s", strings.Join(tkeys, ", "), t, strings.Join(conds, " AND "))
		})
	}
	both := fmt.Sprintf("(%s UNION ALL SELECT %s, NULL::tid FROM src) AS trellis_r", rows, strings.Join(keys, ", "))
	return fmt.Sprintf("t.ctid = ANY (ARRAY(SELECT min(trellis_r.trellis_ctid) FROM %s GROUP BY %s HAVING count(*) = count(trellis_r.trellis_ctid)))",
		both, strings.Join(keys, ", "))
}

// keyNullable says whether the target's key column i can hold NULL among
// the rows of a keyed recompute: a joined table's key under a LEFT JOIN,
// an aggregate's or window's group when the keys include a NULL group. A
// table's key is never NULL, but under a FULL JOIN or when its own key may
// be (a target read by a chain, decisions 0049, 0054 and 0062).
func (p *Plan) keyNullable(i int, withNulls bool) bool {
	if p.Kind() == KindJoin {
		if p.Full() {
			return true // any table may be missing from a row
		}
		if src := p.Spec.Source; i < len(src.KeyCols) {
			return i < len(src.KeyNulls) && src.KeyNulls[i]
		}
		joins := p.Spec.JoinList()
		if slices.ContainsFunc(joins, func(j *Join) bool { return j.Left }) {
			return true
		}
		// Inner joins: a joined target whose own key may be NULL (decision
		// 0062).
		at := len(p.Spec.Source.KeyCols)
		for _, j := range joins {
			if k := i - at; k < len(j.Source.KeyCols) {
				return k < len(j.Source.KeyNulls) && j.Source.KeyNulls[k]
			}
			at += len(j.Source.KeyCols)
		}
		return false
	}
	if i < len(p.unitExprs()) {
		return withNulls
	}
	if p.Spec.SetOp != nil {
		// A UNION ALL's key past its unit: a joined table's, NULL in
		// other branches' rows and under a LEFT JOIN.
		return true
	}
	// A window's key past its partition is its rows' key: the FROM
	// table's, never NULL unless its own key may be (a target read by a
	// chain, decision 0049), and over a join the joined tables' too, NULL
	// for a table an outer join leaves out (see rowKeys).
	return p.Spec.NullableKeys(0) || slices.ContainsFunc(p.Spec.JoinList(), func(j *Join) bool { return j.Left || j.Right || j.Full })
}

// groupsParts are the groups CTE of an aggregate's keyed recompute and the
// definition's query for those groups.
func (p *Plan) groupsParts(withNulls bool) (groups, query string) {
	groups, _, query = p.groupsStatements(withNulls)
	return groups, query
}

// groupsStatements are the groups CTE, the condition selecting the
// groups' rows of the target (alias t) and the definition's query for the
// groups.
func (p *Plan) groupsStatements(withNulls bool) (groups, rows, query string) {
	// A global aggregate kept through partials is evaluated (EvalKeys)
	// over the whole source, as its one group's key (the key its careful
	// path and samples use) says.
	if p.oneUnit() {
		// The one group, of no columns: every row of the source. Its key
		// parameter (see KeyParams) says whether it is to be recomputed.
		groups = "g AS (SELECT WHERE cardinality($1::text[]) > 0)"
		rows = "EXISTS (SELECT FROM g)"
		if p.Spec.Window != nil {
			// No GROUP BY: the condition goes in WHERE, where it keeps
			// or drops the whole partition.
			return groups, rows, p.shapeQuery("EXISTS (SELECT FROM g)")
		}
		having := ""
		if p.Spec.Having != "" {
			having = " AND (" + p.Spec.Having + ")"
		}
		return groups, rows,
			fmt.Sprintf("SELECT %s FROM %s%s HAVING EXISTS (SELECT FROM g)%s", p.shapeSelect(), p.fromClause(), p.where(), having)
	}
	// The unit's key columns lead the target's key: all of it for an
	// aggregate, the PARTITION BY for a window.
	exprs := p.unitExprs()
	unit := p.Spec.Key[:len(exprs)]
	ops := p.keyOps()[:len(exprs)]
	types := make([]string, len(unit))
	// The groups CTE's columns have names of their own, so that a GROUP BY
	// expression that names a source column never binds to them.
	gcols := make([]string, len(unit))
	for i, k := range unit {
		types[i] = k.Type
		gcols[i] = fmt.Sprintf("trellis_g%d", i+1)
	}
	groups = "g AS (" + unnestParams(1, gcols, types) + ")"
	if p.branchProbes() {
		// Each branch reads its keys of the page in one index scan.
		return groups, "", p.branchProbeQuery(gcols)
	}
	if p.multiUnit() {
		// Each unit probes the source on its own (see unitProbes).
		return groups, "", p.byUnits(gcols, withNulls, func(eq func(i int, a, b string) string) string {
			conds := make([]string, len(exprs))
			for i, e := range exprs {
				conds[i] = eq(i, "("+e+")", unitsAlias+"."+gcols[i])
			}
			return "SELECT * FROM (" + p.shapeQuery(strings.Join(conds, " AND ")) + ") AS trellis_s"
		})
	}
	// One column (several are multiUnit): the plain equality lets an
	// index find the rows. Only a page with a NULL group gets the NULL
	// arm, an index condition too (a condition no index serves, such as
	// asking the array whether it holds a NULL, made the whole OR a
	// filter that casts and searches the array for every row).
	in := func(expr string) string {
		if !withNulls {
			return inParam(expr, 1, types[0], ops[0])
		}
		return fmt.Sprintf("(%s OR (%s) IS NULL)", inParam(expr, 1, types[0], ops[0]), expr)
	}
	return groups, in("t." + ident.Quote(unit[0].Name)), p.shapeQuery(in(exprs[0]))
}

// Changes describes the parameters of the affected-rows queries: the
// changed source's key columns and captured columns, as the ledger holds
// them. Parameters: one text[] per key column, one text[] per captured
// column (old values, NULL where the row has none), then a bool[] saying
// which rows carry old values.
type Changes struct {
	Source   Source
	CapCols  []string
	CapTypes []string
	// Part limits AffectedGroups to the groups of the changed rows' old
	// values ("old") or of their current rows ("current"); "" is both.
	Part string
}

// pick keeps the old part, the current part or both of AffectedGroups.
func (c Changes) pick(old, current string) []string {
	switch c.Part {
	case "old":
		return []string{old}
	case "current":
		return []string{current}
	}
	return []string{old, current}
}

// capType is the type of captured column i ("" when none is recorded).
func (c Changes) capType(i int) string {
	if i < len(c.CapTypes) {
		return c.CapTypes[i]
	}
	return ""
}

func (c Changes) cte() string {
	var params, cols []string
	n := 1
	for i := range c.Source.KeyCols {
		params = append(params, keyParam(n, c.Source.KeyTypes[i]))
		cols = append(cols, fmt.Sprintf("k%d", i+1))
		n++
	}
	for i := range c.CapCols {
		params = append(params, keyParam(n, c.capType(i)))
		cols = append(cols, fmt.Sprintf("v%d", i+1))
		n++
	}
	params = append(params, fmt.Sprintf("$%d::bool[]", n))
	cols = append(cols, "hv")
	types := append(append([]string(nil), c.Source.KeyTypes...), c.CapTypes...)
	if anyOwnParam(types) {
		// See zipped: a composite key or old value stays one column.
		elems := make([]string, len(params))
		for i, pa := range params {
			elems[i] = "unnest(" + pa + ") AS " + cols[i]
		}
		return "chg AS (SELECT " + strings.Join(elems, ", ") + ")"
	}
	return fmt.Sprintf("chg AS (SELECT * FROM unnest(%s) AS u(%s))", strings.Join(params, ", "), strings.Join(cols, ", "))
}

// oldImage is a derived table of the changed rows' old values, named alias.
// When capture keeps no column of the table, no row carries old values,
// and every changed row stands for its old row (one with no column read):
// a branch aggregating without GROUP BY or WHERE has its one row touched
// by a deleted row too, found through no current row.
func (c Changes) oldImage(alias string) string {
	var casts []string
	for i, col := range c.CapCols {
		casts = append(casts, fromKeyParam(fmt.Sprintf("v%d", i+1), c.CapTypes[i])+" AS "+ident.Quote(col))
	}
	if len(casts) == 0 {
		return "(SELECT NULL AS trellis_none FROM chg) AS " + ident.Quote(alias)
	}
	return "(SELECT " + strings.Join(casts, ", ") + " FROM chg WHERE hv) AS " + ident.Quote(alias)
}

// current is the condition selecting the changed rows as they are now.
func (c Changes) current(alias string) string {
	if c.Source.KeyMayBeNull() {
		return c.currentNullable(alias)
	}
	var keys, casts []string
	for i, k := range c.Source.KeyCols {
		keys = append(keys, ident.Quote(alias)+"."+ident.Quote(k))
		casts = append(casts, fromKeyParam(fmt.Sprintf("k%d", i+1), c.Source.KeyTypes[i]))
	}
	return inQuery(keys, "SELECT "+strings.Join(casts, ", ")+" FROM chg", c.Source.KeyOps)
}

// maxNullArms bounds the lookups currentNullable splits a key into: one
// per pattern of NULL parts its nullable columns can take.
const maxNullArms = 16

// currentNullable is current for a source whose key may have NULL parts
// (decision 0049): a key matches the row whose key is not distinct from
// it, as the source's unique index NULLS NOT DISTINCT compares them. The
// rows are found by one lookup per pattern of NULL parts, each an index
// condition on the key's columns (= for a column with a value, IS NULL
// for one without), and selected by their row ids (a TID scan): an OR of
// the patterns, or IS NOT DISTINCT FROM, would keep a generic plan off the
// index.
func (c Changes) currentNullable(alias string) string {
	tbl := ident.Qualified(c.Source.Schema, c.Source.Table)
	return ident.Quote(alias) + ".ctid = ANY (ARRAY(" + nullSafeLookups(tbl, "chg", c.Source.KeyCols, c.Source.KeyNulls, c.Source.KeyOps,
		func(i int) string { return fromKeyParam(fmt.Sprintf("chg.k%d", i+1), c.Source.KeyTypes[i]) },
		func(i int) string { return fmt.Sprintf("chg.k%d IS NULL", i+1) }) + "))"
}

// nullSafeLookups is a query of the row ids (ctid) of the rows of tbl
// whose columns cols are not distinct from a key of keys (a CTE or
// table): one lookup per pattern of NULL parts over the columns that may
// be NULL (nulls), each an index condition on cols (= with the key's
// value, val(i), for a column with one; IS NULL for one without, where
// isNull(i) holds), joined by UNION ALL. Beyond maxNullArms patterns it is
// one lookup, exact but off the index (IS NOT DISTINCT FROM).
func nullSafeLookups(tbl, keys string, cols []string, nulls []bool, ops []*Op, val, isNull func(i int) string) string {
	var nullable []int
	for i := range cols {
		if i < len(nulls) && nulls[i] {
			nullable = append(nullable, i)
		}
	}
	col := func(i int) string { return "trellis_x." + ident.Quote(cols[i]) }
	arm := func(match []string) string {
		return "SELECT trellis_x.ctid FROM " + keys + " JOIN " + tbl + " AS trellis_x ON " + strings.Join(match, " AND ")
	}
	if 1<<len(nullable) > maxNullArms {
		var match []string
		for i := range cols {
			match = append(match, cmp(col(i), "IS NOT DISTINCT FROM", val(i), opAt(ops, i)))
		}
		return arm(match)
	}
	var arms []string
	for set := 0; set < 1<<len(nullable); set++ {
		null := map[int]bool{}
		for b, i := range nullable {
			null[i] = set&(1<<b) != 0
		}
		var match []string
		for i := range cols {
			if null[i] {
				match = append(match, fmt.Sprintf("%s IS NULL AND %s", col(i), isNull(i)))
				continue
			}
			match = append(match, cmp(col(i), "=", val(i), opAt(ops, i)))
		}
		arms = append(arms, arm(match))
	}
	return strings.Join(arms, " UNION ALL ")
}

// currentByKey is Changes.current for a table of one key column: the
// changed keys as an array the planner cannot size, so it finds the rows
// through the key's index (sized, a page's keys made it hash the whole
// table, a cost growing with the table). A key that may be NULL is looked
// up as current does (currentNullable).
func (c Changes) currentByKey(alias string) string {
	src := c.Source
	if len(src.KeyCols) != 1 || isArrayType(src.KeyTypes[0]) || src.KeyMayBeNull() {
		return c.current(alias)
	}
	o := opAt(src.KeyOps, 0)
	k1 := fromKeyParam("k1", src.KeyTypes[0])
	if o != nil {
		k1 = "k1::" + o.Type
	}
	return anyOf(ident.Quote(alias)+"."+ident.Quote(src.KeyCols[0]), "ARRAY(SELECT "+k1+" FROM chg)", o)
}

// textWithBucket renders output expressions, of the given types, as text
// plus their key bucket, the way capture renders keys.
func textWithBucket(exprs, types []string, buckets int) string {
	var t []string
	for i, e := range exprs {
		typ := "text"
		if i < len(types) && types[i] != "" {
			typ = types[i]
		}
		t = append(t, textOf("("+e+")", typ))
	}
	arr := "ARRAY[" + strings.Join(t, ", ") + "]"
	return strings.Join(t, ", ") + fmt.Sprintf(", hashtext(%s::text) & %d", arr, buckets-1)
}

// JoinedSideFromKeys finds the FROM-side keys a change of the joined table
// affects: FROM rows whose ON columns match the changed rows' old or
// current values. Returns the keys as text and their bucket.
func (p *Plan) JoinedSideFromKeys(c Changes, buckets int) string {
	j := p.Spec.Join
	ja := aliasOf(j.Source)
	var fromCols, joinedCols []string
	for _, on := range j.On {
		fromCols = append(fromCols, ident.Quote(p.alias())+"."+ident.Quote(on.From))
		joinedCols = append(joinedCols, ident.Quote(ja)+"."+ident.Quote(on.Joined))
	}
	vals := fmt.Sprintf("SELECT %s FROM %s UNION SELECT %s FROM %s AS %s WHERE %s",
		strings.Join(joinedCols, ", "), c.oldImage(ja),
		strings.Join(joinedCols, ", "), ident.Qualified(j.Source.Schema, j.Source.Table), ident.Quote(ja), c.current(ja))
	return fmt.Sprintf("WITH %s SELECT DISTINCT %s FROM %s WHERE %s",
		c.cte(), textWithBucket(p.srcKey(), p.Spec.Source.KeyTypes, buckets), p.from(), inQuery(fromCols, vals, onOps(j.On)))
}

// AffectedGroups finds the groups of an aggregate that a change of one of
// its tables touches: the groups of the changed rows' old values and of
// their current rows, joined (for a join) with the other side as it is
// now. For a change of the joined side, the groups of the FROM rows that
// matched the old values under the current join are included too (a left
// join's rows that lost their match). Returns the groups as text and their
// bucket.
func (p *Plan) AffectedGroups(c Changes, joinedSide bool, buckets int) string {
	if p.Partial() {
		return p.partialAffected(c, buckets)
	}
	if p.oneUnit() {
		// Any change touches the one group.
		return fmt.Sprintf("WITH %s SELECT %s WHERE EXISTS (SELECT FROM chg)", c.cte(), textWithBucket([]string{GlobalKey}, nil, buckets))
	}
	g := strings.Join(p.unitExprs(), ", ")
	var parts []string
	switch {
	case p.Spec.Join == nil:
		// The changed rows as they are now, found through the key's index
		// in one scan (currentByKey): an IN of the page's keys was a hash
		// join over the whole source, or a scan of the index per key.
		parts = c.pick(
			fmt.Sprintf("SELECT %s FROM %s", g, c.oldImage(p.alias())),
			fmt.Sprintf("SELECT %s FROM %s WHERE %s", g, p.from(), c.currentByKey(p.alias())))
	case !joinedSide && !p.Spec.GroupJoined:
		// The GROUP BY reads the changed side alone: its rows' groups,
		// old and new, whatever they join (the other side may have
		// changed in the same page: joining it as it is now would miss
		// the group of a pair that no longer exists).
		parts = c.pick(
			fmt.Sprintf("SELECT %s FROM %s", g, c.oldImage(p.alias())),
			fmt.Sprintf("SELECT %s FROM %s WHERE %s", g, p.from(), c.currentByKey(p.alias())))
	case joinedSide && p.Spec.GroupJoined:
		j := p.Spec.Join
		ja := aliasOf(j.Source)
		jt := ident.Qualified(j.Source.Schema, j.Source.Table) + " AS " + ident.Quote(ja)
		parts = c.pick(
			fmt.Sprintf("SELECT %s FROM %s", g, c.oldImage(ja)),
			fmt.Sprintf("SELECT %s FROM %s WHERE %s", g, jt, c.currentByKey(ja)))
		if j.Left && c.Part != "old" {
			// A FROM row the change gave a match had none before: it
			// leaves the group it had without one (the NULL group of
			// GROUP BY s.col), which no image of the joined side gives.
			// Its null-extended group is recomputed too (LEFT JOIN ON
			// false extends every row with NULLs).
			var fromCols, joinedCols []string
			for _, on := range j.On {
				fromCols = append(fromCols, ident.Quote(p.alias())+"."+ident.Quote(on.From))
				joinedCols = append(joinedCols, ident.Quote(ja)+"."+ident.Quote(on.Joined))
			}
			vals := fmt.Sprintf("SELECT %s FROM %s UNION SELECT %s FROM %s WHERE %s",
				strings.Join(joinedCols, ", "), c.oldImage(ja), strings.Join(joinedCols, ", "), jt, c.current(ja))
			parts = append(parts, fmt.Sprintf("SELECT %s FROM %s LEFT JOIN %s ON false WHERE %s",
				g, p.from(), jt, inQuery(fromCols, vals, onOps(j.On))))
		}
	case !joinedSide:
		j := p.Spec.Join
		ja := aliasOf(j.Source)
		jt := ident.Qualified(j.Source.Schema, j.Source.Table) + " AS " + ident.Quote(ja)
		parts = c.pick(
			fmt.Sprintf("SELECT %s FROM %s%s%s ON %s", g, c.oldImage(p.alias()), p.joinWord(), jt, p.onClause(p.alias(), ja)),
			fmt.Sprintf("SELECT %s FROM %s WHERE %s", g, p.fromClause(), c.current(p.alias())))
	default:
		j := p.Spec.Join
		ja := aliasOf(j.Source)
		var fromCols, joinedCols []string
		for _, on := range j.On {
			fromCols = append(fromCols, ident.Quote(p.alias())+"."+ident.Quote(on.From))
			joinedCols = append(joinedCols, ident.Quote(ja)+"."+ident.Quote(on.Joined))
		}
		jt := ident.Qualified(j.Source.Schema, j.Source.Table)
		vals := fmt.Sprintf("SELECT %s FROM %s UNION SELECT %s FROM %s AS %s WHERE %s",
			strings.Join(joinedCols, ", "), c.oldImage(ja), strings.Join(joinedCols, ", "), jt, ident.Quote(ja), c.current(ja))
		parts = c.pick(
			fmt.Sprintf("SELECT %s FROM %s JOIN %s ON %s", g, p.from(), c.oldImage(ja), p.onClause(p.alias(), ja)),
			fmt.Sprintf("SELECT %s FROM %s WHERE %s", g, p.fromClause(), inQuery(fromCols, vals, onOps(j.On))))
	}
	cols := make([]string, len(p.unitExprs()))
	for i := range cols {
		cols[i] = fmt.Sprintf("g%d", i+1)
	}
	_, types := p.CheckUnit()
	return fmt.Sprintf("WITH %s SELECT DISTINCT %s FROM (%s) AS grp(%s)", c.cte(), textWithBucket(cols, types, buckets), strings.Join(parts, " UNION "), strings.Join(cols, ", "))
}

// ShapeKeys lists, as text, every key a join or aggregate target can have
// from its source's current rows: a join's FROM keys, an aggregate's groups
// (before its WHERE, which may be what fails). A build on which a row fails
// is re-derived key by key from this list.
func (p *Plan) ShapeKeys() string {
	if p.FullUnits() {
		return p.fullShapeKeys()
	}
	if p.Kind() == KindJoin {
		var cols []string
		for i, k := range p.srcKey() {
			cols = append(cols, textOf(k, p.Spec.Source.KeyTypes[i]))
		}
		return fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), p.from())
	}
	if p.oneUnit() {
		return "SELECT " + GlobalKey + "::text" // the one group
	}
	var cols []string
	_, types := p.CheckUnit()
	for i, g := range p.unitExprs() {
		cols = append(cols, textOf("("+g+")", types[i]))
	}
	return fmt.Sprintf("SELECT DISTINCT %s FROM %s", strings.Join(cols, ", "), p.fromClause())
}

// Args are the parameters of the Changes queries for n changed rows: row(i)
// gives the i-th row's key values and old values (nil for a new row).
func (c Changes) Args(n int, row func(i int) (key, vals []*string)) []any {
	nkeys, ncaps := len(c.Source.KeyCols), len(c.CapCols)
	cols := make([][]*string, nkeys+ncaps)
	hv := make([]bool, n)
	for r := 0; r < n; r++ {
		key, vals := row(r)
		for i := 0; i < nkeys; i++ {
			var v *string
			if i < len(key) {
				v = key[i]
			}
			cols[i] = append(cols[i], v)
		}
		for i := 0; i < ncaps; i++ {
			var v *string
			if i < len(vals) {
				v = vals[i]
			}
			cols[nkeys+i] = append(cols[nkeys+i], v)
		}
		hv[r] = vals != nil
	}
	args := make([]any, 0, len(cols)+1)
	for _, col := range cols {
		args = append(args, col)
	}
	return append(args, hv)
}

// AffectedQueries are the queries finding the target keys that changes of
// one of a join's or aggregate's tables touch (fromSide, joinedSide: which
// of its tables the changes are of); each returns the keys as text and
// their bucket, and takes c.Args.
func (p *Plan) AffectedQueries(c Changes, fromSide, joinedSide bool, buckets int) []string {
	if p.Kind() == KindJoin {
		return []string{p.JoinedSideFromKeys(c, buckets)}
	}
	var out []string
	if fromSide {
		out = append(out, p.AffectedGroups(c, false, buckets))
	}
	if joinedSide {
		out = append(out, p.AffectedGroups(c, true, buckets))
	}
	return out
}
