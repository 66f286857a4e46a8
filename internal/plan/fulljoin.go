package plan

import (
	"fmt"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
)

// A join with a FULL JOIN, or a RIGHT JOIN after the second table
// (decisions 0033, 0039), may leave out any table before it, so no one
// table's key is in every target row. The tables a row holds are a
// subtree of the join tree whose first table (in FROM order) is the FROM
// table or one joined with RIGHT or FULL JOIN; the row's unit is that
// table's key, the other tables' parts NULL. Units so split the target's
// rows, as a LEFT JOIN's FROM keys do, and each is read off the target's
// key (see fullUnitArr).

// Full reports whether the definition has a FULL JOIN, or a RIGHT JOIN
// after the second table: its unit is the key of the first table a row
// holds.
func (p *Plan) Full() bool {
	for _, j := range p.Spec.JoinList() {
		if j.Full || j.Right {
			return true
		}
	}
	return false
}

// FullUnits reports whether the definition's units are the keys of the
// first table a row holds: a join (not an aggregate over it, whose unit is
// its group) with a FULL JOIN or a RIGHT JOIN after the second table.
func (p *Plan) FullUnits() bool { return p.Kind() == KindJoin && p.Full() }

// fullPart is one table that can be the first a row holds: the FROM
// table, or a table joined with RIGHT or FULL JOIN.
type fullPart struct {
	pos int // its position among the definition's tables
	at  int // the index of its first column among the unit's
	key int // the index of its first column among the target's key
	n   int // how many key columns it has
}

// fullParts are the tables that can be the first a row holds, in FROM
// order: their keys make a unit's columns.
func (p *Plan) fullParts() []fullPart {
	var out []fullPart
	at, key := 0, 0
	for pos, src := range p.Spec.Sources()[:len(p.Spec.JoinList())+1] {
		n := len(src.KeyCols)
		if pos == 0 || p.Spec.JoinList()[pos-1].Full || p.Spec.JoinList()[pos-1].Right {
			out = append(out, fullPart{pos: pos, at: at, key: key, n: n})
			at += n
		}
		key += n
	}
	return out
}

// fullUnit are the target's key columns that make a unit (each first
// table's key, in FROM order), their types and operators, and the parts
// they belong to.
func (p *Plan) fullUnit() (names, types []string, ops []*Op, parts []fullPart) {
	parts = p.fullParts()
	for _, pt := range parts {
		src := p.sourceAt(pt.pos)
		for i := 0; i < pt.n; i++ {
			names = append(names, p.Spec.Key[pt.key+i].Name)
			types = append(types, src.KeyTypes[i])
			ops = append(ops, opAt(src.KeyOps, i))
		}
	}
	return names, types, ops, parts
}

// tableKey is the key columns of the table at pos qualified by its alias.
func (p *Plan) tableKey(pos int) []string {
	src := p.sourceAt(pos)
	out := make([]string, len(src.KeyCols))
	for i, k := range src.KeyCols {
		out[i] = ident.Quote(aliasOf(src)) + "." + ident.Quote(k)
	}
	return out
}

// fullParams are the names of a unit's columns in the keys CTE: one
// letter per part (trellis_a1 the FROM table's first key column).
func (p *Plan) fullParams() []string {
	var out []string
	for pi, pt := range p.fullParts() {
		for i := 0; i < pt.n; i++ {
			if pi < 26 {
				out = append(out, fmt.Sprintf("trellis_%c%d", 'a'+pi, i+1))
			} else {
				out = append(out, fmt.Sprintf("trellis_p%d_%d", pi+1, i+1))
			}
		}
	}
	return out
}

// partNulls are the conditions that no part before part pi is held: the
// first key column of each (col gives its expression from its index among
// the unit's columns, or the target's key's, as the caller reads them).
func partNulls(parts []fullPart, pi int, col func(pt fullPart) string) []string {
	var out []string
	for _, q := range parts[:pi] {
		out = append(out, col(q)+" IS NULL")
	}
	return out
}

// partFilter selects, in the keys CTE (of columns params, see fullParams,
// each prefixed), the units of part pi: no earlier part's key and, unless
// it is the last part, its own.
func partFilter(parts []fullPart, params []string, pi int, prefix string) string {
	col := func(pt fullPart) string { return prefix + ident.Quote(params[pt.at]) }
	conds := partNulls(parts, pi, col)
	if pi < len(parts)-1 {
		conds = append(conds, col(parts[pi])+" IS NOT NULL")
	}
	return strings.Join(conds, " AND ")
}

// fullKeysParts are the keys CTE of the keyed recompute and the
// definition's query for those units: for each part, the rows holding
// none of the parts before it and one of its keys. Each is a join
// PostgreSQL reduces (its condition is strict on the part's table) to
// outer joins from the table whose key it looks up.
func (p *Plan) fullKeysParts() (keys, query string) {
	_, types, ops, parts := p.fullUnit()
	params := p.fullParams()
	keys = "k AS (" + unnestParams(1, params, types) + ")"
	var queries []string
	for pi, pt := range parts {
		var conds []string
		if pi > 0 {
			// A row holding the part's table holds none before it exactly
			// when its RIGHT or FULL JOIN found no match: the ON column of
			// the table it joins is NULL. Said so (not with the earlier
			// parts' keys), PostgreSQL plans an anti-join that stops at the
			// first match instead of joining every row that matches.
			e := p.edge(pt.pos)
			conds = append(conds, ident.Quote(aliasOf(p.sourceAt(e.To)))+"."+ident.Quote(e.On[0].From)+" IS NULL")
		}
		conds = append(conds, inQuery(p.tableKey(pt.pos), "SELECT "+ident.List(params[pt.at:pt.at+pt.n])+" FROM k WHERE "+partFilter(parts, params, pi, ""), ops[pt.at:pt.at+pt.n]))
		queries = append(queries, p.shapeQuery(strings.Join(conds, " AND ")))
	}
	return keys, strings.Join(queries, " UNION ALL ")
}

// recomputeFullKeys re-derives the target rows of a set of units: one
// text[] parameter per unit column. One statement, as every join's
// (shapeRecompute): the target's rows of the units are, for each part,
// those holding none of the parts before it and one of its keys.
func (p *Plan) recomputeFullKeys() []string {
	names, types, ops, parts := p.fullUnit()
	params := p.fullParams()
	keys, query := p.fullKeysParts()
	part := func(pi int) string {
		pt := parts[pi]
		filter := partFilter(parts, params, pi, "k.")
		if pt.n == 1 && !isArrayType(types[pt.at]) {
			// An array the planner cannot size keeps it on the target's
			// key index (as a join's keyed recompute does).
			o := ops[pt.at]
			return anyOf("t."+ident.Quote(names[pt.at]), "ARRAY(SELECT "+o.side("k."+ident.Quote(params[pt.at]))+" FROM k WHERE "+filter+")", o)
		}
		var tk, kk []string
		for i := pt.at; i < pt.at+pt.n; i++ {
			tk = append(tk, "t."+ident.Quote(names[i]))
			kk = append(kk, "k."+ident.Quote(params[i]))
		}
		return inQuery(tk, "SELECT "+strings.Join(kk, ", ")+" FROM k WHERE "+filter, ops[pt.at:pt.at+pt.n])
	}
	alts := []string{part(0)}
	for pi := 1; pi < len(parts); pi++ {
		conds := partNulls(parts, pi, func(q fullPart) string { return "t." + ident.Quote(names[q.at]) })
		alts = append(alts, "("+strings.Join(append(conds, part(pi)), " AND ")+")")
	}
	unit := "(" + strings.Join(alts, " OR ") + ")"
	return []string{p.shapeRecompute(keys, query, unit, false)}
}

// fullAffected finds the units that changes of the table at pos touch.
// For a part's own table, the changed rows' own keys (the rows holding
// them first); and for each other part, the keys its rows have that are
// joined, as the tables are now, to the changed rows' old or current
// images along the join tree. The tables a row holds are a subtree, so
// the walk from a changed row it holds reaches its first table; and a
// row that comes or goes as a match of one of its tables comes or goes
// (a row without a partner) holds the table the changed row matches, or
// matched, from which the walk goes on to its first table. Decision 0039
// gives the argument.
func (p *Plan) fullAffected(c Changes, pos, buckets int) string {
	_, types, _, parts := p.fullUnit()
	padded := func(pi int, key []string) string {
		var out []string
		for qi, q := range parts {
			for i := 0; i < q.n; i++ {
				if qi == pi {
					out = append(out, key[i])
				} else {
					out = append(out, "NULL::"+types[q.at+i])
				}
			}
		}
		return strings.Join(out, ", ")
	}
	var sel []string
	for pi, pt := range parts {
		if pt.pos == pos {
			var own []string
			for i, t := range c.Source.KeyTypes {
				own = append(own, fromKeyParam(fmt.Sprintf("k%d", i+1), t))
			}
			sel = append(sel, "SELECT "+padded(pi, own)+" FROM chg")
			continue
		}
		path := p.treePath(pos, pt.pos)
		var b strings.Builder
		fmt.Fprintf(&b, "SELECT %s FROM %s", padded(pi, p.tableKey(pt.pos)), p.images(c, pos))
		for i := 1; i < len(path); i++ {
			fmt.Fprintf(&b, " JOIN %s ON %s", p.tableAs(path[i]), p.edgeOn(path[i-1], path[i]))
		}
		sel = append(sel, b.String())
	}
	cols := make([]string, len(types))
	for i := range cols {
		cols[i] = fmt.Sprintf("g%d", i+1)
	}
	return fmt.Sprintf("WITH %s SELECT DISTINCT %s FROM (%s) AS grp(%s)", c.cte(), textWithBucket(cols, types, buckets), strings.Join(sel, " UNION "), strings.Join(cols, ", "))
}

// fullShapeKeys lists, as text, every unit the target can have from its
// tables' current rows.
func (p *Plan) fullShapeKeys() string {
	var cols []string
	parts := p.fullParts()
	_, types, _, _ := p.fullUnit()
	for pi, pt := range parts {
		nulls := partNulls(parts, pi, func(q fullPart) string { return p.tableKey(q.pos)[0] })
		for i, k := range p.tableKey(pt.pos) {
			if pi == 0 {
				cols = append(cols, textOf(k, types[pt.at+i]))
				continue
			}
			cols = append(cols, "CASE WHEN "+strings.Join(nulls, " AND ")+" THEN "+textOf(k, types[pt.at+i])+" END")
		}
	}
	return fmt.Sprintf("SELECT DISTINCT %s FROM %s", strings.Join(cols, ", "), p.fromClause())
}

// fullUnitArr is the unit column i of a self-check's row, whose key
// columns are ref(0), ref(1), ...: a part's key is the unit's only when
// the row holds no part before it.
func (p *Plan) fullUnitArr(i int, ref func(int) string) string {
	parts := p.fullParts()
	for pi, pt := range parts {
		if i >= pt.at+pt.n {
			continue
		}
		col := ref(pt.key + i - pt.at)
		if pi == 0 {
			return "ARRAY[" + col + "]"
		}
		nulls := partNulls(parts, pi, func(q fullPart) string { return ref(q.key) })
		return "ARRAY[CASE WHEN " + strings.Join(nulls, " AND ") + " THEN " + col + " END]"
	}
	panic("plan: unit column out of range")
}

// UnitOf is the unit a target key belongs to (the leading columns of the
// key, but for a FULL JOIN's: the key of the first table the row holds,
// see fullUnitArr), for the self-check to restrict a page to rows' units.
func (p *Plan) UnitOf(key []*string) []*string {
	if !p.FullUnits() {
		names, _ := p.CheckUnit()
		return key[:len(names)]
	}
	parts := p.fullParts()
	var out []*string
	held := false
	for _, pt := range parts {
		mine := !held && key[pt.key] != nil
		for i := 0; i < pt.n; i++ {
			if mine {
				out = append(out, key[pt.key+i])
			} else {
				out = append(out, nil)
			}
		}
		held = held || key[pt.key] != nil
	}
	return out
}
