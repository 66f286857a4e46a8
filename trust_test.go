package trellis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// On a database where PUBLIC may create in public and every session's
// search_path puts public before pg_catalog, another role plants there
// better-matching versions of the functions and operators capture, the
// drain, builds, the self-check and status call (hashtext, &, = on text,
// now, clock_timestamp, pg_notify, to_regclass, format, set_config,
// unnest, array_position, a text() cast function). A writer that may only
// INSERT into and UPDATE the source writes through capture, as does the
// owner: no planted function or operator ever runs, neither as Trellis
// nor as a writer, and the targets stay exact.
func TestCaptureAndWorkersNeverRunPlantedCode(t *testing.T) {
	t.Parallel()
	t.Run("planted before the define", func(t *testing.T) { t.Parallel(); plantedNeverRunsAnywhere(t, true) })
	t.Run("planted after the build", func(t *testing.T) { t.Parallel(); plantedNeverRunsAnywhere(t, false) })
}

// plantedNeverRunsAnywhere is TestCaptureAndWorkersNeverRunPlantedCode,
// with the objects planted before the define (before) or once the targets
// are built.
func plantedNeverRunsAnywhere(t *testing.T, before bool) {
	e := setup(t)
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g text NOT NULL, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT i, 'g' || (i % 4), i FROM generate_series(1, 40) i`)
	e.exec(`CREATE INDEX ON src (g)`)
	writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
	planter := e.role("planter")
	hit := func(what string) string {
		return fmt.Sprintf(`INSERT INTO public.hits VALUES (current_user, %s)`, "'"+what+"'")
	}
	e.exec(fmt.Sprintf(`ALTER DATABASE %q SET search_path = public, pg_catalog`, db))
	plant := func() {
		e.as(planter,
			`CREATE TABLE public.hits (who text, what text)`,
			`GRANT INSERT ON public.hits TO PUBLIC`,
			`CREATE FUNCTION public.hashtext(text) RETURNS int LANGUAGE sql AS $$`+hit("hashtext")+`; SELECT 0$$`,
			`CREATE FUNCTION public.band(int, int) RETURNS int LANGUAGE sql AS $$`+hit("&")+`; SELECT 0$$`,
			`CREATE OPERATOR public.& (LEFTARG = int, RIGHTARG = int, FUNCTION = public.band)`,
			`CREATE FUNCTION public.teq(text, text) RETURNS bool LANGUAGE sql AS $$`+hit("=")+`; SELECT true$$`,
			`CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.teq)`,
			`CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql AS $$`+hit("now")+`; SELECT pg_catalog.now()$$`,
			`CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$`+hit("clock_timestamp")+`; SELECT pg_catalog.now()$$`,
			`CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE sql AS $$`+hit("pg_notify")+`$$`,
			`CREATE FUNCTION public.to_regclass(text) RETURNS regclass LANGUAGE sql AS $$`+hit("to_regclass")+`; SELECT pg_catalog.to_regclass($1)$$`,
			`CREATE FUNCTION public.format(text, text) RETURNS text LANGUAGE sql AS $$`+hit("format")+`; SELECT $1$$`,
			`CREATE FUNCTION public.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$`+hit("set_config")+`; SELECT pg_catalog.set_config($1, $2, $3)$$`,
			`CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE sql AS $$`+hit("unnest")+`; SELECT pg_catalog.unnest($1)$$`,
			`CREATE FUNCTION public.array_position(text[], text) RETURNS int LANGUAGE sql AS $$`+hit("array_position")+`; SELECT pg_catalog.array_position($1, $2)$$`,
			`CREATE FUNCTION public.text(int) RETURNS text LANGUAGE sql AS $$`+hit("text(int)")+`; SELECT 'x'$$`,
		)
	}
	if before {
		plant()
	}

	c := e.engine()
	for _, d := range []string{
		"TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s, count(*) AS n GROUP BY g",
		"TRANSFORM proj FROM src SELECT v * 2 AS w, g AS g",
	} {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	e.waitState(c, "by_g", trellis.StateLive)
	e.waitState(c, "proj", trellis.StateLive)
	if !before {
		plant()
	}
	var path string
	require.NoError(t, writer.QueryRow(e.ctx, `SHOW search_path`).Scan(&path))
	require.Equal(t, "public, pg_catalog", path, "the writer's session resolves public first")
	e.as(writer, `INSERT INTO src VALUES (100, 'g9', 100), (101, 'g1', 101)`, `UPDATE src SET v = 5`)
	e.as(writer, `UPDATE src SET g = 'g2'`)
	e.as(e.db, `INSERT INTO src VALUES (102, 'g3', 102)`, `UPDATE src SET g = 'g0', v = 7`)
	e.as(e.db, `DELETE FROM src WHERE id > 100`, `TRUNCATE src`, `INSERT INTO src VALUES (1, 'g1', 1), (2, 'g2', 2)`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s, count(*) AS n FROM src GROUP BY g")
	e.assertMatches("proj", "SELECT id, v * 2 AS w, g FROM src")
	job, err := c.SelfCheck(e.ctx, "by_g", trellis.SelfCheckOptions{Timeout: 20 * time.Second, Mode: trellis.SelfCheckStrict})
	require.NoError(t, err)
	done := e.waitSelfCheck(c, job.ID)
	if done.Error != nil {
		t.Fatalf("self-check: %s", *done.Error)
	}
	for _, tg := range []string{"by_g", "proj"} {
		st, err := c.Status(e.ctx, tg)
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, tg)
	}
	require.Empty(t, e.rows(`SELECT who, what FROM public.hits GROUP BY who, what`), "planted code ran")
	// The plants work: a session resolving public first runs them.
	e.as(writer, `SELECT hashtext('a')`)
	require.NotEmpty(t, e.rows(`SELECT who FROM public.hits WHERE what OPERATOR(pg_catalog.=) 'hashtext'`))
}

// Only Trellis writes its catalog: a role that may write a captured table
// has no right on any table, sequence, function or the schema of the
// catalog (so it can neither forge ledger rows nor hold a lock that stops
// reclamation), and its writes still reach the targets through capture.
func TestCatalogGrantsOtherRolesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT i, i FROM generate_series(1, 10) i`)
	writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM copy FROM src SELECT v AS v")
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)
	var who string
	require.NoError(t, writer.QueryRow(e.ctx, `SELECT current_user`).Scan(&who))

	rights := e.rows(`
SELECT c.relname, p.priv FROM pg_class c
CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p(priv)
WHERE c.relnamespace = 'trellis'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
  AND has_table_privilege($1, c.oid, p.priv)
UNION ALL
SELECT c.relname, p.priv FROM pg_class c CROSS JOIN unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) p(priv)
WHERE c.relnamespace = 'trellis'::regnamespace AND c.relkind = 'S' AND has_sequence_privilege($1, c.oid, p.priv)
UNION ALL
SELECT f.oid::regprocedure::text, 'EXECUTE' FROM pg_proc f
WHERE f.pronamespace = 'trellis'::regnamespace AND has_function_privilege($1, f.oid, 'EXECUTE')
UNION ALL
SELECT 'schema', p.priv FROM unnest(ARRAY['USAGE', 'CREATE']) p(priv) WHERE has_schema_privilege($1, 'trellis', p.priv)`, who)
	require.Empty(t, rights, "another role has rights on the catalog")
	var n int
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = 'trellis'::regnamespace AND relname LIKE 'ledger%'`).Scan(&n))
	require.Greater(t, n, 1, "the ledger and its segments were checked")

	for _, q := range []string{
		`INSERT INTO trellis.ledger (seg, src, bucket, key) VALUES (0, 1, 0, '{1}')`,
		`INSERT INTO trellis.ledger_0 (seg, src, bucket, key) VALUES (0, 1, 0, '{1}')`,
		`UPDATE trellis.ring SET cur = cur`,
		`BEGIN; LOCK TABLE trellis.ledger_0 IN ROW EXCLUSIVE MODE`,
		`SELECT pg_notify('x', 'y') FROM trellis.transforms`,
	} {
		_, err := writer.Exec(e.ctx, q)
		require.Equal(t, "42501", sqlstate(err), "%s: %v", q, err)
	}
	e.as(writer, `UPDATE src SET v = 100`, `INSERT INTO src VALUES (11, 11)`)
	e.converge(c)
	e.assertMatches("copy", "SELECT id, v FROM src")
}

// Damage to the catalog's ring (its row deleted, or pointing at no
// segment) or the ledger renamed never fails a write to a captured table,
// by its owner or by a role that may only INSERT and UPDATE it.
func TestWritesSurviveDamagedRing(t *testing.T) {
	t.Parallel()
	for name, damage := range map[string]string{
		"ring row deleted":  `DELETE FROM trellis.ring`,
		"ring out of range": `UPDATE trellis.ring SET cur = 999`,
		"ring null":         `ALTER TABLE trellis.ring ALTER COLUMN cur DROP NOT NULL; UPDATE trellis.ring SET cur = NULL`,
		"ledger renamed":    `ALTER TABLE trellis.ledger RENAME TO ledger_gone`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
			e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 20) i`)
			writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
			c := e.engine()
			_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s GROUP BY g")
			require.NoError(t, err)
			e.waitState(c, "by_g", trellis.StateLive)
			require.NoError(t, c.Close())

			e.exec(damage)
			e.as(writer, `UPDATE src SET v = 1`, `INSERT INTO src VALUES (21, 1, 21)`)
			e.as(e.db, `UPDATE src SET g = 3 WHERE id = 3`, `DELETE FROM src WHERE id = 4`, `TRUNCATE src`, `INSERT INTO src VALUES (1, 1, 1)`)
			e.as(writer, `UPDATE src SET v = 2`)
		})
	}
}

// A key's text, hence its bucket and the key lock recomputes of it take,
// is the same whatever the writer's session settings: a writer whose
// bytea_output is escape records the bytea key the hex writers record.
// Two spellings of one key land in two buckets, so two drain pages could
// recompute the key at once under different locks, and the older one
// could overwrite the newer (the "wrong bucket" row, made by any
// writer's SET).
func TestKeyTextIsTheSameFromEverySession(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE bk (b bytea PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO bk SELECT convert_to('k' || i, 'UTF8'), i FROM generate_series(1, 5) i`)
	writer := e.role("writer", "GRANT SELECT, UPDATE ON bk TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM copy FROM bk SELECT v AS v")
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)
	require.NoError(t, c.Close())

	e.as(writer, `UPDATE bk SET v = 10 WHERE b = 'k1'`)
	e.as(writer, `SET LOCAL bytea_output = 'escape'`, `UPDATE bk SET v = 11 WHERE b = 'k1'`)
	require.Equal(t, [][]string{{"1", "1"}}, e.rows(`SELECT count(DISTINCT key), count(DISTINCT hashtext(key::text) & 63) FROM trellis.ledger`),
		"one key, recorded as %v", e.rows(`SELECT key::text FROM trellis.ledger`))
}

// A cast to text planted after the define by the owner of a type a source
// column has (another role: PUBLIC may create in public) neither fails a
// writer's statement nor runs as Trellis's role: capture renders values of
// types outside pg_catalog by their output function, and the drain, which
// renders keys as text and reads them back, never runs it either: the
// staging worker pauses the readers with a reason naming the cast and the
// fix, and a define over the type is refused meanwhile. Once the cast is
// dropped, RESUME re-derives the target: nothing written meanwhile is lost.
func TestCastsPlantedOnASourceTypeNeverRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	planter := e.role("planter")
	e.as(planter, `CREATE TYPE public.tag AS ENUM ('a', 'b', 'c')`, `CREATE TABLE public.hits (who text)`, `GRANT INSERT ON public.hits TO PUBLIC`)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, t public.tag NOT NULL, v int)`)
	e.exec(`INSERT INTO src SELECT i, 'a', i FROM generate_series(1, 10) i`)
	writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_t FROM src SELECT t AS t, sum(v) AS s GROUP BY t")
	require.NoError(t, err)
	e.waitState(c, "by_t", trellis.StateLive)

	e.as(planter,
		`CREATE FUNCTION public.tag_text(public.tag) RETURNS text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.hits VALUES (current_user); IF $1 = 'c' THEN RAISE EXCEPTION 'no c'; END IF; RETURN pg_catalog.enum_out($1)::text; END $$`,
		`CREATE CAST (public.tag AS text) WITH FUNCTION public.tag_text(public.tag)`)
	st := e.waitStatus(c, "by_t", func(st *trellis.Status) bool { return st.State == trellis.StatePaused })
	require.Contains(t, st.PausedReason, "(public.tag AS text)")
	require.Contains(t, st.PausedReason, "public.tag_text(public.tag)")
	require.Contains(t, st.PausedReason, "DROP CAST")
	e.as(writer, `UPDATE src SET t = 'b'`)
	e.as(writer, `UPDATE src SET t = 'c'`)
	e.as(writer, `UPDATE src SET v = 1`, `INSERT INTO src VALUES (11, 'a', 11)`)
	_, err = c.Define(e.ctx, "TRANSFORM by_t2 FROM src SELECT t AS t, count(*) AS n GROUP BY t")
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "(public.tag AS text)")
	require.Empty(t, e.rows(`SELECT who, count(*) FROM public.hits GROUP BY who`), "the planted cast ran")

	e.as(planter, `DROP CAST (public.tag AS text)`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM by_t")
	require.NoError(t, err)
	e.waitState(c, "by_t", trellis.StateLive)
	e.converge(c)
	e.assertMatches("by_t", "SELECT t, sum(v) AS s FROM src GROUP BY t")
	require.Empty(t, e.rows(`SELECT who, count(*) FROM public.hits GROUP BY who`), "the planted cast ran")
}
