package trellis_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/ledger"
)

// damageCurrentSegment drops or detaches (damage) the ledger segment
// capture appends to, as the catalog's owner may, and returns the
// segment's number: the one the clock picks, with half a second at least
// left before the ring moves on (or the next one, waited for).
func (e *env) damageCurrentSegment(damage string) int {
	e.t.Helper()
	var cur int
	e.eventually("half a second left in the current segment's period", func() bool {
		var left float64
		require.NoError(e.t, e.db.QueryRow(e.ctx, `SELECT `+ledger.SegmentAt(`now()`)+`,
  (date_part('epoch', now())::int8 / $1 + 1) * $1 - 0.5 - date_part('epoch', now())`, int(ledger.SegmentPeriod/time.Second)).Scan(&cur, &left))
		return left > 0.5
	})
	q := fmt.Sprintf(`DROP TABLE trellis.ledger_%d`, cur)
	if damage == "detach" {
		q = fmt.Sprintf(`ALTER TABLE trellis.ledger DETACH PARTITION trellis.ledger_%d`, cur)
	}
	_, err := e.db.Exec(e.ctx, q)
	require.NoError(e.t, err)
	return cur
}

// segmentAttached reports whether segment seg is a partition of the ledger.
func (e *env) segmentAttached(seg int) bool {
	e.t.Helper()
	var ok bool
	require.NoError(e.t, e.db.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits
        WHERE inhparent = 'trellis.ledger'::regclass AND inhrelid = to_regclass(format('trellis.ledger_%s', $1::int)))`, seg).Scan(&ok))
	return ok
}

// The ledger segment capture appends to, dropped or detached by the
// catalog's owner, fails no write, neither of a role that may only INSERT
// into and UPDATE the source nor of the owner. The staging worker puts the
// segment back and every reader is re-derived: no change made meanwhile is
// lost, not even one whose transaction was still open when the segment
// came back and commits after the readers were re-derived.
func TestWritesSurviveDamagedCurrentSegment(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"drop", "detach"} {
		t.Run(damage, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
			e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 40) i`)
			writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
			c := e.engine()
			_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s, count(*) AS n GROUP BY g")
			require.NoError(t, err)
			_, err = c.Define(e.ctx, "TRANSFORM proj FROM src SELECT v * 2 AS w")
			require.NoError(t, err)
			e.waitState(c, "by_g", trellis.StateLive)
			e.waitState(c, "proj", trellis.StateLive)
			e.as(writer, `UPDATE src SET v = 1`)
			e.converge(c)

			var damaged time.Time
			require.NoError(t, e.db.QueryRow(e.ctx, `SELECT clock_timestamp()`).Scan(&damaged))
			seg := e.damageCurrentSegment(damage)
			open, err := writer.Begin(e.ctx)
			require.NoError(t, err)
			defer func() { _ = open.Rollback(e.ctx) }()
			_, err = open.Exec(e.ctx, `INSERT INTO src VALUES (43, 3, 43)`)
			require.NoError(t, err)
			e.as(writer, `INSERT INTO src VALUES (41, 1, 41)`, `UPDATE src SET v = 2`)
			e.as(writer, `UPDATE src SET g = 4`)
			e.as(e.db, `DELETE FROM src WHERE id = 3`, `UPDATE src SET v = v + id WHERE id < 10`, `INSERT INTO src VALUES (42, 2, 42)`)

			if damage == "detach" {
				// The open transaction appended to the detached segment:
				// it holds the segment until it ends.
				require.NoError(t, open.Commit(e.ctx))
			}
			e.eventually("the staging worker put the segment back", func() bool { return e.segmentAttached(seg) })
			for _, target := range []string{"by_g", "proj"} {
				e.pollStatus(c, target, stateWaitCap, 10*time.Millisecond, target+" was not re-derived", func(st *trellis.Status) bool {
					return st.State == trellis.StateLive && st.Since.After(damaged)
				})
			}
			e.converge(c)
			if damage == "drop" {
				// It wrote while the segment was gone, and commits after
				// the readers were re-derived.
				require.NoError(t, open.Commit(e.ctx))
			}
			e.as(writer, `INSERT INTO src VALUES (44, 4, 44)`)
			e.eventually("the targets match their recomputes", func() bool {
				e.converge(c)
				return e.differs("SELECT g, s, n FROM by_g", "SELECT g, sum(v) AS s, count(*) AS n FROM src GROUP BY g") == 0 &&
					e.differs("SELECT id, w FROM proj", "SELECT id, v * 2 AS w FROM src") == 0
			})
			// Re-derived once more when the transactions open as the
			// segment was repaired have ended, then live and exact.
			e.waitState(c, "by_g", trellis.StateLive)
			e.waitState(c, "proj", trellis.StateLive)
			e.converge(c)
			e.assertMatches("by_g", "SELECT g, sum(v) AS s, count(*) AS n FROM src GROUP BY g")
			e.assertMatches("proj", "SELECT id, v * 2 AS w FROM src")
		})
	}
}

// Capture appends a transaction's rows to the segment its start time picks
// (ledger.SegmentAt), reading nothing to find it: with the ring's cur
// pointing at no segment, an update's old and new rows are in that
// segment with their keys, and the target follows.
func TestCaptureAppendsToTheSegmentItsStartPicks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
	e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 20) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE ON src TO %s")
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s GROUP BY g")
	require.NoError(t, err)
	e.waitState(c, "by_g", trellis.StateLive)
	require.NoError(t, c.Close())

	e.exec(`UPDATE trellis.ring SET cur = 999`)
	tx, err := writer.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	_, err = tx.Exec(e.ctx, `UPDATE src SET v = v + 1 WHERE id = 1`)
	require.NoError(t, err)
	var xid int64
	var seg int
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT txid_current(), `+ledger.SegmentAt(`now()`)).Scan(&xid, &seg))
	_, err = tx.Exec(e.ctx, `INSERT INTO src VALUES (21, 1, 21)`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(e.ctx))
	rows := e.rows(`SELECT seg, key::text, tableoid::regclass::text FROM trellis.ledger
WHERE xid = $1::text::xid8 ORDER BY key, vals NULLS FIRST`, strconv.FormatInt(xid, 10))
	in := fmt.Sprintf("trellis.ledger_%d", seg)
	s := strconv.Itoa(seg)
	require.Equal(t, [][]string{{s, "{1}", in}, {s, "{1}", in}, {s, "{21}", in}}, rows, "the new and old row of key 1, key 21")

	c = e.engine()
	e.converge(c)
	e.assertMatches("by_g", "SELECT g, sum(v) AS s FROM src GROUP BY g")
}
