package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// parenJoins are parenthesized joins equal to a flat join list (decision
// 0045): an inner join of a parenthesized left join, a left join of one,
// and an aggregate over an inner join of an inner join. Each recompute is
// PostgreSQL's own parenthesized query, its columns in the target's order.
var parenJoins = []struct{ stmt, target, recompute string }{
	{`TRANSFORM pj_inner FROM lefts l JOIN (notes n LEFT JOIN rights r ON r.id = n.lid) ON n.lid = l.id SELECT l.v, n.note, r.w`,
		"pj_inner", `SELECT l.id AS l_id, n.lid AS n_lid, n.line AS n_line, r.id AS r_id, l.v, n.note, r.w FROM lefts l JOIN (notes n LEFT JOIN rights r ON r.id = n.lid) ON n.lid = l.id`},
	{`TRANSFORM pj_left FROM lefts l LEFT JOIN (rights r LEFT JOIN notes n ON n.lid = r.id) ON r.g = l.g SELECT l.v, r.w, n.note`,
		"pj_left", `SELECT l.id AS l_id, r.id AS r_id, n.lid AS n_lid, n.line AS n_line, l.v, r.w, n.note FROM lefts l LEFT JOIN (rights r LEFT JOIN notes n ON n.lid = r.id) ON r.g = l.g`},
	{`TRANSFORM pj_grouped FROM lefts l JOIN (rights r JOIN notes n ON n.lid = r.id) ON r.g = l.g SELECT l.h, count(*) AS c, sum(r.w) AS sw GROUP BY l.h`,
		"pj_grouped", `SELECT l.h, count(*) AS c, sum(r.w) AS sw FROM lefts l JOIN (rights r JOIN notes n ON n.lid = r.id) ON r.g = l.g GROUP BY l.h`},
}

// TestParenthesizedJoinsConverge maintains parenthesized joins read as
// the flat join lists they equal while writers change every table, with
// two clients' drain workers: every target equals PostgreSQL's own
// parenthesized query, both ways, and a self-check finds nothing. A LEFT
// JOIN of a parenthesized inner join, which no flat list equals, is
// refused naming the rewrite.
func TestParenthesizedJoinsConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createFullJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, d := range parenJoins {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	_, err := c.Define(e.ctx, `TRANSFORM pj_bad FROM lefts l LEFT JOIN (rights r JOIN notes n ON n.lid = r.id) ON r.g = l.g SELECT l.v`)
	requireCode(t, err, trellis.CodeValidation)
	require.Contains(t, err.Error(), "define the parenthesized join as a transform and join its target")
	for _, d := range parenJoins {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "pj_inner")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts", "public.notes", "public.rights"}, st.Sources)
	for _, d := range parenJoins {
		e.fixIndexGaps(c, d.target)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}
	writes := e.writeConcurrently(4, 790, 300, writeFullJoinSources)
	e.converge(c)
	for _, d := range parenJoins {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)
}
