package trellis_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
)

// everydayDefs is how many definitions of the everyday forms each
// differential case adds (everydayDef), beside the ones the main stream
// draws: 2, or TRELLIS_DIFF_EVERYDAY (a longer run of these forms:
// TRELLIS_DIFF_EVERYDAY=8 go test -run TestDifferential -long -long-for 5m).
func everydayDefs() int {
	if n, err := strconv.Atoi(os.Getenv("TRELLIS_DIFF_EVERYDAY")); err == nil && n >= 0 {
		return n
	}
	return 2
}

// everydayDef draws, from the everyday stream only (so every seed of
// regressions.txt still generates the case it found), a definition of the
// everyday forms of issue 11 that resolve to the shapes of the main
// stream, or have recompute paths of their own: HAVING, SELECT DISTINCT
// (over a, a view, a derived table, the partitioned table, and one side of
// a join), aggregates without GROUP BY (an empty source keeps one row:
// count 0, sum NULL; over semi-joins, views, derived tables and joins of
// every kind), comma joins of two and three tables (a JOIN after the
// comma too), and JOIN ... USING. Each is an accepted form, so
// a refusal fails the case. Outputs are of types whose equality is
// identity wherever they are grouped or made distinct.
func (g *diffGen) everydayDef(name string) diffDef {
	r := g.everyday
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	where := func(w string) string {
		if w == "" {
			return ""
		}
		return " WHERE " + w
	}
	and := func(a, b string) string {
		switch {
		case a == "":
			return b
		case b == "":
			return a
		}
		return a + " AND " + b
	}
	a, b, c := g.q("a"), g.q("b"), g.q("c")
	d := diffDef{name: name, kind: "everyday"}
	switch pick("having", "distinct", "global", "comma", "using") {
	case "having":
		// HAVING over a, over a join or over a comma join, grouped by a
		// column of either table; the HAVING reads aggregates selected or
		// not.
		from, w, key := a+" a", g.wherePredFrom(r, "a"), groupKeyFrom(r, "a")
		aggs := aggregatesFrom(r, "a")
		having := pick("count(*) > 1", "count(*) >= 3", "sum(a.g) > 2", "min(a.k) <> 'bob'", "count(DISTINCT a.g) >= 2",
			"bool_or(a.f > 0)", "max(a.ts) > '2024-01-01 00:00:00+00'", "avg(a.n) < 5", "count(a.d) = 0")
		useCTE := false
		switch r.IntN(6) {
		case 3:
			// a semi-join, or a CTE or view read
			switch r.IntN(3) {
			case 0:
				w = and(w, pick("a.g IN (SELECT c.w FROM "+c+" c WHERE c.tag IS NOT NULL)", "EXISTS (SELECT 1 FROM "+b+" b WHERE b.aid = a.id)"))
			case 1:
				from = g.q("av") + " a"
			default:
				useCTE = true // written as a CTE below
			}
		case 4:
			// the partitioned table
			from, w, key = g.q("p")+" a", pick("", "a.v > 0"), pick("a.part", "a.s", "a.v")
			aggs = [][2]string{{"cnt", "count(*)"}, {"sv", "sum(a.v)"}, {"ms", "max(a.s)"}}[:1+r.IntN(3)]
			having = pick("count(*) > 1", "sum(a.v) > 2", "min(a.s) <> 'bob'")
		case 5:
			// a LEFT JOIN ... USING, grouped by the USING column
			from, w, key = fmt.Sprintf("%s b LEFT JOIN %s c USING (w)", b, c), pick("", "b.label IS NOT NULL"), pick("w", "b.label")
			aggs = [][2]string{{"cnt", "count(*)"}, {"nc", "count(c.id)"}, {"tags", "string_agg(c.tag, ',' ORDER BY c.tag, c.id, b.id)"}}[:1+r.IntN(3)]
			having = pick("count(*) > 1", "count(c.id) >= 2", "max(c.tag) IS NOT NULL")
		case 1:
			from = fmt.Sprintf("%s a %s %s b ON %s", a, pick("JOIN", "LEFT JOIN"), b, pick("a.id = b.aid", "b.aid = a.id"))
			key = pick("a.g", "a.k", "a.e", "b.w", "b.label")
			aggs = [][2]string{{"cnt", "count(*)"}, {"nb", "count(b.id)"}, {"sw", "sum(b.w)"}}[:1+r.IntN(3)]
			having = pick("count(*) > 1", "count(b.id) >= 2", "sum(b.w) > 0", "max(b.label) IS NOT NULL", "min(a.g) < 2")
			w = pick("", "b.w <> 0", "a.g IS NOT NULL")
		case 2:
			// a comma join: the equality in WHERE is its ON
			from = fmt.Sprintf("%s a, %s b", a, b)
			key = pick("a.g", "a.k", "b.w", "b.label")
			aggs = [][2]string{{"cnt", "count(*)"}, {"sw", "sum(b.w)"}, {"mk", "max(a.k)"}}[:1+r.IntN(3)]
			having = pick("count(*) > 1", "sum(b.w) >= 2", "max(a.k) > 'a'")
			w = and(pick("a.id = b.aid", "b.aid = a.id"), pick("", "b.w > 0", "a.e <> 'sad'"))
		}
		sel, names, exprs := selectList(aggs)
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s AS gk, %s%s GROUP BY %s HAVING %s", name, from, key, strings.Join(sel, ", "), where(w), key, having)
		if useCTE {
			// the same query over a CTE of a's rows that pass WHERE
			d.stmt = fmt.Sprintf("TRANSFORM %s WITH x AS (SELECT * FROM %s a%s) FROM x a SELECT %s AS gk, %s GROUP BY %s HAVING %s", name, a, where(w), key, strings.Join(sel, ", "), key, having)
		}
		d.cols = append([]string{"gk"}, names...)
		d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s%s GROUP BY %s HAVING %s", key, strings.Join(exprs, ", "), from, where(w), key, having)
	case "distinct":
		// SELECT DISTINCT of one to three outputs of one table: a alone,
		// or one side of a join (inner, left, comma or USING), sometimes
		// with a constant output, which is no part of the key.
		var from, w string
		var outs []string
		switch r.IntN(7) {
		case 4:
			// one side of a join of three tables, or the preserved side of
			// a RIGHT JOIN
			if r.IntN(2) == 0 {
				from = fmt.Sprintf("%s a JOIN %s b ON a.id = b.aid %s %s c ON c.w = b.w", a, b, pick("JOIN", "LEFT JOIN"), c)
				outs = []string{"c.tag", "c.w"}[:1+r.IntN(2)]
			} else {
				from = fmt.Sprintf("%s b RIGHT JOIN %s a ON a.id = b.aid", b, a)
				outs = []string{"a.g", "a.e"}[:1+r.IntN(2)]
			}
			w = pick("", "a.g > 0")
		case 5:
			// a view, a derived table or the partitioned table
			switch r.IntN(3) {
			case 0:
				from, w, outs = g.q("av")+" a", g.wherePredFrom(r, "a"), []string{"a.g", "a.e"}[:1+r.IntN(2)]
			case 1:
				from, outs = fmt.Sprintf("(SELECT * FROM %s WHERE g IS NOT NULL) a", a), []string{"a.k", "a.d"}[:1+r.IntN(2)]
			default:
				from, w, outs = g.q("p")+" p", pick("", "p.v > 0"), []string{"p.part", "p.s"}[:1+r.IntN(2)]
			}
		case 6:
			// a comma join selecting one side
			from, w = fmt.Sprintf("%s b, %s c", b, c), pick("b.w = c.w", "c.w = b.w")
			outs = []string{"b.label", "b.aid % 3"}[:1+r.IntN(2)]
		case 0, 1:
			from, w = a+" a", g.wherePredFrom(r, "a")
			all := []string{"a.g", "a.k", "a.e", "a.d", "a.g % 2", "a.arr", "a.j ->> 'x'", "a.ts", "a.k || '!'", "lower(a.k)"}
			r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			outs = all[:1+r.IntN(3)]
		case 2:
			join := pick("JOIN", "LEFT JOIN")
			from = fmt.Sprintf("%s a %s %s b ON a.id = b.aid", a, join, b)
			if join == "JOIN" && r.IntN(2) == 0 {
				from = fmt.Sprintf("%s a, %s b", a, b)
				w = "b.aid = a.id"
			}
			if r.IntN(2) == 0 {
				outs = []string{"b.w", "b.label"}[:1+r.IntN(2)]
			} else {
				outs = []string{"a.g", "a.e", "a.k"}[:1+r.IntN(3)]
			}
			w = and(w, pick("", "a.g > 0", "b.w IS NOT NULL"))
		default:
			from = fmt.Sprintf("%s b %s %s c USING (w)", b, pick("JOIN", "LEFT JOIN", "RIGHT JOIN"), c)
			if r.IntN(2) == 0 {
				outs = []string{"w", "b.label"}[:1+r.IntN(2)]
			} else {
				outs = []string{"c.tag", "c.w % 2"}[:1+r.IntN(2)]
			}
			w = pick("", "w > 0", "c.tag <> 'bob'")
			if strings.Contains(from, "RIGHT") {
				// the unqualified w is c's under a RIGHT JOIN
				outs = []string{"c.tag", "w"}[:1+r.IntN(2)]
			}
		}
		var sel, rec []string
		for i, o := range outs {
			n := fmt.Sprintf("x%d", i)
			sel, rec = append(sel, o+" AS "+n), append(rec, o)
			d.cols = append(d.cols, n)
		}
		if r.IntN(4) == 0 {
			sel, rec = append(sel, "1 AS one"), append(rec, "1")
			d.cols = append(d.cols, "one")
		}
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT DISTINCT %s%s", name, from, strings.Join(sel, ", "), where(w))
		d.recompute = fmt.Sprintf("SELECT DISTINCT %s FROM %s%s", strings.Join(rec, ", "), from, where(w))
	case "global":
		// Aggregates without GROUP BY: over a (a filter may leave no row,
		// as TRUNCATE does), a join, a comma join or the partitioned
		// table; with HAVING, no row while it fails.
		from, w := a+" a", pick("", "a.g > 1", "a.g > 10", "a.k <> 'bob'", "a.e = 'happy'")
		var aggs [][2]string
		switch r.IntN(7) {
		case 4:
			// a semi- or anti-join, a view or a derived table
			aggs = aggregatesFrom(r, "a")
			switch r.IntN(3) {
			case 0:
				w = and(w, pick("EXISTS (SELECT 1 FROM "+b+" b WHERE b.aid = a.id)", "NOT EXISTS (SELECT 1 FROM "+c+" c WHERE c.w = a.g)"))
			case 1:
				from = g.q("av") + " a"
			default:
				from, w = fmt.Sprintf("(SELECT * FROM %s WHERE k IS NOT NULL) a", a), ""
			}
		case 5:
			// three tables, or a FULL JOIN
			if r.IntN(2) == 0 {
				from = fmt.Sprintf("%s a JOIN %s b ON a.id = b.aid %s %s c ON c.w = b.w", a, b, pick("JOIN", "LEFT JOIN"), c)
				aggs = [][2]string{{"cnt", "count(*)"}, {"nc", "count(c.id)"}, {"sw", "sum(c.w)"}, {"mt", "max(c.tag)"}}[:1+r.IntN(4)]
			} else {
				from = fmt.Sprintf("%s a FULL JOIN %s b ON a.id = b.aid", a, b)
				aggs = [][2]string{{"cnt", "count(*)"}, {"na", "count(a.id)"}, {"nb", "count(b.id)"}, {"sw", "sum(b.w)"}}[:1+r.IntN(4)]
				w = pick("", "b.w > 0", "a.g IS NOT NULL")
			}
		case 6:
			// JOIN ... USING
			from, w = fmt.Sprintf("%s b %s %s c USING (w)", b, pick("JOIN", "LEFT JOIN"), c), pick("", "w > 0")
			aggs = [][2]string{{"cnt", "count(*)"}, {"sw", "sum(w)"}, {"nc", "count(c.id)"}}[:1+r.IntN(3)]
		case 0, 1:
			aggs = aggregatesFrom(r, "a")
			if r.IntN(2) == 0 {
				aggs = append([][2]string{{"cnt0", "count(*)"}, {"sum0", "sum(a.g)"}}, aggs...)
			}
		case 2:
			from = fmt.Sprintf("%s a %s %s b ON a.id = b.aid", a, pick("JOIN", "LEFT JOIN"), b)
			if r.IntN(2) == 0 {
				from = fmt.Sprintf("%s a, %s b", a, b)
				w = and("a.id = b.aid", w)
			}
			aggs = [][2]string{{"cnt", "count(*)"}, {"sw", "sum(b.w)"}, {"nb", "count(b.id)"}, {"mx", "max(b.label)"}, {"av", "avg(b.w * a.g)"}}
			r.Shuffle(len(aggs), func(i, j int) { aggs[i], aggs[j] = aggs[j], aggs[i] })
			aggs = aggs[:1+r.IntN(len(aggs))]
		default:
			from, w = g.q("p")+" p", pick("", "p.v > 1", "p.part = 1")
			aggs = [][2]string{{"cnt", "count(*)"}, {"sv", "sum(p.v)"}, {"mn", "min(p.s)"}, {"av", "avg(p.v)"}}[:1+r.IntN(4)]
		}
		having := ""
		if r.IntN(3) == 0 {
			having = " HAVING " + pick("count(*) > 2", "count(*) = 0", "count(*) > 0")
		}
		sel, names, exprs := selectList(aggs)
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s%s%s", name, from, strings.Join(sel, ", "), where(w), having)
		d.cols = names
		d.recompute = fmt.Sprintf("SELECT %s FROM %s%s%s", strings.Join(exprs, ", "), from, where(w), having)
	case "comma":
		// A comma join of two or three tables (a star on a or a chain
		// through b), its equalities in WHERE in either order, with a
		// filter; a projection keyed by every table's key, or grouped.
		tables := fmt.Sprintf("%s a, %s b", a, b)
		w := pick("a.id = b.aid", "b.aid = a.id")
		keys := []string{"a.id", "b.id"}
		cols := []string{"a_id0", "b_id0"}
		outs := [][2]string{{"ak", "a.k"}, {"bw", "b.w"}, {"bl", "b.label"}}
		three := r.IntN(2) == 0
		if three && r.IntN(3) == 0 {
			// c joined after the comma: the JOIN joins b alone (as in
			// PostgreSQL), so its ON reads b
			tables += fmt.Sprintf(" %s %s c ON c.w = b.w", pick("JOIN", "LEFT JOIN"), c)
			keys, cols = append(keys, "c.id"), append(cols, "c_id0")
			outs = append(outs, [2]string{"ct", "c.tag"})
		} else if three {
			tables += ", " + c + " c"
			w = and(w, pick("c.w = b.w", "b.w = c.w", "c.w = a.g"))
			keys, cols = append(keys, "c.id"), append(cols, "c_id0")
			outs = append(outs, [2]string{"ct", "c.tag"})
		}
		w = and(w, pick("", "a.g > 1", "b.w > 0", "a.k IS NOT NULL"))
		if r.IntN(2) == 0 {
			var sel []string
			for i, k := range keys {
				sel = append(sel, k+" AS "+cols[i])
			}
			for _, o := range outs {
				sel = append(sel, o[1]+" AS "+o[0])
				cols = append(cols, o[0])
			}
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s WHERE %s", name, tables, strings.Join(sel, ", "), w)
			d.cols = cols
			rec := slices.Clone(keys)
			for _, o := range outs {
				rec = append(rec, o[1])
			}
			d.recompute = fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(rec, ", "), tables, w)
		} else {
			key := pick("a.g", "a.k", "b.w", "b.label")
			if three {
				key = pick(key, "c.tag")
			}
			aggs := [][2]string{{"cnt", "count(*)"}, {"sw", "sum(b.w)"}, {"ks", "string_agg(a.k, ',' ORDER BY a.k, a.id, b.id)"}}[:1+r.IntN(3)]
			sel, names, exprs := selectList(aggs)
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s AS gk, %s WHERE %s GROUP BY %s", name, tables, key, strings.Join(sel, ", "), w, key)
			d.cols = append([]string{"gk"}, names...)
			d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s GROUP BY %s", key, strings.Join(exprs, ", "), tables, w, key)
		}
	default: // using
		// b and c share w: JOIN, LEFT JOIN or RIGHT JOIN ... USING (w),
		// many to many. The unqualified w is the preserved table's; the
		// keys not selected are added as b_id and c_id.
		join := pick("JOIN", "LEFT JOIN", "RIGHT JOIN")
		from := fmt.Sprintf("%s b %s %s c USING (w)", b, join, c)
		w := pick("", "w > 0", "b.label IS NOT NULL", "c.tag <> 'bob'")
		switch r.IntN(3) {
		case 0, 1:
			outs := [][2]string{{"w", "w"}, {"label", "b.label"}, {"tag", "c.tag"}, {"aid", "b.aid"}}
			r.Shuffle(len(outs), func(i, j int) { outs[i], outs[j] = outs[j], outs[i] })
			outs = outs[:1+r.IntN(len(outs))]
			var sel, rec []string
			d.cols = []string{"b_id", "c_id"}
			rec = []string{"b.id", "c.id"}
			for _, o := range outs {
				// no AS: each output is named by its column, as
				// PostgreSQL names it
				sel, rec = append(sel, o[1]), append(rec, o[1])
				d.cols = append(d.cols, o[0])
			}
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s%s", name, from, strings.Join(sel, ", "), where(w))
			d.recompute = fmt.Sprintf("SELECT %s FROM %s%s", strings.Join(rec, ", "), from, where(w))
		default:
			key := pick("w", "b.label", "c.tag")
			if join == "LEFT JOIN" {
				key = pick("w", "b.label")
			} else if join == "RIGHT JOIN" {
				key = pick("w", "c.tag")
			}
			aggs := [][2]string{{"cnt", "count(*)"}, {"nc", "count(c.id)"}, {"nb", "count(b.id)"}, {"ls", "string_agg(b.label, ',' ORDER BY b.label, b.id, c.id)"}}
			aggs = aggs[:1+r.IntN(len(aggs))]
			sel, names, exprs := selectList(aggs)
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s AS gk, %s%s GROUP BY %s", name, from, key, strings.Join(sel, ", "), where(w), key)
			d.cols = append([]string{"gk"}, names...)
			d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s%s GROUP BY %s", key, strings.Join(exprs, ", "), from, where(w), key)
		}
	}
	return d
}

// wherePredFrom is wherePred drawn from r.
func (g *diffGen) wherePredFrom(r *rand.Rand, alias string) string {
	ps := []string{"", "%s.g > 1", "%s.g IS NULL", "%s.k <> 'bob'", "%s.n >= 2", "%s.e <> 'sad'", "%s.f > 0", "%s.d IS NOT NULL"}
	return strings.ReplaceAll(ps[r.IntN(len(ps))], "%s", alias)
}

// groupKeyFrom is groupKey drawn from r.
func groupKeyFrom(r *rand.Rand, alias string) string {
	ks := []string{"%s.g", "%s.k", "%s.e", "%s.d", "%s.g % 2", "%s.arr", "%s.j ->> 'x'", "%s.ts"}
	return strings.ReplaceAll(ks[r.IntN(len(ks))], "%s", alias)
}

// aggregatesFrom is aggregates drawn from r.
func aggregatesFrom(r *rand.Rand, a string) [][2]string {
	all := [][2]string{
		{"cnt", "count(*)"}, {"cnt_k", "count(%s.k)"}, {"sum_g", "sum(%s.g)"}, {"sum_n", "sum(%s.n)"}, {"avg_n", "avg(%s.n)"},
		{"min_k", "min(%s.k)"}, {"max_ts", "max(%s.ts)"}, {"agg_k", "string_agg(%s.k, ',' ORDER BY %s.k, %s.id)"},
		{"arr_g", "array_agg(%s.g ORDER BY %s.id)"}, {"all_pos", "bool_and(%s.g > 0)"}, {"any_f", "bool_or(%s.f > 0)"},
		{"dist_g", "count(DISTINCT %s.g)"}, {"min_e", "min(%s.e)"}, {"max_d", "max(%s.d)"}, {"sum_n2", "sum(%s.n2)"},
		{"jagg", "jsonb_agg(%s.j ORDER BY %s.id)"}, {"cnt_js", "count(%s.js)"}, {"avg_g", "avg(%s.g)"}, {"min_n", "min(%s.n2)"},
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	out := all[:1+r.IntN(5)]
	for i := range out {
		out[i][1] = strings.ReplaceAll(out[i][1], "%s", a)
	}
	return out
}
