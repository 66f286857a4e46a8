package staging

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/internal/recompute"
)

// A projection's one-statement build that fails on a row is not given up
// at once (decision 0025): when each failing column fails on its own and
// the rest of the definition does not, the rows are written in one
// statement with those columns paused, and the rows each one fails on are
// found by one ordered scan of the source per column, restarted past every
// row that raises. Anything else (the WHERE raising, a constraint of the
// target, columns failing only together, a scan whose order cannot be
// trusted) leaves the build to its careful pages, as before.

// buildQuarantining is buildAllAtOnce's second try after a row failed:
// drop and add are its key statements. It reports ok = false, having
// changed nothing, when the build must go the careful way.
func (w *Worker) buildQuarantining(ctx context.Context, tx pgx.Tx, t *catalog.Transform, drop, add string) (rows int64, ok bool, err error) {
	pl := t.Plan()
	evalFails := func(p *plan.Plan) (bool, error) {
		err := recompute.Undone(ctx, tx, func() error {
			_, err := tx.Exec(ctx, p.EvalAll())
			return err
		})
		if err != nil && !recompute.RowError(err) {
			return false, err
		}
		return err != nil, nil
	}
	// The definition with no column evaluated (its WHERE) must not fail.
	if bad, err := evalFails(recompute.WithPaused(pl, func(plan.Column) bool { return true })); err != nil || bad {
		return 0, false, err
	}
	var failing []string
	for _, c := range pl.Spec.Columns {
		if c.Paused {
			continue
		}
		bad, err := evalFails(recompute.WithPaused(pl, func(o plan.Column) bool { return o.Name != c.Name }))
		if err != nil {
			return 0, false, err
		}
		if bad {
			failing = append(failing, c.Name)
		}
	}
	if len(failing) == 0 {
		return 0, false, nil
	}
	fails := map[string][]recompute.Failure{}
	for _, name := range failing {
		fs, trusted, err := w.scanFailures(ctx, tx, recompute.WithPaused(pl, func(o plan.Column) bool { return o.Name != name }))
		if err != nil || !trusted || len(fs) == 0 {
			return 0, false, err
		}
		fails[name] = fs
	}
	rest := recompute.WithPaused(pl, func(c plan.Column) bool { return c.Paused || slices.Contains(failing, c.Name) })
	rows, ok, err = w.buildKeyAfter(ctx, tx, t, drop, []string{rest.InsertAll()}, add)
	if err != nil || !ok {
		return 0, false, err
	}
	if err := w.Recompute.QuarantineBuilt(ctx, tx, t, fails); err != nil {
		return 0, false, fmt.Errorf("quarantining columns of %s: %w", t.Target, err)
	}
	return rows, true, nil
}

// scanFailures finds the rows on which a projection with one column not
// paused (only) fails: a scan in key order (plan.FailureScan) stops at the
// first row that raises, right after the keys of the rows before it; that
// row, the next one past them, is recorded with the scan's error, and the
// scan resumes past it. A scan that stops before reading any row may not
// have run in key order: its row is checked to fail on its own. trusted is
// false when a row so checked does not (or no row is left to blame).
//
// All in one savepoint that is undone (it holds the scan's settings), the
// scans under a savepoint of their own that each failure rolls back to.
func (w *Worker) scanFailures(ctx context.Context, tx pgx.Tx, only *plan.Plan) (fs []recompute.Failure, trusted bool, err error) {
	n := len(only.Spec.Source.KeyCols)
	err = recompute.Undone(ctx, tx, func() error {
		if _, err := tx.Exec(ctx, sqlOrderedScan); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlScanSavepoint); err != nil {
			return err
		}
		var lower []any
		for {
			last, read, scanErr := scanSegment(ctx, tx, only, n, lower)
			if scanErr == nil {
				trusted = true // the scan reached the end
				return nil
			}
			var pe *pgconn.PgError
			if !recompute.RowError(scanErr) || !errors.As(scanErr, &pe) {
				return scanErr
			}
			if _, err := tx.Exec(ctx, sqlScanRollback); err != nil {
				return err
			}
			next := make([]string, n)
			dest := make([]any, n)
			for i := range next {
				dest[i] = &next[i]
			}
			if err := tx.QueryRow(ctx, only.NextKey(last != nil), last...).Scan(dest...); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return nil // no row to blame: not trusted
				}
				return err
			}
			if read == 0 {
				alone := func() error {
					_, err := tx.Exec(ctx, only.EvalKey(), toAny(next)...)
					return err
				}()
				if alone == nil {
					return nil // it does not fail alone: not trusted
				}
				if !recompute.RowError(alone) || !errors.As(alone, &pe) {
					return alone
				}
				if _, err := tx.Exec(ctx, sqlScanRollback); err != nil {
					return err
				}
			}
			fs = append(fs, recompute.Failure{Key: recompute.Ptrs(next), State: pe.Code, Msg: pe.Message})
			lower = toAny(next)
		}
	})
	if err != nil || !trusted {
		return nil, false, err
	}
	return fs, true, nil
}

// scanSegment runs one failure scan past lower (none: from the start) and
// returns the last key it read (lower when none), how many rows it read,
// and the error that stopped it (nil: it reached the end).
func scanSegment(ctx context.Context, tx pgx.Tx, only *plan.Plan, n int, lower []any) (last []any, read int, err error) {
	last = lower
	rows, err := tx.Query(ctx, only.FailureScan(lower != nil), lower...)
	if err != nil {
		return last, 0, err
	}
	defer rows.Close()
	key := make([]string, n)
	scan := make([]any, n+1)
	for i := range key {
		scan[i] = &key[i]
	}
	var isNull bool
	scan[n] = &isNull
	for rows.Next() {
		if err := rows.Scan(scan...); err != nil {
			return last, read, err
		}
		last = toAny(key)
		read++
	}
	return last, read, rows.Err()
}
