package trellis_test

import (
	"cmp"
	"log/slog"
	"slices"
	"testing"
	"time"

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
	for _, r := range logs.awaitRecords(t, "build finished; transform is live", 4) {
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
	finished := logs.awaitRecords(t, "build finished; transform is live", 1)
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

// A projection whose one-statement build fails on some rows of some
// columns is still built in one statement (decision 0025): the failing
// columns are quarantined with exactly the rows they fail on as samples,
// for a single and a composite key, while writers change the sources
// throughout; after the drain caught up, the samples are exactly the rows
// that fail now and the healthy columns equal their recompute.
func TestBulkBuildQuarantinesFailingColumns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createShapeSources(e)
	logs := &lockedBuffer{}
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 2,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	w := e.startWriters(3, 11)
	for _, d := range []string{
		"TRANSFORM ratios FROM items SELECT 1000 / v AS r, v AS w, note AS note",
		"TRANSFORM pair_ratios FROM pairs SELECT label AS label, 100 / a AS r",
	} {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err)
	}
	e.waitState(c, "ratios", trellis.StateLive)
	e.waitState(c, "pair_ratios", trellis.StateLive)
	method := map[string]any{}
	for _, r := range logs.awaitRecords(t, "build finished; transform is live", 2) {
		method[r["target"].(string)] = r["method"]
	}
	require.Equal(t, map[string]any{"public.ratios": staging.BuildQuarantining, "public.pair_ratios": staging.BuildQuarantining}, method)
	e.writesPast(&w.writes, 100)
	w.stop(t)
	e.converge(c)

	e.assertMatches("(SELECT id, w, note FROM ratios) x", `SELECT id, v, note FROM items`)
	e.assertMatches("(SELECT a, b, label FROM pair_ratios) x", `SELECT a, b, label FROM pairs`)
	q, err := c.QuarantineStatus(e.ctx, "ratios.r")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, q.State)
	require.Contains(t, q.Error, "division by zero")
	page, err := c.SampleQuarantined(e.ctx, "ratios.r", trellis.SampleOptions{Limit: 1000})
	require.NoError(t, err)
	var want []string
	for _, r := range e.rows(`SELECT id FROM items WHERE v = 0 ORDER BY id`) {
		want = append(want, r[0])
	}
	got := sampleKeys(page)
	slices.SortFunc(got, func(a, b string) int { return cmp.Compare(len(a), len(b))*2 + cmp.Compare(a, b) })
	require.Equal(t, want, got, "the samples of ratios.r are the rows with v = 0")
	page, err = c.SampleQuarantined(e.ctx, "pair_ratios.r", trellis.SampleOptions{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, page.Samples, len(e.rows(`SELECT 1 FROM pairs WHERE a = 0`)), "the samples of pair_ratios.r are the rows with a = 0")

	// Fixed and resumed, the quarantined column is rebuilt.
	e.exec(`UPDATE items SET v = 1 WHERE v = 0`)
	e.exec(`UPDATE pairs SET a = 1000 WHERE a = 0`)
	for _, a := range []string{"ratios.r", "pair_ratios.r"} {
		_, err := c.Apply(e.ctx, "RESUME TRANSFORM "+a)
		require.NoError(t, err)
	}
	e.waitState(c, "ratios", trellis.StateLive)
	e.waitState(c, "pair_ratios", trellis.StateLive)
	e.converge(c)
	e.assertMatches("ratios", `SELECT id, 1000 / v AS r, v AS w, note FROM items`)
	e.assertMatches("pair_ratios", `SELECT a, b, label, 100 / a AS r FROM pairs`)
}

// A build whose WHERE raises on a row is no column's fault: it is left to
// the careful pages, which poison the row's key, as before.
func TestBulkBuildLeavesAFailingWhereToPages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, CASE WHEN g = 17 THEN 0 ELSE 1 END FROM generate_series(1, 300) g`)
	logs := &lockedBuffer{}
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 1,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	_, err := c.Define(e.ctx, "TRANSFORM kept FROM items SELECT a AS a WHERE a / b > 0")
	require.NoError(t, err)
	e.waitState(c, "kept", trellis.StateLive)
	finished := logs.awaitRecords(t, "build finished; transform is live", 1)
	require.Len(t, finished, 1)
	require.Equal(t, staging.BuildInPages, finished[0]["method"])
	st, err := c.Status(e.ctx, "kept")
	require.NoError(t, err)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 1, st.HeldKeys.Count)
	poisoned, err := c.PoisonedSince(e.ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, poisoned, 1)
	require.Equal(t, "17", poisoned[0].Key)
	e.assertMatches("kept", `SELECT id, a FROM items WHERE id <> 17`)
}

// The staging worker dying in the middle of a quarantining build (during
// its scan for the failing rows, among them the first rows and adjacent
// ones) leaves nothing behind: the next worker
// builds again from the start, and the target, its quarantined column and
// its samples are exactly those of a build that never stopped.
func TestBulkBuildQuarantiningSurvivesACrash(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, CASE WHEN g % 500 = 0 OR g IN (1, 2, 3, 199999) THEN 0 ELSE 1 END FROM generate_series(1, 200000) g`)
	e.exec(`ANALYZE items`)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))

	first, err := trellis.Connect(e.ctx, trellis.Options{URL: e.url, Logger: quietLogger(), Staging: true, DrainWorkers: 1, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	_, err = first.Define(e.ctx, "TRANSFORM ratios FROM items SELECT a / b AS r, a AS a")
	require.NoError(t, err)
	e.eventually("the build scanning for failing rows", func() bool {
		return e.rows(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%IS NULL FROM (SELECT%'`)[0][0] != "0"
	})
	e.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'trellis%' AND datname = current_database() AND pid <> pg_backend_pid()`)
	require.NoError(t, first.Close())
	require.Equal(t, [][]string{{"waiting_to_backfill", "0", "0"}}, e.rows(`
SELECT t.state, (SELECT count(*) FROM trellis.quarantine), (SELECT count(*) FROM trellis.quarantined_columns) FROM trellis.transforms t`),
		"the stopped build left no rows, samples or quarantined column")
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM ratios`))

	logs := &lockedBuffer{}
	second := e.connect(trellis.Options{Staging: true, DrainWorkers: 1,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	e.waitState(second, "ratios", trellis.StateLive)
	finished := logs.awaitRecords(t, "build finished; transform is live", 1)
	require.Len(t, finished, 1)
	require.Equal(t, staging.BuildQuarantining, finished[0]["method"])
	require.EqualValues(t, 200000, finished[0]["rows"])
	e.assertMatches("(SELECT id, a FROM ratios) x", `SELECT id, a FROM items`)
	q, err := second.QuarantineStatus(e.ctx, "ratios.r")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, q.State)
	require.EqualValues(t, 404, q.Rows, "every failing row is a sample, the first, the last and adjacent ones too")
	require.Equal(t, [][]string{{"404", "404"}}, e.rows(`SELECT count(*), count(DISTINCT key_text) FROM trellis.quarantine WHERE column_name = 'r'`))
}
