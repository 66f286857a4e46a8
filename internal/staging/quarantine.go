package staging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/internal/recompute"
)

// Bad data never stops a build either: a build page on which a row fails
// is re-derived key by key, the way the drain does it (package recompute),
// so a failing column is quarantined, a failing key
// poisoned, and the build goes on.

// buildRange builds one page of a projection: the keys in (lower, upper],
// args holding the bounds. It returns the rows written.
func (w *Worker) buildRange(ctx context.Context, tx pgx.Tx, t *catalog.Transform, hasLower, hasUpper bool, args []any) (int64, error) {
	pl := t.Plan()
	rebuild := t.BuildKind == "rebuild"
	var deleted, upserted int64
	err := recompute.Savepoint(ctx, tx, func() error {
		return tx.QueryRow(ctx, pl.BuildPage(hasLower, hasUpper, rebuild), args...).Scan(&deleted, &upserted)
	})
	if err == nil {
		return upserted, w.sampleRange(ctx, tx, t, hasLower, hasUpper, args)
	}
	if !recompute.RowError(err) {
		return 0, err
	}
	keys, err := textRows(ctx, tx, pl.BuildPageKeys(hasLower, hasUpper, rebuild), args...)
	if err != nil {
		return 0, fmt.Errorf("listing the keys of a build page: %w", err)
	}
	return int64(len(keys)), w.Recompute.BuildKeys(ctx, tx, t, keys)
}

// OneShotRows and OneShotBytes bound the source an initial build reads in
// one statement (PostgreSQL's estimate of its rows, and its size); a larger
// source, or a partitioned one, is built in pages.
const (
	OneShotRows  = 2_000_000
	OneShotBytes = 512 << 20
)

// buildAllAtOnce builds a projection's target in one statement when its
// source is small enough: the target's primary key is dropped, the rows
// inserted, and the key added again (sorting the rows once is much cheaper
// than inserting them into the index one by one), all in the build's
// transaction, which holds the target's lock throughout, so no one sees it
// without its key. It reports ok = false, having changed nothing, when the
// source is too large or anything fails (a row, a foreign key referencing
// the target): the build then runs in pages.
func (w *Worker) buildAllAtOnce(ctx context.Context, tx pgx.Tx, t *catalog.Transform) (rows int64, ok bool, err error) {
	pl := t.Plan()
	var small bool
	var pkey string
	err = tx.QueryRow(ctx, sqlOneShotCheck, pl.Spec.Source.Schema, pl.Spec.Source.Table, t.Target.Schema, t.Target.Name,
		OneShotRows, OneShotBytes).Scan(&small, &pkey)
	if err != nil {
		return 0, false, err
	}
	if !small || pkey == "" {
		return 0, false, nil
	}
	drop := w.Cat.SQL(sqlDropConstraint, t.Target.Quoted(), ident.Quote(pkey))
	add := w.Cat.SQL(sqlAddPrimaryKey, t.Target.Quoted(), ident.Quote(pkey), ident.List(pl.Spec.Source.KeyCols))
	rows, cause, err := w.tryKeyAfter(ctx, tx, t, drop, []string{pl.InsertAll()}, add)
	if err != nil {
		return 0, false, err
	}
	if cause == nil {
		w.method = BuildInOneStatement
		return rows, true, nil
	}
	if recompute.RowError(cause) {
		// A bad row: perhaps a column failing on some rows, which one
		// statement can build without and quarantine.
		rows, ok, err = w.buildQuarantining(ctx, tx, t, drop, add)
		if err != nil || ok {
			if ok {
				w.method = BuildQuarantining
			}
			return rows, ok, err
		}
	}
	w.Logger.Warn("building with the target's key added after the rows failed; building the usual way", "target", t.Target.String(), "error", cause)
	return 0, false, nil
}

// buildKeyAfter runs a build's statements with the target's key dropped
// first and created again after the rows (sorting them once is much cheaper
// than inserting them into the index one by one), under a savepoint in the
// build's transaction, which holds the target's lock throughout, so no one
// sees it without its key. The target is locked NOWAIT first: a session
// reading it makes this path give way at once, rather than wait holding
// every key lock of the transform. It reports ok = false, having changed
// nothing, when anything fails: the caller then builds the usual way.
// rows is what the last statement wrote.
func (w *Worker) buildKeyAfter(ctx context.Context, tx pgx.Tx, t *catalog.Transform, drop string, stmts []string, create string) (rows int64, ok bool, err error) {
	rows, cause, err := w.tryKeyAfter(ctx, tx, t, drop, stmts, create)
	if err != nil {
		return 0, false, err
	}
	if cause != nil {
		w.Logger.Warn("building with the target's key added after the rows failed; building the usual way", "target", t.Target.String(), "error", cause)
		return 0, false, nil
	}
	return rows, true, nil
}

// tryKeyAfter is buildKeyAfter without its log record: cause is why it
// changed nothing (nil when it built), err a failure of the context.
func (w *Worker) tryKeyAfter(ctx context.Context, tx pgx.Tx, t *catalog.Transform, drop string, stmts []string, create string) (rows int64, cause, err error) {
	err = recompute.Savepoint(ctx, tx, func() error {
		all := append(append([]string{"LOCK TABLE " + t.Target.Quoted() + " IN ACCESS EXCLUSIVE MODE NOWAIT", drop}, stmts...), create)
		for i, q := range all {
			tag, err := tx.Exec(ctx, q)
			if err != nil {
				return err
			}
			if i == len(all)-2 {
				rows = tag.RowsAffected()
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, err
		}
		return 0, err, nil
	}
	return rows, nil, nil
}

// nextInitialPage inserts the next page of an initial build in one
// statement (plan.BuildPageNext). It reports fast = false, having changed
// nothing, when a row of the page fails: the caller then builds the page
// the careful way.
func (w *Worker) nextInitialPage(ctx context.Context, tx pgx.Tx, t *catalog.Transform, hasLower bool, lowerArgs []any) (upper []string, rows int64, last, fast bool, err error) {
	var end []string
	err = recompute.Savepoint(ctx, tx, func() error {
		return tx.QueryRow(ctx, t.Plan().BuildPageNext(hasLower, BuildPageRows), lowerArgs...).Scan(&rows, &end)
	})
	if err != nil {
		if recompute.RowError(err) {
			return nil, 0, false, false, nil
		}
		return nil, 0, false, false, err
	}
	last = rows < BuildPageRows
	if rows > 0 {
		args := append(append([]any(nil), lowerArgs...), toAny(end)...)
		if err := w.sampleRange(ctx, tx, t, hasLower, true, args); err != nil {
			return nil, 0, false, false, err
		}
	}
	return end, rows, last, true, nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// sampleRange keeps, for a transform with quarantined columns, the rows of
// a build page on which they fail as samples, so the samples cover every
// row the build read. The columns are evaluated once over the whole page
// (the work undone); only a page on which one fails is probed key by key.
func (w *Worker) sampleRange(ctx context.Context, tx pgx.Tx, t *catalog.Transform, hasLower, hasUpper bool, args []any) error {
	cols, err := w.Recompute.QuarantinedColumns(ctx, tx, t.ID)
	if err != nil || len(cols) == 0 {
		return err
	}
	only := recompute.WithPaused(t.Plan(), func(c plan.Column) bool { return !slices.Contains(cols, c.Name) })
	var deleted, upserted int64
	failed := recompute.Undone(ctx, tx, func() error {
		return tx.QueryRow(ctx, only.BuildPage(hasLower, hasUpper, true), args...).Scan(&deleted, &upserted)
	})
	if failed == nil || !recompute.RowError(failed) {
		return failed
	}
	keys, err := textRows(ctx, tx, t.Plan().BuildPageKeys(hasLower, hasUpper, false), args...)
	if err != nil {
		return fmt.Errorf("listing the keys of a build page: %w", err)
	}
	return w.Recompute.SampleKeys(ctx, tx, t, keys, cols)
}

// buildWhole builds a join or aggregate: every row deleted, then what the
// definition yields inserted. It returns the rows written.
func (w *Worker) buildWhole(ctx context.Context, tx pgx.Tx, t *catalog.Transform) (int64, error) {
	pl := t.Plan()
	stmts := pl.ShapeResync()
	if t.BuildKind == "initial" {
		// The target is new and empty: its key index is built after the
		// rows (by sorting them once), as for a projection (decision 0012);
		// an aggregate that PostgreSQL would compute with parallel workers
		// goes through a scratch table (decision 0025).
		first, method := stmts, BuildInOneStatement
		if scratch, err := w.scratchPays(ctx, tx, pl); err != nil {
			return 0, err
		} else if scratch {
			first, method = pl.ScratchBuild(fmt.Sprintf("trellis_build_%d", t.ID)), BuildThroughScratch
		}
		if n, ok, err := w.buildWithoutIndex(ctx, tx, t, first); err != nil || ok {
			if ok {
				w.method = method
			}
			return n, err
		}
	}
	var n int64
	err := recompute.Savepoint(ctx, tx, func() error {
		for _, q := range stmts {
			tag, err := tx.Exec(ctx, q)
			if err != nil {
				return err
			}
			n = tag.RowsAffected()
		}
		return nil
	})
	if err == nil || !recompute.RowError(err) {
		return n, err
	}
	if _, err := tx.Exec(ctx, stmts[0]); err != nil {
		return 0, err
	}
	keys, err := textRows(ctx, tx, pl.ShapeKeys())
	if err != nil {
		return 0, fmt.Errorf("listing the keys of %s: %w", t.Target, err)
	}
	return int64(len(keys)), w.Recompute.BuildKeys(ctx, tx, t, keys)
}

// ScratchRows bounds the rows (PostgreSQL's estimate) a join or aggregate
// may yield for its initial build to go through a scratch table: past it,
// writing the rows twice costs more than the parallel workers save.
const ScratchRows = 200_000

// scratchPays reports whether the initial build of a join or aggregate
// should fill a scratch table first (plan.ScratchBuild): it is an
// aggregate, PostgreSQL plans its query with parallel workers, which it never does for the INSERT ...
// SELECT of the build, and the query yields at most ScratchRows rows.
func (w *Worker) scratchPays(ctx context.Context, tx pgx.Tx, pl *plan.Plan) (bool, error) {
	if pl.Kind() != plan.KindAggregate {
		return false, nil // a join yields about as many rows as it reads
	}
	var out []byte
	// Undone: planning can raise (a constant expression that fails), and
	// the build's careful path then diagnoses it as before.
	err := recompute.Undone(ctx, tx, func() error { return tx.QueryRow(ctx, pl.ExplainShape()).Scan(&out) })
	if err != nil {
		if ctx.Err() != nil {
			return false, err
		}
		return false, nil
	}
	var explained []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		}
	}
	if err := json.Unmarshal(out, &explained); err != nil || len(explained) != 1 {
		return false, fmt.Errorf("reading the plan of the build of %s: %v", pl.Target, err)
	}
	parallel := bytes.Contains(out, []byte(`"Node Type": "Gather`))
	return parallel && explained[0].Plan.Rows <= ScratchRows, nil
}

// buildWithoutIndex runs an initial build of a join or aggregate with the
// target's unique key index dropped, and creates it again (as PostgreSQL
// itself renders it) after the rows, under a savepoint in the build's
// transaction, which holds the target's lock throughout. It reports ok =
// false, having changed nothing, when anything fails: the caller then builds
// with the index in place.
func (w *Worker) buildWithoutIndex(ctx context.Context, tx pgx.Tx, t *catalog.Transform, stmts []string) (rows int64, ok bool, err error) {
	var index, def string
	err = tx.QueryRow(ctx, sqlKeyIndex, t.Target.Schema, t.Target.Name).Scan(&index, &def)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return w.buildKeyAfter(ctx, tx, t, "DROP INDEX "+ident.Qualified(t.Target.Schema, index), stmts, def)
}

// textRows reads a query's rows of text values (NULL as nil).
func textRows(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([][]*string, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]*string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		k := make([]*string, len(vals))
		for i, v := range vals {
			if s, ok := v.(string); ok {
				k[i] = &s
			}
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
