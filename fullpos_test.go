package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// fullJoinsAnyPosition are joins of three tables with a RIGHT or FULL JOIN
// after the second table (decision 0039): a RIGHT JOIN keeping a table
// whose rows need no match among the join before it, a FULL JOIN after a
// LEFT JOIN, two FULL JOINs (any of three tables can be a row's first),
// and a swapped RIGHT JOIN followed by a FULL JOIN; each with the fresh
// recompute it must equal.
var fullJoinsAnyPosition = []struct{ stmt, target, recompute string }{
	{`TRANSFORM fp_right FROM lefts l JOIN notes n ON n.lid = l.id RIGHT JOIN rights r ON r.id = n.lid SELECT l.v, n.note, r.w`,
		"fp_right", `SELECT l.id AS l_id, n.lid AS n_lid, n.line AS n_line, r.id AS r_id, l.v, n.note, r.w FROM lefts l JOIN notes n ON n.lid = l.id RIGHT JOIN rights r ON r.id = n.lid`},
	{`TRANSFORM fp_right_star FROM lefts l LEFT JOIN notes n ON n.lid = l.id RIGHT JOIN rights r ON r.g = l.g SELECT l.id AS lid, n.note, r.w WHERE r.h IS DISTINCT FROM 1`,
		"fp_right_star", `SELECT l.id AS lid, n.lid AS n_lid, n.line AS n_line, r.id AS r_id, n.note, r.w FROM lefts l LEFT JOIN notes n ON n.lid = l.id RIGHT JOIN rights r ON r.g = l.g WHERE r.h IS DISTINCT FROM 1`},
	{`TRANSFORM fp_full FROM lefts l LEFT JOIN notes n ON n.lid = l.id FULL JOIN rights r ON r.g = l.g SELECT l.v, n.note, r.w, coalesce(l.g, r.g) AS g`,
		"fp_full", `SELECT l.id AS l_id, n.lid AS n_lid, n.line AS n_line, r.id AS r_id, l.v, n.note, r.w, coalesce(l.g, r.g) AS g FROM lefts l LEFT JOIN notes n ON n.lid = l.id FULL JOIN rights r ON r.g = l.g`},
	{`TRANSFORM fp_full2 FROM lefts l FULL JOIN rights r ON r.g = l.g FULL JOIN notes n ON n.lid = r.id SELECT l.v, r.w, n.note`,
		"fp_full2", `SELECT l.id AS l_id, r.id AS r_id, n.lid AS n_lid, n.line AS n_line, l.v, r.w, n.note FROM lefts l FULL JOIN rights r ON r.g = l.g FULL JOIN notes n ON n.lid = r.id`},
	{`TRANSFORM fp_swapped FROM notes n RIGHT JOIN lefts l ON l.id = n.lid FULL JOIN rights r ON r.h = l.h AND r.g = l.g SELECT n.note, l.v, r.w`,
		"fp_swapped", `SELECT l.id AS l_id, n.lid AS n_lid, n.line AS n_line, r.id AS r_id, n.note, l.v, r.w FROM notes n RIGHT JOIN lefts l ON l.id = n.lid FULL JOIN rights r ON r.h = l.h AND r.g = l.g`},
}

// TestFullJoinsAnyPositionConverge maintains RIGHT and FULL JOINs after
// the second table while writers change all three tables at once (rows
// gaining and losing partners, join columns going NULL, keys moving),
// with two clients' drain workers; every target then equals a fresh
// recompute, both ways, and a self-check finds nothing.
func TestFullJoinsAnyPositionConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createFullJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, d := range fullJoinsAnyPosition {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range fullJoinsAnyPosition {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	// Every table is a source; each ON's columns are looked up on both of
	// its tables (a key that leads an index needs none).
	st, err := c.Status(e.ctx, "fp_full")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts", "public.notes", "public.rights"}, st.Sources)
	require.ElementsMatch(t, []string{"public.lefts(g)", "public.rights(g)"}, gapNames(st.SourceIndexGaps))
	for _, d := range fullJoinsAnyPosition {
		e.fixIndexGaps(c, d.target)
	}
	for _, d := range fullJoinsAnyPosition {
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	writes := e.writeConcurrently(4, 190, 400, writeFullJoinSources)
	e.converge(c)
	for _, d := range fullJoinsAnyPosition {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)

	// Each table emptied in turn, then refilled.
	for _, table := range []string{"rights", "notes", "lefts"} {
		e.exec(`DELETE FROM ` + table)
		e.converge(c)
		for _, d := range fullJoinsAnyPosition {
			e.assertMatches(d.target, d.recompute)
		}
	}
	e.exec(`INSERT INTO lefts SELECT i, i % 5, i % 3, i FROM generate_series(1, 30) i`)
	e.exec(`INSERT INTO rights SELECT i, i % 4, i % 2, i FROM generate_series(20, 40) i`)
	e.exec(`INSERT INTO notes SELECT 15 + i / 2, i % 2, 'm' || i FROM generate_series(1, 40) i`)
	e.converge(c)
	for _, d := range fullJoinsAnyPosition {
		e.assertMatches(d.target, d.recompute)
	}
}

// A RIGHT JOIN after the second table: its failing column is quarantined
// with samples of the units it fails on (rows holding only the RIGHT
// JOIN's table among them) while its healthy columns stay exact; ALTER
// TRANSFORM adds and drops columns of any of its tables; the self-check
// finds the altered target consistent, and a dump carries it as written.
func TestFullJoinAnyPositionQuarantineAlterDump(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE lefts (id int PRIMARY KEY, g int, v int)`)
	e.exec(`CREATE TABLE mids (id int PRIMARY KEY, lid int, g int)`)
	e.exec(`CREATE TABLE rights (id int PRIMARY KEY, g int, w int)`)
	e.exec(`INSERT INTO lefts SELECT i, i % 10, i FROM generate_series(1, 40) i`)
	e.exec(`INSERT INTO mids SELECT i, i, i % 10 FROM generate_series(1, 30) i`)
	e.exec(`INSERT INTO rights SELECT i, i % 20, 1 + i % 3 FROM generate_series(1, 30) i`)
	e.exec(`UPDATE rights SET w = 0 WHERE id IN (15, 16)`) // g 15 and 16: no mids row matches
	_, err := c.Define(e.ctx, `TRANSFORM fq3 FROM lefts l JOIN mids m ON m.lid = l.id RIGHT JOIN rights r ON r.g = m.g SELECT l.v, r.w, 100 / r.w AS inv`)
	require.NoError(t, err)
	e.waitState(c, "fq3", trellis.StateLive)
	q, err := c.QuarantineStatus(e.ctx, "fq3.inv")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, q.State)
	require.Contains(t, q.Error, "division by zero")
	page, err := c.SampleQuarantined(e.ctx, "fq3.inv", trellis.SampleOptions{})
	require.NoError(t, err)
	require.Len(t, page.Samples, 2, "the two rights rows without a partner, each its own unit")
	from := `FROM lefts l JOIN mids m ON m.lid = l.id RIGHT JOIN rights r ON r.g = m.g`
	healthy := `SELECT l.id AS l_id, m.id AS m_id, r.id AS r_id, l.v, r.w ` + from
	e.assertMatches("(SELECT l_id, m_id, r_id, v, w FROM fq3) x", healthy)

	// Writes on every table reach the healthy columns.
	e.exec(`UPDATE mids SET g = 15 WHERE id = 1`) // rights 15 gains a partner
	e.exec(`DELETE FROM lefts WHERE id = 2`)      // rights 2 and 12 lose one
	e.exec(`INSERT INTO rights VALUES (100, NULL, 7)`)
	e.converge(c)
	e.assertMatches("(SELECT l_id, m_id, r_id, v, w FROM fq3) x", healthy)

	// Fixed and resumed, the target equals a fresh recompute.
	e.exec(`UPDATE rights SET w = 5 WHERE w = 0`)
	_, err = c.Apply(e.ctx, `RESUME TRANSFORM fq3.inv`)
	require.NoError(t, err)
	e.waitState(c, "fq3", trellis.StateLive)
	e.converge(c)
	e.assertMatches("fq3", `SELECT l.id AS l_id, m.id AS m_id, r.id AS r_id, l.v, r.w, 100 / r.w AS inv `+from)

	_, err = c.Apply(e.ctx, `ALTER TRANSFORM fq3 ADD COLUMN coalesce(m.g, 0) + coalesce(r.w, 0) AS total`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM fq3 DROP COLUMN w`)
	require.NoError(t, err)
	e.waitState(c, "fq3", trellis.StateLive)
	e.exec(`UPDATE rights SET g = 3 WHERE id % 4 = 0`)
	e.exec(`DELETE FROM mids WHERE id % 5 = 0`)
	e.converge(c)
	e.assertMatches("fq3", `SELECT l.id AS l_id, m.id AS m_id, r.id AS r_id, l.v, 100 / r.w AS inv, coalesce(m.g, 0) + coalesce(r.w, 0) AS total `+from)
	e.fixIndexGaps(c, "fq3")
	requireConsistent(t, "fq3", e.selfCheck(c, "fq3", trellis.SelfCheckStrict))

	st, err := c.Status(e.ctx, "fq3")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts", "public.mids", "public.rights"}, st.Sources)
	dump, err := c.DumpDefinitionsSQL(e.ctx)
	require.NoError(t, err)
	require.Contains(t, dump, "JOIN mids m ON m.lid = l.id RIGHT JOIN rights r ON r.g = m.g")
}

// fullJoinAggregates are aggregates over joins with a FULL JOIN or a RIGHT
// JOIN after the second table (decision 0039): grouped by a table a row
// may lack (its NULL group), by the RIGHT JOIN's table (every row holds
// it), DISTINCT, HAVING, and without GROUP BY.
var fullJoinAggregates = []struct{ stmt, target, recompute string }{
	{`TRANSFORM fg_count FROM lefts l FULL JOIN rights r ON r.g = l.g SELECT r.h, count(*) AS n, count(l.id) AS nl, sum(l.v) AS sv GROUP BY r.h`,
		"fg_count", `SELECT r.h, count(*) AS n, count(l.id) AS nl, sum(l.v) AS sv FROM lefts l FULL JOIN rights r ON r.g = l.g GROUP BY r.h`},
	{`TRANSFORM fg_right FROM lefts l JOIN notes n ON n.lid = l.id RIGHT JOIN rights r ON r.id = n.lid SELECT r.id, count(n.lid) AS nn, max(l.v) AS mv GROUP BY r.id`,
		"fg_right", `SELECT r.id, count(n.lid) AS nn, max(l.v) AS mv FROM lefts l JOIN notes n ON n.lid = l.id RIGHT JOIN rights r ON r.id = n.lid GROUP BY r.id`},
	{`TRANSFORM fg_distinct FROM lefts l FULL JOIN rights r ON r.g = l.g FULL JOIN notes n ON n.lid = r.id SELECT DISTINCT l.h`,
		"fg_distinct", `SELECT DISTINCT l.h FROM lefts l FULL JOIN rights r ON r.g = l.g FULL JOIN notes n ON n.lid = r.id`},
	{`TRANSFORM fg_global FROM lefts l FULL JOIN rights r ON r.id = l.id SELECT count(*) AS n, count(r.id) AS nr, sum(l.v) AS sv`,
		"fg_global", `SELECT count(*) AS n, count(r.id) AS nr, sum(l.v) AS sv FROM lefts l FULL JOIN rights r ON r.id = l.id`},
	{`TRANSFORM fg_having FROM lefts l LEFT JOIN notes n ON n.lid = l.id FULL JOIN rights r ON r.g = l.g SELECT l.g, count(*) AS n, string_agg(n.note, ',' ORDER BY n.note) AS notes GROUP BY l.g HAVING count(r.id) > 0`,
		"fg_having", `SELECT l.g, count(*) AS n, string_agg(n.note, ',' ORDER BY n.note) AS notes FROM lefts l LEFT JOIN notes n ON n.lid = l.id FULL JOIN rights r ON r.g = l.g GROUP BY l.g HAVING count(r.id) > 0`},
}

// TestFullJoinAggregatesConverge maintains aggregates over FULL and RIGHT
// JOINs while writers change all three tables at once, with two clients'
// drain workers; every target then equals a fresh recompute, both ways,
// and a self-check finds nothing. A transform can read the one grouped
// by the RIGHT JOIN's table (its group is never NULL); one grouped by a
// table the join may leave out only by grouping it again (decision 0049).
func TestFullJoinAggregatesConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createFullJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	defs := fullJoinAggregates
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	_, err := c.Define(e.ctx, `TRANSFORM fg_reader FROM fg_right SELECT id, nn * 2 AS nn2`)
	require.NoError(t, err)
	// A projection of a group that may be NULL (decision 0054).
	_, err = c.Define(e.ctx, `TRANSFORM fg_count_rows FROM fg_count SELECT n, sv`)
	require.NoError(t, err)
	defs = append(defs, struct{ stmt, target, recompute string }{"", "fg_reader", `SELECT id, nn * 2 AS nn2 FROM fg_right`},
		struct{ stmt, target, recompute string }{"", "fg_count_rows", `SELECT h, n, sv FROM fg_count`})
	for _, d := range defs {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "fg_right")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts", "public.notes", "public.rights"}, st.Sources)
	for _, d := range defs {
		e.fixIndexGaps(c, d.target)
	}
	for _, d := range defs {
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	writes := e.writeConcurrently(4, 290, 400, writeFullJoinSources)
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

// fullJoinSemis are EXISTS and IN subqueries over joins with a FULL JOIN
// or a RIGHT JOIN after the second table (decision 0039), over a join and
// over an aggregate, correlated with a table the join may leave out.
var fullJoinSemis = []struct{ stmt, target, recompute string }{
	{`TRANSFORM fs_exists FROM lefts l FULL JOIN rights r ON r.g = l.g SELECT l.v, r.w WHERE EXISTS (SELECT 1 FROM notes n WHERE n.lid = r.id AND n.note <> 'x')`,
		"fs_exists", `SELECT l.id AS l_id, r.id AS r_id, l.v, r.w FROM lefts l FULL JOIN rights r ON r.g = l.g WHERE EXISTS (SELECT 1 FROM notes n WHERE n.lid = r.id AND n.note <> 'x')`},
	{`TRANSFORM fs_not_exists FROM lefts l JOIN notes n ON n.lid = l.id RIGHT JOIN rights r ON r.id = n.lid SELECT l.v, n.note, r.w WHERE NOT EXISTS (SELECT 1 FROM lefts x WHERE x.g = l.h)`,
		"fs_not_exists", `SELECT l.id AS l_id, n.lid AS n_lid, n.line AS n_line, r.id AS r_id, l.v, n.note, r.w FROM lefts l JOIN notes n ON n.lid = l.id RIGHT JOIN rights r ON r.id = n.lid WHERE NOT EXISTS (SELECT 1 FROM lefts x WHERE x.g = l.h)`},
	{`TRANSFORM fs_in_grouped FROM lefts l FULL JOIN rights r ON r.id = l.id SELECT r.h, count(*) AS n, sum(l.v) AS sv WHERE l.g IN (SELECT n.line FROM notes n) GROUP BY r.h`,
		"fs_in_grouped", `SELECT r.h, count(*) AS n, sum(l.v) AS sv FROM lefts l FULL JOIN rights r ON r.id = l.id WHERE l.g IN (SELECT n.line FROM notes n) GROUP BY r.h`},
}

// TestFullJoinSemisConverge maintains EXISTS and IN subqueries over FULL
// and RIGHT JOINs while writers change every table at once, with two
// clients' drain workers; every target then equals a fresh recompute,
// both ways, and a self-check finds nothing. NOT IN over a table an
// outer join may leave out is refused (a row without it passes NOT IN
// only while the subquery is empty).
func TestFullJoinSemisConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createFullJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, d := range fullJoinSemis {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, stmt := range []string{
		`TRANSFORM fs_bad FROM lefts l FULL JOIN rights r ON r.id = l.id SELECT l.v WHERE r.id NOT IN (SELECT n.lid FROM notes n)`,
		`TRANSFORM fs_bad FROM lefts l LEFT JOIN rights r ON r.id = l.id SELECT l.v WHERE r.id NOT IN (SELECT n.lid FROM notes n)`,
	} {
		_, err := c.Define(e.ctx, stmt)
		require.Error(t, err, stmt)
		require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), stmt)
		require.Contains(t, err.Error(), "a table an outer join may leave out of a row, is not supported", stmt)
		require.Contains(t, err.Error(), "use NOT EXISTS", stmt)
	}
	for _, d := range fullJoinSemis {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "fs_exists")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts", "public.notes", "public.rights"}, st.Sources)
	require.ElementsMatch(t, []string{"public.lefts(g)", "public.rights(g)"}, gapNames(st.SourceIndexGaps))
	for _, d := range fullJoinSemis {
		e.fixIndexGaps(c, d.target)
	}
	for _, d := range fullJoinSemis {
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	writes := e.writeConcurrently(4, 390, 400, writeFullJoinSources)
	e.converge(c)
	for _, d := range fullJoinSemis {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)

	for _, table := range []string{"notes", "rights", "lefts"} {
		e.exec(`DELETE FROM ` + table)
		e.converge(c)
		for _, d := range fullJoinSemis {
			e.assertMatches(d.target, d.recompute)
		}
	}
	e.exec(`INSERT INTO lefts SELECT i, i % 5, i % 3, i FROM generate_series(1, 30) i`)
	e.exec(`INSERT INTO rights SELECT i, i % 4, i % 2, i FROM generate_series(20, 40) i`)
	e.exec(`INSERT INTO notes SELECT 15 + i / 2, i % 2, 'm' || i FROM generate_series(1, 40) i`)
	e.converge(c)
	for _, d := range fullJoinSemis {
		e.assertMatches(d.target, d.recompute)
	}
}
