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

// TestCountedRecomputeWritesOnlyChangedCopies: the keyed recompute of a
// counted set operation (INTERSECT ALL, EXCEPT ALL, decision 0050) whose
// values each have many copies, in the generic plan a drain worker's
// prepared statement gets, does target work proportional to the copies
// the page's changes add or remove, not to the copies its values hold:
// each value's count is read from the source through its index, the
// target's highest ordinal through the target's, and only the ordinals
// past the new count are deleted, only those past the old one inserted.
// It regenerated every copy of every value of the page (the upsert
// checked each against the target's index, and EXCEPT compared them all
// with every target row of the value: a 1M-row source with 100 copies a
// value took 5 ms a unit, 13.8 s for a page of 3,664), and its generic
// plan, estimated at 2,000,000 rows, cost enough for JIT (400 ms of
// compilation a page). The page's result is checked against the
// definition, so the test also fails if the cheaper statement is wrong.
func TestCountedRecomputeWritesOnlyChangedCopies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const (
		rows   = 60000
		values = 2000 // grp = id % 2000, v = 0: 30 copies a value
	)
	src := []string{"id bigint", "grp integer", "v integer"}
	srcT := table("public", "csrc", "", []string{"id"}, src...)
	types := map[string]string{"grp": "integer", "v": "integer", "ordinal": "bigint"}
	cases := []goldenCase{
		{name: "intersect_all", stmt: "TRANSFORM c_inter FROM csrc SELECT grp, v WHERE v >= 0 INTERSECT ALL SELECT grp, v FROM csrc WHERE id > 0",
			tables: []*Table{srcT, srcT}, types: types},
		{name: "except_all", stmt: "TRANSFORM c_except FROM csrc SELECT grp, v EXCEPT ALL SELECT grp, v FROM csrc WHERE id % 10 = 0",
			tables: []*Table{srcT, srcT}, types: types},
	}

	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.csrc (id bigint PRIMARY KEY, grp integer NOT NULL, v integer)")
	exec(fmt.Sprintf("INSERT INTO public.csrc SELECT g, g %% %d, 0 FROM generate_series(1, %d) g", values, rows))
	exec("CREATE INDEX ON public.csrc (grp, v)")
	exec("VACUUM ANALYZE public.csrc")
	var plans []*Plan
	for _, c := range cases {
		pl, _ := planOf(t, c)
		plans = append(plans, pl)
		buildTarget(exec, pl)
		exec("VACUUM ANALYZE " + pl.Target.Quoted())
	}
	// One row of each value moves to v = 1 (its value loses a copy, the
	// new value gains one), one of value 7 to a NULL v, and one value
	// loses every row: the page's units are the old and the new values.
	exec(fmt.Sprintf("UPDATE public.csrc SET v = 1 WHERE id <= %d", values))
	exec(fmt.Sprintf("UPDATE public.csrc SET v = NULL WHERE id = %d", values+7))
	exec("DELETE FROM public.csrc WHERE grp = 11 AND v = 0")
	var gs, vs []string
	for g := range values {
		gs, vs = append(gs, fmt.Sprint(g), fmt.Sprint(g)), append(vs, "0", "1")
	}
	withNull := func(a []string, s string) []string { return append(append([]string(nil), a...), s) }
	pages := []struct {
		name      string
		args      []string
		withNulls bool
	}{
		{"page", []string{"{" + strings.Join(gs, ",") + "}", "{" + strings.Join(vs, ",") + "}"}, false},
		{"null_page", []string{"{" + strings.Join(withNull(gs, "7"), ",") + "}", "{" + strings.Join(withNull(vs, "NULL"), ",") + "}"}, true},
	}
	for ci, c := range cases {
		pl := plans[ci]
		t.Run(c.name, func(t *testing.T) {
			for _, page := range pages {
				units := len(gs)
				stmts := pl.RecomputeGroups(page.withNulls)
				require.Len(t, stmts, 1)
				before, after := pl.PlannerSettings()
				tx := genericTx(ctx, t, conn, "60s", before, fmt.Sprintf("PREPARE %s_%s AS %s", c.name, page.name, stmts[0]))
				args := "'" + strings.Join(page.args, "', '") + "'"
				var raw []byte
				start := time.Now()
				err := tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %s_%s(%s)", c.name, page.name, args)).Scan(&raw)
				took := time.Since(start)
				if pgerr.Is(err, pgerrcode.QueryCanceled) {
					t.Fatalf("a page of %d units did not finish in 60 s under a generic plan", units)
				}
				require.NoError(t, err)
				plan := decodePlan(t, raw)
				require.NotContains(t, plan, "JIT", "a page of %d units was compiled by JIT: %s", units, raw)
				limit := 4 * float64(units)
				for _, w := range planNodes(plan["Plan"].(map[string]any)) {
					if strings.HasPrefix(w.node, "Seq Scan") {
						require.NotContains(t, []string{"csrc", pl.Target.Name}, w.relation, "a page scans the whole of %s: %s", w.relation, raw)
					}
					require.LessOrEqual(t, w.joinFilt, limit, "%s removed %.0f rows by a join filter for a page of %d units: %s", w.node, w.joinFilt, units, raw)
					if w.relation == "csrc" || strings.HasPrefix(w.index, "csrc_") || strings.HasPrefix(w.node, "Append") || strings.HasSuffix(w.node, "Aggregate") {
						continue // a value's count reads its rows
					}
					require.LessOrEqual(t, w.rows+w.filtered, limit, "%s on %q read %.0f rows for a page of %d units (30 copies a value, one or two changed): %s",
						w.node, w.relation, w.rows+w.filtered, units, raw)
				}
				var conflicts float64
				eachPlanNode(plan["Plan"].(map[string]any), func(n map[string]any) {
					f, _ := n["Conflicting Tuples"].(float64)
					conflicts += f
				})
				require.LessOrEqual(t, conflicts, float64(units), "the upsert met %.0f copies already there: %s", conflicts, raw)
				t.Logf("%s %s: a page of %d units in %v", c.name, page.name, units, took)

				// Run for real: the target is then the definition's rows.
				var del, ins int64
				require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf("EXECUTE %s_%s(%s)", c.name, page.name, args)).Scan(&del, &ins))
				if after != "" {
					_, err = tx.Exec(ctx, after)
					require.NoError(t, err)
				}
				// The page without NULLs leaves value (7, NULL) out.
				only := " WHERE v IS NOT NULL"
				if page.withNulls {
					only = ""
				}
				var diff int64
				require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM ((SELECT grp, v, ordinal FROM %[1]s%[3]s EXCEPT ALL SELECT * FROM (%[2]s) q%[3]s) UNION ALL (SELECT * FROM (%[2]s) q%[3]s EXCEPT ALL SELECT grp, v, ordinal FROM %[1]s%[3]s)) d",
					pl.Target.Quoted(), pl.Query(), only)).Scan(&diff))
				require.Zero(t, diff, "the target differs from the definition in %d rows after a page (%d deleted, %d written)", diff, del, ins)
				require.NoError(t, tx.Rollback(ctx))
			}
		})
	}
}
