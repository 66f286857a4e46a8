package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A catalog installed by a release at migration level 5, with live
// transforms, captured changes not yet applied and a partitioned source,
// is upgraded by Migrate through the later migrations: nothing is lost,
// the changes captured before the upgrade reach their targets (pages cut
// by the older release read every segment), and the targets stay exact
// under writes afterwards.
func TestUpgradeFromMigrationLevel5(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, customer int NOT NULL, price int NOT NULL)`)
	e.exec(`CREATE INDEX ON orders (customer)`)
	e.exec(`INSERT INTO orders SELECT i, i % 7, i FROM generate_series(1, 200) i`)
	e.exec(`CREATE TABLE events (id int, day int, n int, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)`)
	e.exec(`CREATE TABLE events_1 PARTITION OF events FOR VALUES FROM (0) TO (100)`)
	e.exec(`CREATE TABLE events_2 PARTITION OF events FOR VALUES FROM (100) TO (200)`)
	e.exec(`INSERT INTO events SELECT i, i % 200, i FROM generate_series(1, 300) i`)
	c := e.engine()
	for _, d := range []string{
		`TRANSFORM totals FROM orders SELECT customer AS customer, sum(price) AS revenue, count(*) AS n GROUP BY customer`,
		`TRANSFORM event_copy FROM events SELECT n AS n`,
	} {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	e.waitState(c, "totals", trellis.StateLive)
	e.waitState(c, "event_copy", trellis.StateLive)
	e.exec(`UPDATE orders SET price = price + 1 WHERE id <= 50`)
	e.converge(c)
	require.NoError(t, c.Close())

	// Changes captured while no drain worker runs: some in pages the
	// staging worker cut before the upgrade, some not cut yet.
	e.exec(`UPDATE orders SET price = price * 2 WHERE id > 150`)
	e.exec(`DELETE FROM events WHERE id <= 10`)
	cutter := e.connect(trellis.Options{Staging: true, DrainWorkers: 0})
	e.eventually("a page cut and not applied", func() bool {
		return e.rows(`SELECT count(*) FROM trellis.pages WHERE NOT done`)[0][0] != "0"
	})
	require.NoError(t, cutter.Close())
	e.exec(`INSERT INTO events VALUES (1000, 150, 1)`)
	e.exec(`UPDATE orders SET customer = 6 WHERE id = 1`)
	// The catalog as a release at level 5 left it: without what the later
	// migrations add.
	require.NotEmpty(t, e.rows(`SELECT version FROM trellis.schema_migrations WHERE version > 5`))
	e.exec(`ALTER TABLE trellis.sources DROP COLUMN partition_ids`)
	e.exec(`ALTER TABLE trellis.pages DROP COLUMN segs`)
	e.exec(`ALTER TABLE trellis.ring DROP COLUMN IF EXISTS repair_pending, DROP COLUMN IF EXISTS repair_snap`)
	e.exec(`DELETE FROM trellis.schema_migrations WHERE version > 5`)

	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	require.NotEqual(t, "0", e.rows(`SELECT count(*) FROM trellis.pages WHERE segs IS NULL AND NOT done`)[0][0],
		"pages cut before the upgrade are left, to read every segment")
	c = e.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	e.waitState(c, "totals", trellis.StateLive)
	e.waitState(c, "event_copy", trellis.StateLive)
	e.converge(c)
	e.assertMatches("totals", `SELECT customer, sum(price) AS revenue, count(*) AS n FROM orders GROUP BY customer`)
	e.assertMatches("event_copy", `SELECT id, day, n FROM events`)

	e.exec(`UPDATE orders SET customer = 3 WHERE id BETWEEN 60 AND 70`)
	e.exec(`UPDATE events SET n = n + 5 WHERE day < 50`)
	e.converge(c)
	e.assertMatches("totals", `SELECT customer, sum(price) AS revenue, count(*) AS n FROM orders GROUP BY customer`)
	e.assertMatches("event_copy", `SELECT id, day, n FROM events`)
}
