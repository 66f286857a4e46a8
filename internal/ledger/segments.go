package ledger

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/pgerr"
)

// RepairSegments makes every segment of the ring a partition of the ledger
// again, so that upkeep, pages and capture find them all. A segment
// detached outside Trellis is attached back with its rows. A segment
// dropped outside Trellis is created afresh, empty: the changes it held
// are lost, so the caller must have every transform re-derived. It returns
// the names of the segments created afresh, and of those attached back.
// The new table is attached, not
// created as a partition, so the ledger's writers never queue behind it.
// Capture appends to a segment by its name, so a detached segment goes on
// receiving the rows of the transactions that begin while it is current,
// in no cut: the caller must have every transform re-derived once one is
// attached back. Attaching waits for those writers; while they hold it,
// the next pass tries again (the writers move on with the clock).
func (l *Ledger) RepairSegments(ctx context.Context) (created, attached []string, err error) {
	rows, err := l.Pool.Query(ctx, l.Cat.SQL(sqlSegmentStates), l.Cat.Schema)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the ledger's segments: %w", err)
	}
	type state struct {
		seg               int
		present, attached bool
	}
	states, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (state, error) {
		var s state
		err := r.Scan(&s.seg, &s.present, &s.attached)
		return s, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the ledger's segments: %w", err)
	}
	for _, s := range states {
		if s.attached {
			continue
		}
		name := segment(s.seg)
		if !s.present {
			if _, err := l.Pool.Exec(ctx, l.Cat.SQL(sqlCreateSegment, name)); err != nil {
				return created, attached, fmt.Errorf("recreating the ledger segment %s: %w", name, err)
			}
			created = append(created, segmentName(s.seg))
		}
		ok, err := l.attach(ctx, name, s.seg)
		if err != nil {
			return created, attached, err
		}
		if !ok {
			// Writers of the segment still hold it: the next pass tries again.
			continue
		}
		if s.present {
			attached = append(attached, segmentName(s.seg))
		}
	}
	return created, attached, nil
}

// attach attaches a segment back to the ledger, waiting at most
// SegmentLockWait for it (writers that appended to it while it was
// detached hold it until their transactions end). It reports false when
// the lock was not granted.
func (l *Ledger) attach(ctx context.Context, name string, seg int) (bool, error) {
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		if err := locks.SetTimeout(ctx, tx, SegmentLockWait); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, l.Cat.SQL(sqlAttachSegment, name, strconv.Itoa(seg)))
		return err
	})
	if pgerr.Is(err, pgerrcode.LockNotAvailable) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("attaching the ledger segment %s: %w", name, err)
	}
	return true, nil
}

// NoteRepair records, in the ring, that segments were repaired: a
// transaction that wrote while one was gone recorded nothing, and may
// commit after its readers were re-derived. RepairSettled says when every
// such transaction has ended, so that they are re-derived once more.
func (l *Ledger) NoteRepair(ctx context.Context) error {
	_, err := l.Pool.Exec(ctx, l.Cat.SQL(sqlNoteRepair))
	return err
}

// RepairSettled reports whether every transaction that was running when
// the last repair was noted has ended since (and then clears the note,
// in tx, which re-derives the transforms). The first call after the note
// only takes the snapshot of the transactions to wait for: it is taken
// after the repair committed, so every writer that could have missed it
// is in it.
func (l *Ledger) RepairSettled(ctx context.Context, tx pgx.Tx) (bool, error) {
	var pending, snapped, ended bool
	if err := tx.QueryRow(ctx, l.Cat.SQL(sqlRepairState)).Scan(&pending, &snapped, &ended); err != nil {
		return false, fmt.Errorf("reading the ring's repair: %w", err)
	}
	switch {
	case !pending:
		return false, nil
	case !snapped:
		_, err := tx.Exec(ctx, l.Cat.SQL(sqlRepairSnapshot))
		return false, err
	case !ended:
		return false, nil
	}
	_, err := tx.Exec(ctx, l.Cat.SQL(sqlRepairDone))
	return err == nil, err
}
