package trellis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A plain source table whose statement-level capture stops seeing some of
// its writes after the define: another table made to inherit from it
// (writes to that child), the table attached as a partition (inserts
// routed through the partitioned parent), or made to inherit from another
// table (updates through that parent). PostgreSQL fires a statement
// trigger only for the table a statement names. The writes (of the owner,
// in the DDL's own transaction, and of a role that may only INSERT and
// UPDATE) all succeed; the readers pause with a capture failure naming the
// other table and the fix, instead of staying live and missing rows; after
// the fix, RESUME re-derives them with every change made meanwhile.
func TestSourceGainingInheritancePausesItsReaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, other string
		ddl         []string // owner, in one transaction with a write
		writes      []string // a role that may only INSERT and UPDATE
		says, fix   string
	}{
		{name: "child", other: "public.kid",
			ddl:    []string{`CREATE TABLE kid () INHERITS (src)`, `GRANT INSERT, UPDATE ON kid TO PUBLIC`, `INSERT INTO kid VALUES (200, 1, 200)`},
			writes: []string{`INSERT INTO kid VALUES (201, 2, 201)`, `UPDATE kid SET v = 11`},
			says:   "inherited by public.kid", fix: `ALTER TABLE public.kid NO INHERIT public.src`},
		{name: "partition", other: "public.big",
			ddl: []string{`CREATE TABLE big (id int PRIMARY KEY, g int, v int) PARTITION BY RANGE (id)`,
				`ALTER TABLE big ATTACH PARTITION src FOR VALUES FROM (0) TO (1000)`, `GRANT INSERT, UPDATE ON big TO PUBLIC`, `INSERT INTO big VALUES (300, 1, 300)`},
			writes: []string{`INSERT INTO big VALUES (301, 2, 301)`, `UPDATE big SET v = 12`},
			says:   "a partition of public.big", fix: `ALTER TABLE public.big DETACH PARTITION public.src`},
		{name: "parent", other: "public.base",
			ddl:    []string{`CREATE TABLE base (id int, g int, v int)`, `ALTER TABLE src INHERIT base`, `GRANT INSERT, UPDATE ON base TO PUBLIC`, `UPDATE base SET v = 13`},
			writes: []string{`UPDATE base SET v = 14`},
			says:   "inherits from public.base", fix: `ALTER TABLE public.src NO INHERIT public.base`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
			e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 40) i`)
			writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
			c := e.engine()
			_, err := c.Define(e.ctx, "TRANSFORM proj FROM src SELECT v * 2 AS w")
			require.NoError(t, err)
			e.waitState(c, "proj", trellis.StateLive)
			e.as(writer, `UPDATE src SET v = 3`)
			e.converge(c)

			before := time.Now().Add(-time.Second)
			e.as(e.db, append([]string{`UPDATE src SET v = 7`}, tc.ddl...)...)
			for _, w := range tc.writes {
				e.as(writer, w)
			}
			st := e.waitCaptureFailure(c, "proj", before)
			require.Equal(t, "public.src", st.CaptureFailure.SourceTable)
			require.Contains(t, st.CaptureFailure.Error, tc.says)
			require.Contains(t, st.CaptureFailure.Error, tc.fix)
			require.Contains(t, st.CaptureFailure.Error, "RESUME TRANSFORM proj")
			e.as(writer, tc.writes[len(tc.writes)-1])

			// RESUME while the table is still so: paused again.
			resumed := time.Now()
			_, err = c.Apply(e.ctx, "RESUME TRANSFORM proj")
			require.NoError(t, err)
			e.waitCaptureFailure(c, "proj", resumed)

			e.exec(tc.fix)
			e.as(writer, `UPDATE src SET v = 15`, `INSERT INTO src VALUES (400, 4, 400)`)
			_, err = c.Apply(e.ctx, "RESUME TRANSFORM proj")
			require.NoError(t, err)
			e.waitState(c, "proj", trellis.StateLive)
			e.as(writer, `UPDATE src SET v = 16`)
			e.converge(c)
			e.assertMatches("proj", "SELECT id, v * 2 AS w FROM src")
		})
	}
}
