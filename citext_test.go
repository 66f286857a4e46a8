package trellis_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/ident"
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

// citext installed in public, where PUBLIC may CREATE: once the
// transforms are live, another role plants there functions and operators
// that Trellis's statements over citext keys would pick under a path with
// public on it (unnest and array_position of text[], generate_subscripts
// of citext[], = between citext and text, each recording that it ran).
// Source keys, a GROUP BY (a NULL group too) and a join's ON on citext
// still compare as citext does, through drains, a build and a self-check,
// and none of the planted code ever runs. The same holds for definitions
// stored before the key columns' operators were recorded (op_schemas
// alone): the catalog derives them when it loads the definitions.
func TestPlantedObjectsNeverRunOverCitextKeys(t *testing.T) {
	t.Parallel()
	t.Run("recorded", func(t *testing.T) { t.Parallel(); plantedOverCitext(t, false) })
	t.Run("stored before", func(t *testing.T) { t.Parallel(); plantedOverCitext(t, true) })
}

// plantedOverCitext is TestPlantedObjectsNeverRunOverCitextKeys; with
// stripped, the stored definitions lose their recorded operators before
// the workers load them.
func plantedOverCitext(t *testing.T, stripped bool) {
	e := setup(t)
	var avail bool
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'citext')`).Scan(&avail))
	if !avail {
		t.Skip("the citext extension is not installed on this server (Debian: postgresql-contrib)")
	}
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	e.exec(`CREATE EXTENSION citext SCHEMA public`)
	e.exec(`CREATE TABLE people (name public.citext PRIMARY KEY, team public.citext, n int)`)
	e.exec(`CREATE INDEX ON people (team)`)
	e.exec(`INSERT INTO people VALUES ('ann', 'Red', 1), ('bob', 'red', 2), ('cid', 'Blue', 3), ('eve', NULL, 5)`)
	e.exec(`CREATE TABLE teams (id int PRIMARY KEY, name public.citext, label text)`)
	e.exec(`CREATE INDEX ON teams (name)`)
	e.exec(`INSERT INTO teams VALUES (1, 'RED', 'the reds'), (2, 'blue', 'the blues')`)

	c := e.engine()
	defs := map[string]string{
		"people_copy":  "TRANSFORM people_copy FROM people SELECT team, n",
		"by_team":      "TRANSFORM by_team FROM people SELECT team, sum(n) AS total, count(*) AS members GROUP BY team",
		"people_teams": "TRANSFORM people_teams FROM people p JOIN teams t ON p.team = t.name SELECT p.n, t.label",
		"latest":       "TRANSFORM latest FROM people SELECT DISTINCT ON (team) team, name, n ORDER BY team, n DESC, name",
		"team_sums":    "TRANSFORM team_sums FROM people SELECT team, name, sum(n) OVER (PARTITION BY team) AS team_total",
		"all_teams":    "TRANSFORM all_teams FROM people SELECT team UNION SELECT name FROM teams",
		"both_named":   "TRANSFORM both_named FROM people SELECT name, team UNION ALL SELECT name, label FROM teams",
		// Keyed by (branch, name): a page's names of each branch are
		// compared as citext in one array (decision 0061).
		"names_split": "TRANSFORM names_split FROM people SELECT name, n WHERE n > 3 UNION ALL SELECT name, n FROM people WHERE n <= 3",
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	for tgt := range defs {
		e.waitState(c, tgt, trellis.StateLive)
	}
	if stripped {
		require.NoError(t, c.Close())
		for _, r := range e.rows(`SELECT id, spec::text FROM trellis.transforms`) {
			var spec map[string]any
			require.NoError(t, json.Unmarshal([]byte(r[1]), &spec))
			require.Equal(t, []any{"public"}, spec["op_schemas"])
			var strip func(v any)
			strip = func(v any) {
				switch v := v.(type) {
				case map[string]any:
					delete(v, "key_ops")
					delete(v, "op")
					for _, x := range v {
						strip(x)
					}
				case []any:
					for _, x := range v {
						strip(x)
					}
				}
			}
			strip(spec)
			b, err := json.Marshal(spec)
			require.NoError(t, err)
			e.exec(`UPDATE trellis.transforms SET spec = $2::jsonb WHERE id = $1::int`, r[0], string(b))
		}
		require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM trellis.transforms WHERE spec::text LIKE '%"op"%' OR spec::text LIKE '%key_ops%'`))
		c = e.engine()
	}

	planter := e.role("planter")
	hit := func(what string) string {
		return fmt.Sprintf("INSERT INTO public.hits VALUES (%s)", ident.Literal(what))
	}
	e.as(planter,
		`CREATE TABLE public.hits (what text)`,
		`GRANT INSERT ON public.hits TO PUBLIC`,
		`CREATE FUNCTION public.unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN `+hit("unnest(text[])")+`; RETURN QUERY SELECT pg_catalog.unnest(a); END $$`,
		`CREATE FUNCTION public.array_position(a text[], b text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN `+hit("array_position(text[], text)")+`; RETURN pg_catalog.array_position(a, b); END $$`,
		`CREATE FUNCTION public.generate_subscripts(a public.citext[], d int) RETURNS SETOF int LANGUAGE plpgsql AS $$
BEGIN `+hit("generate_subscripts(citext[], int)")+`; RETURN QUERY SELECT pg_catalog.generate_subscripts(a, d); END $$`,
		`CREATE FUNCTION public.eq_ct(a public.citext, b text) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN `+hit("=(citext, text)")+`; RETURN true; END $$`,
		`CREATE OPERATOR public.= (LEFTARG = public.citext, RIGHTARG = text, FUNCTION = public.eq_ct)`,
		`CREATE FUNCTION public.eq_tc(a text, b public.citext) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN `+hit("=(text, citext)")+`; RETURN true; END $$`,
		`CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = public.citext, FUNCTION = public.eq_tc)`)

	// Keys and groups change between spellings, a group becomes NULL and
	// back, a join's match moves.
	e.exec(`INSERT INTO people VALUES ('dee', 'RED', 4), ('fay', NULL, 6)`)
	e.exec(`UPDATE people SET n = 50 WHERE name = 'ANN'`)
	e.exec(`UPDATE people SET team = 'BLUE' WHERE name = 'bob'`)
	e.exec(`UPDATE people SET team = NULL WHERE name = 'cid'`)
	e.exec(`UPDATE people SET team = 'blue' WHERE name = 'eve'`)
	e.exec(`DELETE FROM people WHERE name = 'DEE'`)
	e.exec(`INSERT INTO people VALUES ('DEE', 'Red', 7)`)
	e.exec(`UPDATE people SET name = 'Ann' WHERE name = 'ann'`)
	e.exec(`UPDATE teams SET name = 'Blue' WHERE id = 2`)
	e.exec(`INSERT INTO teams VALUES (3, 'red', 'more reds')`)
	e.converge(c)
	// A build: a column added is backfilled.
	_, err := c.Apply(e.ctx, "ALTER TRANSFORM by_team ADD COLUMN max(n) AS top")
	require.NoError(t, err)
	e.waitState(c, "by_team", trellis.StateLive)
	e.exec(`UPDATE people SET n = n + 1`)
	e.converge(c)

	e.assertMatches("(SELECT name::text, team::text, n FROM people_copy) x", "SELECT name::text, team::text, n FROM people")
	require.Equal(t, e.rows(`SELECT pg_catalog.lower(team::text), total, members, top FROM by_team ORDER BY 1`),
		e.rows(`SELECT pg_catalog.lower(team::text), sum(n), count(*), max(n) FROM people GROUP BY team ORDER BY 1`))
	require.Equal(t, [][]string{{"3"}}, e.rows(`SELECT count(*) FROM by_team`), "red, blue and NULL are the groups")
	require.Equal(t, e.rows(`SELECT p.name::text, t.id, p.n, t.label FROM people_teams x JOIN people p ON p.name OPERATOR(public.=) x.p_name JOIN teams t ON t.id = x.t_id ORDER BY 1, 2`),
		e.rows(`SELECT p.name::text, t.id, p.n, t.label FROM people p JOIN teams t ON p.team OPERATOR(public.=) t.name ORDER BY 1, 2`))
	e.assertMatches("(SELECT n, label FROM people_teams) x", "SELECT p.n, t.label FROM people p JOIN teams t ON p.team OPERATOR(public.=) t.name")
	e.assertMatches("(SELECT pg_catalog.lower(team::text), name::text, n FROM latest) x",
		"SELECT DISTINCT ON (team) pg_catalog.lower(team::text), name::text, n FROM people ORDER BY team, n DESC, name")
	require.Equal(t, e.rows(`SELECT pg_catalog.lower(team::text) FROM all_teams ORDER BY 1`),
		e.rows(`SELECT pg_catalog.lower(team::text) FROM (SELECT team FROM people UNION SELECT name FROM teams) u ORDER BY 1`))
	e.assertMatches("(SELECT name::text, team::text FROM both_named) x",
		"SELECT name::text, team::text FROM people UNION ALL SELECT name::text, label FROM teams")
	e.assertMatches("(SELECT branch, name::text, n FROM names_split) x",
		"SELECT 1::smallint, name::text, n FROM people WHERE n > 3 UNION ALL SELECT 2::smallint, name::text, n FROM people WHERE n <= 3")
	e.assertMatches("(SELECT pg_catalog.lower(team::text), name::text, team_total FROM team_sums) x",
		"SELECT pg_catalog.lower(team::text), name::text, sum(n) OVER (PARTITION BY team) FROM people")
	require.Empty(t, e.rows(`SELECT what FROM public.hits GROUP BY what`), "planted code ran as Trellis")
	// The self-check's transactions are read-only: planted code would fail them.
	for tgt := range defs {
		requireConsistent(t, tgt, e.selfCheck(c, tgt, trellis.SelfCheckStrict))
	}
	require.Empty(t, e.rows(`SELECT what FROM public.hits GROUP BY what`), "planted code ran as Trellis")
}

// Keys of citext page in citext's own order: a build's and a self-check's
// pages end at a key found by ORDER BY (the type's default operator
// class) and the next one starts past it by citext's >, so no row is
// checked twice or skipped, though the keys' text order (upper case
// first) differs. A composite key (citext, int) pages the same way.
func TestCitextKeysPageInTheirOwnOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var avail bool
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'citext')`).Scan(&avail))
	if !avail {
		t.Skip("the citext extension is not installed on this server (Debian: postgresql-contrib)")
	}
	e.exec(`CREATE EXTENSION citext SCHEMA public`)
	e.exec(`CREATE TABLE words (w public.citext PRIMARY KEY, n int)`)
	e.exec(`INSERT INTO words SELECT CASE WHEN i % 2 = 0 THEN 'W' ELSE 'w' END || pg_catalog.lpad(i::text, 6, '0'), i FROM generate_series(1, 12001) i`)
	e.exec(`CREATE TABLE parts (w public.citext, part int, n int, PRIMARY KEY (w, part))`)
	e.exec(`INSERT INTO parts SELECT CASE WHEN i % 2 = 0 THEN 'P' ELSE 'p' END || pg_catalog.lpad((i / 3)::text, 6, '0'), i % 3, i FROM generate_series(1, 12001) i`)
	c := e.engine()
	for _, d := range []string{"TRANSFORM words_copy FROM words SELECT n", "TRANSFORM parts_copy FROM parts SELECT n"} {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	e.waitState(c, "words_copy", trellis.StateLive)
	e.waitState(c, "parts_copy", trellis.StateLive)
	e.exec(`UPDATE words SET n = -n WHERE n % 1000 = 0`)
	e.exec(`UPDATE parts SET w = pg_catalog.upper(w::text) WHERE n % 1000 = 1`)
	e.converge(c)
	e.assertMatches("(SELECT w::text, n FROM words_copy) x", "SELECT w::text, n FROM words")
	e.assertMatches("(SELECT w::text, part, n FROM parts_copy) x", "SELECT w::text, part, n FROM parts")
	for _, tgt := range []string{"words_copy", "parts_copy"} {
		rep := e.selfCheck(c, tgt, trellis.SelfCheckStrict)
		requireConsistent(t, tgt, rep)
		require.EqualValues(t, 12001, rep.RowsCompared, tgt)
	}
}
