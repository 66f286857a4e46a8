package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAggregatesOverCountedSetOperationsRunWithoutJIT: the keyed
// recompute of an aggregate over a set operation other than UNION ALL
// (decision 0050: the branches' rows grouped by value, repeated by the
// tree's count through generate_series) runs, in the generic plan a drain
// worker's prepared statement gets, without JIT, reading only the page's
// groups through the source's index. It ran with nested loops off and no
// JIT setting: the copies are a nested loop over the function scan, which
// enable_nestloop = off prices at its disabled cost (over 10^10), so every
// page was compiled, 1.2 s of JIT for a 60 ms page of 200 groups at 1M
// rows; the bench's union_values (this test's first case) kept a latency
// of seconds at 450 writes/s with a drain CPU of 92 µs a change (decision
// 0060). The page's result is checked against the definition.
func TestAggregatesOverCountedSetOperationsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const (
		rows   = 60000
		groups = 2000 // grp = id % 2000: 30 rows a group
		page   = 500  // the page's groups: 0..499
	)
	srcT := table("public", "osrc", "", []string{"id"}, "id bigint", "grp integer", "v integer")
	types := map[string]string{"grp": "integer", "top": "integer", "n": "bigint", "total": "bigint"}
	cases := []goldenCase{
		{name: "union_values", stmt: "TRANSFORM o_union WITH u AS (SELECT grp, v FROM osrc WHERE v >= 0 UNION SELECT grp, v FROM osrc WHERE v < 0) FROM u SELECT grp, max(v) AS top, count(*) AS n GROUP BY grp",
			tables: []*Table{srcT, srcT}, types: types},
		{name: "intersect_all", stmt: "TRANSFORM o_inter WITH u AS (SELECT grp, v FROM osrc INTERSECT ALL SELECT grp, v FROM osrc WHERE id % 3 = 0) FROM u SELECT grp, sum(v) AS total, count(*) AS n GROUP BY grp",
			tables: []*Table{srcT, srcT}, types: types},
	}
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.osrc (id bigint PRIMARY KEY, grp integer NOT NULL, v integer)")
	exec(fmt.Sprintf("INSERT INTO public.osrc SELECT g, g %% %d, g %% 7 - 1 FROM generate_series(1, %d) g", groups, rows))
	exec("CREATE INDEX ON public.osrc (grp)") // what SourceIndexGaps asks for
	exec("VACUUM ANALYZE public.osrc")
	var plans []*Plan
	for _, c := range cases {
		pl, _ := planOf(t, c)
		plans = append(plans, pl)
		buildTarget(exec, pl)
		exec("VACUUM ANALYZE " + pl.Target.Quoted())
	}
	// Rows of the page's groups change value (some to a value their group
	// has, some to a new one), and group 3 loses every row.
	exec(fmt.Sprintf("UPDATE public.osrc SET v = v + id %% 3 WHERE grp < %d", page))
	exec("DELETE FROM public.osrc WHERE grp = 3")
	gs := make([]string, page)
	for g := range gs {
		gs[g] = fmt.Sprint(g)
	}
	arg := "'{" + strings.Join(gs, ",") + "}'"
	for ci, c := range cases {
		pl := plans[ci]
		t.Run(c.name, func(t *testing.T) {
			stmts := pl.RecomputeGroups(false)
			require.Len(t, stmts, 1)
			before, after := pl.PlannerSettings()
			tx := genericTx(ctx, t, conn, "60s", before, fmt.Sprintf("PREPARE %s_page AS %s", c.name, stmts[0]))
			defer func() { _ = tx.Rollback(ctx) }()
			raw, plan := explainJSON(ctx, t, tx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %s_page(%s)", c.name, arg))
			require.NotContains(t, plan, "JIT", "a page of %d groups was compiled by JIT: %s", page, raw)
			var read float64
			for _, w := range planNodes(plan["Plan"].(map[string]any)) {
				if strings.HasPrefix(w.node, "Seq Scan") {
					require.NotContains(t, []string{"osrc", pl.Target.Name}, w.relation, "a page scans the whole of %s: %s", w.relation, raw)
				}
				if w.relation == "osrc" {
					read += w.rows + w.filtered
				}
			}
			// Each branch reads the page's groups' rows, 30 a group.
			limit := float64(2 * page * rows / groups)
			require.LessOrEqual(t, read, limit, "the branches read %.0f source rows for a page of %d groups of %d rows: %s", read, page, rows/groups, raw)

			// Run for real: the target is then the definition's rows.
			_, err := tx.Exec(ctx, fmt.Sprintf("EXECUTE %s_page(%s)", c.name, arg))
			require.NoError(t, err)
			if after != "" {
				_, err = tx.Exec(ctx, after)
				require.NoError(t, err)
			}
			var diff int64
			require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM ((TABLE %[1]s EXCEPT ALL %[2]s) UNION ALL (%[2]s EXCEPT ALL TABLE %[1]s)) d",
				pl.Target.Quoted(), pl.Query())).Scan(&diff))
			require.Zero(t, diff, "the target differs from the definition in %d rows after a page", diff)
		})
	}
}
