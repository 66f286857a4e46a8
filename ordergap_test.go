package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A global top-k's SourceIndexGaps name the index of its ORDER BY, in
// order and direction, with a fix PostgreSQL accepts: an index of another
// mix of directions does not serve, its exact reverse does (a backward
// scan), and once one exists no gap is left; the top-k stays exact.
func TestTopKOrderIndexGap(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE scores (id bigint PRIMARY KEY, v int, w int)`)
	e.exec(`INSERT INTO scores SELECT g, g % 50, g % 7 FROM generate_series(1, 300) g`)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM best FROM scores SELECT id, v ORDER BY v DESC, id LIMIT 5`, "best",
			`SELECT id, v FROM scores ORDER BY v DESC, id LIMIT 5`},
		{`TRANSFORM best_w FROM scores s SELECT s.id, s.w * 2 AS w2 WHERE s.v > 3 ORDER BY w2 DESC NULLS LAST, s.id LIMIT 4`, "best_w",
			`SELECT id, w * 2 AS w2 FROM scores WHERE v > 3 ORDER BY w2 DESC NULLS LAST, id LIMIT 4`},
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	gaps := func(target string) []trellis.SourceIndexGap {
		t.Helper()
		st, err := c.Status(e.ctx, target)
		require.NoError(t, err)
		return st.SourceIndexGaps
	}
	for _, d := range defs {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	require.Equal(t, []trellis.SourceIndexGap{{Table: "public.scores", Columns: []string{"v DESC", "id"}, Role: trellis.RoleOrderBy,
		Fix: `CREATE INDEX ON "public"."scores" USING btree (v DESC, id);`}}, gaps("best"))
	e.exec(`CREATE INDEX ON scores (v, id)`)
	require.Len(t, gaps("best"), 1, "(v, id) gives v DESC only with id DESC")
	e.exec(`CREATE INDEX ON scores (v, id DESC)`)
	require.Empty(t, gaps("best"), "(v, id DESC) scanned backward gives v DESC, id")

	g := gaps("best_w")
	require.Len(t, g, 1)
	require.Equal(t, trellis.RoleOrderBy, g[0].Role)
	require.Equal(t, `CREATE INDEX ON "public"."scores" USING btree (((w * 2)) DESC NULLS LAST, id);`, g[0].Fix)
	e.exec(g[0].Fix)
	require.Empty(t, gaps("best_w"))

	e.exec(`UPDATE scores SET v = 99 WHERE id IN (3, 4)`)
	e.exec(`UPDATE scores SET w = NULL WHERE id = 10`)
	e.exec(`DELETE FROM scores WHERE id = 49`)
	e.converge(c)
	for _, d := range defs {
		e.assertMatches(d.target, d.recompute)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}
}
