package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

func TestProgressLine(t *testing.T) {
	t.Parallel()
	st := &trellis.Status{State: trellis.StateBackfilling, BuildRows: 250_000, BuildTotal: 1_000_000}
	require.Equal(t, "orders_copy: backfilling, [#####...............] 250000 of ~1000000 rows (25%), 50000 rows/s, about 15s left",
		progressLine("orders_copy", st, 50_000))
	require.Equal(t, "orders_copy: backfilling, [#####...............] 250000 of ~1000000 rows (25%)", progressLine("orders_copy", st, 0))
	require.Equal(t, "orders_copy: backfilling, 300 rows, 10 rows/s", progressLine("orders_copy", &trellis.Status{State: trellis.StateBackfilling, BuildRows: 300}, 10))
	require.Equal(t, "orders_copy: waiting_to_backfill", progressLine("orders_copy", &trellis.Status{State: trellis.StateWaitingToBackfill}, 0))
	// An estimate below the rows done is capped at 100%.
	require.Contains(t, progressLine("t", &trellis.Status{State: trellis.StateBackfilling, BuildRows: 12, BuildTotal: 10}, 0), "(100%)")
}

// Not on a terminal: a line per change of state, the figures of a build
// again once progressEvery passed, and no terminal control characters.
func TestProgressPlainLines(t *testing.T) {
	var out bytes.Buffer
	saved := progressEvery
	progressEvery = 0
	t.Cleanup(func() { progressEvery = saved })
	p := newProgress(&out)
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p.now = func() time.Time { return clock }
	p.update("t", &trellis.Status{State: trellis.StateWaitingToBackfill})
	p.update("t", &trellis.Status{State: trellis.StateWaitingToBackfill})
	p.update("t", &trellis.Status{State: trellis.StateBackfilling, BuildRows: 100, BuildTotal: 400})
	clock = clock.Add(2 * time.Second)
	p.update("t", &trellis.Status{State: trellis.StateBackfilling, BuildRows: 200, BuildTotal: 400})
	p.live("t")
	p.live("t")
	p.finish()
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.Len(t, lines, 4, out.String())
	require.Equal(t, "t: waiting_to_backfill", string(lines[0]))
	require.Equal(t, "t: backfilling, [#####...............] 100 of ~400 rows (25%)", string(lines[1]))
	require.Regexp(t, `^t: backfilling, \[##########\.{10}\] 200 of ~400 rows \(50%\), 50 rows/s, about 4s left$`, string(lines[2]))
	require.Equal(t, "t: live", string(lines[3]))
	require.NotContains(t, out.String(), "\x1b")
	require.NotContains(t, out.String(), "\r")
}
