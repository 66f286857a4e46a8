package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
)

func TestDemo(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY)`) // the user's own objects stay
	r := e.run("demo", "--rows", "2000", "--writers", "2", "--duration", "2s")
	require.Equal(t, cli.ExitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	t.Log("\n" + r.stdout)
	require.Contains(t, r.stdout, "defined public.demo_order_totals\n")
	require.Regexp(t, `backfill: \d+ rows, live in `, r.stdout)
	require.Regexp(t, `(?m)^\s+1s\s+\d+ writes \(\s*\d+/s\)  commit-to-target lag median [\d.]+ms, max [\d.]+ms over \d+ probes$`, r.stdout)
	require.Regexp(t, `summary: \d+ writes in \S+ \(\d+ writes/s\); commit-to-target lag p50 [\d.]+ms, p99 [\d.]+ms`, r.stdout)
	require.Regexp(t, `target matches its definition: \d+ rows\n`, r.stdout)
	require.Contains(t, r.stdout, "cleaned up: dropped public.demo_order_totals, public.demo_orders and schema trellis_demo\n")

	// Everything the demo created is gone; the rest is untouched.
	var demoTables, schemas, userTables int
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT
		(SELECT count(*) FROM pg_class WHERE relname LIKE 'demo\_%'),
		(SELECT count(*) FROM pg_namespace WHERE nspname = 'trellis_demo'),
		(SELECT count(*) FROM pg_class WHERE relname = 'orders')`).Scan(&demoTables, &schemas, &userTables))
	require.Zero(t, demoTables)
	require.Zero(t, schemas)
	require.Equal(t, 1, userTables)

	// It refuses to touch a table of the user's that has its name.
	e.exec(`CREATE TABLE demo_orders (id int PRIMARY KEY); INSERT INTO demo_orders VALUES (1)`)
	r = e.run("demo", "--rows", "10", "--duration", "1s")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "trellis: table public.demo_orders already exists")
	var n int
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT count(*) FROM demo_orders`).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'trellis_demo'`).Scan(&n))
	require.Zero(t, n)
}

func TestDemoThrowawayServer(t *testing.T) {
	t.Parallel()
	r := runIn(t.Context(), "", "demo", "--rows", "500", "--writers", "1", "--duration", "1s")
	require.Equal(t, cli.ExitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "no --url or DATABASE_URL: starting a throwaway PostgreSQL server\n"), r.stdout)
	require.Regexp(t, `PostgreSQL \d+ on 127\.0\.0\.1:\d+ \(removed at the end\)`, r.stdout)
	require.Regexp(t, `target matches its definition: \d+ rows\n`, r.stdout)
}

func TestBench(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.run("bench", "--only", "backfill", "--rows", "2000", "--quiet")
	require.Equal(t, cli.ExitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "backfill")
	require.Empty(t, r.stderr)
}

// The demo's own pool pins search_path like every connection of Trellis:
// a path the database sets (to a schema another role could plant
// functions and operators in) does not reach the demo's statements.
func TestDemoPoolPinsSearchPath(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT current_database()`).Scan(&db))
	e.exec(`CREATE SCHEMA trap`)
	e.exec(`CREATE TABLE trap.planted (x int)`)
	e.exec(fmt.Sprintf(`ALTER DATABASE %q SET search_path = trap, public`, db))
	cfg, err := cli.DemoPoolConfig(e.url, 1)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	var path string
	var planted *string
	require.NoError(t, pool.QueryRow(e.ctx, `SELECT current_setting('search_path'), to_regclass('planted')::text`).Scan(&path, &planted))
	require.Equal(t, "pg_catalog, pg_temp", path)
	require.Nil(t, planted, "the database's path does not resolve names for the demo")
}
