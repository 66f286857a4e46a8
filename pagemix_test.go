package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// Self semi- and anti-joins, three-table chains with LEFT JOINs (grouped
// by the last table, which can be NULL-extended) and DISTINCT ON stay
// equal to a fresh recompute when one transaction changes several of
// their tables at once (one page), keys included, with NULLs on the way.
func TestOnePageManyTables(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE emp (id int PRIMARY KEY, mgr int, dept int, name text)`)
	e.exec(`CREATE TABLE dept (id int PRIMARY KEY, site int, title text)`)
	e.exec(`CREATE TABLE site (id int PRIMARY KEY, city text)`)
	e.exec(`INSERT INTO site SELECT g, 'c' || g FROM generate_series(1, 4) g`)
	e.exec(`INSERT INTO dept SELECT g, CASE WHEN g % 3 = 0 THEN NULL ELSE g % 4 + 1 END, 't' || g FROM generate_series(1, 8) g`)
	e.exec(`INSERT INTO emp SELECT g, CASE WHEN g > 3 THEN g % 3 + 1 END, CASE WHEN g % 5 = 0 THEN NULL ELSE g % 8 + 1 END, 'e' || g FROM generate_series(1, 30) g`)
	c := e.engine()
	shapes := []struct{ stmt, target, recompute string }{
		{`TRANSFORM mgrs FROM emp e SELECT e.id, e.name WHERE EXISTS (SELECT 1 FROM emp m WHERE m.mgr = e.id)`,
			"mgrs", `SELECT e.id, e.name FROM emp e WHERE EXISTS (SELECT 1 FROM emp m WHERE m.mgr = e.id)`},
		{`TRANSFORM leaves FROM emp e SELECT e.id, e.name WHERE NOT EXISTS (SELECT 1 FROM emp m WHERE m.mgr = e.id)`,
			"leaves", `SELECT e.id, e.name FROM emp e WHERE NOT EXISTS (SELECT 1 FROM emp m WHERE m.mgr = e.id)`},
		{`TRANSFORM per_city FROM emp e LEFT JOIN dept d ON d.id = e.dept LEFT JOIN site s ON s.id = d.site SELECT s.city, count(*) AS n, count(d.id) AS nd GROUP BY s.city`,
			"per_city", `SELECT s.city, count(*) AS n, count(d.id) AS nd FROM emp e LEFT JOIN dept d ON d.id = e.dept LEFT JOIN site s ON s.id = d.site GROUP BY s.city`},
		{`TRANSFORM emp_city FROM emp e JOIN dept d ON d.id = e.dept LEFT JOIN site s ON s.id = d.site SELECT e.id, d.title, s.city`,
			"emp_city", `SELECT e.id, d.title, s.city FROM emp e JOIN dept d ON d.id = e.dept LEFT JOIN site s ON s.id = d.site`},
		{`TRANSFORM per_site FROM emp e JOIN dept d ON d.id = e.dept JOIN site s ON s.id = d.site SELECT s.id AS sid, count(*) AS n, max(e.name) AS top GROUP BY s.id`,
			"per_site", `SELECT s.id AS sid, count(*) AS n, max(e.name) AS top FROM emp e JOIN dept d ON d.id = e.dept JOIN site s ON s.id = d.site GROUP BY s.id`},
		{`TRANSFORM emp_mgr_site FROM emp e JOIN emp m ON m.id = e.mgr JOIN dept d ON d.id = m.dept SELECT e.id, m.name AS mname, d.site`,
			"emp_mgr_site", `SELECT e.id, m.name AS mname, d.site FROM emp e JOIN emp m ON m.id = e.mgr JOIN dept d ON d.id = m.dept`},
		{`TRANSFORM best_per_dept FROM emp SELECT DISTINCT ON (dept) dept, id AS best, name ORDER BY dept, name DESC, best`,
			"best_per_dept", `SELECT DISTINCT ON (dept) dept, id AS best, name FROM emp ORDER BY dept, name DESC, id`},
	}
	for _, d := range shapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range shapes {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(onePageCols[d.target], d.recompute)
	}
	steps := []string{
		// middle and last tables in one transaction, key change of the middle
		`BEGIN; UPDATE dept SET id = id + 100 WHERE id = 2; UPDATE emp SET dept = 102 WHERE dept = 2 AND id % 2 = 0; UPDATE site SET id = 9 WHERE id = 3; UPDATE dept SET site = 9 WHERE site = 3; COMMIT`,
		// managers move and keys change in one statement
		`UPDATE emp SET mgr = CASE WHEN mgr = 1 THEN 2 WHEN mgr = 2 THEN NULL ELSE mgr END, id = CASE WHEN id = 3 THEN 33 ELSE id END`,
		`BEGIN; DELETE FROM dept WHERE id = 4; INSERT INTO dept VALUES (4, 1, 'new4'); UPDATE site SET city = NULL WHERE id = 1; DELETE FROM site WHERE id = 2; COMMIT`,
		`BEGIN; UPDATE emp SET id = -id WHERE id IN (4, 7); UPDATE emp SET mgr = -4 WHERE mgr = 2; UPDATE emp SET dept = NULL WHERE id = 10; UPDATE dept SET site = NULL WHERE id = 1; COMMIT`,
		`BEGIN; UPDATE emp SET name = 'zz' || name WHERE id % 4 = 1; UPDATE dept SET id = 1000 WHERE id = 5; UPDATE dept SET id = 5 WHERE id = 6; UPDATE dept SET id = 6 WHERE id = 1000; COMMIT`,
		`BEGIN; DELETE FROM emp WHERE mgr = 33; INSERT INTO emp VALUES (200, 33, 5, 'new'); UPDATE emp SET mgr = 200 WHERE id = 1; COMMIT`,
	}
	for i, s := range steps {
		_, err := e.db.Exec(e.ctx, s)
		require.NoError(t, err, s)
		e.converge(c)
		for _, d := range shapes {
			t.Logf("step %d %s", i, d.target)
			e.assertMatches(onePageCols[d.target], d.recompute)
		}
	}
}

var onePageCols = map[string]string{
	"mgrs":          "(SELECT id, name FROM mgrs) x",
	"leaves":        "(SELECT id, name FROM leaves) x",
	"per_city":      "(SELECT city, n, nd FROM per_city) x",
	"emp_city":      "(SELECT id, title, city FROM emp_city) x",
	"per_site":      "(SELECT sid, n, top FROM per_site) x",
	"emp_mgr_site":  "(SELECT id, mname, site FROM emp_mgr_site) x",
	"best_per_dept": "(SELECT dept, best, name FROM best_per_dept) x",
}
