package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	for _, k := range []string{"Filter", "Join Filter"} {
		if f, ok := node[k].(string); ok && strings.Contains(f, "ANY (($") {
			out = append(out, fmt.Sprintf("%s %s: %s", node["Node Type"], k, f))
		}
	}
	if subs, ok := node["Plans"].([]any); ok {
		for _, s := range subs {
			out = append(out, arrayFilters(s.(map[string]any))...)
		}
	}
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
	url := testsupport.Database(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	exec := func(q string) {
		t.Helper()
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	exec("CREATE TABLE public.nums (id bigint PRIMARY KEY, v integer NOT NULL)")
	exec("INSERT INTO public.nums SELECT g, g % 7 FROM generate_series(1, 20000) g")
	for _, q := range strings.Split(pl.CreateShapeTarget(), ";\n") {
		exec(q)
	}
	for _, q := range pl.ShapeResync() {
		exec(q)
	}
	exec("ANALYZE public.nums")
	exec("ANALYZE public.rows_once")
	exec("SET plan_cache_mode = force_generic_plan")
	var ids, vs []string
	for i := 1; i <= 2000; i++ {
		ids, vs = append(ids, fmt.Sprint(i)), append(vs, fmt.Sprint(i%7))
	}
	// A page with a NULL key (RecomputeGroups(true)) still matches the
	// first column with an OR that PostgreSQL evaluates row by row.
	for i, q := range pl.RecomputeGroups(false) {
		name := fmt.Sprintf("r%d", i)
		exec("PREPARE " + name + " AS " + q)
		var raw []byte
		require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE %s('{%s}', '{%s}')", name, strings.Join(ids, ","), strings.Join(vs, ","))).Scan(&raw))
		var plan []map[string]any
		require.NoError(t, json.Unmarshal(raw, &plan))
		require.Empty(t, arrayFilters(plan[0]["Plan"].(map[string]any)), "%s", raw)
	}
}
