package trellis_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// The database's search_path puts first a schema another role owns, where
// it plants better-matching versions of functions Trellis's generated SQL
// calls (each records that it ran). Trellis's connections pin their
// search_path, so defines, drains, builds, the self-check and status work
// and none of the planted code ever runs; the definer's own names still
// resolve through the database's search_path.
func TestPinnedSearchPathNeverRunsPlantedCode(t *testing.T) {
	t.Parallel()
	t.Run("database setting", func(t *testing.T) { t.Parallel(); plantedNeverRuns(t, false) })
	t.Run("URL options", func(t *testing.T) { t.Parallel(); plantedNeverRuns(t, true) })
}

// plantedNeverRuns is TestPinnedSearchPathNeverRunsPlantedCode with the
// search_path set by ALTER DATABASE, or by the URL's options (byURL).
func plantedNeverRuns(t *testing.T, byURL bool) {
	e := setup(t)
	db := e.rows(`SELECT current_database()`)[0][0]
	planter := e.role("planter", fmt.Sprintf("GRANT CREATE ON DATABASE %q TO %%s", db))
	e.as(planter,
		`CREATE SCHEMA trap`,
		`GRANT USAGE ON SCHEMA trap TO PUBLIC`,
		`CREATE TABLE trap.hits (what text)`,
		`GRANT INSERT ON trap.hits TO PUBLIC`,
		`CREATE FUNCTION trap.unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO trap.hits VALUES ('unnest(text[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$`,
		`CREATE FUNCTION trap.unnest(a text[], b text[], c bool[]) RETURNS TABLE (x text, y text, z bool) LANGUAGE plpgsql AS $$
BEGIN INSERT INTO trap.hits VALUES ('unnest(text[], text[], bool[])'); RETURN QUERY SELECT * FROM pg_catalog.unnest(a, b, c); END $$`,
		`CREATE FUNCTION trap.array_position(a text[], b text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN INSERT INTO trap.hits VALUES ('array_position'); RETURN pg_catalog.array_position(a, b); END $$`)
	if byURL {
		u, err := url.Parse(e.url)
		require.NoError(t, err)
		q := u.Query()
		q.Set("options", "-csearch_path=trap,public")
		u.RawQuery = q.Encode()
		e.url = u.String()
	} else {
		e.exec(fmt.Sprintf(`ALTER DATABASE %q SET search_path = trap, public`, db))
	}
	e.exec(`CREATE TABLE public.orders (id int PRIMARY KEY, customer text, price numeric)`)
	e.exec(`CREATE INDEX ON public.orders (customer)`)
	e.exec(`INSERT INTO public.orders SELECT i, 'c' || (i % 3), i FROM pg_catalog.generate_series(1, 30) i`)

	c := e.engine()
	// Unqualified names resolve as the database's search_path has them.
	_, err := c.Define(e.ctx, "TRANSFORM totals FROM orders SELECT customer, sum(price) AS revenue, count(*) AS n GROUP BY customer")
	require.NoError(t, err)
	e.waitState(c, "totals", trellis.StateLive)
	e.exec(`UPDATE public.orders SET price = price + 1 WHERE id <= 10`)
	e.exec(`INSERT INTO public.orders VALUES (31, 'c9', 5)`)
	e.exec(`DELETE FROM public.orders WHERE id = 2`)
	e.converge(c)
	e.assertMatches("public.totals", "SELECT customer, sum(price) AS revenue, count(*) AS n FROM public.orders GROUP BY customer")

	// A build: a column added is backfilled.
	_, err = c.Apply(e.ctx, "ALTER TRANSFORM totals ADD COLUMN max(price) AS top")
	require.NoError(t, err)
	e.waitState(c, "totals", trellis.StateLive)
	e.converge(c)
	e.assertMatches("public.totals", "SELECT customer, sum(price) AS revenue, count(*) AS n, max(price) AS top FROM public.orders GROUP BY customer")

	requireConsistent(t, "totals", e.selfCheck(c, "totals", trellis.SelfCheckStrict))
	st, err := c.Status(e.ctx, "totals")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)

	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT pg_catalog.count(*) FROM trap.hits`), "planted code ran: %v", e.rows(`SELECT what FROM trap.hits`))
}

// A key whose type lives outside pg_catalog (a domain over text in schema
// app, citext installed in schema ext) drains and checks correctly under
// the pinned search_path: casts name the type's schema, and citext keys
// that differ only in case are one key, as the definition groups them.
func TestKeysOfTypesOutsidePgCatalog(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE SCHEMA app`)
	e.exec(`CREATE DOMAIN app.code AS text CHECK (VALUE <> '')`)
	e.exec(`CREATE TABLE app.items (code app.code PRIMARY KEY, grp app.code, n int)`)
	e.exec(`CREATE INDEX ON app.items (grp)`)
	e.exec(`INSERT INTO app.items SELECT 'i' || i, 'g' || (i % 4), i FROM generate_series(1, 20) i`)
	e.exec(`CREATE SCHEMA ext`)
	e.exec(`CREATE EXTENSION citext SCHEMA ext`)
	e.exec(`CREATE TABLE people (name ext.citext PRIMARY KEY, team ext.citext, n int)`)
	e.exec(`INSERT INTO people VALUES ('ann', 'Red', 1), ('bob', 'red', 2), ('cid', 'Blue', 3)`)

	c := e.engine()
	for _, d := range []string{
		"TRANSFORM items_copy FROM app.items SELECT grp, n",
		"TRANSFORM by_grp FROM app.items SELECT grp, sum(n) AS total GROUP BY grp",
		"TRANSFORM people_copy FROM people SELECT team, n",
	} {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	for _, tgt := range []string{"items_copy", "by_grp", "people_copy"} {
		e.waitState(c, tgt, trellis.StateLive)
	}
	e.exec(`UPDATE app.items SET n = n * 10 WHERE n <= 5`)
	e.exec(`UPDATE app.items SET grp = 'g9' WHERE code = 'i7'`)
	e.exec(`DELETE FROM app.items WHERE code = 'i8'`)
	e.exec(`INSERT INTO app.items VALUES ('i21', 'g1', 100)`)
	// 'RED' is the group of 'Red' and 'red'; 'ANN' is the row 'ann'.
	e.exec(`INSERT INTO people VALUES ('dee', 'RED', 4)`)
	e.exec(`UPDATE people SET n = 50 WHERE name = 'ANN'`)
	e.exec(`UPDATE people SET team = 'blue' WHERE name = 'bob'`)
	e.exec(`DELETE FROM people WHERE name = 'CID'`)
	e.converge(c)
	e.assertMatches("items_copy", "SELECT code, grp, n FROM app.items")
	e.assertMatches("by_grp", "SELECT grp, sum(n) AS total FROM app.items GROUP BY grp")
	e.assertMatches("people_copy", "SELECT name, team, n FROM people")
	for _, tgt := range []string{"items_copy", "by_grp", "people_copy"} {
		requireConsistent(t, tgt, e.selfCheck(c, tgt, trellis.SelfCheckStrict))
	}
}

// In the transaction of a user's statement (TRANSFORM, ALTER, PAUSE,
// RESUME, DROP, Sync, RequestBackfill) only the user's names resolve
// through the definer's search_path; Trellis's own statements run under
// the pinned one. Here the database's path puts public before pg_catalog,
// and another role planted in public functions and an operator that
// Trellis's own SQL calls: none of them runs, while the definition's own
// unqualified names (a table and a function in public) still resolve.
func TestDefinerPathResolvesOnlyTheUsersNames(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int NOT NULL, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT i, i % 3, i FROM generate_series(1, 10) i`)
	e.exec(`CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 2'`)
	planter := e.role("planter")
	e.as(planter,
		`CREATE TABLE public.hits (what text)`,
		`GRANT INSERT ON public.hits TO PUBLIC`,
		`CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE sql AS $$INSERT INTO public.hits VALUES ('pg_notify')$$`,
		`CREATE FUNCTION public.to_regclass(text) RETURNS regclass LANGUAGE sql AS $$INSERT INTO public.hits VALUES ('to_regclass'); SELECT pg_catalog.to_regclass($1)$$`,
		`CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$INSERT INTO public.hits VALUES ('clock_timestamp'); SELECT pg_catalog.now()$$`,
		`CREATE FUNCTION public.plus(bigint, integer) RETURNS bigint LANGUAGE sql AS $$INSERT INTO public.hits VALUES ('+'); SELECT $1 OPERATOR(pg_catalog.+) $2$$`,
		`CREATE OPERATOR public.+ (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = public.plus)`)
	e.exec(fmt.Sprintf(`ALTER DATABASE %q SET search_path = public, pg_catalog`, db))

	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM by_g FROM src SELECT g AS g, sum(twice(v)) AS s GROUP BY g`)
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	for _, s := range []string{
		`ALTER TRANSFORM by_g ADD COLUMN max(twice(v)) AS m`,
		`PAUSE TRANSFORM by_g`,
		`RESUME TRANSFORM by_g`,
	} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err, s)
	}
	e.waitState(c, "by_g", trellis.StateLive)
	require.NoError(t, c.RequestBackfill(e.ctx, "src"))
	_, err = c.Sync(e.ctx, `TRANSFORM by_g FROM src SELECT g AS g, sum(twice(v)) AS s, max(twice(v)) AS m GROUP BY g;
TRANSFORM copy FROM src SELECT twice(v) AS v2;`, trellis.SyncOptions{})
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	e.waitState(c, "copy", trellis.StateLive)
	e.exec(`UPDATE src SET v = v OPERATOR(pg_catalog.+) 1 WHERE id <= 4`)
	e.converge(c)
	e.assertMatches("by_g", `SELECT g, pg_catalog.sum(v OPERATOR(pg_catalog.*) 2) AS s, pg_catalog.max(v OPERATOR(pg_catalog.*) 2) AS m FROM src GROUP BY g`)
	_, err = c.Apply(e.ctx, `DROP TRANSFORM copy`)
	require.NoError(t, err)

	require.Empty(t, e.rows(`SELECT what FROM public.hits GROUP BY what`), "planted code ran as Trellis")
}
