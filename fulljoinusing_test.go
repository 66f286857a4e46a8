package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// fullJoinsUsing are FULL JOINs with USING (decision 0045): the merged
// column is COALESCE of both tables' columns, as PostgreSQL defines it,
// in the select list and in WHERE; on one and on two columns, with a
// table joined after it. Each recompute is PostgreSQL's own FULL JOIN
// ... USING, its columns in the target's order.
var fullJoinsUsing = []struct{ stmt, target, recompute string }{
	{`TRANSFORM fu_one FROM lefts l FULL JOIN rights r USING (g) SELECT g, l.v, r.w, l.h AS lh`,
		"fu_one", `SELECT l.id AS l_id, r.id AS r_id, g, l.v, r.w, l.h AS lh FROM lefts l FULL JOIN rights r USING (g)`},
	{`TRANSFORM fu_two FROM lefts l FULL JOIN rights r USING (g, h) SELECT g, h, l.v + coalesce(r.w, 0) AS vw WHERE g IS DISTINCT FROM 3`,
		"fu_two", `SELECT l.id AS l_id, r.id AS r_id, g, h, l.v + coalesce(r.w, 0) AS vw FROM lefts l FULL JOIN rights r USING (g, h) WHERE g IS DISTINCT FROM 3`},
	{`TRANSFORM fu_three FROM lefts l FULL JOIN rights r USING (g) LEFT JOIN notes n ON n.lid = r.id SELECT g, l.v, n.note`,
		"fu_three", `SELECT l.id AS l_id, r.id AS r_id, n.lid AS n_lid, n.line AS n_line, g, l.v, n.note FROM lefts l FULL JOIN rights r USING (g) LEFT JOIN notes n ON n.lid = r.id`},
}

// TestFullJoinUsingConverge maintains FULL JOINs with USING while writers
// change every table at once (the USING columns going NULL, rows gaining
// and losing partners), with two clients' drain workers: every target
// equals PostgreSQL's FULL JOIN ... USING, both ways, and a self-check
// finds nothing. The sources, index gaps and a dump are as for a FULL
// JOIN written with ON; a reader is refused as for one.
func TestFullJoinUsingConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createFullJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, d := range fullJoinsUsing {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range fullJoinsUsing {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "fu_three")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts", "public.notes", "public.rights"}, st.Sources)
	st, err = c.Status(e.ctx, "fu_two")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts(g, h)", "public.rights(g, h)"}, gapNames(st.SourceIndexGaps))
	// Its key may be NULL; a projection reads it (decision 0054).
	e.requireProjectionReads(c, `TRANSFORM fu_reader FROM fu_one SELECT g, lh`, "fu_reader", `SELECT l_id, r_id, g, lh FROM fu_one`)
	dump, err := c.DumpDefinitionsSQL(e.ctx)
	require.NoError(t, err)
	require.Contains(t, dump, "FULL JOIN rights r USING (g, h)")
	for _, d := range fullJoinsUsing {
		e.fixIndexGaps(c, d.target)
	}
	for _, d := range fullJoinsUsing {
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	writes := e.writeConcurrently(4, 690, 400, writeFullJoinSources)
	e.converge(c)
	for _, d := range fullJoinsUsing {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)
	for _, table := range []string{"rights", "lefts"} {
		e.exec(`DELETE FROM ` + table)
		e.converge(c)
		for _, d := range fullJoinsUsing {
			e.assertMatches(d.target, d.recompute)
		}
	}
	e.exec(`INSERT INTO lefts SELECT i, i % 5, i % 3, i FROM generate_series(1, 30) i`)
	e.exec(`INSERT INTO rights SELECT i, i % 4, i % 2, i FROM generate_series(20, 40) i`)
	e.converge(c)
	for _, d := range fullJoinsUsing {
		e.assertMatches(d.target, d.recompute)
	}
}
