package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnionAllPageProbesEachBranchOnce: the keyed recompute of a UNION
// ALL whose unit is (branch, key), the key a column every branch fills
// with its FROM table's key (union_join's (branch, id), a UNION ALL of
// one table's rows), reads a page's rows of each branch in one index
// scan of the branch's table, and the page's target rows of each branch
// in one scan of the target's key index, under the generic plan a drain
// worker's prepared statement gets: a node reading the source or the
// target runs once, not once per unit. Probed unit by unit (decision
// 0048), each of a page's units ran its own LATERAL probe of the source
// and of the target, and half of union_join's units find no row (a
// changed row is a unit in both branches): 2,000 probes of each for a
// page of 2,000 units. The page leaves the target as the definition
// yields it: rows moved between branches, rows deleted, a row whose
// customer is gone.
func TestUnionAllPageProbesEachBranchOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ids = 1000 // changed rows of a page: each a unit in both branches
	src := []string{"id bigint", "customer_id bigint", "v integer"}
	srcT := func(alias string) *Table { return table("public", "bsrc", alias, []string{"id"}, src...) }
	custT := table("public", "bcust", "c", []string{"id"}, "id bigint", "region text")
	cases := []goldenCase{
		{name: "union_join",
			stmt:   "TRANSFORM b_union_join FROM bsrc s JOIN bcust c ON c.id = s.customer_id SELECT s.id, c.region, s.v WHERE s.v >= 0 UNION ALL SELECT s.id, c.region, s.v FROM bsrc s LEFT JOIN bcust c ON c.id = s.customer_id WHERE s.v < 0",
			tables: []*Table{srcT("s"), custT, srcT("s"), custT}, types: map[string]string{"branch": "smallint", "id": "bigint", "c_id": "bigint", "region": "text", "v": "integer"}},
		{name: "union_all",
			stmt:   "TRANSFORM b_union FROM bsrc SELECT id, v WHERE v >= 0 UNION ALL SELECT id, v FROM bsrc WHERE v < 0",
			tables: []*Table{srcT(""), srcT("")}, types: map[string]string{"branch": "smallint", "id": "bigint", "v": "integer"}},
	}
	conn, exec := testConn(ctx, t)
	exec("CREATE TABLE public.bcust (id bigint PRIMARY KEY, region text NOT NULL)")
	exec("INSERT INTO public.bcust SELECT g, 'r' || g % 50 FROM generate_series(1, 10000) g")
	exec("CREATE TABLE public.bsrc (id bigint PRIMARY KEY, customer_id bigint NOT NULL, v integer NOT NULL)")
	exec("INSERT INTO public.bsrc SELECT g, g % 10000 + 1, g % 100 - 10 FROM generate_series(1, 100000) g")
	exec("ANALYZE public.bsrc, public.bcust")
	// A page of 1,000 changed rows, each a unit in both branches: every
	// third moved to the other branch, every seventh deleted, every
	// eleventh's customer gone (a row of the LEFT JOIN's branch only).
	var branches, keys, changed []string
	for i := 0; i < ids; i++ {
		id := fmt.Sprint(1 + i*97)
		changed = append(changed, id)
		branches, keys = append(branches, "1", "2"), append(keys, id, id)
	}
	args := fmt.Sprintf("'{%s}', '{%s}'", strings.Join(branches, ","), strings.Join(keys, ","))
	in := strings.Join(changed, ", ")
	for _, c := range cases {
		pl, _ := planOf(t, c)
		buildTarget(exec, pl)
		exec("ANALYZE " + pl.Target.Quoted())
		t.Run(c.name, func(t *testing.T) {
			stmts := pl.RecomputeGroups(false)
			require.Len(t, stmts, 1)
			tx := genericTx(ctx, t, conn, "60s",
				"UPDATE public.bsrc SET v = -v - 1 WHERE id IN ("+in+") AND id % 3 = 0",
				"DELETE FROM public.bsrc WHERE id IN ("+in+") AND id % 7 = 0",
				"UPDATE public.bsrc SET customer_id = 20000 WHERE id IN ("+in+") AND id % 11 = 0",
				fmt.Sprintf("PREPARE %s_page AS %s", c.name, stmts[0]))
			defer func() { _ = tx.Rollback(context.Background()) }()
			raw, plan := explainJSON(ctx, t, tx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %s_page(%s)", c.name, args))
			var srcScans, targetScans int
			for _, w := range planNodes(plan["Plan"].(map[string]any)) {
				switch {
				case w.relation == "bsrc":
					require.NotEqual(t, "Seq Scan", w.node, "a page scans the whole of bsrc: %s", raw)
					require.Equal(t, 1.0, w.loops, "%s of bsrc runs once per unit: %s", w.node, raw)
					srcScans++
				case w.relation == pl.Target.Name && (strings.Contains(w.node, "Index") || w.node == "Bitmap Heap Scan"):
					require.Equal(t, 1.0, w.loops, "%s of the target runs once per unit: %s", w.node, raw)
					targetScans++
				case w.relation == pl.Target.Name:
					require.NotEqual(t, "Seq Scan", w.node, "a page scans the whole target: %s", raw)
				}
			}
			require.Equal(t, 2, srcScans, "one scan of bsrc a branch: %s", raw)
			require.Equal(t, 2, targetScans, "one scan of the target's key index a branch: %s", raw)
			var wrong int
			require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM ((SELECT to_jsonb(t) FROM %[1]s t EXCEPT ALL SELECT to_jsonb(d) FROM (%[2]s) d)
				UNION ALL (SELECT to_jsonb(d) FROM (%[2]s) d EXCEPT ALL SELECT to_jsonb(t) FROM %[1]s t)) x`, pl.Target.Quoted(), pl.Query())).Scan(&wrong))
			require.Zero(t, wrong, "target rows differ from the definition's after the page")
		})
	}
}
