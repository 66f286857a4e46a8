package drain

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/recompute"
)

// affectedCareful is affected for a careful page: changes of a source whose
// place in the transform cannot be computed (a GROUP BY expression raises
// on the row) are found by bisection, skipped and held as source rows of
// the transform, so the page goes on for every other change and transform.
func (w *Worker) affectedCareful(ctx context.Context, tx pgx.Tx, wk *recompute.Set, src int, sc *srcChanges) error {
	bad, err := w.affectedBisect(ctx, tx, wk, src, sc.truncate, sc.rows)
	if err != nil || len(bad) == 0 {
		return err
	}
	s := w.sources[src]
	if s == nil {
		return fmt.Errorf("source %d of %s is not in the catalog", src, wk.T.Target)
	}
	return w.e.Recompute.HoldSourceRows(ctx, tx, wk, s.Name(), bad, &w.tally)
}

func (w *Worker) affectedBisect(ctx context.Context, tx pgx.Tx, wk *recompute.Set, src int, truncate bool, rows []ledger.Change) ([]recompute.Failure, error) {
	if len(rows) == 0 && !truncate {
		return nil, nil
	}
	err := recompute.Savepoint(ctx, tx, func() error {
		return w.affected(ctx, tx, wk, src, &srcChanges{rows: rows, truncate: truncate})
	})
	if err == nil || !recompute.RowError(err) {
		return nil, err
	}
	if len(rows) == 1 {
		// The row is held; the groups its old values or its current row
		// do give are still recomputed, so a row leaving a group for a bad
		// value leaves that group right.
		for _, part := range []string{"old", "current"} {
			perr := recompute.Savepoint(ctx, tx, func() error {
				return w.affected(ctx, tx, wk, src, &srcChanges{rows: rows, part: part})
			})
			if perr != nil && !recompute.RowError(perr) {
				return nil, perr
			}
		}
		f := recompute.Failure{Key: rows[0].Key, Msg: err.Error()}
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			f.State, f.Msg = pe.Code, pe.Message
		}
		return []recompute.Failure{f}, nil
	}
	mid := len(rows) / 2
	a, err := w.affectedBisect(ctx, tx, wk, src, truncate, rows[:mid])
	if err != nil {
		return nil, err
	}
	b, err := w.affectedBisect(ctx, tx, wk, src, false, rows[mid:])
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}
