// Package testsupport is the test harness every package of the module
// shares: one TestMain that stops the throwaway cluster and checks for
// leaked goroutines, and a fresh database per test. Package trellistest
// gives users the same database and stop on top of it. Only test files and
// trellistest import it, so the testing package stays out of the binaries.
package testsupport

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/trellis-pg/trellis/internal/testpg"
)

// databaseTimeout bounds creating or dropping one test database.
const databaseTimeout = time.Minute

// ignored are goroutines that outlive a test by design: pgxpool's health
// check exits shortly after Close returns.
var ignored = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
}

// Main runs the tests, stops the cluster Database may have started, and
// fails the run if goroutines leaked. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }
//
// It returns m.Run's exit code, or 1 if the tests passed but stopping the
// cluster failed or goroutines leaked.
func Main(m *testing.M) int {
	code := StopShared(m.Run(), "testsupport")
	if code == 0 {
		if err := goleak.Find(ignored...); err != nil {
			fmt.Fprintln(os.Stderr, "testsupport: goroutines leaked:", err)
			code = 1
		}
	}
	return code
}

// StopShared stops the shared throwaway cluster, if one was started, and
// returns code, or 1 if code was 0 and stopping failed; who names the
// caller in the message it prints then (trellistest.Main is one).
func StopShared(code int, who string) int {
	if err := testpg.StopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stopping the test server: %v\n", who, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Database creates a fresh, empty database for the calling test, drops it
// (terminating leftover sessions) in t.Cleanup, and returns its URL. The
// database is named t_<counter>_<test name>; see testpg.NewDatabase for
// where it lives (TRELLIS_TEST_DATABASE_URL or a shared throwaway cluster).
// Safe for parallel tests.
func Database(t testing.TB) string {
	t.Helper()
	return DatabaseFor(t, "testsupport")
}

// DatabaseFor is Database, with who naming the caller in its failure
// messages (trellistest.NewDatabase is one).
func DatabaseFor(t testing.TB, who string) string {
	t.Helper()
	var logf func(string, ...any)
	if testing.Verbose() {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	url, drop, err := testpg.NewDatabase(ctx, t.Name(), logf)
	if err != nil {
		t.Fatalf("%s: %v", who, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("%s: drop the test's database: %v", who, err)
		}
	})
	return url
}

// Pool is Database with a pool on the database, closed in t.Cleanup
// before the database is dropped. It returns the database's URL and the
// pool.
func Pool(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	url := Database(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("testsupport: pool on the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return url, pool
}
