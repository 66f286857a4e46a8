package ledger

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// RepairSegments makes every segment of the ring a partition of the ledger
// again, so that upkeep, pages and capture find them all. A segment
// detached outside Trellis is attached back with its rows. A segment
// dropped outside Trellis is created afresh, empty: the changes it held
// are lost, so the caller must have every transform re-derived. It returns
// the names of the segments created afresh, and of those attached back.
// The new table is attached, not
// created as a partition, so the ledger's writers never queue behind it.
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
			created = append(created, fmt.Sprintf("ledger_%d", s.seg))
		} else {
			attached = append(attached, fmt.Sprintf("ledger_%d", s.seg))
		}
		if _, err := l.Pool.Exec(ctx, l.Cat.SQL(sqlAttachSegment, name, strconv.Itoa(s.seg))); err != nil {
			return created, attached, fmt.Errorf("attaching the ledger segment %s: %w", name, err)
		}
	}
	return created, attached, nil
}
