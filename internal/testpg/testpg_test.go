package testpg

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines (internal/testsupport cannot be
// used here: it imports this package).
func TestMain(m *testing.M) {
	code := m.Run()
	if err := StopShared(); err != nil && code == 0 {
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
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

// TestNewDatabaseUsesEnvURL checks that with TRELLIS_TEST_DATABASE_URL
// set, NewDatabase creates its database on that server, starts no cluster,
// and its drop function drops the database.
func TestNewDatabaseUsesEnvURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Stop()) })
	t.Setenv(EnvDatabaseURL, c.URL("postgres"))

	sharedMu.Lock()
	startedBefore := sharedTried
	sharedMu.Unlock()

	url, drop, err := NewDatabase(ctx, t.Name(), nil)
	require.NoError(t, err)
	var name string
	conn := connect(t, url)
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&name))
	assert.Regexp(t, `^t_[0-9]+_testnewdatabaseusesenvurl$`, name)
	assert.Equal(t, withDatabase(c.URL("postgres"), name), url)
	assert.Equal(t, c.URL(name), url)

	if !startedBefore {
		sharedMu.Lock()
		assert.False(t, sharedTried, "NewDatabase started a cluster although %s is set", EnvDatabaseURL)
		sharedMu.Unlock()
	}

	require.NoError(t, drop(ctx)) // WITH (FORCE) ends the open session
	admin := connect(t, c.URL("postgres"))
	var n int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
	assert.Zero(t, n, "database %s not dropped", name)
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
	// Other test processes on the machine start and stop clusters in the
	// same directory meanwhile: only a new directory this process owns is
	// one the failed Start left behind.
	after, _ := filepath.Glob(filepath.Join(baseDir(), tempPrefix+"*"))
	for _, dir := range after {
		if owner, ok := readPid(filepath.Join(dir, "owner.pid")); ok && owner == os.Getpid() {
			assert.Contains(t, before, dir, "failed Start left its temp dir behind")
		}
	}
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
