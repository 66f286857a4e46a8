package trellis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

func requireCode(t *testing.T, err error, code trellis.Code) {
	t.Helper()
	require.Error(t, err)
	var te *trellis.Error
	require.True(t, errors.As(err, &te), "error %v (%T) is not a *trellis.Error", err, err)
	require.Equal(t, code, te.Code, "error: %v", err)
	require.Equal(t, code, trellis.CodeOf(err))
}

func TestPauseResumeAppliesChangesMadeWhilePaused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE widgets (id int PRIMARY KEY, price int)`)
	e.exec(`INSERT INTO widgets SELECT g, g FROM generate_series(1, 100) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM widget_prices FROM widgets SELECT price * 2 AS doubled")
	require.NoError(t, err)
	e.waitState(c, "widget_prices", trellis.StateLive)

	res, err := c.Apply(e.ctx, "PAUSE TRANSFORM widget_prices")
	require.NoError(t, err)
	require.Equal(t, trellis.Paused{Addresses: []string{"widget_prices"}}, res)
	st := e.waitState(c, "widget_prices", trellis.StatePaused)
	require.NotEmpty(t, st.PausedReason)

	e.exec(`UPDATE widgets SET price = 0 WHERE id <= 10`)
	e.exec(`DELETE FROM widgets WHERE id > 90`)
	e.exec(`INSERT INTO widgets VALUES (1000, 7)`)
	e.converge(c)
	// Nothing reached the paused target.
	require.Equal(t, [][]string{{"100"}}, e.rows(`SELECT count(*) FROM widget_prices`))
	require.Equal(t, [][]string{{"2"}}, e.rows(`SELECT doubled FROM widget_prices WHERE id = 1`))

	res, err = c.Apply(e.ctx, "resume transform WIDGET_PRICES")
	require.NoError(t, err)
	require.Equal(t, trellis.Resumed{Addresses: []string{"widget_prices"}}, res)
	e.waitState(c, "widget_prices", trellis.StateLive)
	e.converge(c)
	e.assertMatches("widget_prices", "SELECT id, price * 2 AS doubled FROM widgets")

	// Resuming what is not paused resumes nothing.
	res, err = c.Apply(e.ctx, "RESUME TRANSFORM widget_prices")
	require.NoError(t, err)
	require.Equal(t, trellis.Resumed{Addresses: []string{}}, res)
}

func TestDropTransform(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE a (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO a VALUES (1, 1)`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM a1 FROM a SELECT v AS v")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM a2 FROM a SELECT v + 1 AS w")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM a1_chain FROM a1 SELECT v * 10 AS x")
	require.NoError(t, err)
	e.waitState(c, "a1_chain", trellis.StateLive)
	e.waitState(c, "a2", trellis.StateLive)

	// a1 is read by a1_chain: dropping it first is refused, nothing changes.
	_, err = c.Apply(e.ctx, "DROP TRANSFORM a1")
	requireCode(t, err, trellis.CodeConflict)
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT count(*) FROM a1`))

	res, err := c.Apply(e.ctx, "DROP TRANSFORM a1_chain")
	require.NoError(t, err)
	require.Equal(t, trellis.Dropped{Target: "public.a1_chain"}, res)
	res, err = c.Apply(e.ctx, "DROP TRANSFORM public.a1")
	require.NoError(t, err)
	require.Equal(t, trellis.Dropped{Target: "public.a1"}, res)
	require.Equal(t, [][]string{{"false"}, {"false"}}, e.rows(`SELECT to_regclass(n) IS NOT NULL FROM unnest(ARRAY['a1', 'a1_chain']) n`))

	st, err := c.Status(e.ctx, "a1")
	require.NoError(t, err)
	require.Nil(t, st)
	_, err = c.Apply(e.ctx, "DROP TRANSFORM a1")
	requireCode(t, err, trellis.CodeNotFound)

	// a2 still reads a: its capture stays; the dropped a1_chain's source (a1) is gone.
	e.exec(`UPDATE a SET v = 5`)
	e.converge(c)
	require.Equal(t, [][]string{{"6"}}, e.rows(`SELECT w FROM a2`))
	triggers := func(table string) [][]string {
		return e.rows(`SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname LIKE 'trellis%'`, table)
	}
	require.Equal(t, [][]string{{"4"}}, triggers("a"))

	// Dropping the last reader of a removes its capture.
	_, err = c.Apply(e.ctx, "DROP TRANSFORM a2")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return triggers("a")[0][0] == "0" }, 20*time.Second, 20*time.Millisecond)
}

func TestAlterAddAndDropColumn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, qty int, price numeric(10,2))`)
	e.exec(`INSERT INTO items SELECT g, g, g * 1.5 FROM generate_series(1, 500) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM item_view FROM items SELECT qty AS qty")
	require.NoError(t, err)
	e.waitState(c, "item_view", trellis.StateLive)

	res, err := c.Apply(e.ctx, "ALTER TRANSFORM item_view ADD COLUMN qty * price AS amount")
	require.NoError(t, err)
	require.Equal(t, trellis.Altered{Target: "public.item_view"}, res)
	st, err := c.Status(e.ctx, "item_view")
	require.NoError(t, err)
	if st.State != trellis.StateLive {
		require.Equal(t, []string{"amount"}, st.BackfillingColumns)
	}
	require.Equal(t, [][]string{{"numeric"}}, e.rows(`SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'item_view'::regclass AND attname = 'amount'`))
	e.waitState(c, "item_view", trellis.StateLive)
	e.exec(`UPDATE items SET qty = 0 WHERE id < 50`)
	e.converge(c)
	e.assertMatches("item_view", "SELECT id, qty, qty * price AS amount FROM items")
	st, err = c.Status(e.ctx, "item_view")
	require.NoError(t, err)
	require.Empty(t, st.BackfillingColumns)

	_, err = c.Apply(e.ctx, "ALTER TRANSFORM item_view ADD COLUMN qty AS qty")
	requireCode(t, err, trellis.CodeConflict)
	_, err = c.Apply(e.ctx, "ALTER TRANSFORM item_view DROP COLUMN nope")
	requireCode(t, err, trellis.CodeNotFound)
	_, err = c.Apply(e.ctx, "ALTER TRANSFORM item_view DROP COLUMN id")
	requireCode(t, err, trellis.CodeValidation)

	_, err = c.Apply(e.ctx, "ALTER TRANSFORM item_view DROP COLUMN qty")
	require.NoError(t, err)
	e.exec(`UPDATE items SET price = 1 WHERE id = 7`)
	e.converge(c)
	e.assertMatches("item_view", "SELECT id, qty * price AS amount FROM items")
}

func TestStatementErrorsApplyNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int, t text)`)
	e.exec(`CREATE TABLE nokey (v int)`)
	e.exec(`CREATE TABLE taken (id int PRIMARY KEY)`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM ok FROM src SELECT v AS v")
	require.NoError(t, err)

	cases := []struct {
		stmt string
		code trellis.Code
	}{
		{"TRANSFORM t1 FROM src SELECT v + 1", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT v v2 v3", trellis.CodeParse},
		{"TRANSFORM t1 FROM src SELECT v AS v; DROP TABLE src", trellis.CodeParse},
		{"TRANSFORM t1 FROM src SELECT v AS v; DROP TABLE src AS x", trellis.CodeParse},
		{`TRANSFORM "t1; DROP TABLE src" FROM src SELECT v AS v`, trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT (SELECT 1) AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT random() AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT row_number() OVER () AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT generate_series(1, v) AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT t, sum(v) AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT v AS v, t AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT nope AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT v + 'x' AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT v AS id", trellis.CodeValidation},
		{"TRANSFORM t1 FROM nokey SELECT v AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM missing SELECT v AS v", trellis.CodeNotFound},
		{"TRANSFORM taken FROM src SELECT v AS v", trellis.CodeConflict},
		{"TRANSFORM ok FROM src SELECT v AS v", trellis.CodeConflict},
		{"TRANSFORM t1 FROM src SELECT v AS v, t AS t GROUP BY v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src SELECT count(*) AS n GROUP BY v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src s JOIN src2 o ON o.id = s.id SELECT s.v AS v", trellis.CodeNotFound},
		{"TRANSFORM t1 FROM src s JOIN taken o ON o.id = s.nope SELECT s.v AS v", trellis.CodeValidation},
		{"TRANSFORM t1 FROM src s JOIN taken o ON s.id = s.v SELECT s.v AS v", trellis.CodeValidation},
		{"PAUSE TRANSFORM nope", trellis.CodeNotFound},
		{"DROP TRANSFORM", trellis.CodeParse},
		{"SELECT 1", trellis.CodeParse},
		{"", trellis.CodeParse},
	}
	for _, tc := range cases {
		_, err := c.Apply(e.ctx, tc.stmt)
		requireCode(t, err, tc.code)
		require.NotEmpty(t, err.Error())
	}
	// Define refuses other forms before applying them.
	_, err = c.Define(e.ctx, "PAUSE TRANSFORM ok")
	requireCode(t, err, trellis.CodeValidation)
	st, err := c.Status(e.ctx, "ok")
	require.NoError(t, err)
	require.NotEqual(t, trellis.StatePaused, st.State)

	// Nothing of the refused statements exists: no table, no definition.
	require.Equal(t, [][]string{{"false"}}, e.rows(`SELECT to_regclass('t1') IS NOT NULL`))
	require.Equal(t, [][]string{{"true"}}, e.rows(`SELECT to_regclass('src') IS NOT NULL`))
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, defs, 1)
	require.Equal(t, "public.ok", defs[0].Target)

	// Parse errors say where.
	_, err = c.Apply(e.ctx, "TRANSFORM t1 FROM src\nSELECT v AS v WHERE")
	requireCode(t, err, trellis.CodeParse)
	require.Contains(t, err.Error(), "line 2")
}

func TestMigrateRulesAndWorkerConflicts(t *testing.T) {
	t.Parallel()
	e := setup(t)

	_, err := trellis.Connect(e.ctx, trellis.Options{URL: e.url, Schema: "public", Logger: quietLogger()})
	requireCode(t, err, trellis.CodeValidation)
	_, err = trellis.Connect(e.ctx, trellis.Options{URL: e.url, Schema: "x", TargetSchema: "x", Logger: quietLogger()})
	requireCode(t, err, trellis.CodeValidation)
	_, err = trellis.Connect(e.ctx, trellis.Options{Logger: quietLogger()})
	requireCode(t, err, trellis.CodeValidation)

	// Staging on an unmigrated catalog: not found.
	_, err = trellis.Connect(e.ctx, trellis.Options{URL: e.url, Staging: true, Logger: quietLogger()})
	requireCode(t, err, trellis.CodeNotFound)

	// A fleet migrating at once migrates once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := trellis.Connect(e.ctx, trellis.Options{URL: e.url, Logger: quietLogger()})
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			errs[i] = c.Migrate(e.ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, [][]string{{"true"}}, e.rows(`SELECT count(*) = count(DISTINCT version) AND count(*) = max(version) FROM trellis.schema_migrations`), "each version once")

	// Another instance cannot take this one's catalog as its target schema,
	// nor use it as its catalog's target.
	other := e.connect(trellis.Options{Schema: "billing", TargetSchema: "trellis"})
	requireCode(t, other.Migrate(e.ctx), trellis.CodeConflict)
	other2 := e.connect(trellis.Options{Schema: "public2", TargetSchema: "reports"})
	require.NoError(t, other2.Migrate(e.ctx))
	third := e.connect(trellis.Options{Schema: "reports"})
	requireCode(t, third.Migrate(e.ctx), trellis.CodeConflict)
	// A schema holding the user's own tables is not taken over.
	e.exec(`CREATE SCHEMA app; CREATE TABLE app.users (id int)`)
	requireCode(t, e.connect(trellis.Options{Schema: "app"}).Migrate(e.ctx), trellis.CodeConflict)

	// Exactly one staging worker per instance.
	first := e.connect(trellis.Options{Staging: true})
	ok, err := first.HasLiveStagingWorker(e.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = trellis.Connect(e.ctx, trellis.Options{URL: e.url, Staging: true, Logger: quietLogger()})
	requireCode(t, err, trellis.CodeConflict)
	// A different instance has its own.
	e.connect(trellis.Options{Schema: "public2", TargetSchema: "reports", Staging: true})

	web := e.connect(trellis.Options{})
	ok, err = web.HasLiveDrainWorkers(e.ctx)
	require.NoError(t, err)
	require.False(t, ok)
	drainer := e.connect(trellis.Options{DrainWorkers: 1})
	ok, err = web.HasLiveDrainWorkers(e.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, drainer.Close())
	require.NoError(t, drainer.Close())
	ok, err = web.HasLiveDrainWorkers(e.ctx)
	require.NoError(t, err)
	require.False(t, ok)

	require.NoError(t, first.Close())
	ok, err = web.HasLiveStagingWorker(e.ctx)
	require.NoError(t, err)
	require.False(t, ok)
	// Once the first is gone, another may take over.
	e.connect(trellis.Options{Staging: true})

	cfg := web.Config()
	require.Equal(t, trellis.Config{Schema: "trellis", TargetSchema: "public", MaxConns: 20, AcquireTimeout: trellis.CallTimeout}, cfg)
}

func TestCloseCancelsCallsAndDeadlines(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE locked (id int PRIMARY KEY, v int)`)
	c := e.connect(trellis.Options{})
	require.NoError(t, c.Migrate(e.ctx))

	// Hold a lock that define needs (the source table's ACCESS EXCLUSIVE).
	holder, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	defer holder.Rollback(context.Background())
	_, err = holder.Exec(e.ctx, `LOCK TABLE locked IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	// A caller's short deadline: CodeTimeout, and the server-side wait ends.
	short, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	_, err = c.Define(short, "TRANSFORM l2 FROM locked SELECT v AS v")
	cancel()
	requireCode(t, err, trellis.CodeTimeout)

	waiters := func() bool {
		var waiting bool
		err := e.db.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
WHERE NOT granted AND locktype = 'relation' AND relation = 'locked'::regclass)`).Scan(&waiting)
		require.NoError(t, err)
		return waiting
	}
	e.eventually("the timed-out define stops waiting for the lock", func() bool { return !waiters() })

	// A Status on the same client is not delayed by a call stuck on a lock.
	done := make(chan error, 1)
	go func() {
		_, err := c.Define(e.ctx, "TRANSFORM l3 FROM locked SELECT v AS v")
		done <- err
	}()
	e.eventually("the define waits for the table's lock", waiters)
	_, err = c.Status(e.ctx, "anything")
	require.NoError(t, err)

	// Close cancels the stuck call with a validation error.
	require.NoError(t, c.Close())
	select {
	case err := <-done:
		requireCode(t, err, trellis.CodeValidation)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not cancel the call in flight")
	}
	_, err = c.Status(e.ctx, "x")
	requireCode(t, err, trellis.CodeValidation)
	require.NoError(t, c.Close())

	// No server-side work was left behind: nothing waits on the lock.
	require.Eventually(t, func() bool {
		return e.rows(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)[0][0] == "0"
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, [][]string{{"false"}}, e.rows(`SELECT to_regclass('l3') IS NOT NULL`))
}

func TestWatermarkAcrossClients(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE events (id bigint PRIMARY KEY, n int)`)
	worker := e.engine()
	_, err := worker.Define(e.ctx, "TRANSFORM events_copy FROM events SELECT n AS n")
	require.NoError(t, err)
	_, err = worker.Define(e.ctx, "TRANSFORM events_copy2 FROM events_copy SELECT n * 2 AS n2")
	require.NoError(t, err)
	e.waitState(worker, "events_copy2", trellis.StateLive)

	web := e.connect(trellis.Options{})
	reader := e.connect(trellis.Options{})
	for i := 1; i <= 20; i++ {
		e.exec(`INSERT INTO events VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET n = events.n + 1`, i%5, i)
		tok, err := web.WatermarkToken(e.ctx)
		require.NoError(t, err)
		// The token crosses a process boundary as a string.
		parsed, err := trellis.ParseWatermark(tok.String())
		require.NoError(t, err)
		require.NoError(t, reader.AwaitConverged(e.ctx, parsed, 20*time.Second))
		want := e.rows(`SELECT id, n * 2 FROM events ORDER BY id`)
		require.Equal(t, want, e.rows(`SELECT id, n2 FROM events_copy2 ORDER BY id`), "after write %d", i)
	}
	_, err = trellis.ParseWatermark("garbage")
	requireCode(t, err, trellis.CodeValidation)
	requireCode(t, reader.AwaitConverged(e.ctx, trellis.Watermark{}, time.Second), trellis.CodeValidation)
}

// ALTER TRANSFORM keeps what a definition reads exact: a column a
// downstream transform stopped reading can be dropped upstream, and a
// column added over a JOIN reads the table it names.
func TestAlterKeepsReadsExact(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, a int, b int)`)
	e.exec(`INSERT INTO src SELECT g, g, g FROM generate_series(1, 20) g`)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, region text)`)
	e.exec(`INSERT INTO customers SELECT g, 'r' || g FROM generate_series(1, 5) g`)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, cid int, amt int)`)
	e.exec(`INSERT INTO orders SELECT g, g % 5 + 1, g FROM generate_series(1, 20) g`)
	for _, s := range []string{
		`TRANSFORM up FROM src SELECT a AS a, b AS b`,
		`TRANSFORM down FROM up SELECT a AS a, b * 2 AS b2`,
		`TRANSFORM lines FROM orders o JOIN customers c ON c.id = o.cid SELECT o.id AS id, o.amt AS amt`,
	} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err)
	}
	for _, n := range []string{"up", "down", "lines"} {
		e.waitState(c, n, trellis.StateLive)
	}
	_, err := c.Apply(e.ctx, `ALTER TRANSFORM up DROP COLUMN b`)
	require.Equal(t, trellis.CodeConflict, trellis.CodeOf(err), "down still reads up.b")
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM down DROP COLUMN b2`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM up DROP COLUMN b`)
	require.NoError(t, err, "down no longer reads up.b")

	_, err = c.Apply(e.ctx, `ALTER TRANSFORM lines ADD COLUMN c.region AS region`)
	require.NoError(t, err)
	e.waitState(c, "lines", trellis.StateLive)
	// region is read from customers: dropping it there is a capture
	// failure of lines, naming customers.
	e.exec(`ALTER TABLE customers DROP COLUMN region`)
	deadline := time.Now().Add(30 * time.Second)
	var st *trellis.Status
	for time.Now().Before(deadline) {
		st, err = c.Status(e.ctx, "lines")
		require.NoError(t, err)
		if st.CaptureFailure != nil && st.CaptureFailure.Kind == trellis.CaptureFailureCapture {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotNil(t, st.CaptureFailure)
	require.Equal(t, trellis.CaptureFailureCapture, st.CaptureFailure.Kind)
	require.Equal(t, "public.customers", st.CaptureFailure.SourceTable)
	require.Equal(t, []string{"region"}, st.CaptureFailure.Columns)
}

// A projection of a moderate source is built in one statement, its primary
// key added after the rows: the target ends with the same key constraint,
// and the rows are exact.
func TestInitialBuildKeepsTheTargetKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 5000) g`)
	e.exec(`ANALYZE src`)
	_, err := c.Apply(e.ctx, `TRANSFORM copy FROM src SELECT v * 2 AS v2 WHERE v % 3 <> 0`)
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)
	require.Equal(t, [][]string{{"copy_pkey", "id"}}, e.rows(`
SELECT k.conname::text, a.attname::text FROM pg_constraint k
JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)
WHERE k.conrelid = 'copy'::regclass AND k.contype = 'p'`))
	e.assertMatches("copy", `SELECT id, v * 2 AS v2 FROM src WHERE v % 3 <> 0`)
	e.exec(`UPDATE src SET v = v + 1 WHERE id <= 100`)
	e.converge(c)
	e.assertMatches("copy", `SELECT id, v * 2 AS v2 FROM src WHERE v % 3 <> 0`)
}
