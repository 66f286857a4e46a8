package ledger

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

// TestEveryPassStatementsStayCheap: the statements the staging worker and
// idle drain workers run on every pass are planned far below the cost at
// which PostgreSQL compiles a statement with JIT (jit_above_cost, 100,000
// by default): a misestimate there (the ring, never analyzed, taken for
// 1,810 rows times 1,000 segments) made each segment check compile for
// about a second of CPU, several times a second on an idle instance.
func TestEveryPassStatementsStayCheap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, pool := testsupport.Pool(t)
	require.NoError(t, catalog.Migrate(ctx, pool, "trellis", "public"))
	cat := catalog.New("trellis")
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"segment states": {cat.SQL(sqlSegmentStates), []any{"trellis"}},
		"look":           {cat.SQL(sqlOutlook), nil},
	} {
		var plan []map[string]any
		var raw []byte
		require.NoError(t, pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(&raw), name)
		require.NoError(t, json.Unmarshal(raw, &plan), name)
		cost := plan[0]["Plan"].(map[string]any)["Total Cost"].(float64)
		require.Less(t, cost, 10_000.0, "%s: planned at cost %.0f", name, cost)
	}
}
