package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

// expandViews reads the views a definition names as derived tables of
// their queries (decision 0028): when a table of s is a view, text is
// parsed again with every view inlined. It returns the transform to
// compile and the views read, with their fingerprints.
func (e *Engine) expandViews(ctx context.Context, tx pgx.Tx, s *grammar.Transform, text string) (*grammar.Transform, []plan.View, error) {
	refs := []grammar.TableRef{s.From}
	for _, j := range s.Joins {
		refs = append(refs, j.Table)
	}
	if s.SetOp != nil {
		for _, b := range s.SetOp.Branches {
			refs = append(refs, b.From)
			for _, j := range b.Joins {
				refs = append(refs, j.Table)
			}
		}
	}
	hasView := false
	for _, r := range refs {
		rel, err := e.resolve(ctx, tx, r.Table, e.TargetSchema)
		if err != nil {
			return nil, nil, err
		}
		if rel != nil && rel.kind == "v" {
			hasView = true
		}
	}
	if !hasView {
		return s, nil, nil
	}
	if text == "" {
		return nil, nil, errs.New(trellistype.CodeInternal, "the statement text of a definition reading a view is missing")
	}
	var views []plan.View
	var dbErr error
	read := func(n grammar.Name) (string, bool, error) {
		rel, err := e.resolve(ctx, tx, n, e.TargetSchema)
		if err != nil {
			dbErr = err
			return "", false, err
		}
		if rel == nil || rel.kind != "v" {
			return "", false, nil
		}
		name := rel.schema + "." + rel.name
		var def, fp string
		var barrier, invoker bool
		if err := tx.QueryRow(ctx, sqlViewFacts, rel.oid).Scan(&def, &fp, &barrier, &invoker); err != nil {
			dbErr = err
			return "", false, err
		}
		switch {
		case barrier:
			return "", false, fmt.Errorf("view %s is a security_barrier view: Trellis reads a view's tables itself, past the barrier; read its tables in the transform instead", name)
		case invoker:
			return "", false, fmt.Errorf("view %s is a security_invoker view: Trellis's workers would read its tables with rights other than the reader's; read its tables in the transform instead", name)
		}
		rows, err := tx.Query(ctx, sqlViewTables, rel.oid)
		if err != nil {
			dbErr = err
			return "", false, err
		}
		type table struct {
			name     string
			can, rls bool
		}
		tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
			var t table
			err := r.Scan(&t.name, &t.can, &t.rls)
			return t, err
		})
		if err != nil {
			dbErr = err
			return "", false, err
		}
		for _, t := range tables {
			switch {
			case !t.can:
				return "", false, fmt.Errorf("view %s reads table %s, which you may not read: Trellis reads a view's tables with your rights, not its owner's (grant SELECT on %s)", name, t.name, t.name)
			case t.rls:
				return "", false, fmt.Errorf("view %s reads table %s, which has row level security: through the view its owner's policies apply, and Trellis would read the table with yours; read the table in the transform instead", name, t.name)
			}
		}
		seen := false
		for _, v := range views {
			seen = seen || v.OID == uint32(rel.oid)
		}
		if !seen {
			views = append(views, plan.View{OID: uint32(rel.oid), Name: name, Fingerprint: fp})
		}
		return def, true, nil
	}
	st, err := grammar.ParseWithViews(text, read)
	if dbErr != nil {
		return nil, nil, dbErr
	}
	if err != nil {
		var ge *grammar.Error
		if errors.As(err, &ge) && ge.Kind == grammar.Invalid {
			return nil, nil, &errs.Error{Code: trellistype.CodeValidation, Msg: ge.Error(), Err: err}
		}
		return nil, nil, &errs.Error{Code: trellistype.CodeParse, Msg: err.Error(), Err: err}
	}
	t, ok := st.(*grammar.Transform)
	if !ok {
		return nil, nil, errs.New(trellistype.CodeInternal, "a TRANSFORM statement parsed as %s", grammar.KindOf(st))
	}
	return t, views, nil
}

// staleViews refuses to resume a transform whose views changed: it still
// reads the definitions it inlined.
func staleViews(spec plan.Spec) error {
	for _, v := range spec.Views {
		if v.Changed != "" {
			return errs.New(trellistype.CodeValidation,
				"view %s was %s since the transform was defined, and the transform inlines the definition it had then: DROP TRANSFORM and define it again to read the view as it is now", v.Name, v.Changed)
		}
	}
	return nil
}
