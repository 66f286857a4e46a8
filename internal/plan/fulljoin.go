package plan

import (
	"fmt"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
)

// A FULL JOIN of the first two tables (decision 0033) may leave out either
// side, so no one table's key is in every target row; the tables joined
// after it (INNER or LEFT) join rows holding the table their ON names. Its unit is the key of the
// first table a row holds: the FROM table's key when the row has a FROM
// row (the joined key part NULL), else the joined table's key (the FROM
// part NULL). Units so split the target's rows, as a LEFT JOIN's FROM keys
// do, and both parts lead the target's key.

// Full reports whether the definition is a FULL JOIN.
func (p *Plan) Full() bool { return p.Spec.Join != nil && p.Spec.Join.Full }

// fullUnit are the target's key columns that make a FULL JOIN's unit (the
// FROM table's, then the joined table's), their types and operators, and
// how many are the FROM table's.
func (p *Plan) fullUnit() (names, types []string, ops []*Op, nFrom int) {
	src, j := p.Spec.Source, p.Spec.Join.Source
	nFrom = len(src.KeyCols)
	for _, k := range p.Spec.Key[:nFrom+len(j.KeyCols)] {
		names = append(names, k.Name)
	}
	types = append(append([]string(nil), src.KeyTypes...), j.KeyTypes...)
	for i := range src.KeyCols {
		ops = append(ops, opAt(src.KeyOps, i))
	}
	for i := range j.KeyCols {
		ops = append(ops, opAt(j.KeyOps, i))
	}
	return names, types, ops, nFrom
}

// joinedKey is the joined table's key columns qualified by its alias.
func (p *Plan) joinedKey() []string {
	j := p.Spec.Join.Source
	out := make([]string, len(j.KeyCols))
	for i, k := range j.KeyCols {
		out[i] = ident.Quote(aliasOf(j)) + "." + ident.Quote(k)
	}
	return out
}

// fullParams are the names of a FULL JOIN's unit columns in the keys CTE.
func (p *Plan) fullParams() []string {
	_, types, _, nFrom := p.fullUnit()
	out := make([]string, len(types))
	for i := range out {
		if i < nFrom {
			out[i] = fmt.Sprintf("trellis_a%d", i+1)
		} else {
			out[i] = fmt.Sprintf("trellis_b%d", i-nFrom+1)
		}
	}
	return out
}

// fullKeysParts are the keys CTE of a FULL JOIN's keyed recompute and the
// definition's query for those units: the rows holding one of the FROM
// keys, and the rows without a FROM row holding one of the joined keys.
// Each part is a join PostgreSQL reduces to a LEFT JOIN from the table
// whose key it looks up.
func (p *Plan) fullKeysParts() (keys, query string) {
	_, types, ops, nFrom := p.fullUnit()
	params := p.fullParams()
	keys = "k AS (" + unnestParams(1, params, types) + ")"
	first := ident.Quote(params[0])
	fromUnits := inQuery(p.srcKey(), "SELECT "+ident.List(params[:nFrom])+" FROM k WHERE "+first+" IS NOT NULL", ops[:nFrom])
	joinedUnits := p.srcKey()[0] + " IS NULL AND " +
		inQuery(p.joinedKey(), "SELECT "+ident.List(params[nFrom:])+" FROM k WHERE "+first+" IS NULL", ops[nFrom:])
	return keys, p.shapeQuery(fromUnits) + " UNION ALL " + p.shapeQuery(joinedUnits)
}

// recomputeFullKeys re-derives the target rows of a set of FULL JOIN
// units: one text[] parameter per unit column. One statement, as every
// join's (shapeRecompute): the target's rows of the units are those of
// the FROM keys, and those without a FROM row of the joined keys.
func (p *Plan) recomputeFullKeys() []string {
	names, types, ops, nFrom := p.fullUnit()
	params := p.fullParams()
	keys, query := p.fullKeysParts()
	part := func(from, to int, fromSide bool) string {
		filter := unitFilter(params, fromSide)
		if to-from == 1 && !isArrayType(types[from]) {
			// An array the planner cannot size keeps it on the target's
			// key index (as a join's keyed recompute does).
			o := ops[from]
			return anyOf("t."+ident.Quote(names[from]), "ARRAY(SELECT "+o.side("k."+ident.Quote(params[from]))+" FROM k WHERE "+filter+")", o)
		}
		var tk, kk []string
		for i := from; i < to; i++ {
			tk = append(tk, "t."+ident.Quote(names[i]))
			kk = append(kk, "k."+ident.Quote(params[i]))
		}
		return inQuery(tk, "SELECT "+strings.Join(kk, ", ")+" FROM k WHERE "+filter, ops[from:to])
	}
	unit := "(" + part(0, nFrom, true) + " OR (t." + ident.Quote(names[0]) + " IS NULL AND " + part(nFrom, len(names), false) + "))"
	return []string{p.shapeRecompute(keys, query, unit, false)}
}

// unitFilter selects, in the keys CTE k (of columns params, see
// fullParams), the units of FROM keys (fromSide) or those of joined keys.
func unitFilter(params []string, fromSide bool) string {
	c := "k." + ident.Quote(params[0])
	if fromSide {
		return c + " IS NOT NULL"
	}
	return c + " IS NULL"
}

// fullAffected finds the units of a FULL JOIN that changes of the table
// at pos touch. For the FROM table (0) or the joined one (1), the changed
// rows' own keys (the rows holding them, or holding one without the other
// side); and for each of the two, the keys its rows have that are joined,
// as the tables are now, to the changed rows' old or current images along
// the join tree: those rows gain or lose a partner (their row without one
// comes or goes), or hold the changed row. A later table's rows only join
// rows holding the table it is joined to, so the walk from it finds every
// unit it is in.
func (p *Plan) fullAffected(c Changes, pos, buckets int) string {
	_, types, _, nFrom := p.fullUnit()
	nulls := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, "NULL::"+types[i])
		}
		return out
	}
	padded := func(slot int, key []string) string {
		if slot == 0 {
			return strings.Join(append(key, nulls(nFrom, len(types))...), ", ")
		}
		return strings.Join(append(nulls(0, nFrom), key...), ", ")
	}
	var parts []string
	for slot, key := range [][]string{p.srcKey(), p.joinedKey()} {
		if slot == pos {
			var own []string
			for i, t := range c.Source.KeyTypes {
				own = append(own, fromKeyParam(fmt.Sprintf("k%d", i+1), t))
			}
			parts = append(parts, "SELECT "+padded(slot, own)+" FROM chg")
			continue
		}
		path := p.treePath(pos, slot)
		var b strings.Builder
		fmt.Fprintf(&b, "SELECT %s FROM %s", padded(slot, key), p.images(c, pos))
		for i := 1; i < len(path); i++ {
			fmt.Fprintf(&b, " JOIN %s ON %s", p.tableAs(path[i]), p.edgeOn(path[i-1], path[i]))
		}
		parts = append(parts, b.String())
	}
	cols := make([]string, len(types))
	for i := range cols {
		cols[i] = fmt.Sprintf("g%d", i+1)
	}
	return fmt.Sprintf("WITH %s SELECT DISTINCT %s FROM (%s) AS grp(%s)", c.cte(), textWithBucket(cols, types, buckets), strings.Join(parts, " UNION "), strings.Join(cols, ", "))
}

// fullShapeKeys lists, as text, every unit a FULL JOIN's target can have
// from its tables' current rows.
func (p *Plan) fullShapeKeys() string {
	var cols []string
	src := p.srcKey()
	_, types, _, nFrom := p.fullUnit()
	for i, k := range src {
		cols = append(cols, textOf(k, types[i]))
	}
	for i, k := range p.joinedKey() {
		cols = append(cols, "CASE WHEN "+src[0]+" IS NULL THEN "+textOf(k, types[nFrom+i])+" END")
	}
	return fmt.Sprintf("SELECT DISTINCT %s FROM %s", strings.Join(cols, ", "), p.fromClause())
}

// fullUnitArr is the unit column i of a self-check's row, whose key
// columns are ref(0), ref(1), ...: a joined key part is the unit's only
// when the row has no FROM row.
func (p *Plan) fullUnitArr(i int, ref func(int) string) string {
	_, _, _, nFrom := p.fullUnit()
	if i < nFrom {
		return "ARRAY[" + ref(i) + "]"
	}
	return "ARRAY[CASE WHEN " + ref(0) + " IS NULL THEN " + ref(i) + " END]"
}
