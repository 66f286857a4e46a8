package testpg

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// EnvDatabaseURL names the environment variable that, when set, makes
// Database create its databases on the server at that URL instead of
// starting a cluster. The URL's user must be allowed to create databases.
const EnvDatabaseURL = "TRELLIS_TEST_DATABASE_URL"

// Timeouts used by Database.
const (
	sharedStartTimeout = 2 * time.Minute
	databaseTimeout    = time.Minute
)

var (
	// sharedMu guards the cluster Database starts lazily, once per process.
	sharedMu      sync.Mutex
	sharedCluster *Cluster
	sharedErr     error
	sharedTried   bool

	// dbCounter numbers the databases Database creates.
	dbCounter atomic.Int64
)

// Main runs the tests (m.Run) and then stops the cluster that Database may
// have started during the run. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(testpg.Main(m)) }
//
// It returns m.Run's exit code, or 1 if the tests passed but stopping the
// cluster failed.
func Main(m *testing.M) int {
	code := m.Run()
	if err := stopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "testpg: stopping the test cluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// stopShared stops the lazily started cluster, if any.
func stopShared() error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	c := sharedCluster
	sharedCluster, sharedErr, sharedTried = nil, nil, false
	if c == nil {
		return nil
	}
	return c.Stop()
}

// shared returns the process-wide cluster, starting it on first use. A
// failed start is remembered and returned to every later caller.
func shared() (*Cluster, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if !sharedTried {
		sharedTried = true
		ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
		defer cancel()
		var logf func(string, ...any)
		if testing.Verbose() {
			logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
		}
		sharedCluster, sharedErr = Start(ctx, Options{Logf: logf})
	}
	return sharedCluster, sharedErr
}

// Database creates a fresh, empty database for the calling test, drops it
// (terminating leftover sessions) in t.Cleanup, and returns its URL. The
// database is named t_<counter>_<test name>.
//
// If TRELLIS_TEST_DATABASE_URL is set, the database is created on that
// server and the returned URL is that URL with the database name replaced.
// Otherwise it is created on a cluster started on first use and shared by
// all tests of the process; Main stops it. Safe for parallel tests.
func Database(t testing.TB) string {
	t.Helper()
	var adminURL string
	var urlFor func(name string) string
	if env := os.Getenv(EnvDatabaseURL); env != "" {
		adminURL = env
		urlFor = func(name string) string { return withDatabase(env, name) }
	} else {
		c, err := shared()
		if err != nil {
			t.Fatalf("testpg: cannot start a PostgreSQL server for the tests (set %s to use an existing server instead): %v",
				EnvDatabaseURL, err)
		}
		adminURL = c.URL("postgres")
		urlFor = c.URL
	}

	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	var name string
	for attempt := 0; ; attempt++ {
		name = databaseName(t.Name())
		err := createDatabase(ctx, adminURL, name)
		if err == nil {
			break
		}
		// Another test process sharing the server may have used the name.
		if !isDuplicateDatabase(err) || attempt >= 100 {
			t.Fatalf("testpg: create test database: %v", err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
		defer cancel()
		if err := dropDatabase(ctx, adminURL, name); err != nil {
			t.Errorf("testpg: drop test database: %v", err)
		}
	})
	return urlFor(name)
}

// databaseName returns a new database name t_<counter>_<sanitised test
// name>: lowercased, characters other than a-z, 0-9 and _ replaced by _,
// at most 40 characters.
func databaseName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 40 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return fmt.Sprintf("t_%d_%s", dbCounter.Add(1), b.String())
}

// withDatabase returns connection string connStr with its database name
// replaced by dbname. URLs (postgres://, postgresql://) get a new path;
// keyword/value strings get a trailing dbname=, which takes precedence.
func withDatabase(connStr, dbname string) string {
	if strings.HasPrefix(connStr, "postgres://") || strings.HasPrefix(connStr, "postgresql://") {
		if u, err := url.Parse(connStr); err == nil {
			u.Path = "/" + dbname
			u.RawPath = ""
			return u.String()
		}
	}
	return connStr + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(dbname) + "'"
}
