// Package recompute applies sets of keys of a transform from the current
// source rows, under the transform's key locks, in the caller's
// transaction: the drain's pages, the builds' pages on which a row failed,
// and the keys a release gives back all go through it. It owns the key
// locks (taken in sorted order), the savepoints, the careful diagnosis
// that quarantines a failing column or poisons a failing key, and the one
// rendering of a key.
package recompute

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/metrics"
	"github.com/trellis-pg/trellis/internal/plan"
)

// Recomputer is what recomputes share: the catalog they record quarantines
// in, the logger and the metrics (nil: not counted). It holds no state, so
// one value serves every worker of a client.
type Recomputer struct {
	Cat     *catalog.Catalog
	Logger  *slog.Logger
	Metrics *metrics.Instance
}

// Tally counts the columns a transaction quarantined and the keys it
// poisoned, for the metrics once it commits.
type Tally struct {
	Columns, Keys int
}

// applier is one transaction's recomputes, counting into a tally.
type applier struct {
	r     *Recomputer
	tally *Tally
}

func (r *Recomputer) applier(t *Tally) *applier { return &applier{r: r, tally: t} }

// Apply recomputes the set's keys (or the whole target) in tx. Carefully,
// a row error is diagnosed key by key instead of failing: a column failing
// on a row is quarantined and a key failing as a whole poisoned, counted
// in t.
func (r *Recomputer) Apply(ctx context.Context, tx pgx.Tx, s *Set, careful bool, t *Tally) error {
	return planned(ctx, tx, s.Plan, func() error {
		if careful {
			return r.applier(t).applyCareful(ctx, tx, s)
		}
		return s.apply(ctx, tx)
	})
}

// planned runs apply between the plan's planner settings (SET LOCAL),
// which a failed apply leaves to the transaction's rollback.
func planned(ctx context.Context, tx pgx.Tx, pl *plan.Plan, apply func() error) error {
	before, after := pl.PlannerSettings()
	if before == "" {
		return apply()
	}
	if _, err := tx.Exec(ctx, before); err != nil {
		return fmt.Errorf("setting the planner up for %s: %w", pl.Target, err)
	}
	if err := apply(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, after); err != nil {
		return fmt.Errorf("resetting the planner after %s: %w", pl.Target, err)
	}
	return nil
}

// RefreshSamples re-evaluates a transform's quarantined columns on the
// set's keys: a fixed row leaves the samples, a row that now fails joins
// them. Nothing is applied.
func (r *Recomputer) RefreshSamples(ctx context.Context, tx pgx.Tx, s *Set, quarantined []string, t *Tally) error {
	return r.applier(t).refreshSamples(ctx, tx, s, quarantined)
}

// DropHeld removes from each set the keys its transform holds (poisoned
// keys). order lists the sets' transform ids; the caller holds their key
// locks, so a release or a poisoning of the same keys has committed or
// waits.
func (r *Recomputer) DropHeld(ctx context.Context, tx pgx.Tx, order []int, sets map[int]*Set) error {
	return r.applier(nil).dropAllHeld(ctx, tx, order, sets)
}

// BuildBound reads, under the key locks, whether a projection is in its
// initial build, and leaves the build's keys to it.
func (r *Recomputer) BuildBound(ctx context.Context, tx pgx.Tx, s *Set) error {
	return r.applier(nil).buildBound(ctx, tx, s)
}

// HoldSourceRows holds rows of the source table src (schema.table) that
// the set's transform cannot place (a GROUP BY expression raises on them)
// as poisoned source rows of the transform, counted in t.
func (r *Recomputer) HoldSourceRows(ctx context.Context, tx pgx.Tx, s *Set, src string, fs []Failure, t *Tally) error {
	return r.applier(t).recordRowsOf(ctx, tx, s, "", src, true, fs, true)
}

// Release re-derives keys a transform held (their quarantine rows already
// deleted by the caller) from their current rows, in the caller's
// transaction: it takes every key lock of the transform, so it waits for
// the pages in flight on it, then applies the keys carefully. A key whose
// cause remains is poisoned again.
func (r *Recomputer) Release(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string) error {
	if err := LockAll(ctx, tx, r.Cat.Schema, t.ID); err != nil {
		return fmt.Errorf("waiting for the pages in flight on %s: %w", t.Target, err)
	}
	return r.applyKeys(ctx, tx, t, keys, true)
}

// BuildKeys re-derives a build's keys carefully, for a build page on which
// a row failed: the caller holds every key lock of the transform. A column
// failing on a row is quarantined and a key failing as a whole poisoned,
// as in the drain.
func (r *Recomputer) BuildKeys(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string) error {
	return r.applyKeys(ctx, tx, t, keys, false)
}

func (r *Recomputer) applyKeys(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string, drained bool) error {
	return planned(ctx, tx, t.Plan(), func() error { return r.applyKeysPlanned(ctx, tx, t, keys, drained) })
}

func (r *Recomputer) applyKeysPlanned(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string, drained bool) error {
	ap := r.applier(&Tally{})
	wk := NewSet(t)
	if drained {
		// Keys past an initial build's cursor are the build's.
		if err := ap.buildBound(ctx, tx, wk); err != nil {
			return err
		}
	}
	for start := 0; start < len(keys); start += ledger.PageTarget {
		wk.clearKeys()
		for _, k := range keys[start:min(start+ledger.PageTarget, len(keys))] {
			wk.Add(k, 0)
		}
		if err := ap.applyCareful(ctx, tx, wk); err != nil {
			return err
		}
		r.Metrics.ColumnsQuarantined(ap.tally.Columns)
		r.Metrics.KeysPoisoned(ap.tally.Keys)
		ap.tally.Columns, ap.tally.Keys = 0, 0
		// A column quarantined by an earlier chunk still samples this one.
		cols, err := r.QuarantinedColumns(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		if err := ap.refreshSamples(ctx, tx, wk, cols); err != nil {
			return err
		}
	}
	return nil
}

// QuarantinedColumns are the columns of a transform quarantined on bad
// rows (not those paused by PAUSE TRANSFORM).
func (r *Recomputer) QuarantinedColumns(ctx context.Context, q pgx.Tx, id int) ([]string, error) {
	var cols []string
	err := q.QueryRow(ctx, r.Cat.SQL(sqlQuarantinedOf), id).Scan(&cols)
	return cols, err
}

// SampleKeys re-evaluates quarantined columns of a transform on keys and
// keeps the rows on which they fail as samples (dry: nothing is applied).
// A build calls it for a page on which a quarantined column fails.
func (r *Recomputer) SampleKeys(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string, cols []string) error {
	ap := r.applier(&Tally{})
	wk := NewSet(t)
	for start := 0; start < len(keys); start += ledger.PageTarget {
		wk.clearKeys()
		for _, k := range keys[start:min(start+ledger.PageTarget, len(keys))] {
			wk.Add(k, 0)
		}
		if err := ap.refreshSamples(ctx, tx, wk, cols); err != nil {
			return err
		}
	}
	return nil
}

// QuarantineBuilt quarantines columns of a transform whose build wrote
// its rows with them paused, keeping the rows each failed on as samples
// (fails, by column; each with at least one row): the build found them
// itself, in one ordered scan of the source per column. The caller holds
// every key lock of the transform.
func (r *Recomputer) QuarantineBuilt(ctx context.Context, tx pgx.Tx, t *catalog.Transform, fails map[string][]Failure) error {
	ap := r.applier(&Tally{})
	if err := ap.quarantineColumns(ctx, tx, NewSet(t), fails); err != nil {
		return err
	}
	r.Metrics.ColumnsQuarantined(ap.tally.Columns)
	return nil
}
