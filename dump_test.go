package trellis_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/dump"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

// fresh is another, empty database for the same test, with the test's
// helpers on it.
func (e *env) fresh() *env {
	e.t.Helper()
	url := testsupport.Database(e.t)
	db, err := pgxpool.New(e.ctx, url)
	require.NoError(e.t, err)
	e.t.Cleanup(db.Close)
	return &env{t: e.t, url: url, db: db, ctx: e.ctx}
}

// structureDump runs what `trellis dump` runs: pg_dump --schema-only with
// c's definitions appended, redone while they change. defs, when not nil,
// replaces the definitions reader.
func (e *env) structureDump(c *trellis.Client, defs func(context.Context) (string, error)) dump.Result {
	e.t.Helper()
	bin, err := dump.FindBinary("pg_dump")
	require.NoError(e.t, err)
	if defs == nil {
		defs = c.DumpDefinitionsSQL
	}
	res, err := dump.Structure(e.ctx, dump.Options{PgDump: bin, URL: e.url, Schema: c.Config().Schema, Definitions: defs})
	require.NoError(e.t, err)
	return res
}

// load runs a dump into the database with psql, stopping at the first
// error, in one transaction (as mix ecto.load and most loaders do).
func (e *env) load(sql []byte) {
	e.t.Helper()
	psql, err := dump.FindBinary("psql")
	require.NoError(e.t, err)
	file := filepath.Join(e.t.TempDir(), "structure.sql")
	require.NoError(e.t, os.WriteFile(file, sql, 0o644))
	out, err := exec.CommandContext(e.ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-d", e.url, "-f", file).CombinedOutput()
	require.NoError(e.t, err, "loading the dump: %s", out)
}

func TestDumpLoadsTransforms(t *testing.T) {
	t.Parallel()
	e := setup(t)
	schema := `
CREATE TABLE customers (id int PRIMARY KEY, region text);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric, qty int, status text);
CREATE TABLE "Odd ""Src"" Table" ("Key Col" int PRIMARY KEY, "Mixed Col" text);
CREATE INDEX ON orders (customer_id);`
	e.exec(schema)
	e.exec(`INSERT INTO customers SELECT g, 'r' || (g % 4) FROM generate_series(1, 20) g`)
	// qty 0 on a few rows: ratio's per_unit quarantines on them.
	e.exec(`INSERT INTO orders SELECT g, g % 25, g % 50, g % 7, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'paid' END FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO "Odd ""Src"" Table" VALUES (1, 'a'), (2, 'b\c')`)
	c := e.engine()

	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM paid FROM orders SELECT price * qty AS amount WHERE status = 'paid'`, "paid",
			`SELECT id, price * qty AS amount, customer_id AS customer FROM orders WHERE status = 'paid'`},
		{`TRANSFORM by_customer FROM orders SELECT customer_id AS customer_id, sum(price) AS revenue, count(*) AS n GROUP BY customer_id`, "by_customer",
			`SELECT customer_id, sum(price) AS revenue, count(*) AS n FROM orders GROUP BY customer_id`},
		{`TRANSFORM lines FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, c.region AS region, o.price AS price`, "lines",
			`SELECT o.id AS order_id, c.id AS c_id, c.region, o.price FROM orders o JOIN customers c ON c.id = o.customer_id`},
		{`TRANSFORM paid_big FROM paid SELECT amount * 2 AS twice WHERE amount > 10`, "paid_big",
			`SELECT id, price * qty * 2 AS twice FROM orders WHERE status = 'paid' AND price * qty > 10`},
		{`TRANSFORM held FROM orders SELECT status AS status`, "held", `SELECT id, status FROM orders`},
		{`TRANSFORM cust_rank FROM orders SELECT customer_id, price, rank() OVER (PARTITION BY customer_id ORDER BY price DESC) AS r`, "cust_rank",
			`SELECT customer_id, id, price, rank() OVER (PARTITION BY customer_id ORDER BY price DESC) AS r FROM orders`},
		{`TRANSFORM top_orders FROM orders SELECT id, price ORDER BY price DESC, id LIMIT 5`, "top_orders",
			`SELECT id, price FROM orders ORDER BY price DESC, id LIMIT 5`},
		{`TRANSFORM reach FROM orders o FULL JOIN customers c ON c.id = o.customer_id SELECT o.price, c.region`, "reach",
			`SELECT o.id, c.id AS c_id, o.price, c.region FROM orders o FULL JOIN customers c ON c.id = o.customer_id`},
		{`TRANSFORM served FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, c.region`, "served",
			`SELECT c.id AS c_id, o.id AS order_id, c.region FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id`},
		{`TRANSFORM ratio FROM orders SELECT 100 / qty AS per_unit, status AS status`, "ratio", `SELECT id, 100 / qty AS per_unit, status FROM orders`},
		{`TRANSFORM "Weird ""T"" Name" FROM "Odd ""Src"" Table" SELECT "Mixed Col" || 'it''s \ ok' AS "Out Col"`, `"Weird ""T"" Name"`,
			`SELECT "Key Col", "Mixed Col" || 'it''s \ ok' AS "Out Col" FROM "Odd ""Src"" Table"`},
	}
	var targets []string
	for _, d := range defs {
		target, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
		targets = append(targets, target)
	}
	for _, target := range targets {
		e.waitState(c, target, trellis.StateLive)
	}
	// An altered definition: its spec, not its statement, says what it is.
	_, err := c.Apply(e.ctx, `ALTER TRANSFORM paid ADD COLUMN customer_id AS customer`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `PAUSE TRANSFORM held`)
	require.NoError(t, err)
	e.waitQuarantine(c, "ratio.per_unit", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	e.waitState(c, "paid", trellis.StateLive)
	e.waitState(c, "held", trellis.StatePaused)

	// A define that commits while pg_dump runs: the dump is redone, so the
	// file has both its target table and its definition. The new target's
	// first build, replacing its key, may also make one pg_dump run fail;
	// that run is redone too.
	var calls atomic.Int32
	res := e.structureDump(c, func(ctx context.Context) (string, error) {
		sql, err := c.DumpDefinitionsSQL(ctx)
		if err == nil && calls.Add(1) == 1 {
			_, err = c.Define(ctx, `TRANSFORM late FROM customers SELECT upper(region) AS loud`)
		}
		return sql, err
	})
	require.GreaterOrEqual(t, res.Attempts, 2, "a define between the reads redoes the dump")
	defs = append(defs, struct{ stmt, target, recompute string }{`TRANSFORM late FROM customers SELECT upper(region) AS loud`, "late",
		`SELECT id, upper(region) AS loud FROM customers`})
	targets = append(targets, "public.late")
	before, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, before, len(defs))
	text := string(res.SQL)
	require.Contains(t, text, "CREATE TABLE public.late")
	require.Contains(t, text, "TRANSFORM late FROM customers")

	// The loaded database has every transform, defined and not built, also
	// the paused one and the one with a quarantined column.
	e2 := e.fresh()
	e2.load(res.SQL)
	m := e2.connect(trellis.Options{})
	history := e2.rows(`SELECT version, name, applied_at FROM trellis.schema_migrations ORDER BY version`)
	require.NoError(t, m.Migrate(e.ctx))
	require.Equal(t, history, e2.rows(`SELECT version, name, applied_at FROM trellis.schema_migrations ORDER BY version`), "Migrate on the loaded database does nothing")
	after, err := m.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, after, len(before))
	for i := range before {
		require.Equal(t, before[i].Target, after[i].Target, "oldest first, as dumped")
		require.Equal(t, before[i].Statement, after[i].Statement)
		require.Equal(t, before[i].Sources, after[i].Sources)
		require.Equal(t, before[i].CreatedAt, after[i].CreatedAt)
		require.Equal(t, trellis.StateWaitingToBackfill, after[i].State, after[i].Target)
	}
	held, err := m.Status(e.ctx, "held")
	require.NoError(t, err)
	require.Equal(t, trellis.StateWaitingToBackfill, held.State)
	require.Empty(t, held.PausedReason)
	quarantined, err := m.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Empty(t, quarantined)

	// Rows written before any worker runs go through the dump's capture
	// triggers; then the staging worker reinstalls capture and builds.
	load := func(db *env, ids string) {
		db.exec(`INSERT INTO orders SELECT g, g % 25, g % 50, 1 + g % 7, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'paid' END FROM ` + ids + ` g`)
	}
	e2.exec(`INSERT INTO customers SELECT g, 'r' || (g % 4) FROM generate_series(1, 20) g`)
	load(e2, `generate_series(1, 150)`)
	e2.exec(`INSERT INTO "Odd ""Src"" Table" VALUES (1, 'a'), (2, 'b\c'), (3, 'q''uote')`)
	c2 := e2.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	for _, target := range targets {
		e2.waitState(c2, target, trellis.StateLive)
	}
	load(e2, `generate_series(151, 300)`)
	e2.exec(`UPDATE orders SET customer_id = 3 WHERE id % 10 = 0`)
	e2.exec(`UPDATE orders SET status = 'paid', qty = qty + 1 WHERE id % 7 = 0`)
	e2.exec(`DELETE FROM orders WHERE id % 11 = 0`)
	e2.exec(`UPDATE customers SET region = 'north' WHERE id IN (1, 2)`)
	e2.exec(`UPDATE "Odd ""Src"" Table" SET "Mixed Col" = 'changed' WHERE "Key Col" = 1`)
	e2.converge(c2)
	for i, d := range defs {
		e2.assertMatches(d.target, d.recompute)
		st, err := c2.Status(e.ctx, targets[i])
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, targets[i])
	}
	require.NotEmpty(t, e2.rows(`SELECT 1 FROM held LIMIT 1`))
	q, err := c2.QuarantineStatus(e.ctx, "ratio.per_unit")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, q.State, "a column quarantined where it was dumped loads unpaused")
	disrupted, err := c2.DetectCaptureDisruptions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, disrupted, "capture was reinstalled by Trellis, not taken over from the dump")
	require.Equal(t, [][]string{{"0"}}, e2.rows(`SELECT count(*) FROM trellis.sources WHERE capture_state <> 'installed'`))

	// The loaded database takes new definitions, with ids after the dumped ones.
	_, err = c2.Define(e.ctx, `TRANSFORM later FROM customers SELECT region AS r`)
	require.NoError(t, err)
	e2.waitState(c2, "later", trellis.StateLive)
	e2.assertMatches("later", `SELECT id, region AS r FROM customers`)
}

// A dump of an instance with no definitions loads into the catalog a fresh
// Migrate makes: every row the migrations seed is in the dump. A migration
// that seeds a row the dump does not carry fails here.
func TestDumpOfEmptyInstanceLoadsAsMigrated(t *testing.T) {
	t.Parallel()
	e := setup(t)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	res := e.structureDump(m, nil)
	require.Equal(t, 1, res.Attempts)

	e2 := e.fresh()
	e2.load(res.SQL)
	tables := e.rows(`SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'trellis' AND c.relkind IN ('r', 'p') ORDER BY 1`)
	require.NotEmpty(t, tables)
	for _, tbl := range tables {
		q := fmt.Sprintf(`SELECT count(*) FROM trellis.%q`, tbl[0])
		require.Equal(t, e.rows(q), e2.rows(q), "rows of trellis.%s after the load", tbl[0])
	}
	cols := `SELECT version, name FROM trellis.schema_migrations ORDER BY version`
	require.Equal(t, e.rows(cols), e2.rows(cols))

	c := e2.engine()
	e2.exec(`CREATE TABLE items (id int PRIMARY KEY, n int)`)
	e2.exec(`INSERT INTO items SELECT g, g FROM generate_series(1, 50) g`)
	_, err := c.Define(e.ctx, `TRANSFORM doubled FROM items SELECT n * 2 AS n2`)
	require.NoError(t, err)
	e2.waitState(c, "doubled", trellis.StateLive)
	e2.exec(`UPDATE items SET n = n + 1 WHERE id < 10`)
	e2.converge(c)
	e2.assertMatches("doubled", `SELECT id, n * 2 AS n2 FROM items`)
}

func TestDumpDefinitionsSQL(t *testing.T) {
	t.Parallel()
	e := setup(t)
	fresh := e.connect(trellis.Options{Schema: "never_migrated"})
	_, err := fresh.DumpDefinitionsSQL(e.ctx)
	require.Equal(t, trellis.CodeNotFound, trellis.CodeOf(err), "%v", err)

	c := e.engine()
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, a int)`)
	_, err = c.Define(e.ctx, `TRANSFORM one FROM src SELECT a AS a`)
	require.NoError(t, err)
	_, err = c.Define(e.ctx, `TRANSFORM two FROM src SELECT a + 1 AS b`)
	require.NoError(t, err)
	e.waitState(c, "two", trellis.StateLive)
	first, err := c.DumpDefinitionsSQL(e.ctx)
	require.NoError(t, err)
	require.Less(t, strings.Index(first, "TRANSFORM one"), strings.Index(first, "TRANSFORM two"), "oldest first")
	// (Tables by their qualified names: a migration's name in the history,
	// ledger_without_buckets, is a definition of the catalog, not its state.)
	for _, runtime := range []string{`"trellis"."ledger`, `"trellis"."pages"`, `"trellis"."quarantine`, `"trellis"."capture_waits"`, `"trellis"."build_cursor"`, "live"} {
		require.NotContains(t, first, runtime, "runtime state is not dumped")
	}

	// The text changes only when a definition does: pausing is runtime state.
	_, err = c.Apply(e.ctx, `PAUSE TRANSFORM one`)
	require.NoError(t, err)
	again, err := c.DumpDefinitionsSQL(e.ctx)
	require.NoError(t, err)
	require.Equal(t, first, again)
	_, err = c.Apply(e.ctx, `DROP TRANSFORM two`)
	require.NoError(t, err)
	dropped, err := c.DumpDefinitionsSQL(e.ctx)
	require.NoError(t, err)
	require.NotEqual(t, first, dropped)
	require.NotContains(t, dropped, "TRANSFORM two")

	// A define and a drop of the same target in between still shows: the
	// ids after the load continue where the dumped database's did.
	_, err = c.Define(e.ctx, `TRANSFORM two FROM src SELECT a + 1 AS b`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `DROP TRANSFORM two`)
	require.NoError(t, err)
	redone, err := c.DumpDefinitionsSQL(e.ctx)
	require.NoError(t, err)
	require.NotEqual(t, dropped, redone)
}
