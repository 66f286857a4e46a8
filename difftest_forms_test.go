package trellis_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// formsDefs is how many definitions of each of the forms of this file
// (groupedUnionDef, parenJoinDef, overSetDef) each differential case adds:
// 1, or TRELLIS_DIFF_FORMS (a longer run of these forms:
// TRELLIS_DIFF_FORMS=4 go test -run TestDifferential -long -long-for 5m).
func formsDefs() int {
	if n, err := strconv.Atoi(os.Getenv("TRELLIS_DIFF_FORMS")); err == nil && n >= 0 {
		return n
	}
	return 1
}

// groupedUnionDef draws, from the unionagg stream only (so every seed of
// regressions.txt still generates the case it found), a UNION ALL of
// aggregating branches (decision 0044, shapes.md): two or three branches
// over a, b, c and p (a twice sometimes), each over one table with a
// WHERE sometimes, all grouped by one or two outputs in the same
// positions (with HAVING sometimes), all aggregating without GROUP BY (a
// row per branch), or all DISTINCT; sometimes filtered in a derived table
// (each branch's HAVING). Keyed by branch and the GROUP BY outputs. Half
// the time a reader of its target follows, whose key (a group) may be
// NULL: an aggregate grouped by the group or the branch, or global
// (decision 0049). Each is accepted, so a refusal fails the case.
func (g *diffGen) groupedUnionDef(name string) []diffDef {
	r := g.unionagg
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	// x is an int, y a "C" text; k an int group key.
	type branch struct{ table, alias, x, y, k, where string }
	all := []branch{
		{"a", "a", pick("a.g", "coalesce(a.d, 0)"), pick("a.k", "upper(a.k)"), pick("a.g", "a.g % 2", "a.d"), pick("", "a.g > 1", "a.k <> 'bob'", "a.e <> 'sad'")},
		{"b", "b", pick("b.w", "b.aid"), pick("b.label COLLATE \"C\"", "lower(b.label) COLLATE \"C\""), pick("b.w", "b.aid % 4"), pick("", "b.w > 0", "b.label IS NOT NULL")},
		{"c", "c", pick("c.w", "c.id % 3"), "c.tag", pick("c.w", "c.w - 1"), pick("", "c.w < 3")},
		{"p", "p", pick("p.v", "p.part"), "p.s COLLATE \"C\"", pick("p.part", "p.v"), pick("", "p.v > 0")},
		{"a", "a2", "a2.g", pick("a2.k", "lower(a2.k)"), pick("a2.g", "a2.id % 5"), pick("", "a2.g IS NULL", "a2.n >= 2")},
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	bs := all[:2+r.IntN(2)]
	where := func(w string) string {
		if w == "" {
			return ""
		}
		return " WHERE " + w
	}
	aggs := [][2]string{{"n", "count(*)"}, {"total", "sum(%x)"}, {"hi", "max(%y)"}, {"lo", "min(%y)"}, {"nx", "count(%x)"}, {"dx", "count(DISTINCT %x)"}, {"av", "avg(%x)"}}
	r.Shuffle(len(aggs), func(i, j int) { aggs[i], aggs[j] = aggs[j], aggs[i] })
	aggs = aggs[:1+r.IntN(3)]
	form := pick("group", "group", "group2", "global", "distinct")
	having := r.IntN(3) == 0 && form != "distinct"
	filter := r.IntN(4) == 0 && form != "global"
	var stmt, rec []string
	var cols []string
	for i, b := range bs {
		var sel, recSel []string
		var groupBy string
		switch form {
		case "group", "group2":
			sel = append(sel, b.k+" AS gk")
			groupBy = " GROUP BY " + b.k
			if form == "group2" {
				sel = append(sel, b.y+" AS gy")
				groupBy += ", " + b.y
			}
		case "distinct":
			sel = append(sel, b.k+" AS gk", b.y+" AS gy")
		}
		if form != "distinct" {
			for _, a := range aggs {
				sel = append(sel, strings.NewReplacer("%x", b.x, "%y", b.y).Replace(a[1])+" AS "+a[0])
			}
		}
		recSel = append([]string{fmt.Sprintf("%d::smallint AS branch", i+1)}, sel...)
		h := ""
		if having {
			h = " HAVING " + pick("count(*) > 1", "count(*) >= 3", fmt.Sprintf("max(%s) IS NOT NULL", b.y), fmt.Sprintf("sum(%s) > 0", b.x))
		}
		recGroupBy := groupBy
		if form == "distinct" {
			recGroupBy = fmt.Sprintf(" GROUP BY %s, %s", b.k, b.y)
		}
		distinct := ""
		if form == "distinct" {
			distinct = "DISTINCT "
		}
		head := "SELECT "
		if i == 0 && !filter {
			head = fmt.Sprintf("TRANSFORM %s FROM %s %s SELECT ", name, g.q(b.table), b.alias)
			stmt = append(stmt, head+distinct+strings.Join(sel, ", ")+where(b.where)+groupBy+h)
		} else {
			stmt = append(stmt, fmt.Sprintf("SELECT %s%s FROM %s %s%s%s%s", distinct, strings.Join(sel, ", "), g.q(b.table), b.alias, where(b.where), groupBy, h))
		}
		rec = append(rec, fmt.Sprintf("SELECT %s FROM %s %s%s%s%s", strings.Join(recSel, ", "), g.q(b.table), b.alias, where(b.where), recGroupBy, h))
		if i == 0 {
			cols = []string{"branch"}
			for _, s := range sel {
				_, n, _ := strings.Cut(s, " AS ")
				cols = append(cols, n)
			}
		}
	}
	d := diffDef{name: name, kind: "unionagg", cols: cols}
	d.stmt = strings.Join(stmt, " UNION ALL ")
	d.recompute = strings.Join(rec, " UNION ALL ")
	if filter {
		// The UNION ALL in a derived table, filtered: each branch's HAVING.
		f := pick("gk > 0", "gk IS NOT NULL", "gy <> 'bob'")
		if form == "group" {
			f = pick("gk > 0", "gk IS NOT NULL", "n > 1")
			if cols[2] != "n" {
				f = pick("gk > 0", "gk IS NOT NULL")
			}
		}
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM (%s) u SELECT %s WHERE %s", name, d.stmt, strings.Join(cols[1:], ", "), f)
		d.recompute = fmt.Sprintf("SELECT %s FROM (%s) u WHERE %s", strings.Join(cols, ", "), d.recompute, f)
	}
	out := []diffDef{d}
	if r.IntN(2) == 0 {
		out = append(out, g.nullReaderDef(r, name+"_r", d, form == "global"))
	}
	return out
}

// nullReaderDef draws from r a reader of up's target whose key may be
// NULL (decision 0049): an aggregate grouped by up's second key column
// (a group, or a joined table's key, NULL sometimes), by its first, or
// global. Its recompute reads up's target, itself compared with its own
// recompute.
func (g *diffGen) nullReaderDef(r *rand.Rand, name string, up diffDef, keyOnly bool) diffDef {
	key := up.cols[1]
	if keyOnly || r.IntN(3) == 0 {
		key = up.cols[0]
	}
	last := up.cols[len(up.cols)-1]
	d := diffDef{name: name, kind: "chain"}
	if r.IntN(4) == 0 {
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s u SELECT count(*) AS cnt, count(u.%s) AS nk", name, up.name, key)
		d.cols = []string{"cnt", "nk"}
		d.recompute = fmt.Sprintf("SELECT count(*), count(u.%s) FROM %s u", key, up.name)
		return d
	}
	d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s u SELECT u.%s AS gk, count(*) AS cnt, count(u.%s) AS nl GROUP BY u.%s", name, up.name, key, last, key)
	d.cols = []string{"gk", "cnt", "nl"}
	d.recompute = fmt.Sprintf("SELECT u.%s, count(*), count(u.%s) FROM %s u GROUP BY u.%s", key, last, up.name, key)
	return d
}

// parenJoinDef draws, from the paren stream only, a parenthesized join
// of a, b and c of the forms that are accepted (decision 0045,
// shapes.md): (a [LEFT] JOIN b ON ..) [LEFT] JOIN c ON .., a JOIN (b
// [LEFT] JOIN c ON ..) ON .. and a LEFT JOIN (b LEFT JOIN c ON ..) ON ..,
// the outer ON comparing a with b (on b's non-key aid, or many to many
// on w); projected (keyed by every table's key, with a WHERE sometimes),
// grouped by a column of one table, or aggregated without GROUP BY. Its
// recompute is PostgreSQL's own parenthesized query. A projection that
// may leave b or c out is read, half the time, by an aggregate over its
// nullable key (decision 0049). Each is accepted, so a refusal fails the
// case.
func (g *diffGen) parenJoinDef(name string) []diffDef {
	r := g.paren
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	a, b, c := g.q("a"), g.q("b"), g.q("c")
	inner := pick("c.w = b.w", "b.w = c.w")
	outer := pick("b.aid = a.id", "a.id = b.aid", "b.w = a.g")
	var from string
	nullable := true
	switch r.IntN(3) {
	case 0:
		j1, j2 := pick("JOIN", "LEFT JOIN"), pick("JOIN", "LEFT JOIN")
		from = fmt.Sprintf("(%s a %s %s b ON %s) %s %s c ON %s", a, j1, b, outer, j2, c, inner)
		nullable = j1 != "JOIN" || j2 != "JOIN"
	case 1:
		j := pick("JOIN", "LEFT JOIN")
		from = fmt.Sprintf("%s a JOIN (%s b %s %s c ON %s) ON %s", a, b, j, c, inner, outer)
		nullable = j != "JOIN"
	default:
		from = fmt.Sprintf("%s a LEFT JOIN (%s b LEFT JOIN %s c ON %s) ON %s", a, b, c, inner, outer)
	}
	d := diffDef{name: name}
	switch pick("projection", "projection", "group", "global") {
	case "projection":
		items := [][2]string{{"ak", "a.k"}, {"ag", "a.g"}, {"bw", "b.w"}, {"bl", "b.label"}, {"ct", "c.tag"}, {"cw", "c.w"}}
		r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		items = items[:1+r.IntN(4)]
		sel, names, exprs := selectList(items)
		w := pick("", " WHERE a.g > 0", " WHERE b.w IS NOT NULL", " WHERE c.tag <> 'bob'")
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT a.id AS a_id0, b.id AS b_id0, c.id AS c_id0, %s%s", name, from, strings.Join(sel, ", "), w)
		d.cols = append([]string{"a_id0", "b_id0", "c_id0"}, names...)
		d.recompute = fmt.Sprintf("SELECT a.id, b.id, c.id, %s FROM %s%s", strings.Join(exprs, ", "), from, w)
		d.kind = "join3"
		if nullable {
			d.kind = "leftjoin"
		}
	case "group":
		key := pick("a.g", "a.k", "b.w", "b.label", "c.tag", "c.w")
		aggs := [][2]string{{"cnt", "count(*)"}, {"nb", "count(b.id)"}, {"nc", "count(c.id)"}, {"sw", "sum(b.w)"}, {"ts", "string_agg(c.tag, ',' ORDER BY c.tag, a.id, b.id, c.id)"}}
		r.Shuffle(len(aggs), func(i, j int) { aggs[i], aggs[j] = aggs[j], aggs[i] })
		aggs = aggs[:1+r.IntN(3)]
		sel, names, exprs := selectList(aggs)
		w := pick("", " WHERE a.g > 0", " WHERE c.tag IS NOT NULL")
		h := pick("", "", " HAVING count(*) > 1")
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s AS gk, %s%s GROUP BY %s%s", name, from, key, strings.Join(sel, ", "), w, key, h)
		d.cols = append([]string{"gk"}, names...)
		d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s%s GROUP BY %s%s", key, strings.Join(exprs, ", "), from, w, key, h)
		d.kind = "group"
	default:
		aggs := [][2]string{{"cnt", "count(*)"}, {"nb", "count(b.id)"}, {"nc", "count(c.id)"}, {"sw", "sum(b.w)"}, {"mt", "max(c.tag)"}}
		r.Shuffle(len(aggs), func(i, j int) { aggs[i], aggs[j] = aggs[j], aggs[i] })
		aggs = aggs[:1+r.IntN(3)]
		sel, names, exprs := selectList(aggs)
		w := pick("", " WHERE a.g > 1", " WHERE b.w > 0")
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s%s", name, from, strings.Join(sel, ", "), w)
		d.cols = names
		d.recompute = fmt.Sprintf("SELECT %s FROM %s%s", strings.Join(exprs, ", "), from, w)
		d.kind = "global"
	}
	out := []diffDef{d}
	if d.kind == "leftjoin" && r.IntN(2) == 0 {
		out = append(out, g.nullReaderDef(r, name+"_r", d, false))
	}
	return out
}

// overSetDef draws, from the overset stream only, a statement over a set
// operation other than a UNION ALL alone, in a CTE or a derived table
// (decisions 0044, 0050): a tree of UNION, INTERSECT and EXCEPT (SQL
// precedence) without ALL or, half the time, with ALL on every operator
// (counted), over two or three branches of a, b and c (a twice
// sometimes; a branch of a joined with b sometimes), under an aggregate
// grouped by an output (with WHERE and HAVING sometimes), a global
// aggregate, SELECT DISTINCT of an output or, without ALL, a filter of
// every column. Outputs are ints, whose equality is identity. Each is
// accepted, so a refusal fails the case.
func (g *diffGen) overSetDef(name string) diffDef {
	r := g.overset
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	type branch struct{ from, x, y, where string }
	all := []branch{
		{g.q("a") + " a", pick("a.g", "a.g % 3"), pick("a.g", "a.id % 3"), pick("", "a.k <> 'bob'", "a.e <> 'sad'")},
		{g.q("b") + " b", pick("b.w", "b.aid % 4"), pick("b.w", "b.aid % 3"), pick("", "b.w > 0")},
		{g.q("c") + " c", pick("c.w", "c.w - 1"), pick("c.w", "c.id % 3"), pick("", "c.w < 3")},
		{g.q("a") + " a2", "a2.g", pick("a2.id % 3", "a2.g"), pick("", "a2.n >= 2")},
	}
	if r.IntN(3) == 0 {
		// A joined branch, its outputs read from a.
		all[0] = branch{g.q("a") + " a " + pick("JOIN", "LEFT JOIN") + " " + g.q("b") + " j ON j.aid = a.id", all[0].x, all[0].y, pick("", "j.w > 0", "a.g IS NOT NULL")}
	}
	r.Shuffle(len(all), func(i, k int) { all[i], all[k] = all[k], all[i] })
	bs := all[:2+r.IntN(2)]
	counted := r.IntN(2) == 0
	ops := make([]string, len(bs))
	for i := 1; i < len(bs); i++ {
		ops[i] = pick("UNION", "INTERSECT", "EXCEPT")
	}
	if counted && ops[1] == "UNION" && (len(ops) < 3 || ops[2] == "UNION") {
		// with ALL, a tree of UNIONs alone is the branch-keyed UNION ALL
		ops[1] = pick("INTERSECT", "EXCEPT")
	}
	var q strings.Builder
	for i, b := range bs {
		if i > 0 {
			q.WriteString(" " + ops[i] + " ")
			if counted {
				q.WriteString("ALL ")
			}
		}
		sel := fmt.Sprintf("%s, %s", b.x, b.y)
		if i == 0 {
			sel = fmt.Sprintf("%s AS x, %s AS y", b.x, b.y)
		}
		fmt.Fprintf(&q, "SELECT %s FROM %s", sel, b.from)
		if b.where != "" {
			q.WriteString(" WHERE " + b.where)
		}
	}
	query := q.String()
	from := fmt.Sprintf("TRANSFORM %s FROM (%s) u ", name, query)
	if r.IntN(2) == 0 {
		from = fmt.Sprintf("TRANSFORM %s WITH u AS (%s) FROM u ", name, query)
	}
	where := pick("", " WHERE y > 0", " WHERE u.x IS NOT NULL")
	d := diffDef{name: name, kind: "over"}
	aggs := [][2]string{{"n", "count(*)"}, {"total", "sum(y)"}, {"lo", "min(y)"}, {"hi", "max(y)"}, {"ny", "count(y)"}, {"dy", "count(DISTINCT y)"}}
	r.Shuffle(len(aggs), func(i, k int) { aggs[i], aggs[k] = aggs[k], aggs[i] })
	aggs = aggs[:1+r.IntN(3)]
	sel, names, _ := selectList(aggs)
	forms := []string{"group", "group", "global", "distinct"}
	if !counted {
		forms = append(forms, "filter")
	}
	switch pick(forms...) {
	case "global":
		d.stmt = from + "SELECT " + strings.Join(sel, ", ") + where
		d.recompute = fmt.Sprintf("SELECT %s FROM (%s) u%s", strings.Join(sel, ", "), query, where)
		d.cols = names
	case "distinct":
		d.stmt = from + "SELECT DISTINCT x" + where
		d.recompute = fmt.Sprintf("SELECT DISTINCT x FROM (%s) u%s", query, where)
		d.cols = []string{"x"}
	case "filter":
		d.stmt = from + "SELECT x, y" + pick(" WHERE y > 0", " WHERE u.x IS NOT NULL", " WHERE x <> 1")
		d.recompute = fmt.Sprintf("SELECT x, y FROM (%s) u%s", query, strings.TrimPrefix(d.stmt, from+"SELECT x, y"))
		d.cols = []string{"x", "y"}
	default:
		having := pick("", " HAVING count(*) > 1")
		d.stmt = from + "SELECT x, " + strings.Join(sel, ", ") + where + " GROUP BY x" + having
		d.recompute = fmt.Sprintf("SELECT x, %s FROM (%s) u%s GROUP BY x%s", strings.Join(sel, ", "), query, where, having)
		d.cols = append([]string{"x"}, names...)
	}
	return d
}
