package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// indexLoops lists, for each node of a JSON EXPLAIN ANALYZE plan that
// scans the index named, how many times it ran.
func indexLoops(node map[string]any, index string) []float64 {
	var out []float64
	eachPlanNode(node, func(n map[string]any) {
		if name, ok := n["Index Name"].(string); ok && name == index {
			loops, _ := n["Actual Loops"].(float64)
			out = append(out, loops)
		}
	})
	return out
}

// TestAffectedGroupsFindChangedRowsInOneScan: the query finding the groups
// a page's changes touch reads the changed rows as they are now in one
// scan of the source's key index for the whole page, in the custom plan
// and in the generic plan a drain worker's prepared statement gets after a
// few pages. It matched them with IN (SELECT ... FROM chg): the planner
// made the page's keys distinct and looked each up in an index scan of
// its own (one loop per key), which cost three times what the bare
// upsert's lookup of the same groups costs (decision 0052).
func TestAffectedGroupsFindChangedRowsInOneScan(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl, _ := planOf(t, goldenCase{
		name:   "aggregate",
		stmt:   "TRANSFORM totals FROM sales SELECT grp, sum(v) AS total, count(*) AS n GROUP BY grp",
		tables: []*Table{table("public", "sales", "", []string{"id"}, "id bigint", "grp integer", "v integer")},
		types:  map[string]string{"grp": "integer", "total": "bigint", "n": "bigint"},
	})
	src := pl.Spec.Source
	query := pl.AffectedGroups(Changes{Source: src, CapCols: []string{"grp"}, CapTypes: []string{"integer"}}, false, 64)

	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.sales (id bigint PRIMARY KEY, grp integer NOT NULL, v integer)")
	exec("CREATE INDEX ON public.sales (grp)")
	exec("INSERT INTO public.sales SELECT g, g % 1000, 0 FROM generate_series(1, 50000) g")
	exec("ANALYZE public.sales")
	exec("PREPARE a AS " + query)

	// A page of 2,000 updated rows: each key with its old group.
	var ks, vs, hv []string
	for i := 1; i <= 2000; i++ {
		id := i * 20
		ks, vs, hv = append(ks, fmt.Sprint(id)), append(vs, fmt.Sprint((id+1)%1000)), append(hv, "true")
	}
	lit := func(xs []string) string { return "'{" + strings.Join(xs, ",") + "}'" }
	args := lit(ks) + ", " + lit(vs) + ", " + lit(hv)
	count := func() int {
		t.Helper()
		rows, err := conn.Query(ctx, "EXECUTE a("+args+")")
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err())
		return n
	}
	want := count()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		exec("SET plan_cache_mode = " + mode)
		require.Equal(t, want, count(), mode)
		raw, plan := explainJSON(ctx, t, conn, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE a("+args+")", mode)
		loops := indexLoops(plan["Plan"].(map[string]any), "sales_pkey")
		require.Equal(t, []float64{1}, loops, "%s: the changed rows are looked up in one scan of the key index: %s", mode, raw)
	}
	// The groups found: the old group and the current one of every key.
	var groups int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM (SELECT grp FROM public.sales WHERE id % 20 = 0 AND id <= 40000 UNION SELECT (id + 1) % 1000 FROM public.sales WHERE id % 20 = 0 AND id <= 40000) g").Scan(&groups))
	require.Equal(t, groups, want)
}
