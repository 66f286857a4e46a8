package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
	"github.com/trellis-pg/trellis/internal/dump"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestDump(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(ordersDDL)
	e.ok("migrate")
	e.ok("apply", "TRANSFORM order_totals FROM orders SELECT price + tax AS total WHERE status = 'open'")
	e.ok("apply", "TRANSFORM by_status FROM orders SELECT status AS status, count(*) AS n, sum(price) AS revenue GROUP BY status")
	e.ok("apply", "PAUSE TRANSFORM by_status")

	file := filepath.Join(t.TempDir(), "structure.sql")
	r := e.ok("dump", "-f", file)
	require.Equal(t, "schema and definitions (schema trellis) dumped to "+file+"\n", r.stdout)
	written, err := os.ReadFile(file)
	require.NoError(t, err)
	info, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "only its owner reads a schema dump")
	require.Contains(t, string(written), "CREATE TABLE public.order_totals")
	require.Contains(t, string(written), "TRANSFORM by_status FROM orders")
	require.Equal(t, unrestricted(string(written)), unrestricted(e.ok("dump").stdout), "without -f the same dump goes to standard output")

	// A fresh database loaded from the file has both transforms; the paused
	// one loads defined and not built, as every other does.
	url := testsupport.Database(t)
	db, err := pgxpool.New(e.ctx, url)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	e2 := &env{t: t, url: url, db: db, ctx: e.ctx}
	psql, err := dump.FindBinary("psql")
	require.NoError(t, err)
	out, err := exec.CommandContext(e.ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-d", url, "-f", file).CombinedOutput()
	require.NoError(t, err, "loading the dump: %s", out)
	lines := e2.ok("definitions").lines()
	require.Len(t, lines, 3)
	require.Regexp(t, `^public\.order_totals\s+waiting_to_backfill\s`, lines[1])
	require.Regexp(t, `^public\.by_status\s+waiting_to_backfill\s`, lines[2])
	require.Equal(t, "catalog migrated (schema trellis)\n", e2.ok("migrate").stdout)

	e2.exec(`INSERT INTO orders SELECT g, g, g / 10.0, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'closed' END FROM generate_series(1, 300) g`)
	c := e2.workers()
	e2.waitLive(c, "order_totals")
	e2.waitLive(c, "by_status")
	e2.exec(`UPDATE orders SET status = 'open' WHERE id % 5 = 0`)
	e2.exec(`DELETE FROM orders WHERE id % 7 = 0`)
	tok, err := c.WatermarkToken(e.ctx)
	require.NoError(t, err)
	require.NoError(t, c.AwaitConverged(e.ctx, tok, 25*time.Second))
	e2.requireMatches("order_totals", `SELECT id, price + tax AS total FROM orders WHERE status = 'open'`)
	e2.requireMatches("by_status", `SELECT status, count(*) AS n, sum(price) AS revenue FROM orders GROUP BY status`)
}

// unrestricted drops the lines with the random key recent pg_dump versions
// guard a dump's SQL with (\restrict KEY, \unrestrict KEY).
func unrestricted(dump string) string {
	var keep []string
	for _, l := range strings.Split(dump, "\n") {
		if !strings.HasPrefix(l, `\restrict `) && !strings.HasPrefix(l, `\unrestrict `) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func TestDumpRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)

	r := e.run("dump")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "run Migrate first (`trellis migrate` does that)")

	e.ok("migrate")
	// A dump naming its schemas without the catalog's could not load the
	// definitions.
	r = runIn(e.ctx, "", "dump", "--url", e.url, "--", "-n", "public")
	require.Equal(t, cli.ExitError, r.code, r.stderr)
	require.Contains(t, r.stderr, `must name "trellis" too`)
	require.Empty(t, r.stdout)
	r = runIn(e.ctx, "", "dump", "--url", e.url, "--", "-n", "public", "-n", "trellis")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)

	for _, args := range [][]string{{"dump", "--", "-Fc"}, {"dump", "--", "--file=x.sql"}, {"dump", "stray"}} {
		r := runIn(e.ctx, "", append(args, "--url", e.url)...)
		require.Equal(t, cli.ExitUsage, r.code, "%q: %s", args, r.stderr)
	}

	file := filepath.Join(t.TempDir(), "kept.sql")
	require.NoError(t, os.WriteFile(file, []byte("old"), 0o644))
	r = e.run("dump", "-f", file, "--pg-dump", filepath.Join(t.TempDir(), "missing-pg_dump"))
	require.Equal(t, cli.ExitError, r.code)
	kept, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, "old", string(kept), "a failed dump leaves the file as it was")
}

// Another tool dumped the schema; --append adds the definitions, and the
// file loads into a database that has the transforms.
func TestDumpAppend(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(ordersDDL)
	e.ok("migrate")
	e.ok("apply", "TRANSFORM order_totals FROM orders SELECT price + tax AS total WHERE status = 'open'")
	pgDump, err := dump.FindBinary("pg_dump")
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "structure.sql")
	out, err := exec.CommandContext(e.ctx, pgDump, "--schema-only", "-f", file, "-d", e.url).CombinedOutput()
	require.NoError(t, err, "%s", out)

	r := e.ok("dump", "--append", file)
	require.Equal(t, "definitions (schema trellis) appended to "+file+"\n", r.stdout)
	written, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Contains(t, string(written), "CREATE TABLE public.order_totals")
	require.Contains(t, string(written), "TRANSFORM order_totals FROM orders")

	url := testsupport.Database(t)
	db, err := pgxpool.New(e.ctx, url)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	e2 := &env{t: t, url: url, db: db, ctx: e.ctx}
	psql, err := dump.FindBinary("psql")
	require.NoError(t, err)
	out, err = exec.CommandContext(e.ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-d", url, "-f", file).CombinedOutput()
	require.NoError(t, err, "loading the dump: %s", out)
	require.Regexp(t, `(?m)^public\.order_totals\s+waiting_to_backfill\s`, e2.ok("definitions").stdout)

	r = e.run("dump", "--append", filepath.Join(t.TempDir(), "missing.sql"))
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "the file must exist")
	r = e.run("dump", "--append", file, "-f", file)
	require.Equal(t, cli.ExitUsage, r.code)
}
