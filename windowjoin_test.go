package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// windowJoins are window functions, per-group and global top-k and
// DISTINCT ON over joins (decision 0045): partitioned by the joined
// table, by the FROM table, by a third table, over a LEFT and a FULL JOIN
// (whose partition may be NULL), each with the fresh recompute it must
// equal, its columns in the target's order (the partition's outputs, the
// rows' key, the other outputs).
var windowJoins = []struct{ stmt, target, recompute string }{
	{`TRANSFORM wj_sum FROM lefts l JOIN rights r ON r.g = l.g SELECT r.h AS rh, l.v, sum(l.v) OVER (PARTITION BY r.h) AS sv, count(*) OVER (PARTITION BY r.h) AS n`,
		"wj_sum", `SELECT r.h AS rh, l.id AS l_id, r.id AS r_id, l.v, sum(l.v) OVER (PARTITION BY r.h) AS sv, count(*) OVER (PARTITION BY r.h) AS n FROM lefts l JOIN rights r ON r.g = l.g`},
	{`TRANSFORM wj_topk FROM (SELECT l.id, l.g, l.v, r.w, row_number() OVER (PARTITION BY l.g ORDER BY l.v DESC NULLS LAST, l.id) AS rn FROM lefts l JOIN rights r ON r.id = l.id) s SELECT * WHERE rn <= 2`,
		"wj_topk", `SELECT g, id, v, w, rn FROM (SELECT l.id, l.g, l.v, r.w, row_number() OVER (PARTITION BY l.g ORDER BY l.v DESC NULLS LAST, l.id) AS rn FROM lefts l JOIN rights r ON r.id = l.id) s WHERE rn <= 2`},
	{`TRANSFORM wj_limit FROM lefts l LEFT JOIN notes n ON n.lid = l.id SELECT l.id, n.lid, n.line, l.v, n.note ORDER BY l.v DESC NULLS LAST, l.id, n.lid, n.line LIMIT 7`,
		"wj_limit", `SELECT l.id, n.lid, n.line, l.v, n.note FROM lefts l LEFT JOIN notes n ON n.lid = l.id ORDER BY l.v DESC NULLS LAST, l.id, n.lid, n.line LIMIT 7`},
	{`TRANSFORM wj_best FROM lefts l JOIN notes n ON n.lid = l.id LEFT JOIN rights r ON r.id = n.lid SELECT DISTINCT ON (l.g) l.g, l.id AS lid, n.line, r.w ORDER BY l.g, r.w DESC NULLS LAST, l.id, n.lid, n.line`,
		"wj_best", `SELECT DISTINCT ON (l.g) l.g, l.id AS lid, n.line, r.w FROM lefts l JOIN notes n ON n.lid = l.id LEFT JOIN rights r ON r.id = n.lid ORDER BY l.g, r.w DESC NULLS LAST, l.id, n.lid, n.line`},
	{`TRANSFORM wj_full FROM lefts l FULL JOIN rights r ON r.g = l.g SELECT l.h AS lh, l.v, r.w, count(*) OVER (PARTITION BY l.h) AS n, max(r.w) OVER (PARTITION BY l.h) AS mw`,
		"wj_full", `SELECT l.h AS lh, l.id AS l_id, r.id AS r_id, l.v, r.w, count(*) OVER (PARTITION BY l.h) AS n, max(r.w) OVER (PARTITION BY l.h) AS mw FROM lefts l FULL JOIN rights r ON r.g = l.g`},
	{`TRANSFORM wj_third FROM lefts l JOIN notes n ON n.lid = l.id LEFT JOIN rights r ON r.g = l.g SELECT r.h, n.note, rank() OVER (PARTITION BY r.h ORDER BY l.v) AS rk`,
		"wj_third", `SELECT r.h, l.id AS l_id, n.lid AS n_lid, n.line AS n_line, r.id AS r_id, n.note, rank() OVER (PARTITION BY r.h ORDER BY l.v) AS rk FROM lefts l JOIN notes n ON n.lid = l.id LEFT JOIN rights r ON r.g = l.g`},
	{`TRANSFORM wj_chain FROM rights r JOIN notes n ON n.lid = r.id SELECT r.id AS rid, n.line, sum(n.line) OVER (PARTITION BY r.id) AS s`,
		"wj_chain", `SELECT r.id AS rid, n.lid AS n_lid, n.line, sum(n.line) OVER (PARTITION BY r.id) AS s FROM rights r JOIN notes n ON n.lid = r.id`},
}

// TestWindowsOverJoinsConverge maintains windows, top-k and DISTINCT ON
// over joins of two and three tables while writers change every table at
// once (rows gaining and losing partners, join and partition columns
// going NULL, keys moving), with two clients' drain workers; every target
// then equals a fresh recompute, both ways, and a self-check finds
// nothing. A transform reads the window over an inner join partitioned by
// a NOT NULL column; one over an outer join is refused.
func TestWindowsOverJoinsConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createFullJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	defs := windowJoins
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	_, err := c.Define(e.ctx, `TRANSFORM wj_reader FROM wj_chain SELECT rid, n_lid, line, s + 1 AS s1`)
	require.NoError(t, err)
	defs = append(defs, struct{ stmt, target, recompute string }{"", "wj_reader", `SELECT rid, n_lid, line, s + 1 AS s1 FROM wj_chain`})
	// A window over a FULL JOIN has a key that may be NULL: an aggregate
	// (decision 0049) and a projection (decision 0054) read it.
	_, err = c.Define(e.ctx, `TRANSFORM wj_full_counts FROM wj_full SELECT lh, count(*) AS rows, count(r_id) AS matched GROUP BY lh`)
	require.NoError(t, err)
	defs = append(defs, struct{ stmt, target, recompute string }{"", "wj_full_counts", `SELECT lh, count(*) AS rows, count(r_id) AS matched FROM wj_full GROUP BY lh`})
	_, err = c.Define(e.ctx, `TRANSFORM wj_full_rows FROM wj_full SELECT n + 1 AS n1 WHERE mw IS DISTINCT FROM 0`)
	require.NoError(t, err)
	defs = append(defs, struct{ stmt, target, recompute string }{"", "wj_full_rows", `SELECT lh, l_id, r_id, n + 1 FROM wj_full WHERE mw IS DISTINCT FROM 0`})

	for _, d := range defs {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "wj_third")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts", "public.notes", "public.rights"}, st.Sources)
	st, err = c.Status(e.ctx, "wj_sum")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts(g)", "public.rights(g)", "public.rights(h)"}, gapNames(st.SourceIndexGaps),
		"the ON columns both ways, and the PARTITION BY on the table it reads")
	for _, d := range defs {
		e.fixIndexGaps(c, d.target)
	}
	for _, d := range defs {
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	writes := e.writeConcurrently(4, 590, 400, writeFullJoinSources)
	e.converge(c)
	for _, d := range defs {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)

	for _, table := range []string{"rights", "notes", "lefts"} {
		e.exec(`DELETE FROM ` + table)
		e.converge(c)
		for _, d := range defs {
			e.assertMatches(d.target, d.recompute)
		}
	}
	e.exec(`INSERT INTO lefts SELECT i, i % 5, i % 3, i FROM generate_series(1, 30) i`)
	e.exec(`INSERT INTO rights SELECT i, i % 4, i % 2, i FROM generate_series(20, 40) i`)
	e.exec(`INSERT INTO notes SELECT 15 + i / 2, i % 2, 'm' || i FROM generate_series(1, 40) i`)
	e.converge(c)
	for _, d := range defs {
		e.assertMatches(d.target, d.recompute)
	}
}
