package trellistest

import (
	"testing"

	"github.com/trellis-pg/trellis/internal/testpg"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

// EnvDatabaseURL names the environment variable that makes NewDatabase
// create its databases on an existing server instead of starting one. Its
// user must be allowed to create databases.
const EnvDatabaseURL = testpg.EnvDatabaseURL

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
	return testsupport.DatabaseFor(t, "trellistest")
}

// Main runs the tests and then stops the server NewDatabase started, if
// any, returning the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(trellistest.Main(m)) }
//
// It is optional: without it the server is stopped when the test binary
// exits, and its temporary files are removed by the next run.
func Main(m *testing.M) int {
	return testsupport.StopShared(m.Run(), "trellistest")
}
