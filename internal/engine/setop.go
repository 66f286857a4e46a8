package engine

import (
	"cmp"
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

// compileSetOp compiles a set operation (UNION [ALL], INTERSECT, EXCEPT):
// each branch's tables are sides of their own, in branch order (its FROM
// table, joined tables, then subqueries'; a table read twice is two
// sides), and each branch is resolved over its own.
func (e *Engine) compileSetOp(ctx context.Context, tx pgx.Tx, s *grammar.Transform) ([]*side, plan.Spec, [][]string, error) {
	first := *s
	first.SetOp = nil
	branches := append([]*grammar.Transform{&first}, s.SetOp.Branches...)
	if s.SetOp.Over {
		// An aggregate over the set operation's rows: every branch is in
		// Branches, the statement reads their rows (decision 0044).
		branches = s.SetOp.Branches
	}
	var sides []*side
	var resolved []*grammar.Transform
	var byBranch [][]*plan.Table
	for _, b := range branches {
		own, err := e.loadSides(ctx, tx, b)
		if err != nil {
			return nil, plan.Spec{}, nil, err
		}
		r, err := plan.Resolve(b, tables(own))
		if err != nil {
			return nil, plan.Spec{}, nil, err
		}
		sides = append(sides, own...)
		resolved = append(resolved, r)
		byBranch = append(byBranch, tables(own))
	}
	aggregates := s.SetOp.Over && s.Aggregated()
	for _, b := range branches {
		aggregates = aggregates || b.Aggregated()
	}
	if err := e.checkFunctions(ctx, tx, s.Functions, aggregates); err != nil {
		return nil, plan.Spec{}, nil, err
	}
	var spec plan.Spec
	var needs [][]string
	var err error
	if s.SetOp.Over {
		spec, needs, err = plan.CompileSetOpOver(s.SetOp.Tree, resolved, byBranch, s)
	} else {
		spec, needs, err = plan.CompileSetOp(s.SetOp.Tree, resolved, byBranch, s.WithoutSourceIndex)
	}
	if err != nil {
		return nil, plan.Spec{}, nil, err
	}
	for i := range spec.SetOp.Branches {
		if err := checkNotIn(ctx, tx, spec.SetOp.BranchSpec(i)); err != nil {
			return nil, plan.Spec{}, nil, err
		}
	}
	return sides, spec, needs, nil
}

// refuseSetOpAlter refuses ALTER TRANSFORM ... ADD/DROP COLUMN of a set
// operation: a column would have to change in every branch at once.
func refuseSetOpAlter(spec plan.Spec, target string) error {
	if spec.SetOp == nil {
		return nil
	}
	if spec.SetOp.Over() {
		return errs.New(trellistype.CodeValidation,
			"ALTER TRANSFORM ... ADD/DROP COLUMN of %s is not supported: it aggregates over a set operation (decision 0044); DROP TRANSFORM and define it again with the columns changed", target)
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
	var out []neededIndex
	// A joined branch's tables want what the join would: each ON's (and
	// correlation's) columns on both of its tables.
	for i, b := range spec.SetOp.Branches {
		if b.Joined() {
			for _, n := range neededIndexes(spec.SetOp.BranchSpec(i)) {
				n.gap.OptedOut = spec.WithoutSourceIndex
				out = append(out, n)
			}
		}
	}
	for _, b := range spec.SetOp.Branches {
		var expr string
		switch {
		case spec.SetOp.All && !spec.SetOp.Over():
			// An aggregating branch's groups are found by its first GROUP
			// BY output; UNION ALL's other rows (a plain branch's beside
			// aggregating ones too) by each table's key.
			if !b.Aggregated || len(b.GroupBy) == 0 {
				continue
			}
			expr = b.Keys[1]
		case !spec.SetOp.Over():
			expr = b.Keys[0]
		default:
			// An aggregate over the rows: each branch's rows of a group
			// are found by the branch's first GROUP BY output (none for
			// a global aggregate, which reads every row), a column or an
			// expression over the branch's table, whose index serves the
			// group's condition PostgreSQL pushes into the branch. A
			// GROUP BY expression over outputs (a subquery of them here)
			// has none the definition could name.
			if len(b.Units) == 0 || strings.HasPrefix(b.Units[0], "(SELECT ") {
				continue
			}
			expr = b.Units[0]
		}
		src := b.GroupSource()
		gap := trellistype.SourceIndexGap{Table: src.Schema + "." + src.Table, Columns: exprColumns([]string{expr}), Role: trellistype.RoleGroupBy, OptedOut: spec.WithoutSourceIndex}
		gap.Fix = indexFixText(src.Schema, src.Table, gap.Columns)
		out = append(out, neededIndex{gap: gap, alias: cmp.Or(src.Alias, src.Table), exprs: []string{expr}})
	}
	return out
}
