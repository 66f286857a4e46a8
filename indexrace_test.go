package trellis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Status reads the source indexes a GROUP BY needs while another session
// creates and drops indexes on the source (as a build does on a target that
// another transform reads): an index that vanishes mid-read is skipped, not
// an error.
func TestStatusWhileSourceIndexesComeAndGo(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, grp int, n int); INSERT INTO items SELECT g, g % 5, g FROM generate_series(1, 100) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM item_sums FROM items SELECT grp AS grp, sum(n) AS n GROUP BY grp")
	require.NoError(t, err)
	e.waitState(c, "item_sums", "live")

	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	defer cancel()
	churn := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if _, err := e.db.Exec(ctx, `CREATE INDEX items_grp_n ON items (grp, n)`); err != nil && ctx.Err() == nil {
				churn <- err
				return
			}
			if _, err := e.db.Exec(ctx, `DROP INDEX IF EXISTS items_grp_n`); err != nil && ctx.Err() == nil {
				churn <- err
				return
			}
		}
		churn <- nil
	}()
	for ctx.Err() == nil {
		_, err := c.Status(e.ctx, "item_sums")
		require.NoError(t, err)
	}
	require.NoError(t, <-churn)
}
