package trellis_test

import (
	"fmt"
	"time"

	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A definition whose result depends on the clock cannot be kept equal to
// its recompute (nothing re-derives a row when time passes): it is
// refused, naming what reads the clock, and nothing is created.
func TestClockDependentDefinitionsAreRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE ev (id int PRIMARY KEY, at timestamptz, d date, label text)`)
	e.exec(`CREATE FUNCTION recent(t timestamptz) RETURNS bool LANGUAGE sql STABLE AS 'SELECT t > now() - interval ''1 day'''`)
	e.exec(`CREATE FUNCTION overdue(d date) RETURNS bool LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN d < CURRENT_DATE; END $$`)
	e.exec(`CREATE FUNCTION days_left(d date) RETURNS int LANGUAGE sql STABLE BEGIN ATOMIC SELECT d - localtimestamp::date; END`)
	e.exec(`CREATE FUNCTION later(a timestamptz, b int) RETURNS bool LANGUAGE sql STABLE AS 'SELECT a > pg_catalog.transaction_timestamp() + b * interval ''1 s'''`)
	e.exec(`CREATE OPERATOR >>> (LEFTARG = timestamptz, RIGHTARG = int, FUNCTION = later)`)
	e.exec(`CREATE FUNCTION shout(s text) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT upper(s) || ''!'''`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM ok FROM ev SELECT at AS at, label AS label")
	require.NoError(t, err)

	cases := []struct{ stmt, names string }{
		{"TRANSFORM t1 FROM ev SELECT at AS at WHERE at > now() - interval '10 seconds'", "now()"},
		{"TRANSFORM t1 FROM ev SELECT at AS at WHERE at > pg_catalog.now()", "pg_catalog.now()"},
		{"TRANSFORM t1 FROM ev SELECT current_timestamp - at AS age", "CURRENT_TIMESTAMP"},
		{"TRANSFORM t1 FROM ev SELECT at AS at WHERE at < CURRENT_TIMESTAMP(3)", "CURRENT_TIMESTAMP"},
		{"TRANSFORM t1 FROM ev SELECT current_date - d AS days", "CURRENT_DATE"},
		{"TRANSFORM t1 FROM ev SELECT current_time AS tm", "CURRENT_TIME"},
		{"TRANSFORM t1 FROM ev SELECT localtime AS tm", "LOCALTIME"},
		{"TRANSFORM t1 FROM ev SELECT localtimestamp AS ts", "LOCALTIMESTAMP"},
		{"TRANSFORM t1 FROM ev SELECT transaction_timestamp() AS ts", "transaction_timestamp()"},
		{"TRANSFORM t1 FROM ev SELECT statement_timestamp() AS ts", "statement_timestamp()"},
		{"TRANSFORM t1 FROM ev SELECT clock_timestamp() AS ts", "clock_timestamp()"},
		{"TRANSFORM t1 FROM ev SELECT timeofday() AS ts", "timeofday()"},
		{"TRANSFORM t1 FROM ev SELECT age(at) AS age", "age()"},
		{"TRANSFORM t1 FROM ev SELECT at AS at WHERE at > 'now'::timestamptz", "'now'"},
		{"TRANSFORM t1 FROM ev SELECT d AS d WHERE d = date 'today'", "'today'"},
		{"TRANSFORM t1 FROM ev SELECT d AS d WHERE d >= ' Yesterday '", "' Yesterday '"},
		{"TRANSFORM t1 FROM ev SELECT label AS l, max(at) AS last WHERE at > now() GROUP BY label", "now()"},
		{"TRANSFORM t1 FROM ev SELECT label AS l, count(*) FILTER (WHERE at > now()) AS recent GROUP BY label", "now()"},
		{"TRANSFORM t1 FROM ev SELECT date_trunc('day', now()) AS l, count(*) AS n GROUP BY date_trunc('day', now())", "now()"},
		{"TRANSFORM t1 FROM ev SELECT current_user AS who", "CURRENT_USER"},
		{"TRANSFORM t1 FROM ev SELECT txid_current() AS x", "txid_current()"},
		{"TRANSFORM t1 FROM ev SELECT label AS l WHERE label = current_setting('app.tenant')", "current_setting()"},
		{"TRANSFORM t1 FROM ev SELECT at AS at WHERE recent(at)", "function public.recent(timestamp with time zone), which calls now(),"},
		{"TRANSFORM t1 FROM ev SELECT overdue(d) AS late", "function public.overdue(date), which calls CURRENT_DATE,"},
		{"TRANSFORM t1 FROM ev SELECT label AS l, count(*) FILTER (WHERE days_left(d) < 3) AS soon GROUP BY label", "function public.days_left(date), which calls LOCALTIMESTAMP,"},
		{"TRANSFORM t1 FROM ev SELECT at >>> 5 AS later", "function public.later(timestamp with time zone,integer), which calls pg_catalog.transaction_timestamp(),"},
		{"ALTER TRANSFORM ok ADD COLUMN overdue(d) AS late", "function public.overdue(date)"},
		{"ALTER TRANSFORM ok ADD COLUMN now() - at AS age", "now()"},
		{"ALTER TRANSFORM ok ADD COLUMN at > localtimestamp AS past", "LOCALTIMESTAMP"},
	}
	for _, tc := range cases {
		_, err := c.Apply(e.ctx, tc.stmt)
		requireCode(t, err, trellis.CodeValidation)
		require.Contains(t, err.Error(), tc.names, tc.stmt)
		if !strings.Contains(tc.names, "CURRENT_USER") && !strings.Contains(tc.names, "txid") && !strings.Contains(tc.names, "setting") {
			require.Contains(t, err.Error(), "clock", tc.stmt)
		}
	}
	// What does not read the clock stays allowed: two-argument age, a
	// text literal that happens to spell a time word.
	_, err = c.Define(e.ctx, "TRANSFORM fine FROM ev SELECT age(at, d) AS span, shout(label) AS label WHERE label <> 'today'::text AND label <> 'now'::varchar")
	require.NoError(t, err)

	require.Equal(t, [][]string{{"false"}}, e.rows(`SELECT to_regclass('t1') IS NOT NULL`))
	require.Equal(t, [][]string{{"at"}, {"id"}, {"label"}},
		e.rows(`SELECT attname FROM pg_attribute WHERE attrelid = 'ok'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY 1`))
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, defs, 2)
}

// eventually polls cond until it holds, failing the test after
// stateWaitCap.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(stateWaitCap)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// differs counts the rows by which a target and a recompute differ, by
// text forms, both ways.
func (e *env) differs(target, recompute string) int {
	e.t.Helper()
	var n int
	q := fmt.Sprintf(`SELECT (SELECT count(*) FROM ((SELECT x::text FROM (%[1]s) x) EXCEPT ALL (SELECT y::text FROM (%[2]s) y)) a)
    + (SELECT count(*) FROM ((SELECT y::text FROM (%[2]s) y) EXCEPT ALL (SELECT x::text FROM (%[1]s) x)) b)`, target, recompute)
	require.NoError(e.t, e.db.QueryRow(e.ctx, q).Scan(&n))
	return n
}

// A function a transform calls that is replaced changes what the
// definition yields for rows nobody touches: the target is re-derived.
// One dropped (the definition no longer runs) pauses it with the reason.
func TestReplacedFunctionRederivesTarget(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE FUNCTION tax(p numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT p * 0.1'`)
	e.exec(`CREATE FUNCTION band(p numeric) RETURNS int LANGUAGE plpgsql IMMUTABLE AS 'BEGIN RETURN p::int / 10; END'`)
	e.exec(`CREATE FUNCTION plus_one(a numeric, b numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT a + b'`)
	e.exec(`CREATE OPERATOR ## (LEFTARG = numeric, RIGHTARG = numeric, FUNCTION = plus_one)`)
	e.exec(`CREATE FUNCTION gone(p numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT p'`)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, price numeric)`)
	e.exec(`INSERT INTO orders SELECT g, g FROM generate_series(1, 200) g`)
	e.exec(`CREATE INDEX ON orders (band(price))`)
	c := e.engine()
	shapes := []struct{ stmt, target, recompute string }{
		{"TRANSFORM taxed FROM orders SELECT tax(price) AS tax, price ## 1 AS up", "SELECT id, tax, up FROM taxed", "SELECT id, price * 0.2, price + 1 FROM orders"},
		{"TRANSFORM bands FROM orders SELECT band(price) AS band, count(*) AS n GROUP BY band(price)", "SELECT band, n FROM bands", "SELECT price::int / 20, count(*) FROM orders GROUP BY 1"},
		{"TRANSFORM plain FROM orders SELECT gone(price) AS p", "SELECT id, p FROM plain", "SELECT id, price FROM orders"},
	}
	for _, s := range shapes {
		_, err := c.Define(e.ctx, s.stmt)
		require.NoError(t, err)
	}
	for _, n := range []string{"taxed", "bands", "plain"} {
		e.waitState(c, n, trellis.StateLive)
	}
	e.exec(`CREATE OR REPLACE FUNCTION tax(p numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT p * 0.2'`)
	e.exec(`CREATE OR REPLACE FUNCTION band(p numeric) RETURNS int LANGUAGE plpgsql IMMUTABLE AS 'BEGIN RETURN p::int / 20; END'`)
	e.exec(`REINDEX TABLE orders`)
	for _, s := range shapes[:2] {
		e.eventually(s.stmt+" is re-derived", func() bool { return e.differs(s.target, s.recompute) == 0 })
	}
	e.exec(`UPDATE orders SET price = price + 1000 WHERE id = 1`)
	e.converge(c)
	for _, s := range shapes[:2] {
		name := strings.Fields(s.stmt)[1]
		st := e.waitState(c, name, trellis.StateLive)
		require.Nil(t, st.CaptureFailure)
		require.Zero(t, e.differs(s.target, s.recompute), s.stmt)
	}
	// The operator's function, replaced too.
	e.exec(`CREATE OR REPLACE FUNCTION plus_one(a numeric, b numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT a + b + 1'`)
	e.eventually("the operator's replacement is re-derived", func() bool {
		return e.differs("SELECT id, up FROM taxed", "SELECT id, price + 2 FROM orders") == 0
	})

	// A replacement that reads the clock pauses the transform, saying so.
	e.exec(`CREATE OR REPLACE FUNCTION band(p numeric) RETURNS int LANGUAGE plpgsql STABLE AS 'BEGIN RETURN extract(hour from now())::int; END'`)
	st := e.waitState(c, "bands", trellis.StatePaused)
	require.Contains(t, st.PausedReason, "band(numeric)")
	require.Contains(t, st.PausedReason, "reads the clock")

	e.exec(`DROP FUNCTION gone(numeric)`)
	st = e.waitState(c, "plain", trellis.StatePaused)
	require.Contains(t, st.PausedReason, "gone(numeric)")
	require.Contains(t, st.PausedReason, "dropped")
	// Other transforms stay live.
	st = e.waitState(c, "taxed", trellis.StateLive)
	require.Empty(t, st.PausedReason)
}
