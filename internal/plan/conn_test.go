package plan

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/testsupport"
)

// testConn connects to a fresh test database, closed when the test ends,
// and returns the connection with an exec that requires each statement to
// succeed.
func testConn(ctx context.Context, t *testing.T) (*pgx.Conn, func(q string, args ...any)) {
	t.Helper()
	conn, err := pgx.Connect(ctx, testsupport.Database(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn, func(q string, args ...any) {
		t.Helper()
		_, err := conn.Exec(ctx, q, args...)
		require.NoError(t, err, q)
	}
}

// buildTarget creates pl's target and fills it as a resync does.
func buildTarget(exec func(q string, args ...any), pl *Plan) {
	for _, q := range strings.Split(pl.CreateShapeTarget(), ";\n") {
		exec(q)
	}
	for _, q := range pl.ShapeResync() {
		exec(q)
	}
}

// rowQuerier is a connection or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// explainJSON runs an EXPLAIN (..., FORMAT JSON) statement and returns its
// output and the plan it decodes to (the one statement's object).
func explainJSON(ctx context.Context, t *testing.T, q rowQuerier, stmt string, msgAndArgs ...any) ([]byte, map[string]any) {
	t.Helper()
	var raw []byte
	require.NoError(t, q.QueryRow(ctx, stmt).Scan(&raw), msgAndArgs...)
	return raw, decodePlan(t, raw)
}

// decodePlan decodes the output of an EXPLAIN (..., FORMAT JSON): the one
// statement's object, its "Plan" the root node.
func decodePlan(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var plan []map[string]any
	require.NoError(t, json.Unmarshal(raw, &plan))
	return plan[0]
}

// genericTx begins a transaction in which a prepared statement gets the
// generic plan a drain worker's does, under the statement timeout given,
// and runs stmts in it (an empty one is skipped). The caller rolls it back.
func genericTx(ctx context.Context, t *testing.T, conn *pgx.Conn, timeout string, stmts ...string) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('statement_timeout', $1, true)", timeout)
	require.NoError(t, err)
	for _, s := range stmts {
		if s != "" {
			_, err := tx.Exec(ctx, s)
			require.NoError(t, err, s)
		}
	}
	return tx
}
