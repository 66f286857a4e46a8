package trellis_test

import (
	"fmt"
	"slices"
	"strings"
)

// joinedUnionDef draws, from the unionjoin stream only (so every seed of
// regressions.txt still generates the case it found), a UNION ALL of
// aggregating branches of which at least one joins two or three tables
// with INNER and LEFT JOINs, its GROUP BY reading one of them (decision
// 0056), beside aggregating branches over one table and, sometimes, a
// plain branch over one table (its rows keyed by the branch, the group
// outputs and its table's key, <table>_<column>). Grouped by one output
// (with WHERE and HAVING sometimes), aggregated without GROUP BY (a row
// per aggregating branch), or DISTINCT (no plain branch). Half the time
// an aggregate reading its target (whose group may be NULL) follows.
// Each is accepted, so a refusal fails the case.
func (g *diffGen) joinedUnionDef(name string) []diffDef {
	r := g.unionjoin
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	a, b, c, p := g.q("a"), g.q("b"), g.q("c"), g.q("p")
	// from is the branch's FROM text; x an int, y a "C" text, k an int
	// group key, each reading one table of the branch (k exactly one).
	type branch struct {
		from, x, y, k, where string
		ky                   string // DISTINCT's text output: of k's table
		plain                bool
		keys                 []string // a plain branch's key columns, qualified
		keyNames             []string // their target columns
	}
	j := func() string { return pick("JOIN", "LEFT JOIN") }
	// kk draws a group key and a text of the same table (DISTINCT's
	// outputs read one table of a join).
	kk := func(pairs ...[2]string) (string, string) { p := pairs[r.IntN(len(pairs))]; return p[0], p[1] }
	ak := [2]string{"a.g", "a.k"}
	joined := []branch{
		{from: fmt.Sprintf("%s a %s %s b ON b.aid = a.id", a, j(), b), x: pick("a.g", "b.w"), y: pick("a.k", "b.label COLLATE \"C\""), where: pick("", "a.g > 0", "b.w IS NOT NULL", "a.k <> 'bob'")},
		{from: fmt.Sprintf("%s b %s %s c ON c.w = b.w", b, j(), c), x: pick("b.w", "c.id % 3"), y: pick("c.tag", "b.label COLLATE \"C\""), where: pick("", "c.tag <> 'bob'", "b.w > 0")},
		{from: fmt.Sprintf("%s a %s %s b ON b.aid = a.id %s %s c ON c.w = b.w", a, j(), b, j(), c), x: pick("a.g", "b.w", "c.w"), y: pick("a.k", "c.tag"), where: pick("", "a.g IS NOT NULL", "c.tag IS NULL")},
		{from: fmt.Sprintf("%s c %s %s a ON a.g = c.w", c, j(), a), x: pick("a.g", "c.w"), y: pick("a.k", "c.tag"), where: pick("", "a.e <> 'sad'")},
	}
	joined[0].k, joined[0].ky = kk(ak, [2]string{"a.g % 2", "upper(a.k)"}, [2]string{"b.w", "b.label COLLATE \"C\""}, [2]string{"b.aid % 4", "lower(b.label) COLLATE \"C\""})
	joined[1].k, joined[1].ky = kk([2]string{"b.w", "b.label COLLATE \"C\""}, [2]string{"c.w", "c.tag"}, [2]string{"b.aid % 4", "b.label COLLATE \"C\""}, [2]string{"c.id % 3", "c.tag"})
	joined[2].k, joined[2].ky = kk(ak, [2]string{"b.w", "b.label COLLATE \"C\""}, [2]string{"c.w", "c.tag"}, [2]string{"c.id % 2", "c.tag"})
	joined[3].k, joined[3].ky = kk([2]string{"c.w", "c.tag"}, ak, [2]string{"a.id % 3", "lower(a.k)"})
	single := []branch{
		{from: a + " a", x: pick("a.g", "coalesce(a.d, 0)"), y: pick("a.k", "upper(a.k)"), k: pick("a.g", "a.g % 2"), where: pick("", "a.g > 1", "a.k <> 'bob'")},
		{from: b + " b", x: pick("b.w", "b.aid"), y: pick("b.label COLLATE \"C\"", "lower(b.label) COLLATE \"C\""), k: pick("b.w", "b.aid % 4"), where: pick("", "b.w > 0")},
		{from: c + " c", x: pick("c.w", "c.id % 3"), y: "c.tag", k: pick("c.w", "c.w - 1"), where: pick("", "c.w < 3")},
		{from: p + " p", x: pick("p.v", "p.part"), y: "p.s COLLATE \"C\"", k: pick("p.part", "p.v"), where: pick("", "p.v > 0")},
	}
	plains := []branch{
		{from: c + " c", x: pick("c.w", "c.id % 3"), y: "c.tag", k: pick("c.w", "c.w - 1"), where: pick("", "c.w < 3", "c.tag IS NOT NULL"),
			plain: true, keys: []string{"c.id"}, keyNames: []string{"c_id"}},
		{from: b + " b", x: "b.w", y: "b.label COLLATE \"C\"", k: pick("b.w", "b.aid % 4"), where: pick("", "b.w > 0"),
			plain: true, keys: []string{"b.id"}, keyNames: []string{"b_id"}},
		{from: p + " p", x: "p.v", y: "p.s COLLATE \"C\"", k: pick("p.part", "p.v"), where: pick("", "p.v > 0"),
			plain: true, keys: []string{"p.id", "p.part"}, keyNames: []string{"p_id", "p_part"}},
	}
	r.Shuffle(len(joined), func(i, k int) { joined[i], joined[k] = joined[k], joined[i] })
	r.Shuffle(len(single), func(i, k int) { single[i], single[k] = single[k], single[i] })
	form := pick("group", "group", "global", "distinct")
	bs := slices.Clone(joined[:1+r.IntN(2)])
	bs = append(bs, single[:r.IntN(2)]...)
	if form != "distinct" && (len(bs) == 1 || r.IntN(2) == 0) {
		bs = append(bs, plains[r.IntN(len(plains))])
	}
	if len(bs) == 1 {
		bs = append(bs, single[0])
	}
	r.Shuffle(len(bs), func(i, k int) { bs[i], bs[k] = bs[k], bs[i] })
	aggs := [][2]string{{"n", "count(*)"}, {"total", "sum(%x)"}, {"hi", "max(%y)"}, {"lo", "min(%y)"}, {"nx", "count(%x)"}, {"dx", "count(DISTINCT %x)"}, {"av", "avg(%x)"}}
	r.Shuffle(len(aggs), func(i, k int) { aggs[i], aggs[k] = aggs[k], aggs[i] })
	aggs = aggs[:1+r.IntN(3)]
	// A plain branch's output in an aggregate's position: of its type.
	plainOut := map[string]string{"n": "%x", "total": "%x", "hi": "%y", "lo": "%y", "nx": "%x", "dx": "%x", "av": "%x"}
	having := form != "distinct" && r.IntN(3) == 0
	where := func(w string) string {
		if w == "" {
			return ""
		}
		return " WHERE " + w
	}
	// The target's columns: branch, the group outputs, the plain
	// branches' key columns, the aggregates.
	cols := []string{"branch"}
	switch form {
	case "group":
		cols = append(cols, "gk")
	case "distinct":
		cols = append(cols, "gk", "gy")
	}
	for _, bb := range bs {
		if bb.plain {
			cols = append(cols, bb.keyNames...)
		}
	}
	if form != "distinct" {
		for _, ag := range aggs {
			cols = append(cols, ag[0])
		}
	}
	var stmt, rec []string
	for i, bb := range bs {
		var sel []string
		groupBy, recGroupBy := "", ""
		switch form {
		case "group":
			sel = append(sel, bb.k+" AS gk")
			if !bb.plain {
				groupBy = " GROUP BY " + bb.k
			}
		case "distinct":
			ky := bb.ky
			if ky == "" {
				ky = bb.y
			}
			sel = append(sel, bb.k+" AS gk", ky+" AS gy")
			recGroupBy = fmt.Sprintf(" GROUP BY %s, %s", bb.k, ky)
		}
		if form != "distinct" {
			for _, ag := range aggs {
				e := ag[1]
				if bb.plain {
					e = plainOut[ag[0]]
				}
				sel = append(sel, strings.NewReplacer("%x", bb.x, "%y", bb.y).Replace(e)+" AS "+ag[0])
			}
		}
		if recGroupBy == "" {
			recGroupBy = groupBy
		}
		h := ""
		if having && !bb.plain {
			h = " HAVING " + pick("count(*) > 1", "count(*) >= 3", fmt.Sprintf("max(%s) IS NOT NULL", bb.y), fmt.Sprintf("sum(%s) > 0", bb.x))
		}
		distinct := ""
		if form == "distinct" {
			distinct = "DISTINCT "
		}
		if i == 0 {
			stmt = append(stmt, fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s%s%s%s%s", name, bb.from, distinct, strings.Join(sel, ", "), where(bb.where), groupBy, h))
		} else {
			stmt = append(stmt, fmt.Sprintf("SELECT %s%s FROM %s%s%s%s", distinct, strings.Join(sel, ", "), bb.from, where(bb.where), groupBy, h))
		}
		// The recompute's columns in cols' order.
		recSel := []string{fmt.Sprintf("%d::smallint", i+1)}
		byName := map[string]string{}
		for _, s := range sel {
			e, n, _ := strings.Cut(s, " AS ")
			byName[n] = e
		}
		for _, o := range bs {
			if !o.plain {
				continue
			}
			for k, kn := range o.keyNames {
				if o.from == bb.from && bb.plain {
					byName[kn] = o.keys[k]
				} else {
					byName[kn] = "NULL::int"
				}
			}
		}
		for _, c := range cols[1:] {
			recSel = append(recSel, byName[c])
		}
		rec = append(rec, fmt.Sprintf("SELECT %s FROM %s%s%s%s", strings.Join(recSel, ", "), bb.from, where(bb.where), recGroupBy, h))
	}
	d := diffDef{name: name, kind: "unionagg", cols: cols}
	d.stmt = strings.Join(stmt, " UNION ALL ")
	d.recompute = strings.Join(rec, " UNION ALL ")
	out := []diffDef{d}
	if r.IntN(2) == 0 {
		out = append(out, g.nullReaderDef(r, name+"_r", d, form == "global"))
	}
	return out
}

// nullKeyReadersDef draws, from the nullread stream only, a target whose
// key may be NULL (a LEFT, RIGHT or FULL JOIN of a and b, or a LEFT JOIN
// of a, b and c; keyed by every table's key, named a_id0, b_id0, c_id0)
// and one or two readers of it (decisions 0049, 0054, 0062): a
// projection with WHERE, an inner or LEFT join of it with b or c (it as
// the FROM or the joined table), a join of three tables (it first,
// between or last), a GROUP BY, a global ORDER BY ... LIMIT, a top-k per
// partition (row_number, rank, dense_rank <= k) and DISTINCT ON. Each
// reader's recompute reads the upstream's target, itself compared with
// its own recompute. Each is accepted, so a refusal fails the case.
func (g *diffGen) nullKeyReadersDef(name string) []diffDef {
	r := g.nullread
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	a, b, c := g.q("a"), g.q("b"), g.q("c")
	up := diffDef{name: name, kind: "leftjoin"}
	// keys are the upstream's key columns; k0 an int key column (b's aid
	// joins it), kn one that may be NULL; g and w int outputs, bl a text.
	keys := []string{"a_id0", "b_id0"}
	k0, kn := "a_id0", "b_id0"
	var from, sel string
	kind := r.IntN(6)
	switch kind {
	case 0:
		from = fmt.Sprintf("%s a LEFT JOIN %s b ON b.aid = a.id", a, b)
	case 1:
		from = fmt.Sprintf("%s b RIGHT JOIN %s a ON b.aid = a.id", b, a)
	case 2:
		from = fmt.Sprintf("%s a FULL JOIN %s b ON b.aid = a.id", a, b)
	case 3:
		from = fmt.Sprintf("%s a %s %s b ON b.aid = a.id LEFT JOIN %s c ON c.w = b.w", a, pick("JOIN", "LEFT JOIN"), b, c)
		keys = append(keys, "c_id0")
	}
	switch kind {
	case 4:
		// A GROUP BY of a nullable column (of a LEFT JOIN's joined table
		// sometimes): its key is the group, NULL sometimes.
		keys, k0, kn = []string{"gk"}, "gk", "gk"
		forms := [][2]string{
			{fmt.Sprintf("%s a", a), "a.g AS gk, count(*) AS g, sum(a.d) AS w, max(a.k) AS bl%s GROUP BY a.g"},
			{fmt.Sprintf("%s a LEFT JOIN %s b ON b.aid = a.id", a, b), "b.w AS gk, count(*) AS g, sum(a.g) AS w, max(a.k) AS bl%s GROUP BY b.w"},
			{fmt.Sprintf("%s b", b), "b.aid AS gk, count(b.w) AS g, sum(b.w) AS w, min(b.label) AS bl%s GROUP BY b.aid"},
		}
		f := forms[r.IntN(len(forms))]
		w := pick("", " WHERE a.k IS DISTINCT FROM 'bob'")
		if strings.HasPrefix(f[1], "b.aid") {
			w = pick("", " WHERE b.w IS DISTINCT FROM 2")
		}
		q := fmt.Sprintf("FROM %s SELECT %s", f[0], fmt.Sprintf(f[1], w))
		up.stmt = fmt.Sprintf("TRANSFORM %s %s", name, q)
		outs, groupBy, _ := strings.Cut(f[1], "%s")
		up.recompute = fmt.Sprintf("SELECT %s FROM %s%s%s", outs, f[0], w, groupBy)
		up.kind = "group"
	case 5:
		// A UNION ALL keyed by branch, a_id and b_id: NULL in the other
		// branch's rows.
		keys, k0, kn = []string{"branch", "a_id", "b_id"}, "a_id", "b_id"
		aw, bw := pick("", " WHERE a.g > 0"), pick("", " WHERE b.w IS NOT NULL")
		up.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT a.g AS g, a.g %% 3 AS w, a.k AS bl%s UNION ALL SELECT b.w, b.aid %% 3, b.label COLLATE \"C\" FROM %s b%s", name, a, aw, b, bw)
		up.recompute = fmt.Sprintf("SELECT 1::smallint, a.id, NULL::int, a.g, a.g %% 3, a.k FROM %s a%s UNION ALL SELECT 2, NULL, b.id, b.w, b.aid %% 3, b.label COLLATE \"C\" FROM %s b%s", a, aw, b, bw)
		up.kind = "setop"
	default:
		sel = "a.id AS a_id0, b.id AS b_id0"
		recSel := "a.id, b.id"
		if len(keys) == 3 {
			sel, recSel = sel+", c.id AS c_id0", recSel+", c.id"
			sel, recSel = sel+", a.g AS g, b.w AS w, c.tag AS bl", recSel+", a.g, b.w, c.tag"
		} else {
			sel, recSel = sel+", a.g AS g, b.w AS w, b.label AS bl", recSel+", a.g, b.w, b.label"
		}
		w := pick("", "", " WHERE a.k <> 'bob'", " WHERE b.w IS DISTINCT FROM 0")
		up.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s%s", name, from, sel, w)
		up.recompute = fmt.Sprintf("SELECT %s FROM %s%s", recSel, from, w)
	}
	up.cols = append(slices.Clone(keys), "g", "w", "bl")
	if kind == 4 {
		up.cols = []string{"gk", "g", "w", "bl"}
	}
	out := []diffDef{up}
	u := name + " u"
	uk := strings.Join(prefixed("u.", keys), ", ")
	for i, n := 0, 1+r.IntN(2); i < n; i++ {
		rn := fmt.Sprintf("%s_r%d", name, i)
		d := diffDef{name: rn, kind: "nullreader"}
		switch pick("projection", "join", "joined", "join3", "group", "limit", "topk", "distincton") {
		case "projection":
			items := [][2]string{{"g", "u.g"}, {"bl", "u.bl"}, {"w1", "u.w + 1"}, {"gw", "coalesce(u.g, 0) * 10 + coalesce(u.w, 0)"}}
			r.Shuffle(len(items), func(i, k int) { items[i], items[k] = items[k], items[i] })
			s, names, exprs := selectList(items[:1+r.IntN(3)])
			wh := pick("", " WHERE u.w > 0", " WHERE u.bl IS NOT NULL", " WHERE u.g IS DISTINCT FROM 1", " WHERE u."+kn+" IS NULL")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s%s", rn, u, strings.Join(s, ", "), wh)
			d.cols = append(slices.Clone(keys), names...)
			d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s%s", uk, strings.Join(exprs, ", "), u, wh)
		case "join":
			// The target as the FROM table, joined with b (on its key part
			// that may be NULL) or c (many to many).
			jt, on, o := b, "x.aid = u."+k0, "x.label"
			if r.IntN(2) == 0 {
				jt, on, o = c, "x.w = u.w", "x.tag"
			}
			jn := pick("JOIN", "LEFT JOIN")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s %s %s x ON %s SELECT %s, x.id AS x_id0, u.g, %s AS xo", rn, u, jn, jt, on, uk, o)
			d.cols = append(slices.Clone(keys), "x_id0", "g", "xo")
			d.recompute = fmt.Sprintf("SELECT %s, x.id, u.g, %s FROM %s %s %s x ON %s", uk, o, u, jn, jt, on)
		case "joined":
			// The target as the joined table.
			jt, on, o := b, "u."+k0+" = x.aid", "x.label"
			if r.IntN(2) == 0 {
				jt, on, o = c, "u.w = x.w", "x.tag"
			}
			jn := pick("JOIN", "LEFT JOIN")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s x %s %s ON %s SELECT x.id AS x_id0, %s, %s AS xo, u.bl", rn, jt, jn, u, on, uk, o)
			d.cols = append(append([]string{"x_id0"}, keys...), "xo", "bl")
			d.recompute = fmt.Sprintf("SELECT x.id, %s, %s, u.bl FROM %s x %s %s ON %s", uk, o, jt, jn, u, on)
		case "join3":
			var f string
			switch r.IntN(3) {
			case 0:
				f = fmt.Sprintf("%s %s %s x ON x.aid = u.%s %s %s y ON y.w = x.w", u, pick("JOIN", "LEFT JOIN"), b, k0, pick("JOIN", "LEFT JOIN"), c)
			case 1:
				f = fmt.Sprintf("%s y %s %s ON u.w = y.w %s %s x ON x.aid = u.%s", c, pick("JOIN", "LEFT JOIN"), u, pick("JOIN", "LEFT JOIN"), b, k0)
			default:
				f = fmt.Sprintf("%s x %s %s y ON y.w = x.w %s %s ON u.w = y.w", b, pick("JOIN", "LEFT JOIN"), c, pick("JOIN", "LEFT JOIN"), u)
			}
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s, x.id AS x_id0, y.id AS y_id0, u.g, y.tag AS yt", rn, f, uk)
			d.cols = append(slices.Clone(keys), "x_id0", "y_id0", "g", "yt")
			d.recompute = fmt.Sprintf("SELECT %s, x.id, y.id, u.g, y.tag FROM %s", uk, f)
		case "group":
			gk := pick(append([]string{"u.g", "u.w", "u.bl"}, prefixed("u.", keys[len(keys)-1:])...)...)
			if (strings.Contains(from, "FULL JOIN") || kind == 5) && r.IntN(2) == 0 {
				gk = "u." + k0
			}
			wh := pick("", " WHERE u.w > 0", " WHERE u."+kn+" IS NOT NULL")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s AS gk, count(*) AS cnt, sum(u.w) AS sw, count(u.%s) AS nb%s GROUP BY %s", rn, u, gk, kn, wh, gk)
			d.cols = []string{"gk", "cnt", "sw", "nb"}
			d.recompute = fmt.Sprintf("SELECT %s, count(*), sum(u.w), count(u.%s) FROM %s%s GROUP BY %s", gk, kn, u, wh, gk)
		case "limit":
			k := 1 + r.IntN(6)
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s, u.w ORDER BY u.w DESC NULLS LAST, %s LIMIT %d", rn, u, uk, uk, k)
			d.cols = append(slices.Clone(keys), "w")
			d.recompute = fmt.Sprintf("SELECT %s, u.w FROM %s ORDER BY u.w DESC NULLS LAST, %s LIMIT %d", uk, u, uk, k)
		case "topk":
			k := 1 + r.IntN(3)
			part := pick("u.g", "u.bl", "u.w")
			inner := fmt.Sprintf("SELECT %s, %s AS pk, u.w, %s() OVER (PARTITION BY %s ORDER BY u.w DESC NULLS LAST, %s) AS rn FROM %s",
				uk, part, pick("row_number", "rank", "dense_rank"), part, uk, u)
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM (%s) s SELECT * WHERE rn <= %d", rn, inner, k)
			d.cols = append(append([]string{"pk"}, keys...), "w", "rn")
			d.recompute = fmt.Sprintf("SELECT pk, %s, w, rn FROM (%s) s WHERE rn <= %d", strings.Join(keys, ", "), inner, k)
		default:
			part := pick("u.g", "u.bl", "u.w")
			// The upstream's key selected under other names.
			var best, bestNames []string
			for _, k := range keys {
				best, bestNames = append(best, "u."+k+" AS best_"+k), append(bestNames, "best_"+k)
			}
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT DISTINCT ON (%s) %s AS pk, %s, u.w ORDER BY %s, u.w DESC NULLS LAST, %s",
				rn, u, part, part, strings.Join(best, ", "), part, uk)
			d.cols = append(append([]string{"pk"}, bestNames...), "w")
			d.recompute = fmt.Sprintf("SELECT DISTINCT ON (%s) %s, %s, u.w FROM %s ORDER BY %s, u.w DESC NULLS LAST, %s", part, part, uk, u, part, uk)
		}
		out = append(out, d)
		// A reader of the reader, a third of the time: its key may be
		// NULL too (decision 0062, "its readers"). An aggregate over its
		// second key column or globally, or a projection of a projection.
		if r.IntN(3) == 0 {
			if strings.Contains(d.stmt, " SELECT DISTINCT ON ") || strings.Contains(d.stmt, " WHERE rn <= ") || strings.Contains(d.stmt, " LIMIT ") || strings.Contains(d.stmt, " GROUP BY ") {
				out = append(out, g.nullReaderDef(r, rn+"_c", d, false))
			} else if !strings.Contains(d.stmt, " JOIN ") && r.IntN(2) == 0 {
				last := d.cols[len(d.cols)-1]
				p := diffDef{name: rn + "_p", kind: "nullreader"}
				wh := pick("", fmt.Sprintf(" WHERE v.%s IS NOT NULL", last), fmt.Sprintf(" WHERE v.%s IS NULL", kn))
				p.stmt = fmt.Sprintf("TRANSFORM %s FROM %s v SELECT v.%s AS c%s", p.name, rn, last, wh)
				p.cols = append(slices.Clone(keys), "c")
				p.recompute = fmt.Sprintf("SELECT %s, v.%s FROM %s v%s", strings.Join(prefixed("v.", keys), ", "), last, rn, wh)
				out = append(out, p)
			} else {
				out = append(out, g.nullReaderDef(r, rn+"_c", d, false))
			}
		}
	}
	return out
}
