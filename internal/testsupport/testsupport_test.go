package testsupport

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func tableNames(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(),
		"SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// isolationCreated is Done once by each of the two isolation tests after
// it created its table.
var isolationCreated = func() *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(2)
	return &wg
}()

// TestIsolationAlpha and TestIsolationBeta run in parallel, each create a
// table in their own database and check neither sees the other's.
func TestIsolationAlpha(t *testing.T) { testIsolation(t, "alpha") }

// TestIsolationBeta: see TestIsolationAlpha.
func TestIsolationBeta(t *testing.T) { testIsolation(t, "beta") }

func testIsolation(t *testing.T, table string) {
	t.Parallel()
	url := Database(t)
	conn := connect(t, url)
	_, err := conn.Exec(context.Background(), "CREATE TABLE "+table+" (id int)")
	isolationCreated.Done()
	require.NoError(t, err)

	// Wait (bounded, in case of -parallel=1 or -run) for the other table.
	done := make(chan struct{})
	go func() { isolationCreated.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Log("the other isolation test did not create its table in time")
	}
	assert.Equal(t, []string{table}, tableNames(t, conn))

	var db string
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&db))
	assert.Regexp(t, `^t_[0-9]+_testisolation`+table+`$`, db)
}

// TestDatabaseDroppedAtCleanup checks that the database a test gets is
// gone once its cleanup ran, even with a session still open on it.
func TestDatabaseDroppedAtCleanup(t *testing.T) {
	var url, name string
	t.Run("database", func(t *testing.T) {
		url = Database(t)
		conn := connect(t, url)
		require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
	})
	require.NotEmpty(t, name)
	// The same server, another database: the first one's URL with its name replaced.
	admin := connect(t, Database(t))
	var n int
	require.NoError(t, admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
	assert.Zero(t, n, "database %s not dropped at cleanup", name)
}
