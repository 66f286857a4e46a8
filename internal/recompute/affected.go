package recompute

import (
	"context"
	"fmt"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/plan"
)

// ChangedKeysOnly reports whether the target keys of t, under plan pl,
// that changes of its source src touch are exactly the changed keys (a
// projection, a join's FROM side that is not also its joined side): Affected
// then only adds them, and the drain shares one set of them among all such
// transforms of a page (NewKeys, Set.AddKeys; decision 0059).
func ChangedKeysOnly(t *catalog.Transform, pl *plan.Plan, src int) bool {
	spec := t.Spec
	if spec.SetOp != nil || pl.Multi() || spec.Source.ID != src {
		return false
	}
	switch pl.Kind() {
	case plan.KindProjection:
		return true
	case plan.KindJoin:
		return spec.Join == nil || spec.Join.Source.ID != src
	}
	return false
}

// Affected hands to add every target key of t, under plan pl, that changes
// of its source src touch, with the key's bucket: the changed keys
// themselves where they are target keys (a projection, a join's FROM
// side), and what pl's affected-keys queries find (groups, a window's
// partitions, join rows).
// source looks up src's capture layout, only when a query needs it; part
// is plan.Changes.Part. The drain finds a page's keys with it, and the
// self-check the keys in flight.
func Affected(ctx context.Context, q catalog.Querier, t *catalog.Transform, pl *plan.Plan, src int,
	source func(id int) (*catalog.Source, error), changes []ledger.Change, part string, add func(key []*string, bucket int)) error {
	spec := t.Spec
	if spec.SetOp != nil {
		return affectedSetOp(ctx, q, t, pl, src, source, changes, part, add)
	}
	if pl.Multi() {
		return affectedMulti(ctx, q, t, pl, src, source, changes, part, add)
	}
	fromSide := spec.Source.ID == src
	joinedSide := spec.Join != nil && spec.Join.Source.ID == src
	kind := pl.Kind()
	if fromSide && kind != plan.KindAggregate && kind != plan.KindWindow {
		for _, c := range changes {
			add(c.Key, c.Bucket)
		}
	}
	if kind == plan.KindProjection || (kind == plan.KindJoin && !joinedSide) {
		return nil
	}
	s, err := source(src)
	if err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("source %d of %s is not in the catalog", src, t.Target)
	}
	side := spec.Source
	if !fromSide {
		side = spec.Join.Source
	}
	ch := plan.Changes{Source: side, CapCols: s.CapCols, CapTypes: s.CapTypes, Part: part}
	args := ch.Args(len(changes), func(i int) ([]*string, []*string) { return changes[i].Key, changes[i].Vals })
	return runAffected(ctx, q, t, s, pl.AffectedQueries(ch, fromSide, joinedSide, ledger.Buckets), args, add)
}

// affectedMulti is Affected for a join of three or more tables: the
// queries of every position src holds (a table joined twice has two).
func affectedMulti(ctx context.Context, q catalog.Querier, t *catalog.Transform, pl *plan.Plan, src int,
	source func(id int) (*catalog.Source, error), changes []ledger.Change, part string, add func(key []*string, bucket int)) error {
	// The FROM table's own keys are the units, unless they group (or
	// partition a window) or a FULL JOIN makes the other side's rows units
	// too.
	direct := !pl.UnitIsGroup() && !pl.Full()
	return affectedPositions(ctx, q, t, src, source, changes, part, add, direct, func(ch plan.Changes, pos int) string {
		return pl.AffectedAt(ch, pos, ledger.Buckets)
	})
}

// affectedSetOp is Affected for a set operation: the queries of every
// branch that reads src (a table read by two branches feeds both).
func affectedSetOp(ctx context.Context, q catalog.Querier, t *catalog.Transform, pl *plan.Plan, src int,
	source func(id int) (*catalog.Source, error), changes []ledger.Change, part string, add func(key []*string, bucket int)) error {
	return affectedPositions(ctx, q, t, src, source, changes, part, add, false, func(ch plan.Changes, pos int) string {
		return pl.AffectedBranch(ch, pos, ledger.Buckets)
	})
}

// affectedPositions runs, for every position of the spec's sources that src
// holds, the affected-keys query of that position (query). With direct,
// position 0's changed keys are its target keys, with no query.
func affectedPositions(ctx context.Context, q catalog.Querier, t *catalog.Transform, src int,
	source func(id int) (*catalog.Source, error), changes []ledger.Change, part string, add func(key []*string, bucket int),
	direct bool, query func(ch plan.Changes, pos int) string) error {
	var s *catalog.Source
	for pos, side := range t.Spec.Sources() {
		if side.ID != src {
			continue
		}
		if pos == 0 && direct {
			for _, c := range changes {
				add(c.Key, c.Bucket)
			}
			continue
		}
		if s == nil {
			var err error
			if s, err = source(src); err != nil {
				return err
			}
			if s == nil {
				return fmt.Errorf("source %d of %s is not in the catalog", src, t.Target)
			}
		}
		ch := plan.Changes{Source: side, CapCols: s.CapCols, CapTypes: s.CapTypes, Part: part}
		qs := query(ch, pos)
		if qs == "" {
			continue // found by another position's query (plan.AffectedBranch)
		}
		args := ch.Args(len(changes), func(i int) ([]*string, []*string) { return changes[i].Key, changes[i].Vals })
		if err := runAffected(ctx, q, t, s, []string{qs}, args, add); err != nil {
			return err
		}
	}
	return nil
}

// runAffected runs affected-keys queries and hands their keys to add.
func runAffected(ctx context.Context, q catalog.Querier, t *catalog.Transform, s *catalog.Source, queries []string, args []any, add func(key []*string, bucket int)) error {
	for _, query := range queries {
		rows, err := q.Query(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("finding what changes of %s touch in %s: %w", s.Name(), t.Target, err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				rows.Close()
				return err
			}
			key := make([]*string, len(vals)-1) // the last is the bucket
			for i := range key {
				if v, ok := vals[i].(string); ok {
					key[i] = &v
				}
			}
			add(key, int(vals[len(vals)-1].(int32)))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("finding what changes of %s touch in %s: %w", s.Name(), t.Target, err)
		}
	}
	return nil
}
