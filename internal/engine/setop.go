package engine

import (
	"cmp"
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

// compileSetOp compiles a set operation (UNION [ALL], INTERSECT, EXCEPT):
// each branch's table is a side of its own, in branch order (a table read
// by two branches is two sides), and each branch is resolved over it.
func (e *Engine) compileSetOp(ctx context.Context, tx pgx.Tx, s *grammar.Transform) ([]*side, plan.Spec, [][]string, error) {
	first := *s
	first.SetOp = nil
	branches := append([]*grammar.Transform{&first}, s.SetOp.Branches...)
	var sides []*side
	var resolved []*grammar.Transform
	for _, b := range branches {
		sd, err := e.loadSide(ctx, tx, b.From)
		if err != nil {
			return nil, plan.Spec{}, nil, err
		}
		r, err := plan.Resolve(b, tables([]*side{sd}))
		if err != nil {
			return nil, plan.Spec{}, nil, err
		}
		sides = append(sides, sd)
		resolved = append(resolved, r)
	}
	if err := e.checkFunctions(ctx, tx, s.Functions, false); err != nil {
		return nil, plan.Spec{}, nil, err
	}
	spec, needs, err := plan.CompileSetOp(s.SetOp.Tree, resolved, tables(sides), s.WithoutSourceIndex)
	if err != nil {
		return nil, plan.Spec{}, nil, err
	}
	return sides, spec, needs, nil
}

// refuseSetOpAlter refuses ALTER TRANSFORM ... ADD/DROP COLUMN of a set
// operation: a column would have to change in every branch at once.
func refuseSetOpAlter(spec plan.Spec, target string) error {
	if spec.SetOp == nil {
		return nil
	}
	return errs.New(trellistype.CodeValidation,
		"ALTER TRANSFORM ... ADD/DROP COLUMN of %s is not supported: it is a set operation (UNION, INTERSECT, EXCEPT), whose columns are in every branch; DROP TRANSFORM and define it again with the columns changed in each branch", target)
}

// setOpIndexes are the indexes a set operation without ALL relies on: a
// distinct row is recomputed from the rows of each branch whose first
// output equals its value, so each branch's table wants an index on that
// output's expression (role group_by). UNION ALL finds its rows by each
// table's key, which has its index.
func setOpIndexes(spec plan.Spec) []neededIndex {
	if spec.SetOp.All {
		return nil
	}
	var out []neededIndex
	for _, b := range spec.SetOp.Branches {
		expr := b.Keys[0]
		gap := trellistype.SourceIndexGap{Table: b.Source.Schema + "." + b.Source.Table, Columns: exprColumns([]string{expr}), Role: trellistype.RoleGroupBy, OptedOut: spec.WithoutSourceIndex}
		gap.Fix = indexFixText(b.Source.Schema, b.Source.Table, gap.Columns)
		out = append(out, neededIndex{gap: gap, alias: cmp.Or(b.Source.Alias, b.Source.Table), exprs: []string{expr}})
	}
	return out
}
