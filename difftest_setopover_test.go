package trellis_test

import (
	"fmt"
	"strings"
)

// overDef draws, from the over stream only (so every seed of
// regressions.txt still generates the case it found), a statement over a
// UNION ALL written in a CTE or a derived table (decision 0044): an
// aggregate grouped by an output (with WHERE and HAVING sometimes), a
// global aggregate, SELECT DISTINCT of an output, or a filter and
// projection of it (the set operation over each branch). Branches read a,
// b and c (a twice sometimes); some join a second table, grouped by
// either side. Outputs are ints, whose equality is identity. Each form is
// accepted, so a refusal fails the case.
func (g *diffGen) overDef(name string) diffDef {
	r := g.over
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	type branch struct{ from, x, y, where string }
	all := []branch{
		{g.q("a") + " a", pick("a.g", "a.g % 3"), pick("a.g", "a.id % 5"), pick("", "a.k <> 'bob'", "a.e <> 'sad'")},
		{g.q("b") + " b", pick("b.w", "b.aid % 4"), pick("b.w", "b.aid"), pick("", "b.w > 0")},
		{g.q("c") + " c", pick("c.w", "c.w - 1"), pick("c.w", "c.id % 3"), pick("", "c.w < 3")},
		{g.q("a") + " a2", "a2.g", pick("a2.id % 7", "a2.g"), pick("", "a2.n >= 2")},
	}
	filter := r.IntN(4) == 0
	if !filter && r.IntN(2) == 0 {
		// A joined branch, grouped by either of its tables.
		j := all[0]
		if r.IntN(2) == 0 {
			j = branch{g.q("a") + " a " + pick("JOIN", "LEFT JOIN") + " " + g.q("b") + " j ON j.aid = a.id", "a.g", "j.w", j.where}
		} else {
			j = branch{g.q("a") + " a " + pick("JOIN", "LEFT JOIN") + " " + g.q("b") + " j ON j.aid = a.id", "j.w", "a.g", j.where}
		}
		all[0] = j
	}
	r.Shuffle(len(all), func(i, k int) { all[i], all[k] = all[k], all[i] })
	bs := all[:2+r.IntN(2)]
	// branchSQL is branch i as a query of its own, named as branch 1
	// names its outputs (with the table's id first when filtered).
	branchSQL := func(b branch, named bool) string {
		sel := fmt.Sprintf("%s, %s", b.x, b.y)
		if named {
			sel = fmt.Sprintf("%s AS x, %s AS y", b.x, b.y)
		}
		if filter {
			id := strings.Fields(b.from)[1] + ".id"
			if named {
				id += " AS id"
			}
			sel = id + ", " + sel
		}
		q := "SELECT " + sel + " FROM " + b.from
		if b.where != "" {
			q += " WHERE " + b.where
		}
		return q
	}
	var union []string
	for i, b := range bs {
		union = append(union, branchSQL(b, i == 0))
	}
	query := strings.Join(union, " UNION ALL ")
	var d diffDef
	d.name = name
	d.kind = "over"
	from := func(q string) string {
		if r.IntN(2) == 0 {
			return fmt.Sprintf("TRANSFORM %s WITH u AS (%s) FROM u ", name, q)
		}
		return fmt.Sprintf("TRANSFORM %s FROM (%s) u ", name, q)
	}
	where := pick("", " WHERE y > 0", " WHERE u.x IS NOT NULL")
	if filter {
		// The statement over each branch: keyed by the branch and id.
		d.stmt = from(query) + "SELECT id, x + y AS s, y" + where
		var rec []string
		for i, b := range bs {
			rec = append(rec, fmt.Sprintf("SELECT %d::smallint AS branch, id, x + y AS s, y FROM (%s) u%s", i+1, branchSQL(b, true), where))
		}
		d.recompute = strings.Join(rec, " UNION ALL ")
		d.cols = []string{"branch", "id", "s", "y"}
		return d
	}
	aggs := [][2]string{{"n", "count(*)"}, {"total", "sum(y)"}, {"lo", "min(y)"}, {"hi", "max(y)"}, {"ny", "count(y)"}, {"dy", "count(DISTINCT y)"}, {"av", "avg(y)"}}
	r.Shuffle(len(aggs), func(i, k int) { aggs[i], aggs[k] = aggs[k], aggs[i] })
	aggs = aggs[:1+r.IntN(3)]
	sel, names, _ := selectList(aggs)
	switch r.IntN(4) {
	case 0:
		// Global: one row, on an empty source too.
		d.stmt = from(query) + "SELECT " + strings.Join(sel, ", ") + where
		d.recompute = fmt.Sprintf("SELECT %s FROM (%s) u%s", strings.Join(sel, ", "), query, where)
		d.cols = names
	case 1:
		d.stmt = from(query) + "SELECT DISTINCT x" + where
		d.recompute = fmt.Sprintf("SELECT DISTINCT x FROM (%s) u%s", query, where)
		d.cols = []string{"x"}
	default:
		having := pick("", " HAVING count(*) > 1")
		d.stmt = from(query) + "SELECT x, " + strings.Join(sel, ", ") + where + " GROUP BY x" + having
		d.recompute = fmt.Sprintf("SELECT x, %s FROM (%s) u%s GROUP BY x%s", strings.Join(sel, ", "), query, where, having)
		d.cols = append([]string{"x"}, names...)
	}
	return d
}
