package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// Target names resolve exactly as SQL identifiers in every statement:
// quoted names keep their case, dots and quotes, unquoted ones fold to
// lower case, and PAUSE, RESUME and DROP TRANSFORM act on that transform
// alone, dropping only its own target.
func TestQuotedTargetNamesResolveExactly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT i, i FROM generate_series(1, 5) i`)
	e.exec(`CREATE SCHEMA "Sales"`)
	c := e.engine()
	targets := map[string]string{
		`"Totals"`:         `public."Totals"`,
		`totals`:           `public.totals`,
		`"we""ird.name"`:   `public."we""ird.name"`,
		`"Sales"."Totals"`: `"Sales"."Totals"`,
		`"Sales.Totals"`:   `public."Sales.Totals"`,
		`"Sales".totals`:   `"Sales".totals`,
	}
	for name := range targets {
		_, err := c.Define(e.ctx, "TRANSFORM "+name+" FROM src SELECT v AS v")
		require.NoError(t, err, name)
	}
	exists := func(rel string) bool {
		return e.rows(`SELECT to_regclass($1) IS NOT NULL`, rel)[0][0] == "true"
	}
	for _, rel := range targets {
		require.True(t, exists(rel), rel)
	}
	for _, name := range []string{`"Totals"`, `"we""ird.name"`, `"Sales"."Totals"`} {
		_, err := c.Apply(e.ctx, "PAUSE TRANSFORM "+name)
		require.NoError(t, err, name)
	}
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	paused := 0
	for _, d := range defs {
		if d.State == trellis.StatePaused {
			paused++
		}
	}
	require.Equal(t, 3, paused, "%+v", defs)

	// Unquoted TOTALS is totals; each DROP takes its own table alone.
	for _, name := range []string{`TOTALS`, `"Sales.Totals"`, `"we""ird.name"`, `"Sales"."Totals"`} {
		_, err := c.Apply(e.ctx, "DROP TRANSFORM "+name)
		require.NoError(t, err, name)
	}
	for name, rel := range targets {
		gone := name == `totals` || name == `"Sales.Totals"` || name == `"we""ird.name"` || name == `"Sales"."Totals"`
		require.Equal(t, !gone, exists(rel), rel)
	}
	_, err = c.Apply(e.ctx, `DROP TRANSFORM "TOTALS"`)
	requireCode(t, err, trellis.CodeNotFound)
}

// A target renamed, moved to another schema, or dropped and created again
// by someone else halts its transform with the reason (nothing is written
// to whatever table has the name now), while the source's writes go on;
// DROP TRANSFORM then drops no table it did not create under the name.
func TestMovedTargetHaltsItsTransform(t *testing.T) {
	t.Parallel()
	for name, ddl := range map[string][]string{
		"renamed":            {`ALTER TABLE copy RENAME TO copy_old`},
		"moved":              {`CREATE SCHEMA elsewhere`, `ALTER TABLE copy SET SCHEMA elsewhere`},
		"dropped, recreated": {`DROP TABLE copy`, `CREATE TABLE copy (id int PRIMARY KEY, v int)`, `INSERT INTO copy VALUES (1, -1)`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
			e.exec(`INSERT INTO src SELECT i, i FROM generate_series(1, 10) i`)
			writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
			c := e.engine()
			_, err := c.Define(e.ctx, "TRANSFORM copy FROM src SELECT v AS v")
			require.NoError(t, err)
			e.waitState(c, "copy", trellis.StateLive)
			e.as(e.db, ddl...)
			e.as(writer, `UPDATE src SET v = 100`, `INSERT INTO src VALUES (11, 11)`)
			st := e.waitState(c, "copy", trellis.StatePaused)
			require.NotNil(t, st.CaptureFailure)
			require.Equal(t, trellis.CaptureFailureHalt, st.CaptureFailure.Kind)
			require.Contains(t, st.PausedReason, "no longer the target Trellis created")
			e.as(writer, `UPDATE src SET v = 200`)
			before := e.rows(`SELECT count(*) FROM pg_class WHERE relname IN ('copy', 'copy_old') AND relkind = 'r'`)
			_, err = c.Apply(e.ctx, "DROP TRANSFORM copy")
			require.NoError(t, err)
			require.Equal(t, before, e.rows(`SELECT count(*) FROM pg_class WHERE relname IN ('copy', 'copy_old') AND relkind = 'r'`),
				"DROP TRANSFORM dropped a table that is not the one it created under the name")
			if name == "dropped, recreated" {
				require.Equal(t, [][]string{{"1", "-1"}}, e.rows(`SELECT id, v FROM copy`))
			}
		})
	}
}
