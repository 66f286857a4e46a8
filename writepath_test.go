package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/ledger"
)

// role creates a login role of its own for this test (roles are the
// cluster's), runs grants as the test's owner, and returns a pool that
// connects as it. At cleanup the role's rights and the role go.
func (e *env) role(suffix string, grants ...string) *pgxpool.Pool {
	e.t.Helper()
	pool, _ := e.roleURL(suffix, grants...)
	return pool
}

// roleURL is role, and the URL that connects as the role.
func (e *env) roleURL(suffix string, grants ...string) (*pgxpool.Pool, string) {
	e.t.Helper()
	var db string
	require.NoError(e.t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	name := db + "_" + suffix
	// Database names repeat between runs on one server (a counter per test
	// binary): a role an earlier run could not drop would fail CREATE ROLE.
	_, _ = e.db.Exec(e.ctx, fmt.Sprintf("DROP ROLE IF EXISTS %q", name))
	e.exec(fmt.Sprintf("CREATE ROLE %q LOGIN", name))
	for _, g := range grants {
		e.exec(fmt.Sprintf(g, fmt.Sprintf("%q", name)))
	}
	u, err := url.Parse(e.url)
	require.NoError(e.t, err)
	u.User = url.User(name)
	pool, err := pgxpool.New(e.ctx, u.String())
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		pool.Close()
		// Not e.ctx: it may have expired in a long test, leaving the role.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = e.db.Exec(ctx, fmt.Sprintf("DROP OWNED BY %q", name))
		_, _ = e.db.Exec(ctx, fmt.Sprintf("DROP ROLE %q", name))
	})
	return pool, u.String()
}

// as runs statements on pool in one transaction and fails the test if any fails.
func (e *env) as(pool *pgxpool.Pool, stmts ...string) {
	e.t.Helper()
	tx, err := pool.Begin(e.ctx)
	require.NoError(e.t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	for _, q := range stmts {
		_, err := tx.Exec(e.ctx, q)
		require.NoError(e.t, err, q)
	}
	require.NoError(e.t, tx.Commit(e.ctx))
}

// sqlstate is the SQLSTATE of a PostgreSQL error ("" for none).
func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// A rename of a column capture reads, in the transaction of a write and
// then committed, fails no write (the owner's or another role's); the
// transform reading the column pauses naming it, one that does not read it
// stays live and exact, and RESUME after renaming it back re-derives the
// paused one with every change made meanwhile.
func TestWritesSurviveRenameOfCapturedColumn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
	e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 50) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE, DELETE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s, count(*) AS n GROUP BY g")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM proj FROM src SELECT v * 2 AS w")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	e.waitState(c, "proj", trellis.StateLive)
	e.as(writer, `UPDATE src SET v = v + 1 WHERE id = 3`)

	// The writer has no right on the catalog: it appends only through capture.
	_, err = writer.Exec(e.ctx, `INSERT INTO trellis.ledger (seg, src, bucket, key) VALUES (0, 1, 0, '{}')`)
	require.Equal(t, "42501", sqlstate(err), "a writer appended to the ledger: %v", err)

	before := time.Now()
	e.as(e.db, `ALTER TABLE src RENAME COLUMN g TO grp`, `UPDATE src SET v = 0 WHERE id = 1`, `INSERT INTO src VALUES (51, 1, 51)`)
	// Before the staging worker could fit capture to the table.
	e.as(writer, `UPDATE src SET v = v + 100 WHERE id = 2`, `DELETE FROM src WHERE id = 4`, `INSERT INTO src VALUES (52, 2, 52)`)
	e.as(e.db, `UPDATE src SET grp = 3 WHERE id = 5`)

	st := e.waitCaptureFailure(c, "by_g", before.Add(-time.Second))
	require.Equal(t, "public.src", st.CaptureFailure.SourceTable)
	require.Equal(t, []string{"g"}, st.CaptureFailure.Columns)
	require.Contains(t, st.CaptureFailure.Error, "column g of public.src")
	require.Contains(t, st.CaptureFailure.Error, "RESUME TRANSFORM by_g")

	e.as(writer, `UPDATE src SET v = v + 1 WHERE id BETWEEN 10 AND 20`)
	e.converge(c)
	e.assertMatches("proj", "SELECT id, v * 2 AS w FROM src")
	st, err = c.Status(e.ctx, "proj")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)

	e.exec(`ALTER TABLE src RENAME COLUMN grp TO g`)
	e.as(writer, `UPDATE src SET v = v + 1 WHERE id BETWEEN 30 AND 35`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM by_g")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	e.as(writer, `UPDATE src SET g = 4 WHERE id = 6`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s, count(*) AS n FROM src GROUP BY g")
	e.assertMatches("proj", "SELECT id, v * 2 AS w FROM src")
}

// Dropping, retyping or adding a column in the transaction of a write,
// and renaming the key, fail no write; what can be kept exact is.
func TestWritesSurviveColumnDDLInTheirTransaction(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, h int, v int)`)
	e.exec(`INSERT INTO src SELECT i, i % 5, i % 3, i FROM generate_series(1, 50) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE, DELETE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s GROUP BY g")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM by_h FROM src SELECT h AS h, count(*) AS n GROUP BY h")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	e.waitState(c, "by_h", trellis.StateLive)

	e.as(e.db, `ALTER TABLE src ADD COLUMN extra text`, `UPDATE src SET v = v + 1 WHERE id = 1`, `INSERT INTO src (id, g, h, v) VALUES (60, 1, 1, 60)`)
	e.as(e.db, `ALTER TABLE src ALTER COLUMN g TYPE bigint`, `UPDATE src SET g = g + 1 WHERE id = 2`, `DELETE FROM src WHERE id = 3`)
	e.as(writer, `UPDATE src SET v = v + 1 WHERE id = 7`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s FROM src GROUP BY g")
	e.assertMatches("by_h", "SELECT h, count(*) AS n FROM src GROUP BY h")

	before := time.Now()
	e.as(e.db, `ALTER TABLE src DROP COLUMN h`, `UPDATE src SET v = v + 1 WHERE id = 8`, `INSERT INTO src (id, g, v) VALUES (61, 2, 61)`, `DELETE FROM src WHERE id = 9`)
	e.as(writer, `UPDATE src SET g = 0 WHERE id = 10`, `DELETE FROM src WHERE id = 11`)
	st := e.waitCaptureFailure(c, "by_h", before.Add(-time.Second))
	require.Equal(t, []string{"h"}, st.CaptureFailure.Columns)
	e.as(writer, `UPDATE src SET v = v + 1 WHERE id = 12`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s FROM src GROUP BY g")

	// The key renamed: writes go on; the readers pause.
	e.as(e.db, `ALTER TABLE src RENAME COLUMN id TO ident`, `UPDATE src SET v = v + 1 WHERE ident = 13`)
	e.as(writer, `UPDATE src SET v = v + 1 WHERE ident = 14`, `INSERT INTO src (ident, g, v) VALUES (62, 1, 62)`)
	e.waitState(c, "by_g", trellis.StatePaused)
	e.as(writer, `UPDATE src SET v = v + 1 WHERE ident = 15`)
}

// Damage to the catalog never fails a write to a captured table.
func TestWritesSurviveDroppedLedger(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
	e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 20) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE, DELETE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s GROUP BY g")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	require.NoError(t, c.Close())

	e.exec(`DROP TABLE trellis.ledger`)
	e.as(writer, `UPDATE src SET v = v + 1 WHERE id = 1`, `INSERT INTO src VALUES (21, 1, 21)`, `DELETE FROM src WHERE id = 2`)
	e.as(e.db, `UPDATE src SET g = 3 WHERE id = 3`, `TRUNCATE src`)
	e.exec(`DROP TABLE trellis.ring`)
	e.as(writer, `INSERT INTO src VALUES (1, 1, 1)`, `UPDATE src SET v = 2`)
}

// Another session's temporary table named like the instance marker does
// not make Migrate fail.
func TestMigrateIgnoresOtherSessionsTempTables(t *testing.T) {
	t.Parallel()
	e := setup(t)
	conn, err := e.db.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(e.ctx, `CREATE TEMP TABLE trellis_instance (catalog_schema text, target_schema text)`)
	require.NoError(t, err)
	_, err = conn.Exec(e.ctx, `INSERT INTO trellis_instance VALUES ('x', 'y')`)
	require.NoError(t, err)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	require.NoError(t, m.Migrate(e.ctx))
}

// Malformed ledger rows (only damage can write them now) never panic the
// drain, never sidestep a key's lock and never lose a change: each is
// counted, and its source re-read for every reader.
func TestDrainRejectsMalformedLedgerRows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
	e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 30) i`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s GROUP BY g")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM proj FROM src SELECT v AS v")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	e.waitState(c, "proj", trellis.StateLive)
	inst := e.instanceLabel("trellis")

	var src int
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT id FROM trellis.sources WHERE table_name = 'src'`).Scan(&src))
	// Changes the forged rows would hide if the drain trusted them.
	e.exec(`UPDATE src SET v = 1000 WHERE id = 7`)
	e.exec(`SET session_replication_role = replica`)
	e.exec(`UPDATE src SET v = 2000 WHERE id = 8`)
	e.exec(`RESET session_replication_role`)
	for _, q := range []string{
		`INSERT INTO trellis.ledger (seg, src, bucket, key) SELECT cur, $1, 0, '{}' FROM trellis.ring`,
		`INSERT INTO trellis.ledger (seg, src, bucket, key) SELECT cur, $1, 3, '{1,2}' FROM trellis.ring`,
		`INSERT INTO trellis.ledger (seg, src, bucket, key, vals) SELECT cur, $1, hashtext('{5}') & 63, '{5}', '{1,2,3}' FROM trellis.ring`,
		`INSERT INTO trellis.ledger (seg, src, bucket, key) SELECT cur, $1, (hashtext('{6}') & 63) # 1, '{6}' FROM trellis.ring`,
		`INSERT INTO trellis.ledger (seg, src, bucket, key) SELECT cur, $1 + 1000, 0, '{6}' FROM trellis.ring`,
	} {
		e.exec(q, src)
	}
	e.waitMetric(inst, "trellis_ledger_rows_rejected_total", atLeast(4))
	e.exec(`UPDATE src SET v = v + 1 WHERE id < 5`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s FROM src GROUP BY g")
	e.assertMatches("proj", "SELECT id, v FROM src")
	for _, target := range []string{"by_g", "proj"} {
		st, err := c.Status(e.ctx, target)
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, target)
	}
	_, found := metricValue(trellis.RenderPrometheus(), "trellis_panics_total", "trellis_instance="+inst)
	require.False(t, found, "a background part panicked")
}

// A source whose capture cannot be installed (Trellis's role may read it
// but does not own it) pauses only its readers, with the cause; another
// source installs, builds, drains and converges meanwhile.
func TestCaptureInstallFailureStopsOnlyItsReaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	own, url := e.roleURL("trellis", fmt.Sprintf("GRANT CREATE ON DATABASE %q TO %%s", db), "GRANT CREATE ON SCHEMA public TO %s")
	e.exec(`CREATE TABLE foreign_src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO foreign_src SELECT i, i FROM generate_series(1, 10) i`)
	e.exec(fmt.Sprintf(`GRANT SELECT ON foreign_src TO %q`, db+"_trellis"))
	_, err := own.Exec(e.ctx, `CREATE TABLE healthy (id int PRIMARY KEY, v int)`)
	require.NoError(t, err)
	_, err = own.Exec(e.ctx, `INSERT INTO healthy SELECT i, i FROM generate_series(1, 10) i`)
	require.NoError(t, err)

	m, err := trellis.Connect(e.ctx, trellis.Options{URL: url, Logger: quietLogger()})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Migrate(e.ctx))
	c, err := trellis.Connect(e.ctx, trellis.Options{URL: url, Logger: quietLogger(), Staging: true, DrainWorkers: 2, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Define(e.ctx, "TRANSFORM foreign_copy FROM foreign_src SELECT v AS v")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM healthy_copy FROM healthy SELECT v AS v")
	require.NoError(t, err)

	st := e.waitCaptureFailure(c, "foreign_copy", time.Now().Add(-time.Minute))
	require.Equal(t, "public.foreign_src", st.CaptureFailure.SourceTable)
	require.Contains(t, st.CaptureFailure.Error, "capture of public.foreign_src cannot be installed")
	require.Contains(t, st.CaptureFailure.Error, "RESUME")

	e.waitState(c, "healthy_copy", trellis.StateLive)
	_, err = own.Exec(e.ctx, `UPDATE healthy SET v = v * 10 WHERE id < 5`)
	require.NoError(t, err)
	e.converge(c)
	e.assertMatches("healthy_copy", "SELECT id, v FROM healthy")
	// The ledger is reclaimed meanwhile: the applied changes go.
	e.eventually("the ledger was reclaimed", func() bool {
		return e.rows(`SELECT count(*) FROM trellis.ledger`)[0][0] == "0"
	})
	_, err = e.db.Exec(e.ctx, `UPDATE foreign_src SET v = 0`)
	require.NoError(t, err, "writes to the table capture could not be installed on")

	// Once Trellis may create triggers on it, RESUME installs and builds.
	e.exec(fmt.Sprintf(`ALTER TABLE foreign_src OWNER TO %q`, db+"_trellis"))
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM foreign_copy")
	require.NoError(t, err)
	e.waitState(c, "foreign_copy", trellis.StateLive)
	e.exec(`UPDATE foreign_src SET v = 5 WHERE id = 1`)
	e.converge(c)
	e.assertMatches("foreign_copy", "SELECT id, v FROM foreign_src")
}

// Sources Trellis cannot capture faithfully (an inheritance parent or
// child, a partition, a temporary table, a system catalog), targets in a
// catalog, and
// definitions that reach a volatile function by a back door are refused.
func TestDefineRefusesWhatCannotBeMaintained(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`CREATE TABLE parent (id int PRIMARY KEY, v int)`)
	e.exec(`CREATE TABLE child (PRIMARY KEY (id)) INHERITS (parent)`)
	e.exec(`CREATE TABLE pt (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)`)
	e.exec(`CREATE TABLE pt_1 PARTITION OF pt FOR VALUES FROM (0) TO (10)`)
	e.exec(`CREATE FUNCTION vplus(int, int) RETURNS int LANGUAGE sql VOLATILE AS 'SELECT $1 + $2'`)
	e.exec(`CREATE OPERATOR ### (LEFTARG = int, RIGHTARG = int, FUNCTION = vplus)`)
	e.exec(`CREATE FUNCTION vcheck(int) RETURNS bool LANGUAGE sql VOLATILE AS 'SELECT $1 > 0'`)
	e.exec(`CREATE DOMAIN vpos AS int CHECK (vcheck(VALUE))`)
	e.exec(`CREATE TYPE mood AS ENUM ('low', 'high')`)
	e.exec(`CREATE FUNCTION vmood(int) RETURNS mood LANGUAGE sql VOLATILE AS $$SELECT CASE WHEN random() < 2 THEN 'low'::mood END$$`)
	e.exec(`CREATE CAST (int AS mood) WITH FUNCTION vmood(int)`)
	c := e.engine()
	other := e.connect(trellis.Options{Schema: "billing", TargetSchema: "reports"})
	require.NoError(t, other.Migrate(e.ctx))

	conn, err := e.db.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(e.ctx, `CREATE TEMP TABLE tmp (id int PRIMARY KEY, v int)`)
	require.NoError(t, err)
	var tmpSchema string
	require.NoError(t, conn.QueryRow(e.ctx, `SELECT pg_my_temp_schema()::regnamespace::text`).Scan(&tmpSchema))

	for _, stmt := range []string{
		"TRANSFORM p FROM parent SELECT v AS v",
		// Writes through their parent fire no statement trigger of theirs.
		"TRANSFORM ch FROM child SELECT v AS v",
		"TRANSFORM leaf FROM pt_1 SELECT v AS v",
		"TRANSFORM tm FROM " + tmpSchema + ".tmp SELECT v AS v",
		"TRANSFORM sys FROM pg_catalog.pg_class SELECT relname AS n",
		"TRANSFORM billing.t FROM src SELECT v AS v",
		"TRANSFORM op FROM src SELECT v ### 1 AS w",
		"TRANSFORM dom FROM src SELECT v::vpos AS w",
		"TRANSFORM cst FROM src SELECT v::mood AS w",
		"TRANSFORM trellis.t FROM src SELECT v AS v",
	} {
		_, err := c.Define(e.ctx, stmt)
		if err == nil || trellis.CodeOf(err) != trellis.CodeValidation {
			t.Errorf("%s: %v", stmt, err)
		}
	}
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, defs, "nothing was created")

	// A quoted name holding a dot is one identifier.
	e.exec(`CREATE SCHEMA sales`)
	_, err = c.Define(e.ctx, `TRANSFORM "sales.totals" FROM src SELECT v AS v`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM sales.totals FROM src SELECT v AS v`)
	require.NoError(t, err)
	applied, err := c.Apply(e.ctx, `DROP TRANSFORM "sales.totals"`)
	require.NoError(t, err)
	require.Equal(t, trellis.Dropped{Target: `public.sales.totals`}, applied)
	st, err := c.Status(e.ctx, "sales.totals")
	require.NoError(t, err)
	require.NotNil(t, st, "the transform in schema sales is still there")
	require.Equal(t, [][]string{{"true"}}, e.rows(`SELECT to_regclass('sales.totals') IS NOT NULL`))
}

// A target renamed and replaced by another table under its name: the
// drain never writes the impostor, the transform halts saying why, and
// DROP TRANSFORM leaves the impostor alone.
func TestTargetsAreTrackedByOID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT i, i FROM generate_series(1, 10) i`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM copy FROM src SELECT v AS v")
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)

	e.exec(`ALTER TABLE copy RENAME TO copy_old`)
	e.exec(`CREATE TABLE copy (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO copy VALUES (1, -1), (2, -2)`)
	e.exec(`UPDATE src SET v = v + 100`)
	st := e.waitState(c, "copy", trellis.StatePaused)
	require.NotNil(t, st.CaptureFailure)
	require.Equal(t, trellis.CaptureFailureHalt, st.CaptureFailure.Kind)
	require.Contains(t, st.CaptureFailure.Error, "no longer the target Trellis created")
	require.Equal(t, [][]string{{"1", "-1"}, {"2", "-2"}}, e.rows(`SELECT id, v FROM copy ORDER BY id`), "the impostor is untouched")

	_, err = c.Apply(e.ctx, "DROP TRANSFORM copy")
	require.NoError(t, err)
	require.Equal(t, [][]string{{"2"}}, e.rows(`SELECT count(*) FROM copy`), "DROP TRANSFORM dropped a table it did not create")
	require.Equal(t, [][]string{{"10"}}, e.rows(`SELECT count(*) FROM copy_old`))
}

// A type the definer reached through its own search_path is recorded
// qualified: workers whose search_path differs resolve the same type.
func TestTypesResolveAsTheDefinerSawThem(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE SCHEMA app`)
	e.exec(`CREATE TYPE app.mood AS ENUM ('sad', 'ok', 'happy')`)
	e.exec(`CREATE TABLE app.feelings (id app.mood PRIMARY KEY, n int)`)
	e.exec(`INSERT INTO app.feelings VALUES ('sad', 1), ('ok', 2)`)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))

	u, err := url.Parse(e.url)
	require.NoError(t, err)
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "options=-c%20search_path%3Dapp%2Cpublic"
	definer, err := trellis.Connect(e.ctx, trellis.Options{URL: u.String(), Logger: quietLogger()})
	require.NoError(t, err)
	defer definer.Close()
	_, err = definer.Define(e.ctx, "TRANSFORM by_mood FROM feelings SELECT n * 2 AS n2")
	require.NoError(t, err)

	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	e.waitState(c, "by_mood", trellis.StateLive)
	e.exec(`UPDATE app.feelings SET n = 10 WHERE id = 'sad'`)
	e.exec(`INSERT INTO app.feelings VALUES ('happy', 3)`)
	e.converge(c)
	e.assertMatches("by_mood", "SELECT id, n * 2 AS n2 FROM app.feelings")
}

// Where PUBLIC may create in public, another role plants better-matching
// functions and operators there after a define: the workers still run
// exactly what the definer's session resolved.
func TestPlantedFunctionsAndOperatorsNeverRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, a varchar, b varchar)`)
	e.exec(`INSERT INTO src SELECT i, 'A' || i, 'B' || i FROM generate_series(1, 10) i`)
	planter := e.role("planter")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM t FROM src SELECT lower(a) AS la, a || b AS ab")
	require.NoError(t, err)
	e.waitState(c, "t", trellis.StateLive)

	e.as(planter,
		`CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'pwned'$$`,
		`CREATE FUNCTION public.cat(varchar, varchar) RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'pwned'$$`,
		`CREATE OPERATOR public.|| (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.cat)`)
	// (The test's own statements name pg_catalog's: the planted operator
	// would catch them too.)
	e.exec(`UPDATE src SET a = pg_catalog.concat(a, 'x') WHERE id <= 5`)
	e.exec(`INSERT INTO src VALUES (11, 'A11', 'B11')`)
	e.converge(c)
	e.assertMatches("t", "SELECT id, pg_catalog.lower(a::text) AS la, a::text OPERATOR(pg_catalog.||) b::text AS ab FROM src")
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM t WHERE la = 'pwned' OR ab = 'pwned'`))
}

// A partitioned source's capture is a row-level trigger, whose plans a
// session caches: a session that wrote to the table before a captured
// column is renamed or retyped (committed, or in the write's own
// transaction, before the staging worker refits capture) still writes;
// the transform pauses naming the column, and RESUME after the column is
// back re-derives every change made meanwhile.
func TestPartitionedWritesSurviveColumnDDLInASessionThatWrote(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE ps (id int PRIMARY KEY, g int, v int) PARTITION BY RANGE (id)`)
	e.exec(`CREATE TABLE ps_a PARTITION OF ps FOR VALUES FROM (0) TO (100)`)
	e.exec(`INSERT INTO ps SELECT i, i % 5, i FROM generate_series(1, 50) i`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM ps SELECT g AS g, sum(v) AS s, count(*) AS n GROUP BY g")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	// No staging worker fits capture to the table meanwhile.
	require.NoError(t, c.Close())
	before := time.Now()

	conn, err := e.db.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	run := func(stmts ...string) {
		t.Helper()
		for _, q := range stmts {
			_, err := conn.Exec(e.ctx, q)
			require.NoError(t, err, q)
		}
	}
	// The session's capture plans are cached for partition ps_a.
	run(`UPDATE ps SET v = v + 1 WHERE id = 1`, `DELETE FROM ps WHERE id = 2`, `INSERT INTO ps VALUES (60, 1, 60)`)
	run(`BEGIN`, `ALTER TABLE ps RENAME COLUMN g TO grp`, `UPDATE ps SET v = v + 1 WHERE id = 3`, `DELETE FROM ps WHERE id = 4`, `COMMIT`)
	run(`UPDATE ps_a SET v = v + 1 WHERE id = 5`, `INSERT INTO ps VALUES (61, 2, 61)`)
	run(`BEGIN`, `ALTER TABLE ps ALTER COLUMN grp TYPE bigint`, `UPDATE ps SET grp = 3 WHERE id = 6`, `DELETE FROM ps WHERE id = 7`, `COMMIT`)
	run(`UPDATE ps SET v = v + 1 WHERE id = 8`)

	c = e.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	st := e.waitCaptureFailure(c, "by_g", before)
	require.Equal(t, []string{"g"}, st.CaptureFailure.Columns, "%+v", st.CaptureFailure)
	run(`ALTER TABLE ps RENAME COLUMN grp TO g`, `UPDATE ps SET v = v + 1 WHERE id = 9`)
	_, err = c.Apply(e.ctx, "RESUME TRANSFORM by_g")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	run(`UPDATE ps SET g = 4 WHERE id = 10`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s, count(*) AS n FROM ps GROUP BY g")
}

// Capture renders a captured value the same from every session whatever
// its type's name: a column of a domain over date, grouped by, is moved
// between groups by a writer whose DateStyle is SQL, DMY, and the group it
// left is the one decremented (not the date with day and month swapped).
func TestCapturedDomainValuesRenderAlikeFromEverySession(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE DOMAIN day AS date`)
	e.exec(`CREATE TABLE ev (id int PRIMARY KEY, d day, v int)`)
	e.exec(`INSERT INTO ev SELECT i, date '2026-01-01' + i % 3, i FROM generate_series(1, 30) i`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_d FROM ev SELECT d AS d, sum(v) AS s, count(*) AS n GROUP BY d")
	require.NoError(t, err)
	e.waitState(c, "by_d", trellis.StateLive)

	e.as(e.db, `SET LOCAL "DateStyle" = 'SQL, DMY'`, `UPDATE ev SET d = '2026-02-06' WHERE id IN (4, 5)`, `DELETE FROM ev WHERE id = 6`)
	e.converge(c)
	e.assertMatches("by_d", "SELECT d, sum(v) AS s, count(*) AS n FROM ev GROUP BY d")
}

// A writer whose own lock_timeout is small never fails on the lock reclaim
// takes on a ledger segment. A transaction appends to the segment its id
// picks however long it runs, also once the ring has moved on and reclaim
// may lock that segment (ACCESS EXCLUSIVE, for its TRUNCATE): the writer
// (REPEATABLE READ here) waits for it, and its change reaches the target.
func TestWriterWithSmallLockTimeoutOutlastsReclaimLock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT i, i FROM generate_series(1, 10) i`)
	writer := e.role("writer", "GRANT SELECT, UPDATE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM copy FROM src SELECT v AS v")
	require.NoError(t, err)
	e.waitState(c, "copy", trellis.StateLive)

	conn, err := writer.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	var pid int
	_, err = tx.Exec(e.ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	_, err = tx.Exec(e.ctx, `SET LOCAL lock_timeout = '20ms'`)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	// The writer's snapshot is taken; its start time picks the segment it
	// appends to.
	var seen int
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT count(*) FROM src`).Scan(&seen))
	var seg int
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT `+ledger.SegmentAt(`now()`)).Scan(&seg))
	stale := fmt.Sprintf("ledger_%d", seg)

	// The lock reclaim takes on the segment the writer will append to.
	reclaim, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = reclaim.Rollback(e.ctx) }()
	_, err = reclaim.Exec(e.ctx, `LOCK TABLE trellis.`+stale+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := tx.Exec(e.ctx, `UPDATE src SET v = 100 WHERE id = 1`)
		done <- err
	}()
	var werr error
	waited := false
	e.eventually("the writer waits on the segment's lock, or is done", func() bool {
		select {
		case werr = <-done:
			return true
		default:
		}
		require.NoError(t, e.db.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`, pid).Scan(&waited))
		return waited
	})
	require.NoError(t, werr, "the writer's statement failed on reclaim's lock")
	require.NoError(t, reclaim.Rollback(e.ctx))
	if waited {
		require.NoError(t, <-done, "the writer's statement failed on reclaim's lock")
	}
	require.NoError(t, tx.Commit(e.ctx))
	e.converge(c)
	e.assertMatches("copy", "SELECT id, v FROM src")
}
