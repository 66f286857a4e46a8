package trellis_test

import (
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
		{"ALTER TRANSFORM ok ADD COLUMN now() - at AS age", "now()"},
		{"ALTER TRANSFORM ok ADD COLUMN at > localtimestamp AS past", "LOCALTIMESTAMP"},
	}
	for _, tc := range cases {
		_, err := c.Apply(e.ctx, tc.stmt)
		requireCode(t, err, trellis.CodeValidation)
		require.Contains(t, err.Error(), tc.names, tc.stmt)
		if tc.names != "CURRENT_USER" {
			require.Contains(t, err.Error(), "clock", tc.stmt)
		}
	}
	// What does not read the clock stays allowed: two-argument age, a
	// text literal that happens to spell a time word.
	_, err = c.Define(e.ctx, "TRANSFORM fine FROM ev SELECT age(at, d) AS span, label AS label WHERE label <> 'today'::text AND label <> 'now'::varchar")
	require.NoError(t, err)

	require.Equal(t, [][]string{{"false"}}, e.rows(`SELECT to_regclass('t1') IS NOT NULL`))
	require.Equal(t, [][]string{{"at"}, {"id"}, {"label"}},
		e.rows(`SELECT attname FROM pg_attribute WHERE attrelid = 'ok'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY 1`))
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, defs, 2)
}
