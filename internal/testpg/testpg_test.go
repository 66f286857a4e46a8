package testpg

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

func TestStartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	c, err := Start(ctx, Options{Settings: map[string]string{"work_mem": "8MB"}, Logf: t.Logf})
	require.NoError(t, err)
	t.Logf("Start took %s", time.Since(begin))
	t.Cleanup(func() { _ = c.Stop() })

	assert.Equal(t, "postgres://postgres@127.0.0.1:"+strconv.Itoa(c.Port())+"/x?sslmode=disable", c.URL("x"))
	conn := connect(t, c.URL("postgres"))
	for setting, want := range map[string]string{
		"work_mem":           "8MB",
		"fsync":              "off",
		"max_connections":    "400",
		"listen_addresses":   "127.0.0.1",
		"full_page_writes":   "off",
		"log_min_messages":   "warning",
		"shared_buffers":     "128MB",
		"max_wal_size":       "2GB",
		"port":               strconv.Itoa(c.Port()),
		"server_encoding":    "UTF8",
		"synchronous_commit": "off",
	} {
		var got string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got))
		assert.Equal(t, want, got, setting)
	}

	url, err := c.CreateDatabase(ctx, "Mixed Case")
	require.NoError(t, err)
	other := connect(t, url)
	var db string
	require.NoError(t, other.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	assert.Equal(t, "Mixed Case", db)
	// WITH (FORCE) ends the open session.
	require.NoError(t, c.DropDatabase(ctx, "Mixed Case"))
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = 'Mixed Case'").Scan(&n))
	assert.Zero(t, n)
	require.NoError(t, conn.Close(ctx))

	dir := c.Dir()
	require.DirExists(t, dir)
	require.NoError(t, c.Stop())
	require.NoError(t, c.Stop())
	assert.NoDirExists(t, dir)
	_, err = net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(c.Port()), time.Second)
	assert.Error(t, err, "server still listening after Stop")
}

// TestStartRetriesTakenPort makes the first port Start tries a taken one.
func TestStartRetriesTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return freePort()
	}
	t.Cleanup(func() { pickPort = freePort })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Logf: t.Logf})
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Stop()) }()
	assert.NotEqual(t, taken, c.Port())
	assert.Equal(t, 2, calls)
	connect(t, c.URL("postgres"))
}

// TestDatabaseUsesEnvURL checks that with TRELLIS_TEST_DATABASE_URL set,
// Database creates its database on that server, starts no cluster, and
// drops the database at cleanup.
func TestDatabaseUsesEnvURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Stop()) })
	t.Setenv(EnvDatabaseURL, c.URL("postgres"))

	sharedMu.Lock()
	startedBefore := sharedTried
	sharedMu.Unlock()

	var url, name string
	t.Run("database", func(t *testing.T) {
		url = Database(t)
		conn := connect(t, url)
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&name))
		assert.Equal(t, withDatabase(c.URL("postgres"), name), url)
		assert.Equal(t, c.URL(name), url)
	})
	require.NotEmpty(t, name)

	if !startedBefore {
		sharedMu.Lock()
		assert.False(t, sharedTried, "Database started a cluster although %s is set", EnvDatabaseURL)
		sharedMu.Unlock()
	}

	conn := connect(t, c.URL("postgres"))
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
	assert.Zero(t, n, "database %s not dropped at cleanup", name)
}

func TestDatabaseName(t *testing.T) {
	n := databaseName("TestFoo/Sub-Test_1 with spaces and a very long name indeed")
	assert.Regexp(t, `^t_[0-9]+_testfoo_sub_test_1_with_spaces_and_a_ver$`, n)
	assert.NotEqual(t, n, databaseName("TestFoo/Sub-Test_1 with spaces and a very long name indeed"))
	assert.Regexp(t, `^t_[0-9]+_t_$`, databaseName("Tü"))
}

func TestWithDatabase(t *testing.T) {
	assert.Equal(t, "postgres://u:p@h:5/new?sslmode=disable",
		withDatabase("postgres://u:p@h:5/old?sslmode=disable", "new"))
	assert.Equal(t, "postgresql://h/new", withDatabase("postgresql://h", "new"))
	assert.Equal(t, "host=h dbname=old dbname='new'", withDatabase("host=h dbname=old", "new"))
}

func TestStartFailureReportsServerLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, _ := filepath.Glob(filepath.Join(baseDir(), tempPrefix+"*"))
	c, err := Start(ctx, Options{Settings: map[string]string{"no_such_setting": "1"}})
	if c != nil {
		_ = c.Stop()
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unrecognized configuration parameter "no_such_setting"`)
	after, _ := filepath.Glob(filepath.Join(baseDir(), tempPrefix+"*"))
	assert.Subset(t, before, after, "failed Start left its temp dir behind")
}

func TestSweepStale(t *testing.T) {
	// A pid that is certainly dead: a finished child of ours.
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	dead := cmd.Process.Pid

	mk := func(owner int) string {
		dir, err := os.MkdirTemp(baseDir(), tempPrefix)
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		require.NoError(t, os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(owner)), 0o644))
		old := time.Now().Add(-time.Hour)
		require.NoError(t, os.Chtimes(dir, old, old))
		return dir
	}
	stale, alive := mk(dead), mk(os.Getpid())
	sweepStale()
	assert.NoDirExists(t, stale)
	assert.DirExists(t, alive)
}
