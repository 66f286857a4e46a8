package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/pgerr"
)

// planWork is what one node of an EXPLAIN (ANALYZE, FORMAT JSON) plan did
// over all its loops: EXPLAIN shows rows and removed rows per loop.
type planWork struct {
	node            string
	relation, index string
	rows, joinFilt  float64
	filtered, loops float64
}

// planNodes lists every node of a JSON plan, its subplans included.
func planNodes(node map[string]any) []planWork {
	var out []planWork
	eachPlanNode(node, func(n map[string]any) {
		num := func(k string) float64 {
			f, _ := n[k].(float64)
			return f
		}
		loops := num("Actual Loops")
		rel, _ := n["Relation Name"].(string)
		typ, _ := n["Node Type"].(string)
		idx, _ := n["Index Name"].(string)
		out = append(out, planWork{node: typ, relation: rel, index: idx, loops: loops,
			rows: num("Actual Rows") * loops, joinFilt: num("Rows Removed by Join Filter") * loops, filtered: num("Rows Removed by Filter") * loops})
	})
	return out
}

// multiUnitCase is a definition whose keyed recompute takes units of two
// columns, with the data it runs on and a page of its units.
type multiUnitCase struct {
	goldenCase
	// units are the page's units, column by column, as text (NULL: nil).
	units [][]*string
	// rows is how many source rows the page's units cover.
	rows int
	// withNulls: the page holds a unit with a NULL.
	withNulls bool
}

func strs(n int, f func(i int) string) []*string {
	out := make([]*string, n)
	for i := range out {
		s := f(i)
		out[i] = &s
	}
	return out
}

// TestMultiColumnUnitRecomputeIsLinear: the keyed recompute of a unit of
// two columns (a UNION ALL's (branch, id), union_join's, an aggregate
// grouped by two columns, a window partitioned by two, a UNION's whole
// row), in the generic plan a drain worker's prepared statement gets after
// five pages, does work linear in the page's units: no node reads or
// removes more than a small multiple of the page's rows, no filter
// searches an array parameter row by row, and the source and the target
// are reached through their indexes, never scanned whole.
// It matched the units with IN over the unnested parameters and deleted
// with NOT EXISTS over src: PostgreSQL estimates unnest at 10 rows there
// and joined both by nested loops over CTE scans, so a page of 2,000
// units removed millions of rows by join filters (10,000 keys of
// union_join at 1M rows: 176 s). Each statement runs under a statement
// timeout: the quadratic plans did not finish within it.
func TestMultiColumnUnitRecomputeIsLinear(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const n = 2000 // units of a page
	src := []string{"id bigint", "customer_id bigint", "v integer", "a integer", "b integer"}
	cust := []string{"id bigint", "region text"}
	srcT := func(alias string) *Table { return table("public", "msrc", alias, []string{"id"}, src...) }
	custT := table("public", "mcust", "c", []string{"id"}, cust...)
	branches := func(i int) string { return fmt.Sprint(1 + i%2) }
	ids := func(i int) string { return fmt.Sprint(1 + (i/2)*37) }
	// Groups (a, b): a = id % 100 (NULL for every 1,000th id), b = id /
	// 100 % 100; 10 rows each.
	as := func(i int) string { return fmt.Sprint(i % 100) }
	bs := func(i int) string { return fmt.Sprint((i*7 + i/100) % 100) }
	nullGroup := func(units [][]*string) [][]*string {
		b := "10"
		return [][]*string{append(units[0], nil), append(units[1], &b)}
	}
	cases := []multiUnitCase{
		{goldenCase: goldenCase{name: "union_all", stmt: "TRANSFORM m_union FROM msrc SELECT id, v WHERE v >= 0 UNION ALL SELECT id, v FROM msrc WHERE v < 0",
			tables: []*Table{srcT(""), srcT("")}, types: map[string]string{"branch": "smallint", "id": "bigint", "v": "integer"}},
			units: [][]*string{strs(n, branches), strs(n, ids)}, rows: n / 2},
		{goldenCase: goldenCase{name: "union_join",
			stmt:   "TRANSFORM m_union_join FROM msrc s JOIN mcust c ON c.id = s.customer_id SELECT s.id, c.region, s.v WHERE s.v >= 0 UNION ALL SELECT s.id, c.region, s.v FROM msrc s LEFT JOIN mcust c ON c.id = s.customer_id WHERE s.v < 0",
			tables: []*Table{srcT("s"), custT, srcT("s"), custT}, types: map[string]string{"branch": "smallint", "id": "bigint", "c_id": "bigint", "region": "text", "v": "integer"}},
			units: [][]*string{strs(n, branches), strs(n, ids)}, rows: n / 2},
		{goldenCase: goldenCase{name: "group_by_two", stmt: "TRANSFORM m_groups FROM msrc SELECT a, b, sum(v) AS total, count(*) AS n GROUP BY a, b",
			tables: []*Table{srcT("")}, types: map[string]string{"a": "integer", "b": "integer", "total": "bigint", "n": "bigint"}},
			units: [][]*string{strs(n, as), strs(n, bs)}, rows: 10 * n},
		{goldenCase: goldenCase{name: "window_two", stmt: "TRANSFORM m_window FROM msrc SELECT a, b, v, sum(v) OVER (PARTITION BY a, b) AS total",
			tables: []*Table{srcT("")}, types: map[string]string{"a": "integer", "b": "integer", "id": "bigint", "v": "integer", "total": "bigint"}},
			units: [][]*string{strs(n, as), strs(n, bs)}, rows: 10 * n},
		{goldenCase: goldenCase{name: "union_distinct", stmt: "TRANSFORM m_distinct FROM msrc SELECT id, v WHERE v >= 0 UNION SELECT id, v FROM msrc WHERE v < 0",
			tables: []*Table{srcT(""), srcT("")}, types: map[string]string{"id": "bigint", "v": "integer"}},
			units: [][]*string{strs(n, func(i int) string { return fmt.Sprint(1 + i*37) }), strs(n, func(i int) string { return fmt.Sprint((1 + i*37) % 100) })}, rows: n},
	}
	// A page with a NULL group takes the statements of RecomputeGroups(true).
	for _, c := range cases[2:4] {
		c.name += "_null_group"
		c.units, c.rows, c.withNulls = nullGroup(c.units), c.rows+10, true
		cases = append(cases, c)
	}

	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.mcust (id bigint PRIMARY KEY, region text NOT NULL)")
	exec("INSERT INTO public.mcust SELECT g, 'r' || g % 50 FROM generate_series(1, 10000) g")
	exec("CREATE TABLE public.msrc (id bigint PRIMARY KEY, customer_id bigint NOT NULL, v integer NOT NULL, a integer, b integer)")
	exec("INSERT INTO public.msrc SELECT g, g % 10000 + 1, g % 100, CASE WHEN g % 1000 <> 0 THEN g % 100 END, g / 100 % 100 FROM generate_series(1, 100000) g")
	exec("CREATE INDEX ON public.msrc (a, b)")
	exec("ANALYZE public.msrc, public.mcust")
	made := map[string]bool{}
	for _, c := range cases {
		pl, _ := planOf(t, c.goldenCase)
		if !made[pl.Target.Name] {
			made[pl.Target.Name] = true
			buildTarget(exec, pl)
			exec("ANALYZE " + pl.Target.Quoted())
		}
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, len(c.units), pl.KeyParams())
			// EXECUTE takes its parameters as literals (the test's own
			// numbers), text[] as the drain sends them.
			args := make([]string, len(c.units))
			for i, u := range c.units {
				elems := make([]string, len(u))
				for j, v := range u {
					elems[j] = "NULL"
					if v != nil {
						elems[j] = *v
					}
				}
				args[i] = "'{" + strings.Join(elems, ",") + "}'"
			}
			page := len(c.units[0])
			for i, q := range pl.RecomputeGroups(c.withNulls) {
				tx := genericTx(ctx, t, conn, "60s", fmt.Sprintf("PREPARE %s_%d AS %s", c.name, i, q))
				var raw []byte
				start := time.Now()
				err := tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %s_%d(%s)", c.name, i, strings.Join(args, ", "))).Scan(&raw)
				took := time.Since(start)
				_ = tx.Rollback(context.Background())
				if pgerr.Is(err, pgerrcode.QueryCanceled) {
					t.Fatalf("a page of %d units did not finish in 60 s under a generic plan", page)
				}
				require.NoError(t, err)
				plan := decodePlan(t, raw)
				require.Empty(t, arrayFilters(plan["Plan"].(map[string]any)), "a filter searches an array parameter row by row: %s", raw)
				limit := 10 * float64(page+c.rows)
				for _, w := range planNodes(plan["Plan"].(map[string]any)) {
					require.LessOrEqual(t, w.joinFilt, limit, "%s removed %.0f rows by a join filter for a page of %d units: %s", w.node, w.joinFilt, page, raw)
					require.LessOrEqual(t, w.rows+w.filtered, limit, "%s read %.0f rows for a page of %d units: %s", w.node, w.rows+w.filtered, page, raw)
					if strings.HasPrefix(w.node, "Seq Scan") {
						require.NotContains(t, []string{"msrc", "mcust", pl.Target.Name}, w.relation, "a page scans the whole of %s: %s", w.relation, raw)
					}
				}
				t.Logf("%s: a page of %d units in %v", c.name, page, took)
			}
		})
	}
}

// TestOneTableSetOperationReadsEachRowOnce: the branches of an INTERSECT
// or EXCEPT that read one table (the same outputs, each its own WHERE)
// are read in one scan of it (decision 0057): a page's keyed recompute,
// under the generic plan a drain worker's prepared statement gets,
// probes the table's index once per unit, not once per unit and branch,
// and the changed rows' units are found by one query, not one per
// branch. Read apart, each branch probed the index for every unit (two
// branches: 4,000 probes for 2,000 units) and had its own query. The
// page's rows gone from the target are deleted by the ctid their unit's
// probe found: found by EXCEPT, each was probed again (3,000 target
// probes for 2,000 units, 1,000 of them gone).
func TestOneTableSetOperationReadsEachRowOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 2000 // units of a page: 1,000 rows, each its old and its new value
	src := []string{"id bigint", "v integer", "w integer"}
	srcT := table("public", "osrc", "", []string{"id"}, src...)
	cases := []goldenCase{
		{name: "intersect", stmt: "TRANSFORM o_both FROM osrc SELECT id, v WHERE v >= 0 INTERSECT SELECT id, v FROM osrc WHERE w > 0",
			tables: []*Table{srcT, srcT}, types: map[string]string{"id": "bigint", "v": "integer"}},
		{name: "except", stmt: "TRANSFORM o_only FROM osrc SELECT id, v WHERE v >= 0 EXCEPT SELECT id, v FROM osrc WHERE w < 0 EXCEPT SELECT id, v FROM osrc WHERE v = 7",
			tables: []*Table{srcT, srcT, srcT}, types: map[string]string{"id": "bigint", "v": "integer"}},
	}
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.osrc (id bigint PRIMARY KEY, v integer NOT NULL, w integer NOT NULL)")
	exec("INSERT INTO public.osrc SELECT g, g % 100, g % 7 - 3 FROM generate_series(1, 100000) g")
	exec("ANALYZE public.osrc")
	// A page of 1,000 changed rows, each v moved up by one since the
	// target was built: its units are each row's old value (a row gone,
	// where the branches kept it) and its new one.
	ids := make([]string, n)
	vs := make([]string, n)
	var changed []string
	for i := range ids {
		id := 1 + (i/2)*97
		ids[i], vs[i] = fmt.Sprint(id), fmt.Sprint(id%100+i%2)
		if i%2 == 0 {
			changed = append(changed, ids[i])
		}
	}
	args := fmt.Sprintf("'{%s}', '{%s}'", strings.Join(ids, ","), strings.Join(vs, ","))
	for _, c := range cases {
		pl, _ := planOf(t, c)
		buildTarget(exec, pl)
		exec("ANALYZE " + pl.Target.Quoted())
		t.Run(c.name, func(t *testing.T) {
			var queries int
			for pos := range c.tables {
				src := pl.Spec.Sources()[pos]
				ch := Changes{Source: src, CapCols: src.Needs}
				for _, col := range src.Needs {
					ch.CapTypes = append(ch.CapTypes, c.tables[pos].Columns[col])
				}
				if pl.AffectedBranch(ch, pos, 64) != "" {
					queries++
				}
			}
			require.Equal(t, 1, queries, "one query finds the units of every branch of the table")
			stmts := pl.RecomputeGroups(false)
			require.Len(t, stmts, 1)
			tx := genericTx(ctx, t, conn, "60s", "UPDATE public.osrc SET v = v + 1 WHERE id IN ("+strings.Join(changed, ", ")+")",
				fmt.Sprintf("PREPARE %s_page AS %s", c.name, stmts[0]))
			defer func() { _ = tx.Rollback(context.Background()) }()
			raw, plan := explainJSON(ctx, t, tx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %s_page(%s)", c.name, args))
			var probes, targetProbes float64
			for _, w := range planNodes(plan["Plan"].(map[string]any)) {
				switch {
				case w.relation == "osrc":
					require.Contains(t, w.node, "Index", "a page scans the whole of osrc: %s", raw)
					probes += w.loops
				case w.relation == pl.Target.Name && strings.Contains(w.node, "Index"):
					targetProbes += w.loops
				}
			}
			require.Equal(t, float64(n), probes, "osrc's index is probed once per unit of the page: %s", raw)
			require.Equal(t, float64(n), targetProbes, "the target's index is probed once per unit of the page: %s", raw)
			// The page made the target what the definition yields.
			var wrong, gone int
			def := pl.Query()
			require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM ((SELECT id, v FROM %[1]s EXCEPT SELECT id, v FROM (%[2]s) d)
				UNION ALL (SELECT id, v FROM (%[2]s) d EXCEPT SELECT id, v FROM %[1]s)) x), (SELECT count(*) FROM %[1]s WHERE id IN (%[3]s) AND v = id %% 100)`,
				pl.Target.Quoted(), def, strings.Join(changed, ", "))).Scan(&wrong, &gone))
			require.Zero(t, wrong, "target rows differ from the definition's after the page")
			require.Zero(t, gone)
		})
	}
}

// TestNullUnitsReadOnlyTheirRows: on a page whose units of two columns
// hold NULLs (RecomputeGroups(true)), a GROUP BY a, b and a PARTITION BY
// a, b probe each unit through the index on (a, b) with both columns as
// index conditions (a IS NULL AND b = ..., a = ... AND b IS NULL), in the
// generic plan a drain worker's prepared statement gets: no node reads
// or filters more than a small multiple of the page's own rows, and the
// page leaves the target as the definition yields it. The units with a
// NULL were probed together by (a = u.a OR (a IS NULL AND u.a IS NULL))
// AND (b = u.b OR ...), of which an index serves only the first column's
// arms: each unit (NULL, b) read every row whose a is NULL and filtered
// b, each unit (a, NULL) read those and a's rows. At 1M rows with 100,000
// NULL a, 500 units half of them (NULL, b): 23 s a page, 0.1 s now.
func TestNullUnitsReadOnlyTheirRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srcT := table("public", "nsrc", "", []string{"id"}, "id bigint", "a integer", "b integer", "v integer")
	cases := []goldenCase{
		{name: "group_by_two", stmt: "TRANSFORM n_groups FROM nsrc SELECT a, b, sum(v) AS total, count(*) AS n GROUP BY a, b",
			tables: []*Table{srcT}, types: map[string]string{"a": "integer", "b": "integer", "total": "bigint", "n": "bigint"}},
		{name: "window_two", stmt: "TRANSFORM n_window FROM nsrc SELECT a, b, v, sum(v) OVER (PARTITION BY a, b) AS total",
			tables: []*Table{srcT}, types: map[string]string{"a": "integer", "b": "integer", "id": "bigint", "v": "integer", "total": "bigint"}},
	}
	conn, exec := testConn(ctx, t)
	// 100,000 rows: a = id % 100, NULL for every 10th id (10,000 rows);
	// b = id / 100 % 100, NULL for every 7th id.
	exec("CREATE TABLE public.nsrc (id bigint PRIMARY KEY, a integer, b integer, v integer NOT NULL)")
	exec("INSERT INTO public.nsrc SELECT g, CASE WHEN g % 10 <> 0 THEN g % 100 END, CASE WHEN g % 7 <> 0 THEN g / 100 % 100 END, g % 13 FROM generate_series(1, 100000) g")
	exec("CREATE INDEX ON public.nsrc (a, b)")
	// A page of 500 units: (NULL, b) for 100 values of b, (a, NULL) for
	// 100 values of a, (NULL, NULL), and 299 units without a NULL.
	var as, bs []string
	for i := 0; i < 500; i++ {
		a, b := fmt.Sprint(i%100), fmt.Sprint(i*7%100)
		switch {
		case i < 100:
			a, b = "NULL", fmt.Sprint(i)
		case i < 200:
			b = "NULL"
		case i == 200:
			a, b = "NULL", "NULL"
		}
		as, bs = append(as, a), append(bs, b)
	}
	units := fmt.Sprintf("'{%s}', '{%s}'", strings.Join(as, ","), strings.Join(bs, ","))
	for _, c := range cases {
		pl, _ := planOf(t, c)
		buildTarget(exec, pl)
		exec("ANALYZE public.nsrc, " + pl.Target.Quoted())
		t.Run(c.name, func(t *testing.T) {
			stmts := pl.RecomputeGroups(true)
			require.Len(t, stmts, 1)
			// Every unit with a NULL changes, and (NULL, 5) is gone.
			tx := genericTx(ctx, t, conn, "120s", "UPDATE public.nsrc SET v = v + 1 WHERE a IS NULL OR b IS NULL", "DELETE FROM public.nsrc WHERE a IS NULL AND b = 5",
				"PREPARE "+c.name+"_page AS "+stmts[0])
			defer func() { _ = tx.Rollback(context.Background()) }()
			var rows float64
			require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM public.nsrc s WHERE EXISTS (SELECT FROM unnest(%s::int[], %s::int[]) AS u(a, b)
				WHERE s.a IS NOT DISTINCT FROM u.a AND s.b IS NOT DISTINCT FROM u.b)`, "'{"+strings.Join(as, ",")+"}'", "'{"+strings.Join(bs, ",")+"}'")).Scan(&rows))
			var raw []byte
			start := time.Now()
			require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %s_page(%s)", c.name, units)).Scan(&raw))
			took := time.Since(start)
			plan := decodePlan(t, raw)
			limit := 3 * (float64(len(as)) + rows)
			for _, w := range planNodes(plan["Plan"].(map[string]any)) {
				require.LessOrEqual(t, w.rows+w.filtered+w.joinFilt, limit, "%s on %s read %.0f rows for a page of %d units covering %.0f rows: %s",
					w.node, w.relation, w.rows+w.filtered+w.joinFilt, len(as), rows, raw)
				if strings.HasPrefix(w.node, "Seq Scan") {
					require.NotContains(t, []string{"nsrc", pl.Target.Name}, w.relation, "a page scans the whole of %s: %s", w.relation, raw)
				}
			}
			var wrong int
			require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM ((SELECT to_jsonb(t) FROM %[1]s t EXCEPT ALL SELECT to_jsonb(d) FROM (%[2]s) d)
				UNION ALL (SELECT to_jsonb(d) FROM (%[2]s) d EXCEPT ALL SELECT to_jsonb(t) FROM %[1]s t)) x`, pl.Target.Quoted(), pl.Query())).Scan(&wrong))
			require.Zero(t, wrong, "target rows differ from the definition's after the page")
			t.Logf("%s: a page of %d units (%.0f rows) in %v", c.name, len(as), rows, took)
		})
	}
}
