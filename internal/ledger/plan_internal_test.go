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

// TestPartOfATransactionIsReadByBlocks: a part of one transaction reads
// its blocks by a TID range scan, also in the generic plan a prepared
// statement switches to, never the transaction's rows through the (xid)
// index (each part would then read every row of the transaction).
func TestPartOfATransactionIsReadByBlocks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, pool := testsupport.Pool(t)
	require.NoError(t, catalog.Migrate(ctx, pool, "trellis", "public"))
	cat := catalog.New("trellis")
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `INSERT INTO trellis.ledger (seg, src, key) SELECT 0, 1, ARRAY[g::text] FROM generate_series(1, 50000) g`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `ANALYZE trellis.ledger_0`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	var raw []byte
	snap := `SELECT pg_current_snapshot()::text`
	var s string
	require.NoError(t, conn.QueryRow(ctx, snap).Scan(&s))
	require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+cat.SQL(sqlPartKeys, segment(0)),
		s, s, Buckets-1, "(10,0)", "(20,0)", "1").Scan(&raw))
	require.Contains(t, string(raw), `"Tid Range Scan"`, string(raw))
	require.NotContains(t, string(raw), `Index`, string(raw))
}
