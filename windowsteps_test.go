package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// Top-k per group by rank() and dense_rank() (ties kept; one over a
// view), top-k by LIMIT, DISTINCT ON and running sums stay equal to a
// fresh recompute, step by step, as rows move between partitions (NULL
// included), change keys and leave or enter the top.
func TestWindowShapesStepwise(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE sc (id int PRIMARY KEY, g text, v int)`)
	e.exec(`INSERT INTO sc SELECT x, CASE WHEN x % 6 = 0 THEN NULL ELSE 'g' || (x % 3) END, x % 4 FROM generate_series(1, 40) x`)
	e.exec(`CREATE VIEW scv AS SELECT id, g, v * 2 AS w FROM sc WHERE v IS NOT NULL`)
	c := e.engine()
	shapes := []struct{ stmt, target, cols, recompute string }{
		{`TRANSFORM rk FROM (SELECT id, g, v, rank() OVER (PARTITION BY g ORDER BY v DESC) AS rn FROM sc) s SELECT * WHERE rn <= 2`,
			"rk", "g, id, v, rn", `SELECT g, id, v, rn FROM (SELECT id, g, v, rank() OVER (PARTITION BY g ORDER BY v DESC) AS rn FROM sc) s WHERE rn <= 2`},
		{`TRANSFORM drk FROM (SELECT id, g, w AS v, dense_rank() OVER (PARTITION BY g ORDER BY w) AS rn FROM scv) s SELECT * WHERE rn = 1`,
			"drk", "g, id, v, rn", `SELECT g, id, v, rn FROM (SELECT id, g, v, dense_rank() OVER (PARTITION BY g ORDER BY v) AS rn FROM (SELECT id, g, w AS v FROM scv) q) s WHERE rn = 1`},
		{`TRANSFORM lim FROM sc SELECT id, v * 2 AS w, g WHERE v > 0 ORDER BY w DESC, id LIMIT 4`,
			"lim", "id, w, g", `SELECT id, v * 2 AS w, g FROM sc WHERE v > 0 ORDER BY w DESC, id LIMIT 4`},
		{`TRANSFORM don FROM sc SELECT DISTINCT ON (g) g, v, id AS k ORDER BY g, v, k DESC`,
			"don", "g, v, k", `SELECT DISTINCT ON (g) g, v, id AS k FROM sc ORDER BY g, v, id DESC`},
		{`TRANSFORM cum FROM sc SELECT id, g, sum(v) OVER (PARTITION BY g ORDER BY id) AS s, count(*) OVER (PARTITION BY g) AS n`,
			"cum", "id, g, s, n", `SELECT id, g, sum(v) OVER (PARTITION BY g ORDER BY id) AS s, count(*) OVER (PARTITION BY g) AS n FROM sc`},
	}
	for _, d := range shapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	check := func(step int) {
		for _, d := range shapes {
			t.Logf("step %d %s", step, d.target)
			e.assertMatches("(SELECT "+d.cols+" FROM "+d.target+") x", d.recompute)
		}
	}
	for _, d := range shapes {
		e.waitState(c, d.target, trellis.StateLive)
	}
	check(-1)
	steps := []string{
		`DELETE FROM sc WHERE id IN (3, 7)`,
		`UPDATE sc SET g = NULL WHERE id IN (1, 2)`,
		`UPDATE sc SET id = id + 100, v = NULL WHERE id % 5 = 0`,
		`BEGIN; UPDATE sc SET v = 9 WHERE id = 4; UPDATE sc SET g = 'g9' WHERE id = 4; INSERT INTO sc VALUES (500, NULL, 0), (501, 'g1', 3); COMMIT`,
		`UPDATE sc SET v = v + 1`,
		`UPDATE sc SET g = CASE g WHEN 'g1' THEN 'g2' WHEN 'g2' THEN 'g1' ELSE g END, id = -id`,
		`DELETE FROM sc WHERE g IS NULL`,
	}
	for i, s := range steps {
		_, err := e.db.Exec(e.ctx, s)
		require.NoError(t, err, s)
		e.converge(c)
		check(i)
	}
}
