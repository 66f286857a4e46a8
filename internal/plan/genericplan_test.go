package plan

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

// arrayFilters lists the conditions of a JSON plan's nodes that search an
// array parameter row by row: a Filter (or Join Filter) with = ANY of a
// parameter. In a generic plan such a parameter cast from text[] is cast
// again for every row, and searched element by element, so a page of n
// keys costs n² (an index condition evaluates its array once).
func arrayFilters(node map[string]any) []string {
	var out []string
	eachPlanNode(node, func(n map[string]any) {
		for _, k := range []string{"Filter", "Join Filter"} {
			if f, ok := n[k].(string); ok && strings.Contains(f, "ANY (($") {
				out = append(out, fmt.Sprintf("%s %s: %s", n["Node Type"], k, f))
			}
		}
	})
	return out
}

// TestSetOpRecomputeSearchesNoArrayPerRow: the keyed recompute of a UNION
// (keyed by its whole row) finds a page's rows through the index on the
// first column, and matches the other columns by hashing, in the generic
// plan a drain worker's prepared statement gets after a few pages. It
// once compared every column with = ANY of its parameter: a filter on the
// later columns that made a 5,000-key page cost seconds (0.03x the bare
// upsert on a 100,000-change backlog).
func TestSetOpRecomputeSearchesNoArrayPerRow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl, _ := planOf(t, goldenCase{
		name:   "union_distinct",
		stmt:   "TRANSFORM rows_once FROM nums SELECT id, v WHERE v >= 0 UNION SELECT id, v FROM nums WHERE v < 0",
		tables: []*Table{table("public", "nums", "", []string{"id"}, "id bigint", "v integer"), table("public", "nums", "", []string{"id"}, "id bigint", "v integer")},
		types:  map[string]string{"id": "bigint", "v": "integer"},
	})
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.nums (id bigint PRIMARY KEY, v integer NOT NULL)")
	exec("INSERT INTO public.nums SELECT g, g % 7 FROM generate_series(1, 20000) g")
	buildTarget(exec, pl)
	exec("ANALYZE public.nums")
	exec("ANALYZE public.rows_once")
	exec("SET plan_cache_mode = force_generic_plan")
	var ids, vs []string
	for i := 1; i <= 2000; i++ {
		ids, vs = append(ids, fmt.Sprint(i)), append(vs, fmt.Sprint(i%7))
	}
	// A page with a NULL key (RecomputeGroups(true)) probes its units
	// by their pattern of NULL parts: TestNullUnitsReadOnlyTheirRows.
	for i, q := range pl.RecomputeGroups(false) {
		name := fmt.Sprintf("r%d", i)
		exec("PREPARE " + name + " AS " + q)
		raw, plan := explainJSON(ctx, t, conn, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE %s('{%s}', '{%s}')", name, strings.Join(ids, ","), strings.Join(vs, ",")))
		require.Empty(t, arrayFilters(plan["Plan"].(map[string]any)), "%s", raw)
	}
}

// cteRows returns the planner's row estimate of the CTE named name in a
// JSON plan (its node's "Plan Rows"), and whether it was found.
func cteRows(node map[string]any, name string) (float64, bool) {
	if node["Subplan Name"] == "CTE "+name {
		r, ok := node["Plan Rows"].(float64)
		return r, ok
	}
	if subs, ok := node["Plans"].([]any); ok {
		for _, s := range subs {
			if r, ok := cteRows(s.(map[string]any), name); ok {
				return r, true
			}
		}
	}
	return 0, false
}

// TestGlobalTopKRecomputeKnowsItsRows: the keyed recompute of a global
// top-k (ORDER BY ... LIMIT k) yields at most k rows, and the planner must
// know it. It estimated the source's row count for them (the window's
// run condition does not lower the estimate), so the anti-join deleting
// the rows that left the top hashed an estimated 1M rows in 16 batches
// written to temporary files: 150-250 ms a page at 1M rows for ten rows
// (topk_global latency p50 ~1 s on a loaded machine).
func TestGlobalTopKRecomputeKnowsItsRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl, _ := planOf(t, goldenCase{
		name:   "top_k",
		stmt:   "TRANSFORM top_nums FROM nums SELECT id, v ORDER BY v DESC, id LIMIT 10",
		tables: []*Table{table("public", "nums", "", []string{"id"}, "id bigint", "v integer")},
		types:  map[string]string{"id": "bigint", "v": "integer"},
	})
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.nums (id bigint PRIMARY KEY, v integer NOT NULL)")
	exec("INSERT INTO public.nums SELECT g, g % 1000 FROM generate_series(1, 50000) g")
	exec("CREATE INDEX ON public.nums (v DESC, id)")
	buildTarget(exec, pl)
	exec("ANALYZE public.nums")
	exec("ANALYZE public.top_nums")
	exec("SET plan_cache_mode = force_generic_plan")
	for i, q := range pl.RecomputeGroups(false) {
		name := fmt.Sprintf("k%d", i)
		exec("PREPARE " + name + " AS " + q)
		raw, plan := explainJSON(ctx, t, conn, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE %s('{x}')", name))
		rows, ok := cteRows(plan["Plan"].(map[string]any), "src")
		require.True(t, ok, "no CTE src in %s", raw)
		require.LessOrEqual(t, rows, 10.0, "the planner expects %v rows of the top 10: %s", rows, raw)
	}
}

// seqScans lists the relations a JSON plan reads whole.
func seqScans(node map[string]any) []string {
	var out []string
	eachPlanNode(node, func(n map[string]any) {
		if n["Node Type"] == "Seq Scan" {
			out = append(out, fmt.Sprint(n["Relation Name"]))
		}
	})
	return out
}

// TestNullableKeyLookupUsesTheIndex: a reader of a target whose key may
// be NULL (decision 0049) finds a page's changed rows as they are now
// through the target's unique index NULLS NOT DISTINCT, in the generic
// plan a drain worker's prepared statement gets, and finds the rows whose
// key has a NULL part: keys (5, NULL) and (4, 14) give their groups, and
// (7, NULL), which no row has, none.
func TestNullableKeyLookupUsesTheIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lj := table("public", "lj", "", []string{"o_id", "c_id"}, "o_id integer", "c_id integer", "amount integer")
	lj.KeyNulls = []bool{false, true}
	pl, _ := planOf(t, goldenCase{
		name:   "nullable_key_reader",
		stmt:   "TRANSFORM by_amount FROM lj SELECT amount, count(*) AS n GROUP BY amount",
		tables: []*Table{lj},
		types:  map[string]string{"amount": "integer", "n": "bigint"},
	})
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.lj (o_id integer, c_id integer, amount integer)")
	exec("INSERT INTO public.lj SELECT g, CASE WHEN g % 3 = 0 THEN NULL ELSE g + 10 END, g * 100 FROM generate_series(1, 20000) g")
	exec("UPDATE public.lj SET c_id = NULL WHERE o_id = 5")
	exec("CREATE UNIQUE INDEX ON public.lj (o_id, c_id) NULLS NOT DISTINCT")
	exec("ANALYZE public.lj")
	exec("SET plan_cache_mode = force_generic_plan")
	ch := Changes{Source: pl.Spec.Source, CapCols: []string{"amount"}, CapTypes: []string{"integer"}, Part: "current"}
	qs := pl.AffectedQueries(ch, true, false, 64)
	require.Len(t, qs, 1)
	exec("PREPARE nk AS " + qs[0])
	args := "('{5,4,7}', '{NULL,14,NULL}', '{NULL,NULL,NULL}', '{f,f,f}')"
	raw, plan := explainJSON(ctx, t, conn, "EXPLAIN (FORMAT JSON) EXECUTE nk"+args)
	require.Empty(t, seqScans(plan["Plan"].(map[string]any)), "%s", raw)
	rows, err := conn.Query(ctx, "EXECUTE nk"+args)
	require.NoError(t, err)
	var groups []string
	for rows.Next() {
		var g string
		var bucket int32
		require.NoError(t, rows.Scan(&g, &bucket))
		groups = append(groups, g)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []string{"500", "400"}, groups)
}

// TestNullableKeyProjectionUsesTheIndex checks the keyed recompute of a
// projection of a target whose key may be NULL (decision 0054): in a
// generic plan it reads neither the source nor its own target whole (each
// key is looked up through their unique indexes, one lookup per pattern
// of NULL parts), and a key with a NULL part matches only the row whose
// key is not distinct from it: (5, NULL) is upserted, (7, NULL), gone
// from the source, deleted, and (5, 99) and (7, 17), no keys of the
// page, kept.
func TestNullableKeyProjectionUsesTheIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lj := table("public", "ljp", "", []string{"o_id", "c_id"}, "o_id integer", "c_id integer", "amount integer")
	lj.KeyNulls = []bool{false, true}
	pl, _ := planOf(t, goldenCase{
		name:   "nullable_key_projection",
		stmt:   "TRANSFORM ljp_big FROM ljp SELECT amount WHERE amount > 0",
		tables: []*Table{lj},
		types:  map[string]string{"o_id": "integer", "c_id": "integer", "amount": "integer"},
	})
	require.Equal(t, KindJoin, pl.Kind())
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.ljp (o_id integer, c_id integer, amount integer)")
	exec("INSERT INTO public.ljp SELECT g, CASE WHEN g % 3 = 0 THEN NULL ELSE g + 10 END, g * 100 FROM generate_series(1, 20000) g")
	exec("UPDATE public.ljp SET c_id = NULL WHERE o_id = 5")
	exec("CREATE UNIQUE INDEX ON public.ljp (o_id, c_id) NULLS NOT DISTINCT")
	for _, q := range strings.Split(pl.CreateShapeTarget(), ";\n") {
		exec(q)
	}
	exec("INSERT INTO public.ljp_big SELECT o_id, c_id, amount FROM public.ljp WHERE amount > 0")
	exec("INSERT INTO public.ljp_big VALUES (7, NULL, 1), (5, 99, 2)")
	exec("UPDATE public.ljp SET amount = 1 WHERE o_id = 5")
	exec("ANALYZE public.ljp")
	exec("ANALYZE public.ljp_big")
	exec("SET plan_cache_mode = force_generic_plan")
	qs := pl.RecomputeJoinKeys()
	require.Len(t, qs, 1)
	exec("PREPARE nkp AS " + qs[0])
	args := "('{5,4,7}', '{NULL,14,NULL}')"
	raw, plan := explainJSON(ctx, t, conn, "EXPLAIN (FORMAT JSON) EXECUTE nkp"+args)
	require.Empty(t, seqScans(plan["Plan"].(map[string]any)), "%s", raw)
	var deleted, upserted int64
	require.NoError(t, conn.QueryRow(ctx, "EXECUTE nkp"+args).Scan(&deleted, &upserted))
	require.Equal(t, []int64{1, 1}, []int64{deleted, upserted})
	var rows []string
	r, err := conn.Query(ctx, "SELECT o_id || ',' || coalesce(c_id::text, 'NULL') || ',' || amount FROM public.ljp_big WHERE o_id IN (4, 5, 7) ORDER BY 1")
	require.NoError(t, err)
	for r.Next() {
		var s string
		require.NoError(t, r.Scan(&s))
		rows = append(rows, s)
	}
	require.NoError(t, r.Err())
	require.Equal(t, []string{"4,14,400", "5,99,2", "5,NULL,1", "7,17,700"}, rows)
}

// TestNullGroupPageSearchesNoArrayPerRow: the recompute of a page whose
// groups include NULL (RecomputeGroups(true)), for an aggregate grouped
// by one nullable column, finds the groups' rows through the index on it
// (= ANY of the groups, or IS NULL) in a generic plan, with no filter
// searching the array row by row. It added "AND array_position(groups,
// NULL) IS NOT NULL" to the NULL arm, which no index serves, so the whole
// OR was a filter: the groups' text[] cast again and searched for every
// row, 11 s for 500 groups of 100 rows (0.12 s without), and the
// null_chain bench shape's 200,000-change drain at 1M rows, whose every
// page holds the NULL group, did not converge in 10 minutes.
func TestNullGroupPageSearchesNoArrayPerRow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl, _ := planOf(t, goldenCase{
		name:   "null_group",
		stmt:   "TRANSFORM per_c FROM rows_c SELECT c, sum(v) AS total, count(*) AS n GROUP BY c",
		tables: []*Table{table("public", "rows_c", "", []string{"id"}, "id bigint", "c integer", "v integer")},
		types:  map[string]string{"id": "bigint", "c": "integer", "v": "integer"},
	})
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.rows_c (id bigint PRIMARY KEY, c integer, v integer NOT NULL)")
	exec("INSERT INTO public.rows_c SELECT g, NULLIF(g % 2000, 0), g % 7 FROM generate_series(1, 40000) g")
	exec("CREATE INDEX ON public.rows_c (c)")
	buildTarget(exec, pl)
	exec("ANALYZE public.rows_c")
	exec("ANALYZE public.per_c")
	exec("SET plan_cache_mode = force_generic_plan")
	groups := []string{"NULL"}
	for i := 1; i <= 1000; i += 2 {
		groups = append(groups, fmt.Sprint(i))
	}
	for i, q := range pl.RecomputeGroups(true) {
		name := fmt.Sprintf("n%d", i)
		exec("PREPARE " + name + " AS " + q)
		raw, plan := explainJSON(ctx, t, conn, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE %s('{%s}')", name, strings.Join(groups, ",")))
		require.Empty(t, arrayFilters(plan["Plan"].(map[string]any)), "%s", raw)
	}
}
