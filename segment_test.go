package trellis_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/ledger"
)

// A ledger segment dropped outside Trellis is reported once and
// recreated: staging does not fail pass after pass, and since the changes
// the segment held are lost, every transform is re-derived from its
// source, so its target is exact again. Writes go on throughout.
func TestDroppedLedgerSegmentIsRecreated(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int NOT NULL, v int NOT NULL)`)
	e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 50) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE, DELETE ON src TO %s")
	logs := &lockedBuffer{}
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 2,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s GROUP BY g")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)

	// A segment that is neither current nor next, so writers keep going,
	// and another one to detach after.
	var seg, other string
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT format('ledger_%s', (c + 2) % 4), format('ledger_%s', (c + 3) % 4)
FROM (SELECT `+ledger.SegmentAt(`now()`)+` AS c) r`).Scan(&seg, &other))
	e.exec(`DROP TABLE trellis.` + seg)
	e.as(writer, `UPDATE src SET v = v + 1 WHERE id <= 10`, `INSERT INTO src VALUES (51, 1, 51)`)

	attached := func(seg string) func() bool {
		return func() bool {
			var ok bool
			require.NoError(t, e.db.QueryRow(e.ctx, `
SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhparent = 'trellis.ledger'::regclass
               AND inhrelid = to_regclass('trellis.' || $1::text))`, seg).Scan(&ok))
			return ok
		}
	}
	e.eventually(seg+" recreated as a segment of the ledger", attached(seg))
	// A detached segment is attached back, with its rows.
	e.exec(`ALTER TABLE trellis.ledger DETACH PARTITION trellis.` + other)
	e.eventually(other+" attached back, and reported", func() bool {
		return len(logs.records(t, "a ledger segment was detached outside Trellis; it is attached back with its rows")) == 1
	})
	require.True(t, attached(other)())
	e.converge(c)
	e.waitState(c, "by_g", trellis.StateLive)
	e.as(writer, `UPDATE src SET v = v * 2 WHERE id > 40`, `DELETE FROM src WHERE id = 3`)
	e.converge(c)
	e.assertMatches("by_g", `SELECT g, sum(v) AS s FROM src GROUP BY g`)

	reported := logs.records(t, "a ledger segment was missing; it is recreated, and every transform is re-derived from its sources")
	require.Len(t, reported, 1, "reported once")
	require.Contains(t, fmt.Sprint(reported[0]["segment"]), seg)
	require.NotContains(t, fmt.Sprint(reported[0]["segment"]), other, "a detached segment lost nothing")
	require.Empty(t, logs.records(t, "staging pass failed"), "staging does not fail over it")
	for _, r := range logs.records(t, "drain pass failed") {
		require.NotContains(t, fmt.Sprint(r["error"]), seg)
	}
	require.False(t, strings.Contains(fmt.Sprint(logs.records(t, "drain page failed; it will be retried")), seg),
		"no page fails over the missing segment")
}
