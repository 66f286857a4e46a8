package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ranSeqScans lists the relations an analyzed JSON plan read by a
// sequential scan (planned and run: a scan under a one-time filter that
// failed runs no loop).
func ranSeqScans(node map[string]any) []string {
	var out []string
	eachPlanNode(node, func(n map[string]any) {
		if loops, _ := n["Actual Loops"].(float64); n["Node Type"] == "Seq Scan" && loops > 0 {
			out = append(out, fmt.Sprint(n["Relation Name"]))
		}
	})
	return out
}

// TestPartialRecomputeReadsItsRanges: a page of a global aggregate kept
// through partials (decision 0051) reads the source rows of its ranges
// through the key index, not the whole source, also in the generic plan a
// drain worker's prepared statements get; the statements that fill the
// partials from the whole source do not run once they are complete.
func TestPartialRecomputeReadsItsRanges(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl, _ := planOf(t, goldenCase{
		name:      "global_partials",
		stmt:      "TRANSFORM sums FROM nums SELECT sum(v) AS total, count(*) AS n, avg(v) AS mean",
		tables:    []*Table{table("public", "nums", "", []string{"id"}, "id bigint", "v integer")},
		types:     map[string]string{"total": "bigint", "n": "bigint", "mean": "numeric"},
		partTypes: []string{"bigint", "bigint", "bigint"},
	})
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.nums (id bigint PRIMARY KEY, v integer NOT NULL)")
	exec("INSERT INTO public.nums SELECT g, g % 7 FROM generate_series(1, 200000) g")
	for _, q := range strings.Split(pl.CreateShapeTarget(), ";\n") {
		exec(q)
	}
	for _, q := range strings.Split(pl.CreatePartials(), ";\n") {
		exec(q)
	}
	for _, q := range pl.RecomputeGroups(false) {
		exec(q, []string{GlobalKeyText}) // fills the partials
	}
	exec("ANALYZE public.nums")
	exec("ANALYZE public.sums_trellis_partials")
	before, _ := pl.PlannerSettings()
	exec("BEGIN")
	exec(before)
	exec("SET LOCAL plan_cache_mode = force_generic_plan")
	// Ten ranges a page, as 500 writes/s give.
	var ranges []string
	for i := 0; i < 10; i++ {
		ranges = append(ranges, fmt.Sprint(i*19))
	}
	arg := "'{" + strings.Join(ranges, ",") + "}'"
	for i, q := range pl.RecomputeGroups(false) {
		name := fmt.Sprintf("r%d", i)
		exec("PREPARE " + name + " AS " + q)
		for range 6 { // past the custom plans
			exec("EXECUTE " + name + "(" + arg + ")")
		}
		raw, plan := explainJSON(ctx, t, conn, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %s(%s)", name, arg))
		require.NotContains(t, ranSeqScans(plan["Plan"].(map[string]any)), "nums", "statement %d reads the whole source: %s", i, raw)
		t.Logf("statement %d: %.2f ms", i, plan["Execution Time"])
	}
	exec("COMMIT")
	var total, n int64
	var mean string
	require.NoError(t, conn.QueryRow(ctx, "SELECT total, n, mean::text FROM public.sums").Scan(&total, &n, &mean))
	var wantTotal, wantN int64
	var wantMean string
	require.NoError(t, conn.QueryRow(ctx, "SELECT sum(v), count(*), avg(v)::text FROM public.nums").Scan(&wantTotal, &wantN, &wantMean))
	require.Equal(t, []any{wantTotal, wantN, wantMean}, []any{total, n, mean})
}

// TestShiftFor: the range size follows the source's size, within bounds.
func TestShiftFor(t *testing.T) {
	for rows, want := range map[float64]int{-1: PartialsShift, 0: 6, 1e5: 6, 1e6: 7, 1e7: 9, 1e8: 11, 1e12: 12} {
		require.Equal(t, want, ShiftFor(rows), "%v rows", rows)
	}
}
