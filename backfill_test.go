package trellis_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/staging"
)

// forceParallel makes PostgreSQL plan every query of the test's database
// that can run in parallel with workers, as it does for a large source:
// sessions opened from now on inherit it.
func forceParallel(e *env) {
	e.t.Helper()
	e.exec(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET parallel_setup_cost = 0', current_database());
EXECUTE format('ALTER DATABASE %I SET parallel_tuple_cost = 0', current_database());
EXECUTE format('ALTER DATABASE %I SET min_parallel_table_scan_size = 0', current_database());
EXECUTE format('ALTER DATABASE %I SET max_parallel_workers_per_gather = 2', current_database()); END $$`)
}

// An aggregate whose query PostgreSQL runs in parallel is built through a
// scratch table (decision 0025); writes committed while it builds reach the
// target exactly once, for a GROUP BY, a HAVING and a global aggregate, and
// a join (which yields as many rows as it reads) keeps the one statement.
func TestParallelAggregateBuildsThroughScratch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	forceParallel(e)
	createShapeSources(e)
	e.exec(`ANALYZE items; ANALYZE owners`)
	logs := &lockedBuffer{}
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 2,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})

	w := e.startWriters(3, 7)
	defs := map[string]string{
		"sums":   "TRANSFORM sums FROM items SELECT v, sum(id) AS total, count(*) AS k GROUP BY v",
		"big":    "TRANSFORM big FROM items SELECT v, sum(id) AS total GROUP BY v HAVING count(*) > 20",
		"global": "TRANSFORM global FROM items SELECT sum(v) AS total, count(*) AS k",
		"named":  "TRANSFORM named FROM items i JOIN owners o ON o.id = i.v SELECT i.note AS note, o.name AS name",
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err)
	}
	for name := range defs {
		e.waitState(c, name, trellis.StateLive)
	}
	e.writesPast(&w.writes, 50)
	w.stop(t)
	e.converge(c)
	assertShapes(e)

	method := map[string]any{}
	for _, r := range logs.records(t, "build finished; transform is live") {
		method[r["target"].(string)] = r["method"]
	}
	require.Equal(t, map[string]any{
		"public.sums":   staging.BuildThroughScratch,
		"public.big":    staging.BuildThroughScratch,
		"public.global": staging.BuildThroughScratch,
		"public.named":  staging.BuildInOneStatement,
	}, method)
	// The target keeps its key index, and later writes keep applying.
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT count(*) FROM pg_index WHERE indrelid = 'sums'::regclass AND indisunique`))
	e.exec(`UPDATE items SET v = v + 1 WHERE id <= 500`)
	e.exec(`DELETE FROM items WHERE id % 97 = 0`)
	e.converge(c)
	assertShapes(e)
}

// A row failing in a parallel aggregate's scratch build quarantines its
// column as the careful build does: the other columns are built, the
// group is sampled, and the build method says it went the careful way.
func TestParallelAggregateBuildQuarantines(t *testing.T) {
	t.Parallel()
	e := setup(t)
	forceParallel(e)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, grp int NOT NULL, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g % 10, g, CASE WHEN g = 777 THEN 0 ELSE 1 END FROM generate_series(1, 5000) g`)
	e.exec(`ANALYZE items`)
	logs := &lockedBuffer{}
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 1,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	_, err := c.Define(e.ctx, `TRANSFORM ratios FROM items SELECT grp, count(*) AS n, sum(a / b) AS r GROUP BY grp`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	q := e.waitQuarantine(c, "ratios.r", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	require.Contains(t, q.Error, "division by zero")
	page, err := c.SampleQuarantined(e.ctx, "ratios.r", trellis.SampleOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Samples, 1)
	require.Equal(t, "7", page.Samples[0].Key, "the group of row 777")
	e.assertMatches("(SELECT grp, n FROM ratios) x", `SELECT grp, count(*) AS n FROM items GROUP BY grp`)
	finished := logs.records(t, "build finished; transform is live")
	require.Len(t, finished, 1)
	require.Equal(t, staging.BuildInPages, finished[0]["method"])
}

// assertShapes compares the targets TestParallelAggregateBuildsThroughScratch
// defines with their recomputes.
func assertShapes(e *env) {
	e.t.Helper()
	e.assertMatches("sums", `SELECT v, sum(id) AS total, count(*) AS k FROM items GROUP BY v`)
	e.assertMatches("big", `SELECT v, sum(id) AS total FROM items GROUP BY v HAVING count(*) > 20`)
	e.assertMatches("global", `SELECT sum(v) AS total, count(*) AS k FROM items`)
	e.assertMatches("(SELECT note, name FROM named) x", `SELECT i.note, o.name FROM items i JOIN owners o ON o.id = i.v`)
}
