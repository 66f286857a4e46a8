package trellis_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// SERIALIZABLE writers changing different rows of a source never fail on
// Trellis's account: capture reads nothing they could conflict on (the
// same interleaving on a table without a transform is the baseline).
func TestSerializableWriters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE ss (id int PRIMARY KEY, g int, v int)`)
	e.exec(`CREATE TABLE plain (id int PRIMARY KEY, g int, v int)`)
	e.exec(`INSERT INTO plain SELECT x, x % 5, x FROM generate_series(1, 20) x`)
	e.exec(`INSERT INTO ss SELECT x, x % 5, x FROM generate_series(1, 20) x`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM ss_g FROM ss SELECT g, sum(v) AS s GROUP BY g`)
	require.NoError(t, err)
	e.waitState(c, "ss_g", trellis.StateLive)
	run := func(table string, round int) (error, error) {
		opts := pgx.TxOptions{IsoLevel: pgx.Serializable}
		t1, err := e.db.BeginTx(e.ctx, opts)
		require.NoError(t, err)
		t2, err := e.db.BeginTx(e.ctx, opts)
		require.NoError(t, err)
		for _, tx := range []pgx.Tx{t1, t2} {
			_, err = tx.Exec(e.ctx, `SET LOCAL enable_seqscan = off`)
			require.NoError(t, err)
		}
		_, err = t1.Exec(e.ctx, `INSERT INTO `+table+` VALUES ($1, 1, 1)`, 1000+2*round)
		require.NoError(t, err)
		_, err = t2.Exec(e.ctx, `INSERT INTO `+table+` VALUES ($1, 2, 2)`, 1001+2*round)
		require.NoError(t, err)
		_, err = t1.Exec(e.ctx, `UPDATE `+table+` SET v = v + 1, g = g + 1 WHERE id = $1`, 3+2*round)
		require.NoError(t, err)
		_, err = t2.Exec(e.ctx, `UPDATE `+table+` SET v = v + 1 WHERE id = $1`, 4+2*round)
		require.NoError(t, err)
		_, err = t1.Exec(e.ctx, `DELETE FROM `+table+` WHERE id = $1`, 13+2*round)
		require.NoError(t, err)
		e1 := t1.Commit(e.ctx)
		e2 := t2.Commit(e.ctx)
		return e1, e2
	}
	for round := range 5 {
		e1, e2 := run("plain", round)
		require.NoError(t, e1)
		require.NoError(t, e2)
		e1, e2 = run("ss", round)
		require.NoError(t, e1, "round %d", round)
		require.NoError(t, e2, "round %d", round)
	}
	e.converge(c)
	e.assertMatches("ss_g", `SELECT g, sum(v) AS s FROM ss GROUP BY g`)
}
