package testpg

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// EnvDatabaseURL names the environment variable that, when set, makes
// NewDatabase create its databases on the server at that URL instead of
// starting a cluster. The URL's user must be allowed to create databases.
const EnvDatabaseURL = "TRELLIS_TEST_DATABASE_URL"

// sharedStartTimeout bounds the start of the shared cluster.
const sharedStartTimeout = 2 * time.Minute

var (
	// sharedMu guards the cluster NewDatabase starts lazily, once per process.
	sharedMu      sync.Mutex
	sharedCluster *Cluster
	sharedErr     error
	sharedTried   bool

	// dbCounter numbers the databases NewDatabase creates.
	dbCounter atomic.Int64
)

// StopShared stops the cluster NewDatabase may have started, if any. A test
// binary calls it once after its tests ran (internal/testsupport.Main does).
func StopShared() error {
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
func shared(logf func(string, ...any)) (*Cluster, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if !sharedTried {
		sharedTried = true
		ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
		defer cancel()
		sharedCluster, sharedErr = Start(ctx, Options{Logf: logf})
	}
	return sharedCluster, sharedErr
}

// NewDatabase creates a fresh, empty database named t_<counter>_<label>
// and returns its URL and a function that drops it (terminating leftover
// sessions). logf, if non-nil, receives the shared cluster's start and stop
// messages.
//
// If TRELLIS_TEST_DATABASE_URL is set, the database is created on that
// server and the URL is that URL with the database name replaced.
// Otherwise it is created on a cluster started on first use and shared by
// every caller in the process; StopShared stops it. Safe for concurrent use.
func NewDatabase(ctx context.Context, label string, logf func(string, ...any)) (string, func(context.Context) error, error) {
	var adminURL string
	var urlFor func(name string) string
	if env := os.Getenv(EnvDatabaseURL); env != "" {
		adminURL = env
		urlFor = func(name string) string { return withDatabase(env, name) }
	} else {
		c, err := shared(logf)
		if err != nil {
			return "", nil, fmt.Errorf("testpg: cannot start a PostgreSQL server (set %s to use an existing server instead): %w",
				EnvDatabaseURL, err)
		}
		adminURL = c.URL("postgres")
		urlFor = c.URL
	}
	var name string
	for attempt := 0; ; attempt++ {
		name = databaseName(label)
		err := createDatabase(ctx, adminURL, name)
		if err == nil {
			break
		}
		// Another process sharing the server may have used the name.
		if !isDuplicateDatabase(err) || attempt >= 100 {
			return "", nil, fmt.Errorf("testpg: create database: %w", err)
		}
	}
	drop := func(ctx context.Context) error { return dropDatabase(ctx, adminURL, name) }
	return urlFor(name), drop, nil
}

// databaseName returns a new database name t_<counter>_<sanitised label>:
// lowercased, characters other than a-z, 0-9 and _ replaced by _, at most
// 40 characters.
func databaseName(label string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(label) {
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
