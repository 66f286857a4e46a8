package trellistest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/trellis-pg/trellis/internal/testpg"
)

// EnvDatabaseURL names the environment variable that makes NewDatabase
// create its databases on an existing server instead of starting one. Its
// user must be allowed to create databases.
const EnvDatabaseURL = testpg.EnvDatabaseURL

// databaseTimeout bounds creating or dropping one test database.
const databaseTimeout = time.Minute

// NewDatabase returns the URL of a fresh, empty database for the calling
// test, and drops it (ending sessions left on it) when the test ends. It
// is safe from tests running in parallel.
//
// The databases live on a throwaway PostgreSQL server started on first use,
// once per test binary, from the server binaries (initdb, postgres) on PATH
// or under /usr/lib/postgresql/*/bin, newest first; run as root, the server
// runs as the "postgres" user. When TRELLIS_TEST_DATABASE_URL is set, they
// are created on that server instead and nothing is started.
//
// The server stops when the test binary exits. Call Main from TestMain to
// stop it, and remove its files, as soon as the tests have run.
func NewDatabase(t testing.TB) string {
	t.Helper()
	var logf func(string, ...any)
	if testing.Verbose() {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	url, drop, err := testpg.NewDatabase(ctx, t.Name(), logf)
	if err != nil {
		t.Fatalf("trellistest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("trellistest: drop the test's database: %v", err)
		}
	})
	return url
}

// Main runs the tests and then stops the server NewDatabase started, if
// any, returning the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(trellistest.Main(m)) }
//
// It is optional: without it the server is stopped when the test binary
// exits, and its temporary files are removed by the next run.
func Main(m *testing.M) int {
	code := m.Run()
	if err := testpg.StopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "trellistest: stopping the test server: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
