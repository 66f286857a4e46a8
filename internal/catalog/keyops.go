package catalog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/plan"
)

// KeyOps reads, for each of the types, the operators its values compare
// with when they are not pg_catalog's (plan.Op); a type not in the map
// compares with pg_catalog's.
func KeyOps(ctx context.Context, q Querier, types []string) (map[string]*plan.Op, error) {
	rows, err := q.Query(ctx, sqlKeyOps, types)
	if err != nil {
		return nil, fmt.Errorf("reading the operators of the key types: %w", err)
	}
	out := map[string]*plan.Op{}
	var name string
	var op plan.Op
	_, err = pgx.ForEachRow(rows, []any{&name, &op.Schema, &op.Type}, func() error {
		o := op
		out[name] = &o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the operators of the key types: %w", err)
	}
	return out, nil
}

// deriveOps records the operators of a definition stored with OpSchemas
// alone (before decision 0030): the types of its ON columns are read from
// the tables as they are now.
func deriveOps(ctx context.Context, q Querier, spec *plan.Spec) error {
	var ss, ts, cs []string
	srcs := spec.Sources()
	spec.EachOn(func(from, joined int, on *plan.JoinOn) {
		ss = append(ss, srcs[from].Schema, srcs[joined].Schema)
		ts = append(ts, srcs[from].Table, srcs[joined].Table)
		cs = append(cs, on.From, on.Joined)
	})
	types := map[[3]string]string{}
	if len(cs) > 0 {
		rows, err := q.Query(ctx, sqlColumnTypes, ss, ts, cs)
		if err != nil {
			return fmt.Errorf("reading the types of the ON columns: %w", err)
		}
		var k [3]string
		var typ string
		if _, err := pgx.ForEachRow(rows, []any{&k[0], &k[1], &k[2], &typ}, func() error {
			types[k] = typ
			return nil
		}); err != nil {
			return fmt.Errorf("reading the types of the ON columns: %w", err)
		}
	}
	colType := func(pos int, col string) string {
		return types[[3]string{srcs[pos].Schema, srcs[pos].Table, col}]
	}
	ops, err := KeyOps(ctx, q, spec.OpTypes(colType))
	if err != nil {
		return err
	}
	spec.SetOps(ops, colType)
	return nil
}
