package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/plan"
)

// fitPartials gives a global aggregate the partials table it can be
// maintained through (decision 0051), after a define or an ALTER
// TRANSFORM: a table of the spec's partials before is dropped, and one
// made for its columns as they are now, its parts' types recorded. A
// definition whose aggregates partial results cannot give exactly (a
// float's sum, string_agg, DISTINCT, ...), or whose table name is taken,
// keeps no partials: every page recomputes it from the whole source. Any
// other failure making the table (a policy refusing it, a lock timeout)
// fails the define or ALTER with its cause.
func (e *Engine) fitPartials(ctx context.Context, tx pgx.Tx, tgt plan.Target, spec *plan.Spec) error {
	if spec.Partials != nil {
		if _, err := tx.Exec(ctx, (&plan.Plan{Target: tgt, Spec: *spec}).DropPartials()); err != nil {
			return fmt.Errorf("dropping the partials of %s: %w", tgt, err)
		}
		spec.Partials = nil
	}
	ps := plan.PartialsFor(*spec, tgt)
	if ps == nil {
		return nil
	}
	var rows float64
	src := spec.Source
	if err := tx.QueryRow(ctx, sqlSourceRows, ident.Qualified(src.Schema, src.Table)).Scan(&rows); err != nil {
		return fmt.Errorf("reading the size of %s.%s: %w", src.Schema, src.Table, err)
	}
	ps.Shift = plan.ShiftFor(rows)
	sp := *spec
	sp.Partials = ps
	pl := &plan.Plan{Target: tgt, Spec: sp}
	sub, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sub.Exec(ctx, pl.CreatePartials()); err != nil {
		if rerr := sub.Rollback(ctx); rerr != nil {
			return rerr
		}
		if pgerr.Is(err, pgerrcode.DuplicateTable) {
			// A table of the name exists: the definition keeps the whole
			// recompute.
			return nil
		}
		return fmt.Errorf("creating the partials table of %s: %w", tgt, err)
	}
	cols, err := pinnedPairs(ctx, sub, sqlTargetTypes, pl.PartialsTable())
	if err != nil {
		_ = sub.Rollback(ctx)
		return err
	}
	types := map[string]string{}
	for _, ct := range cols {
		types[ct[0]] = ct[1]
	}
	for i := range ps.Parts {
		ps.Parts[i].Type = types[plan.PartColumn(i)]
	}
	if !ps.ExactTypes() {
		return sub.Rollback(ctx)
	}
	if err := sub.Commit(ctx); err != nil {
		return err
	}
	spec.Partials = ps
	return nil
}
