package trellis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/ledger"
)

// TestOneHugeTransactionDrainsInBoundedPages: one statement updating
// 300,000 rows (600,000 ledger rows: old rows and new keys) is drained in
// many pages, none holding more than ledger.PageMax rows (the drain
// worker's own histogram of the rows it read per page says so), so a
// worker's memory does not grow with a transaction; and the targets, a
// projection and a GROUP BY whose groups move, equal a fresh recompute
// both ways afterwards, and pass a strict self-check.
func TestOneHugeTransactionDrainsInBoundedPages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 300_000
	e.exec(`CREATE TABLE big (id int PRIMARY KEY, g int NOT NULL, v int NOT NULL)`)
	e.exec(`INSERT INTO big SELECT i, i % 997, i FROM generate_series(1, $1) i`, n)
	e.exec(`CREATE INDEX ON big (g)`)
	c := e.engine()
	shapes := []struct{ stmt, target, recompute string }{
		{`TRANSFORM big_proj FROM big SELECT id, g, v`, "big_proj", `SELECT id, g, v FROM big`},
		{`TRANSFORM big_per_g FROM big SELECT g, count(*) AS n, sum(v) AS s GROUP BY g`,
			"big_per_g", `SELECT g, count(*) AS n, sum(v) AS s FROM big GROUP BY g`},
	}
	for _, d := range shapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range shapes {
		e.pollStatus(c, d.target, stateWaitCap, 50*time.Millisecond, d.target+" did not go live",
			func(st *trellis.Status) bool { return st.State == trellis.StateLive })
	}
	inst := e.instanceLabel("trellis")
	before, _ := metricValue(trellis.RenderPrometheus(), "trellis_drain_page_rows_count", "trellis_instance="+inst)

	// One statement: every row changes its value and moves to another group.
	e.exec(`UPDATE big SET v = v + 1, g = (g + 1) % 997`)
	tok, err := c.WatermarkToken(e.ctx)
	require.NoError(t, err)
	// A call waits at most trellis.CallTimeout: wait in several.
	start := time.Now()
	for err = c.AwaitConverged(e.ctx, tok, 25*time.Second); trellis.CodeOf(err) == trellis.CodeTimeout && time.Since(start) < 4*time.Minute; {
		err = c.AwaitConverged(e.ctx, tok, 25*time.Second)
	}
	require.NoError(t, err)
	t.Logf("600,000 ledger rows of one statement drained in %s", time.Since(start).Round(time.Millisecond))
	for _, d := range shapes {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}

	text := trellis.RenderPrometheus()
	count, ok := metricValue(text, "trellis_drain_page_rows_count", "trellis_instance="+inst)
	require.True(t, ok, "the drain reports the rows of its pages")
	bounded, ok := metricValue(text, "trellis_drain_page_rows_bucket", "trellis_instance="+inst, fmt.Sprintf("le=%d", ledger.PageMax))
	require.True(t, ok, "a bucket at the page bound")
	require.Equal(t, count, bounded, "every page applied held at most %d ledger rows", ledger.PageMax)
	require.GreaterOrEqual(t, count-before, float64(2*n/ledger.PageMax), "the transaction's 600,000 ledger rows took many pages")
}
