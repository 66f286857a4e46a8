package trellis_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/catalog"
)

// A catalog at level 7 with a live source, its capture as that level
// installed it (appending through the partitioned ledger), is upgraded by
// Migrate: writes go on throughout, the staging worker regenerates the
// capture function (it appends to the current segment directly), nothing
// written before, during or after is lost, and the transform stays live,
// with no capture disruption reported.
func TestUpgradeFromLevel7(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
	e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 40) i`)
	writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s GROUP BY g")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	require.NoError(t, c.Close())

	// Back to level 7: its ring, its history, its capture function, and
	// the fingerprint staging recorded for that function.
	old, err := os.ReadFile("testdata/upgrade/capture_level7.sql")
	require.NoError(t, err)
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT id FROM trellis.sources`))
	e.exec(`ALTER TABLE trellis.ring DROP COLUMN repair_pending, DROP COLUMN repair_snap`)
	e.exec(`DELETE FROM trellis.schema_migrations WHERE version >= 8`)
	e.exec(string(old))
	e.exec(`UPDATE trellis.sources s SET fingerprint = ` + capture.Names{Catalog: "trellis"}.FingerprintSQL())
	e.as(writer, `UPDATE src SET v = 3`, `INSERT INTO src VALUES (41, 1, 41)`)
	require.Equal(t, [][]string{{"true"}}, e.rows(`SELECT count(*) > 0 FROM trellis.ledger`), "level 7's capture appends")

	c = e.engine() // migrates to the latest level
	e.as(writer, `UPDATE src SET g = 2`)
	e.eventually("capture regenerated", func() bool {
		return len(e.rows(`SELECT 1 FROM pg_proc WHERE proname = 'capture_1' AND prosrc LIKE '%"trellis"."ledger_0" (seg%'`)) == 1
	})
	e.as(writer, `INSERT INTO src VALUES (42, 4, 42)`, `UPDATE src SET v = 5`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s FROM src GROUP BY g")
	st, err := c.Status(e.ctx, "by_g")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
	require.Nil(t, st.CaptureFailure)
	require.Equal(t, [][]string{{strconv.Itoa(catalog.LatestVersion())}}, e.rows(`SELECT max(version) FROM trellis.schema_migrations`))
}

// A catalog at level 8 with a live source, its capture as that level
// installed it (a probe that starts a LIMIT 0 scan), is upgraded by
// Migrate: writes go on throughout, the staging worker regenerates the
// capture function (its probe plans no scan), nothing written before,
// during or after is lost, and the transform stays live, with no capture
// disruption reported.
func TestUpgradeFromLevel8(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
	e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 40) i`)
	writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s GROUP BY g")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	require.NoError(t, c.Close())

	// Back to level 8: its history, its capture function, and the
	// fingerprint staging recorded for that function.
	old, err := os.ReadFile("testdata/upgrade/capture_level8.sql")
	require.NoError(t, err)
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT id FROM trellis.sources`))
	e.exec(`DELETE FROM trellis.schema_migrations WHERE version >= 9`)
	e.exec(string(old))
	e.exec(`UPDATE trellis.sources s SET fingerprint = ` + capture.Names{Catalog: "trellis"}.FingerprintSQL())
	e.as(writer, `UPDATE src SET v = 3`, `INSERT INTO src VALUES (41, 1, 41)`)
	require.Equal(t, [][]string{{"true"}}, e.rows(`SELECT count(*) > 0 FROM trellis.ledger`), "level 8's capture appends")

	c = e.engine() // migrates to the latest level
	e.as(writer, `UPDATE src SET g = 2`)
	e.eventually("capture regenerated", func() bool {
		return len(e.rows(`SELECT 1 FROM pg_proc WHERE proname = 'capture_1' AND prosrc LIKE '%WHERE false%' AND prosrc NOT LIKE '%LIMIT 0%'`)) == 1
	})
	e.as(writer, `INSERT INTO src VALUES (42, 4, 42)`, `UPDATE src SET v = 5`)
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s FROM src GROUP BY g")
	st, err := c.Status(e.ctx, "by_g")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
	require.Nil(t, st.CaptureFailure)
	require.Equal(t, [][]string{{strconv.Itoa(catalog.LatestVersion())}}, e.rows(`SELECT max(version) FROM trellis.schema_migrations`))
}
