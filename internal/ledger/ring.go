package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/pgerr"
)

// SegmentLockWait is how long a reclaim waits for a segment's lock:
// writers hold it, and a reclaim gives way to them.
const SegmentLockWait = 10 * time.Millisecond

// currentSegment is the SQL expression of the segment writers that start
// now append to (SegmentAt).
var currentSegment = SegmentAt("pg_catalog.now()")

// Maintain reclaims drained segments and prunes finished pages and cuts.
// The ring needs no rotating: each writer appends to the segment its
// transaction's start time picks (SegmentAt), so the segment writers
// append to moves on with the clock, and any segment may receive a row at
// any time (a transaction that began while it was current may still be
// running).
func (l *Ledger) Maintain(ctx context.Context) error {
	var cur, nsegs int
	if err := l.Pool.QueryRow(ctx, l.Cat.SQL(sqlRing, currentSegment)).Scan(&cur, &nsegs); err != nil {
		return fmt.Errorf("reading the ring: %w", err)
	}
	frontier, err := l.DrainedFrontier(ctx, l.Pool)
	if err != nil {
		return fmt.Errorf("reading the drained frontier: %w", err)
	}
	for seg := 0; seg < nsegs; seg++ {
		if seg == cur {
			continue
		}
		if err := l.reclaim(ctx, seg, frontier.Snap); err != nil && !segmentGone(err) {
			return err
		}
	}
	if _, err := l.Pool.Exec(ctx, l.Cat.SQL(sqlPrunePages), frontier.Cut); err != nil {
		return err
	}
	_, err = l.Pool.Exec(ctx, l.Cat.SQL(sqlPruneCuts), frontier.Cut)
	return err
}

// segmentGone says err is a segment's table missing: dropped outside
// Trellis since the staging worker last repaired the ring
// (RepairSegments), which its next pass does; upkeep skips the segment
// meanwhile rather than fail.
func segmentGone(err error) bool { return pgerr.Is(err, pgerrcode.UndefinedTable) }

// reclaim truncates a segment once every row in it is drained. It holds
// the segment's lock only briefly and gives up at once if writers hold it.
func (l *Ledger) reclaim(ctx context.Context, seg int, frontier string) error {
	name := segment(seg)
	var has bool
	if err := l.Pool.QueryRow(ctx, l.Cat.SQL(sqlSegmentHasRows, name)).Scan(&has); err != nil || !has {
		return err
	}
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		if err := locks.SetTimeout(ctx, tx, SegmentLockWait); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, l.Cat.SQL(sqlLockSegment, name)); err != nil {
			return err
		}
		// Under the lock no writer holds the segment: its rows are all
		// committed or gone, and a writer that appends to it afterwards
		// (its transaction began while the segment was current) waits,
		// and appends to the truncated segment. The current one is left to its writers.
		var cur, nsegs int
		if err := tx.QueryRow(ctx, l.Cat.SQL(sqlRing, currentSegment)).Scan(&cur, &nsegs); err != nil || cur == seg {
			return err
		}
		var undrained bool
		if err := tx.QueryRow(ctx, l.Cat.SQL(sqlSegmentUndrained, name), frontier).Scan(&undrained); err != nil || undrained {
			return err
		}
		_, err := tx.Exec(ctx, l.Cat.SQL(sqlTruncateSegment, name))
		return err
	})
	if pgerr.Is(err, pgerrcode.LockNotAvailable) {
		return nil
	}
	return err
}

// segment is the quoted name of segment i of the ring.
func segment(i int) string { return ident.Quote(segmentName(i)) }
