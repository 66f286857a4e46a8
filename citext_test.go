package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A citext source key and a citext GROUP BY work end to end with citext in
// a schema off the pinned search_path: keys and groups that differ only in
// case are one, as citext's own = says, through changes that move a row
// between spellings of its key or its group.
func TestCitextKeysAndGroups(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var avail bool
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'citext')`).Scan(&avail))
	if !avail {
		t.Skip("the citext extension is not installed on this server (Debian: postgresql-contrib)")
	}
	e.exec(`CREATE SCHEMA ext`)
	e.exec(`CREATE EXTENSION citext SCHEMA ext`)
	e.exec(`CREATE TABLE people (name ext.citext PRIMARY KEY, team ext.citext NOT NULL, n int)`)
	e.exec(`CREATE INDEX ON people (team)`)
	e.exec(`INSERT INTO people VALUES ('ann', 'Red', 1), ('bob', 'red', 2), ('cid', 'Blue', 3)`)
	writer := e.role("writer", "GRANT USAGE ON SCHEMA ext TO %s", "GRANT SELECT, INSERT, UPDATE, DELETE ON people TO %s")

	c := e.engine()
	for _, d := range []string{
		"TRANSFORM people_copy FROM people SELECT team, n",
		"TRANSFORM by_team FROM people SELECT team, sum(n) AS total, count(*) AS members GROUP BY team",
	} {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	e.waitState(c, "people_copy", trellis.StateLive)
	e.waitState(c, "by_team", trellis.StateLive)
	require.Equal(t, [][]string{{"2"}}, e.rows(`SELECT count(*) FROM by_team`), "Red and red are one group")

	e.as(writer, `INSERT INTO people VALUES ('dee', 'RED', 4)`, `UPDATE people SET n = 50 WHERE name = 'ann'`)
	e.as(writer, `UPDATE people SET team = 'blue' WHERE name = 'bob'`, `DELETE FROM people WHERE name = 'cid'`)
	// The same key, spelt another way: the row 'dee' becomes 'DEE'.
	e.as(writer, `DELETE FROM people WHERE name = 'dee'`, `INSERT INTO people VALUES ('DEE', 'Green', 7)`)
	e.as(writer, `UPDATE people SET name = 'Ann' WHERE name = 'ann'`)
	e.converge(c)
	e.assertMatches("people_copy", "SELECT name::text, team::text, n FROM people")
	e.assertMatches("(SELECT name::text, team::text, n FROM people_copy) x", "SELECT name::text, team::text, n FROM people")
	require.Equal(t, e.rows(`SELECT lower(team::text), total, members FROM by_team ORDER BY 1`),
		e.rows(`SELECT lower(team::text), sum(n), count(*) FROM people GROUP BY team ORDER BY 1`))
	for _, tgt := range []string{"people_copy", "by_team"} {
		requireConsistent(t, tgt, e.selfCheck(c, tgt, trellis.SelfCheckStrict))
	}
}
