package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
)

// A self-check compares the target with a fresh recompute of the
// definition, a page at a time. Its unit is what the drain recomputes as
// one: a projection's source key, a join's FROM key (the leading columns
// of the target's key), an aggregate's group. Projections and joins are
// paged by ranges of the FROM table's key; an aggregate is one page.

// CheckUnit returns the names and types of the unit's columns, which lead
// the target's key.
func (p *Plan) CheckUnit() (names, types []string) {
	switch p.Kind() {
	case KindProjection:
		return p.Spec.Source.KeyCols, p.Spec.Source.KeyTypes
	case KindJoin:
		if p.Full() {
			names, types, _, _ = p.fullUnit()
			return names, types
		}
		n := len(p.Spec.Source.KeyCols)
		for _, k := range p.Spec.Key[:n] {
			names = append(names, k.Name)
		}
		return names, p.Spec.Source.KeyTypes
	}
	names, types = p.keyColumns()
	n := len(p.unitExprs())
	return names[:n], types[:n]
}

// keyTypes are the types of the target's key columns (KeyNames).
func (p *Plan) keyTypes() []string {
	_, types := p.keyColumns()
	return types
}

// CheckPaged reports whether a check pages the target by ranges of the
// FROM table's key (see BuildBound); an aggregate, a window, a FULL JOIN
// (whose rows need not hold a FROM key) and a join whose FROM key may be
// NULL (row comparisons with a NULL part are unknown) are checked in one
// page.
func (p *Plan) CheckPaged() bool {
	return p.Kind() != KindAggregate && p.Kind() != KindWindow && !p.Full() && !p.Spec.Source.KeyMayBeNull()
}

// CheckColumns are the columns a check compares: every column that is not
// paused (a paused column keeps values nothing maintains).
func (p *Plan) CheckColumns() []string {
	var out []string
	for _, c := range p.Spec.Columns {
		if !c.Paused {
			out = append(out, c.Name)
		}
	}
	return out
}

// CheckPage is the comparison of one page of the target with what the
// definition yields for it now. Parameters, in order: the lower bound's
// unit values (text) when hasLower, the upper bound's when hasUpper (a
// page is (lower, upper] of the FROM key; CheckPaged plans take neither);
// then three sets of units, each one text[] per unit column (a global
// aggregate, whose one unit has no columns, takes a bool per set instead:
// the set holds the unit): the units in flight, the units held, and the
// units to restrict the page to; then a
// bool saying every unit is in flight, a bool saying to restrict, and the
// most differing rows to list.
//
// It returns rows of (part, kind, held, in_flight, n, key, columns,
// target, recomputed): part 0 counts the differing rows by kind ("missing",
// "extra", "differing"), held and in_flight; part 1 lists differing rows
// that are not held, ordered by key, with the key's values as text, the
// columns that differ, and the compared columns of each side as a JSON
// object of text values; part 2 (kind "total") counts the keys compared
// (held ones are not).
func (p *Plan) CheckPage(hasLower, hasUpper bool) string {
	unitNames, unitTypes := p.CheckUnit()
	nu := len(unitNames)
	keys := p.KeyNames()
	cols := p.CheckColumns()
	next := 1
	param := func() int { next++; return next - 1 }

	// The page's range, on the target's unit columns and the FROM key.
	var tConds, sConds []string
	tUnit := make([]string, nu)
	for i, n := range unitNames {
		tUnit[i] = "t." + ident.Quote(n)
	}
	// (Only projections and joins are paged: their unit is the FROM key.)
	if hasLower {
		tConds = append(tConds, cmpTuple(tUnit, ">", p.cursorCols(next), p.Spec.Source.KeyOps))
		sConds = append(sConds, p.srcKeyCmp(">", next))
		next += nu
	}
	if hasUpper {
		tConds = append(tConds, cmpTuple(tUnit, "<=", p.cursorCols(next), p.Spec.Source.KeyOps))
		sConds = append(sConds, p.srcKeyCmp("<=", next))
		next += nu
	}
	recompute := p.checkRecompute(cols, sConds)

	unitSet := func(name string) string {
		if nu == 0 {
			return fmt.Sprintf("%s AS (SELECT WHERE $%d::bool)", name, param())
		}
		var params, as, casts []string
		for i := range unitNames {
			params = append(params, keyParam(param(), unitTypes[i]))
			as = append(as, fmt.Sprintf("x%d", i+1))
			casts = append(casts, fmt.Sprintf("%s AS u%d", fromKeyParam(fmt.Sprintf("u.x%d", i+1), unitTypes[i]), i+1))
		}
		return name + " AS (" + zipped(params, func(i int) string { return "u." + as[i] }, casts, anyOwnParam(unitTypes)) + ")"
	}
	inflight, held, only := unitSet("trellis_inflight"), unitSet("trellis_held"), unitSet("trellis_only")
	allInFlight, restrict, limit := param(), param(), param()

	// Target and recompute, each with a presence mark; joined on the key
	// through one-element arrays, whose equality is hashable and matches
	// NULL with NULL (a NULL group, a left join's missing side).
	keyTypes := p.keyTypes()
	colTypes := map[string]string{}
	for _, c := range p.Spec.Columns {
		colTypes[c.Name] = c.Type
	}
	var tSel, on, jSel, dKeys, keyTexts, order []string
	for _, k := range keys {
		tSel = append(tSel, "t."+ident.Quote(k))
	}
	for _, c := range cols {
		tSel = append(tSel, "t."+ident.Quote(c))
	}
	for i, k := range keys {
		q := ident.Quote(k)
		on = append(on, fmt.Sprintf("ARRAY[%s] = ARRAY[%s]", identity("t."+q, keyTypes[i]), identity("r."+q, keyTypes[i])))
		jSel = append(jSel, fmt.Sprintf("CASE WHEN t.trellis_present THEN t.%s ELSE r.%s END AS trellis_k%d", q, q, i+1))
		dKeys = append(dKeys, fmt.Sprintf("j.trellis_k%d", i+1))
		keyTexts = append(keyTexts, textOf(fmt.Sprintf("j.trellis_k%d", i+1), keyTypes[i]))
		order = append(order, fmt.Sprintf("trellis_k%d", i+1))
	}
	var tv, rv, diffCols, tObj, rObj []string
	for i, c := range cols {
		q := ident.Quote(c)
		jSel = append(jSel, fmt.Sprintf("t.%s AS trellis_t%d, r.%s AS trellis_r%d", q, i+1, q, i+1))
		tv = append(tv, identity("t."+q, colTypes[c]))
		rv = append(rv, identity("r."+q, colTypes[c]))
		diffCols = append(diffCols, fmt.Sprintf("(%s, %s IS DISTINCT FROM %s)", ident.Literal(c),
			identity(fmt.Sprintf("j.trellis_t%d", i+1), colTypes[c]), identity(fmt.Sprintf("j.trellis_r%d", i+1), colTypes[c])))
		tObj = append(tObj, ident.Literal(c)+", "+textOf(fmt.Sprintf("j.trellis_t%d", i+1), colTypes[c]))
		rObj = append(rObj, ident.Literal(c)+", "+textOf(fmt.Sprintf("j.trellis_r%d", i+1), colTypes[c]))
	}
	differs := "false"
	if len(cols) > 0 {
		differs = fmt.Sprintf("(%s) IS DISTINCT FROM (%s)", strings.Join(tv, ", "), strings.Join(rv, ", "))
	}
	jSel = append(jSel, "t.trellis_present AS trellis_in_t", "r.trellis_present AS trellis_in_r", differs+" AS trellis_differs")
	colsExpr, tJSON, rJSON := "'{}'::text[]", "'{}'::jsonb", "'{}'::jsonb"
	if len(cols) > 0 {
		colsExpr = fmt.Sprintf("ARRAY(SELECT v.n FROM (VALUES %s) AS v(n, x) WHERE v.x)", strings.Join(diffCols, ", "))
		tJSON = "jsonb_build_object(" + strings.Join(tObj, ", ") + ")"
		rJSON = "jsonb_build_object(" + strings.Join(rObj, ", ") + ")"
	}

	var unitArrs, setArrs []string
	for i := range unitNames {
		if p.FullUnits() {
			unitArrs = append(unitArrs, p.fullUnitArr(i, func(i int) string { return fmt.Sprintf("j.trellis_k%d", i+1) }))
			setArrs = append(setArrs, fmt.Sprintf("ARRAY[u%d]", i+1))
			continue
		}
		unitArrs = append(unitArrs, fmt.Sprintf("ARRAY[j.trellis_k%d]", i+1))
		setArrs = append(setArrs, fmt.Sprintf("ARRAY[u%d]", i+1))
	}
	inSet := func(set string) string {
		if nu == 0 {
			return fmt.Sprintf("EXISTS (SELECT FROM %s)", set)
		}
		return fmt.Sprintf("(%s) IN (SELECT %s FROM %s)", strings.Join(unitArrs, ", "), strings.Join(setArrs, ", "), set)
	}
	tWhere := ""
	if len(tConds) > 0 {
		tWhere = " WHERE " + strings.Join(tConds, " AND ")
	}

	var b strings.Builder
	fmt.Fprintf(&b, "WITH %s, %s, %s,\n", inflight, held, only)
	fmt.Fprintf(&b, "t AS (SELECT true AS trellis_present, %s FROM %s AS t%s),\n", strings.Join(tSel, ", "), p.Target.Quoted(), tWhere)
	fmt.Fprintf(&b, "r AS (SELECT true AS trellis_present, s.* FROM (%s) AS s),\n", recompute)
	if len(on) == 0 {
		on = []string{"true"} // a global aggregate: at most one row each side
	}
	keyArr, dPrefix := "ARRAY["+strings.Join(keyTexts, ", ")+"]", ""
	if len(keys) == 0 {
		keyArr, order = "'{}'::text[]", []string{"kind"}
	} else {
		dPrefix = strings.Join(dKeys, ", ") + ","
	}
	fmt.Fprintf(&b, "j AS (SELECT %s FROM t FULL JOIN r ON %s),\n", strings.Join(jSel, ", "), strings.Join(on, " AND "))
	fmt.Fprintf(&b, `d AS (SELECT %s
    CASE WHEN j.trellis_in_t IS NULL THEN 'missing' WHEN j.trellis_in_r IS NULL THEN 'extra' ELSE 'differing' END AS kind,
    %s AS held, ($%d OR %s) AS in_flight,
    %s AS key_text,
    CASE WHEN j.trellis_in_t AND j.trellis_in_r THEN %s END AS diff_cols,
    CASE WHEN j.trellis_in_t THEN %s END AS tgt,
    CASE WHEN j.trellis_in_r THEN %s END AS rec
  FROM j
  WHERE (j.trellis_in_t IS NULL OR j.trellis_in_r IS NULL OR j.trellis_differs)
    AND (NOT $%d OR %s))
`, dPrefix, inSet("trellis_held"), allInFlight, inSet("trellis_inflight"),
		keyArr, colsExpr, tJSON, rJSON, restrict, inSet("trellis_only"))
	fmt.Fprintf(&b, `SELECT 0 AS part, kind, held, in_flight, count(*) AS n, NULL::text[] AS key_text, NULL::text[] AS diff_cols, NULL::jsonb AS tgt, NULL::jsonb AS rec
  FROM d GROUP BY kind, held, in_flight
UNION ALL
(SELECT 1, kind, held, in_flight, NULL, key_text, diff_cols, tgt, rec FROM d WHERE NOT held ORDER BY %s LIMIT $%d)
UNION ALL
SELECT 2, 'total', false, false, (SELECT count(*) FROM j WHERE NOT %s), NULL, NULL, NULL, NULL`,
		strings.Join(order, ", "), limit, inSet("trellis_held"))
	return b.String()
}

// checkRecompute is the definition's query for a page, with only the key
// and the compared columns: a paused column, which may be paused because
// its expression fails, is not evaluated.
func (p *Plan) checkRecompute(cols []string, conds []string) string {
	var sel []string
	if p.Kind() == KindProjection {
		for i, k := range p.srcKey() {
			sel = append(sel, k+" AS "+ident.Quote(p.Spec.Source.KeyCols[i]))
		}
	} else {
		for _, k := range p.Spec.Key {
			sel = append(sel, "("+k.Expr+") AS "+ident.Quote(k.Name))
		}
	}
	for _, c := range p.Spec.Columns {
		if slices.Contains(cols, c.Name) {
			sel = append(sel, "("+c.Expr+") AS "+ident.Quote(c.Name))
		}
	}
	if p.Kind() == KindProjection {
		return fmt.Sprintf("SELECT %s FROM %s%s", strings.Join(sel, ", "), p.from(), p.where(conds...))
	}
	if w := p.Spec.Window; w != nil && w.Rank != "" {
		var outer []string
		for _, k := range p.Spec.Key {
			outer = append(outer, "trellis_w."+ident.Quote(k.Name))
		}
		for _, c := range cols {
			outer = append(outer, "trellis_w."+ident.Quote(c))
		}
		return p.ranked(strings.Join(outer, ", "), strings.Join(sel, ", "), p.where(conds...))
	}
	return fmt.Sprintf("SELECT %s FROM %s%s%s", strings.Join(sel, ", "), p.fromClause(), p.where(conds...), p.groupBy())
}

// CheckBound is the query that finds the upper end of the check page that
// follows the cursor (see BuildBound).
func (p *Plan) CheckBound(first bool, n int) string { return p.BuildBound(first, n) }
