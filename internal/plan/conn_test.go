package plan

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/testsupport"
)

// testConn connects to a fresh test database, closed when the test ends,
// and returns the connection with an exec that requires each statement to
// succeed.
func testConn(ctx context.Context, t *testing.T) (*pgx.Conn, func(q string)) {
	t.Helper()
	conn, err := pgx.Connect(ctx, testsupport.Database(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn, func(q string) {
		t.Helper()
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
}
