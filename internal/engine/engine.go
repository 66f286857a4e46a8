// Package engine carries out Trellis statements (define, pause, resume,
// drop, alter) and the Sync of a statements file against the catalog, and
// answers the catalog reads (status,
// definitions, watermarks, liveness). The background workers live in
// packages staging and drain; the ledger and recomputes in ledger and
// recompute.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/funcwatch"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/metrics"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/internal/recompute"
	"github.com/trellis-pg/trellis/trellistype"
)

// Engine runs statements and reads for one instance.
type Engine struct {
	Pool         *pgxpool.Pool
	Cat          *catalog.Catalog
	Names        capture.Names
	TargetSchema string
	// Recompute re-derives released keys.
	Recompute *recompute.Recomputer
	// Metrics counts the capture disruptions a call finds (nil: not counted).
	Metrics *metrics.Instance
	// Ledger answers watermark waits (the call pool's).
	Ledger *ledger.Ledger
	// DefinerPath is the search_path the names of a user's statement
	// resolve through (the role's, database's or URL's, read at connect):
	// only the statements resolving those names run under it (asDefiner),
	// every other one under the connections' pinned pg_catalog, pg_temp.
	// Empty leaves the connection's.
	DefinerPath string

	// indexFixes caches the CREATE INDEX a source index gap offers, as
	// PostgreSQL checked it (status.go).
	indexFixes sync.Map
}

// Parse parses a statement into an engine error on failure: CodeParse for
// text off the grammar, CodeValidation for a rule it breaks. It needs no
// database; its first call in a process initialises the parser.
func Parse(text string) (grammar.Statement, error) {
	st, err := grammar.Parse(text)
	if err != nil {
		var ge *grammar.Error
		if errors.As(err, &ge) && ge.Kind == grammar.Invalid {
			return nil, &errs.Error{Code: trellistype.CodeValidation, Msg: ge.Error(), Err: err}
		}
		return nil, &errs.Error{Code: trellistype.CodeParse, Msg: err.Error(), Err: err}
	}
	return st, nil
}

// ApplyParsed runs a parsed statement.
func (e *Engine) ApplyParsed(ctx context.Context, st grammar.Statement, text string, onlyTransform bool) (trellistype.Applied, error) {
	if _, ok := st.(*grammar.Transform); onlyTransform && !ok {
		return nil, errs.New(trellistype.CodeValidation, "only TRANSFORM statements can be defined; use Apply for PAUSE, RESUME, DROP and ALTER")
	}
	switch s := st.(type) {
	case *grammar.Transform:
		return e.define(ctx, s, text)
	case *grammar.Pause:
		return e.pause(ctx, s.Address)
	case *grammar.Resume:
		return e.resume(ctx, s.Address)
	case *grammar.Drop:
		return e.drop(ctx, s.Target)
	case *grammar.Alter:
		return e.alter(ctx, s)
	}
	return nil, errs.New(trellistype.CodeInternal, "unknown statement %T", st)
}

// inTx runs fn in a transaction holding the instance's DDL lock, which
// drain pages and builds take shared: a statement never changes a
// definition under a page that is applying it.
func (e *Engine) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		if err := locks.DDL(ctx, tx, e.Cat.Schema); err != nil {
			return err
		}
		return fn(tx)
	})
}

// asDefiner runs fn, the statements that resolve the names of a user's
// statement, under the search_path the user's own session would have, and
// pins the path again after it: what those names reach is recorded
// qualified (qualify), and every other statement of the transaction,
// Trellis's own, runs pinned, so nothing planted on the user's path runs
// as Trellis. fn runs only statements that name what the user named, and
// qualify everything else they call with pg_catalog.
func (e *Engine) asDefiner(ctx context.Context, tx pgx.Tx, fn func() error) error {
	if e.DefinerPath == "" {
		return fn()
	}
	if _, err := tx.Exec(ctx, sqlSetSearchPath, e.DefinerPath); err != nil {
		return err
	}
	ferr := fn()
	_, err := tx.Exec(ctx, sqlSetSearchPath, ident.SearchPath)
	if ferr != nil {
		return ferr
	}
	return err
}

func (e *Engine) notifyStaging(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, sqlNotify, e.Names.StagingChannel())
	return err
}

// pgValidation turns a PostgreSQL error about the user's SQL into a
// validation error that says what was being done.
func pgValidation(err error, format string, args ...any) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pgerr.InClass(pe.Code, pgerrcode.SyntaxErrorOrAccessRuleViolation, pgerrcode.DataException,
			pgerrcode.InvalidSchemaName, pgerrcode.DependentPrivilegeDescriptorsStillExist) {
			return &errs.Error{Code: trellistype.CodeValidation, Msg: fmt.Sprintf(format, args...) + ": " + pe.Message, Err: err}
		}
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

type relation struct {
	oid    int64
	schema string
	name   string
	kind   string
}

func (e *Engine) resolve(ctx context.Context, tx pgx.Tx, n grammar.Name, fallbackSchema string) (*relation, error) {
	try := func(name string) (*relation, error) {
		// Only the name resolves through the definer's path.
		var oid *uint32
		err := e.asDefiner(ctx, tx, func() error { return tx.QueryRow(ctx, sqlResolveName, name).Scan(&oid) })
		if err != nil || oid == nil {
			return nil, err
		}
		var r relation
		err = tx.QueryRow(ctx, sqlResolve, *oid).Scan(&r.oid, &r.schema, &r.name, &r.kind)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		return &r, err
	}
	if n.Schema != "" {
		return try(ident.Qualified(n.Schema, n.Name))
	}
	r, err := try(ident.Quote(n.Name))
	if r != nil || err != nil || fallbackSchema == "" {
		return r, err
	}
	return try(ident.Qualified(fallbackSchema, n.Name))
}

func (e *Engine) checkFunctions(ctx context.Context, q catalog.Querier, fns []string, aggregates bool, windows ...string) error {
	for _, f := range fns {
		over := slices.Contains(windows, f) // called with OVER: a window function or an aggregate over a window
		schema, name := "", f
		if i := strings.LastIndex(f, "."); i >= 0 {
			schema, name = f[:i], f[i+1:]
		}
		var volatile, retset, agg, window bool
		if err := q.QueryRow(ctx, sqlFunctionKinds, name, schema).Scan(&volatile, &retset, &agg, &window); err != nil {
			return err
		}
		switch {
		case volatile:
			return errs.New(trellistype.CodeValidation, "function %s is volatile: a transform may only call functions whose result depends on their arguments (immutable or stable)", f)
		case retset:
			return errs.New(trellistype.CodeValidation, "function %s returns a set: set-returning functions are not allowed in a transform", f)
		case over:
		case window:
			return errs.New(trellistype.CodeValidation, "function %s is a window function: call it with OVER (...) in the select list", f)
		case agg && !aggregates:
			return errs.New(trellistype.CodeValidation, "function %s is an aggregate: aggregates need GROUP BY", f)
		}
	}
	return nil
}

func (e *Engine) target(n grammar.Name) plan.Target {
	if n.Schema == "" {
		return plan.Target{Schema: e.TargetSchema, Name: n.Name}
	}
	return plan.Target{Schema: n.Schema, Name: n.Name}
}

// Lookup finds the transform that writes target ("t" or "schema.t"); nil
// when none does.
func (e *Engine) Lookup(ctx context.Context, q catalog.Querier, target string, forUpdate bool) (*catalog.Transform, error) {
	schema, name, qualified := strings.Cut(target, ".")
	if !qualified {
		schema, name = "", schema
	}
	return e.LookupName(ctx, q, grammar.Name{Schema: schema, Name: name}, forUpdate)
}

// LookupName is Lookup of a parsed name: a quoted identifier holding a
// dot ("sales.totals") is one name, never a schema and a table.
func (e *Engine) LookupName(ctx context.Context, q catalog.Querier, n grammar.Name, forUpdate bool) (*catalog.Transform, error) {
	if n.Schema != "" {
		return e.Cat.Transform(ctx, q, plan.Target{Schema: n.Schema, Name: n.Name}, forUpdate)
	}
	name := n.Name
	rows, err := q.Query(ctx, e.Cat.SQL(sqlFindByName), name, e.TargetSchema)
	if err != nil {
		return nil, err
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(schemas) == 0 {
		return nil, err
	}
	return e.Cat.Transform(ctx, q, plan.Target{Schema: schemas[0], Name: name}, forUpdate)
}

// resolveAddress finds the transform and (optional) column an address names.
func (e *Engine) resolveAddress(ctx context.Context, tx pgx.Tx, a grammar.Address, forUpdate bool) (*catalog.Transform, string, error) {
	p := a.Parts
	switch len(p) {
	case 1:
		t, err := e.LookupName(ctx, tx, grammar.Name{Name: p[0]}, forUpdate)
		if err == nil && t == nil {
			err = errs.New(trellistype.CodeNotFound, "no transform writes %s", p[0])
		}
		return t, "", err
	case 2:
		t, err := e.Cat.Transform(ctx, tx, plan.Target{Schema: p[0], Name: p[1]}, forUpdate)
		if err != nil || t != nil {
			return t, "", err
		}
		t, err = e.LookupName(ctx, tx, grammar.Name{Name: p[0]}, forUpdate)
		if err == nil && t == nil {
			err = errs.New(trellistype.CodeNotFound, "no transform writes %s or %s", p[0]+"."+p[1], p[0])
		}
		return t, p[1], err
	case 3:
		t, err := e.Cat.Transform(ctx, tx, plan.Target{Schema: p[0], Name: p[1]}, forUpdate)
		if err == nil && t == nil {
			err = errs.New(trellistype.CodeNotFound, "no transform writes %s.%s", p[0], p[1])
		}
		return t, p[2], err
	}
	return nil, "", errs.New(trellistype.CodeValidation, "an address is a transform or transform.column")
}

func (e *Engine) pause(ctx context.Context, a grammar.Address) (trellistype.Applied, error) {
	var res trellistype.Paused
	err := e.inTx(ctx, func(tx pgx.Tx) error {
		t, col, err := e.resolveAddress(ctx, tx, a, true)
		if err != nil {
			return err
		}
		if col != "" {
			if err := e.setColumnPaused(ctx, tx, t, col, true); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlColumnPause), t.ID, col); err != nil {
				return err
			}
			res.Addresses = []string{t.Target.Name + "." + col}
			return e.Cat.BumpGen(ctx, tx)
		}
		if _, err := tx.Exec(ctx, e.Cat.SQL(sqlSetPaused), t.ID, "paused by PAUSE TRANSFORM"); err != nil {
			return err
		}
		res.Addresses = []string{t.Target.Name}
		return e.Cat.BumpGen(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (e *Engine) resume(ctx context.Context, a grammar.Address) (trellistype.Applied, error) {
	res := trellistype.Resumed{Addresses: []string{}}
	err := e.inTx(ctx, func(tx pgx.Tx) error {
		t, col, err := e.resolveAddress(ctx, tx, a, true)
		if err != nil {
			return err
		}
		if err := staleViews(t.Spec); err != nil {
			return err
		}
		if col != "" {
			i := slices.IndexFunc(t.Spec.Columns, func(c plan.Column) bool { return c.Name == col })
			if i < 0 || !t.Spec.Columns[i].Paused {
				if i < 0 {
					return errs.New(trellistype.CodeNotFound, "%s has no column %s", t.Target, col)
				}
				return nil
			}
			if err := e.setColumnPaused(ctx, tx, t, col, false); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlColumnUnquarantine), t.ID, col); err != nil {
				return err
			}
			// Re-derive the column for every row.
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlColumnBuild), t.ID, col); err != nil {
				return err
			}
			if t.State != trellistype.StatePaused {
				if _, err := tx.Exec(ctx, e.Cat.SQL(sqlSetRebuild), t.ID, trellistype.StateBackfilling); err != nil {
					return err
				}
			}
			res.Addresses = []string{t.Target.Name + "." + col}
			if err := e.Cat.BumpGen(ctx, tx); err != nil {
				return err
			}
			return e.notifyStaging(ctx, tx)
		}
		// Every key the transform holds is released.
		released, err := e.releaseAll(ctx, tx, t)
		if err != nil {
			return lockTimeout(err, "waiting for the drain pages in flight on "+t.Target.String())
		}
		if t.State != trellistype.StatePaused {
			if released > 0 {
				res.Addresses = []string{t.Target.Name}
				return e.Cat.BumpGen(ctx, tx)
			}
			return nil
		}
		// Changes captured while paused were not applied: re-derive the
		// whole target from the source as it is now.
		if _, err := tx.Exec(ctx, e.Cat.SQL(sqlSetRebuild), t.ID, trellistype.StateWaitingToBackfill); err != nil {
			return err
		}
		res.Addresses = []string{t.Target.Name}
		// Capture that was disrupted is installed afresh; a source that is
		// gone cannot be resumed.
		var gone []string
		rows, err := tx.Query(ctx, e.Cat.SQL(sqlDisruptedSources), t.ID)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name string
			var exists bool
			if err := rows.Scan(&name, &exists); err != nil {
				rows.Close()
				return err
			}
			if !exists {
				gone = append(gone, name)
			}
		}
		rows.Close()
		if len(gone) > 0 {
			return errs.New(trellistype.CodeNotFound, "cannot resume %s: its source table %s no longer exists", t.Target, strings.Join(gone, ", "))
		}
		if _, err := tx.Exec(ctx, e.Cat.SQL(sqlReinstallDisrupted), t.ID); err != nil {
			return err
		}
		if err := e.Cat.BumpGen(ctx, tx); err != nil {
			return err
		}
		return e.notifyStaging(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// DetectCaptureDisruptions pauses now the readers of every source whose
// capture was changed outside Trellis, and returns the qualified names of
// all sources whose capture stands disrupted.
func (e *Engine) DetectCaptureDisruptions(ctx context.Context) ([]string, error) {
	var out []string
	err := e.inTx(ctx, func(tx pgx.Tx) error {
		found, err := e.Names.Detect(ctx, tx)
		if err != nil {
			return err
		}
		if e.Metrics != nil {
			e.Metrics.CaptureFailures(trellistype.CaptureFailureDisruption, len(found))
		}
		if len(found) > 0 {
			if err := e.Cat.BumpGen(ctx, tx); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, e.Cat.SQL(sqlDisrupted))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if out == nil {
		out = []string{}
	}
	return out, err
}

func (e *Engine) readers(ctx context.Context, tx pgx.Tx, t *catalog.Transform) ([]string, []plan.Spec, error) {
	rows, err := tx.Query(ctx, e.Cat.SQL(sqlReaders), t.Target.Schema, t.Target.Name, t.ID)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var names []string
	var specs []plan.Spec
	for rows.Next() {
		var n string
		var raw []byte
		if err := rows.Scan(&n, &raw); err != nil {
			return nil, nil, err
		}
		var sp plan.Spec
		if err := json.Unmarshal(raw, &sp); err != nil {
			return nil, nil, err
		}
		names, specs = append(names, n), append(specs, sp)
	}
	return names, specs, rows.Err()
}

func (e *Engine) drop(ctx context.Context, n grammar.Name) (trellistype.Applied, error) {
	var res trellistype.Dropped
	err := e.inTx(ctx, func(tx pgx.Tx) error {
		name := n.String()
		t, err := e.LookupName(ctx, tx, n, true)
		if err != nil {
			return err
		}
		if t == nil {
			return errs.New(trellistype.CodeNotFound, "no transform writes %s", name)
		}
		readers, _, err := e.readers(ctx, tx, t)
		if err != nil {
			return err
		}
		if len(readers) > 0 {
			return errs.New(trellistype.CodeConflict, "transform %s reads %s: drop it first", strings.Join(readers, ", "), t.Target)
		}
		// Only the table Trellis created: one renamed away is left where
		// it is, and a table another created under the name is not touched.
		var ours bool
		if err := tx.QueryRow(ctx, e.Cat.SQL(sqlTargetIsOurs), t.ID).Scan(&ours); err != nil {
			return err
		}
		if ours {
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlDropTarget, t.Target.Quoted())); err != nil {
				return fmt.Errorf("dropping target %s: %w", t.Target, err)
			}
		}
		if t.Spec.Partials != nil {
			if _, err := tx.Exec(ctx, t.Plan().DropPartials()); err != nil {
				return fmt.Errorf("dropping the partials of %s: %w", t.Target, err)
			}
		}
		if _, err := tx.Exec(ctx, e.Cat.SQL(sqlDeleteTrans), t.ID); err != nil {
			return err
		}
		if err := e.forgetSource(ctx, tx, t.Target); err != nil {
			return err
		}
		res.Target = t.Target.String()
		if err := e.Cat.BumpGen(ctx, tx); err != nil {
			return err
		}
		return e.notifyStaging(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// forgetSource removes the capture record of a dropped target that was a
// source (of transforms dropped before it): its triggers went with the
// table, so a table made later under the same name, and read again, is
// captured afresh rather than taken for the old one, whose missing
// triggers would read as a disruption.
func (e *Engine) forgetSource(ctx context.Context, tx pgx.Tx, target plan.Target) error {
	var src catalog.Source
	err := tx.QueryRow(ctx, e.Cat.SQL(sqlSourceOfTable), target.Schema, target.Name).
		Scan(&src.ID, &src.Schema, &src.Table, &src.KeyCols, &src.KeyTypes, &src.CapCols, &src.CapTypes, &src.Partitioned)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := e.Names.Uninstall(ctx, tx, src); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, e.Cat.SQL(sqlDeleteUnreadSource), src.ID)
	return err
}

func (e *Engine) alter(ctx context.Context, s *grammar.Alter) (trellistype.Applied, error) {
	var res trellistype.Altered
	err := e.inTx(ctx, func(tx pgx.Tx) error {
		name := s.Target.String()
		t, err := e.LookupName(ctx, tx, s.Target, true)
		if err != nil {
			return err
		}
		if t == nil {
			return errs.New(trellistype.CodeNotFound, "no transform writes %s", name)
		}
		spec := t.Spec
		if err := refuseSetOpAlter(spec, t.Target.String()); err != nil {
			return err
		}
		col := s.Column.Name
		exists := slices.ContainsFunc(spec.Columns, func(c plan.Column) bool { return c.Name == col })
		switch s.Action {
		case grammar.AlterAddColumn:
			if exists || slices.Contains(t.Plan().KeyNames(), col) {
				return errs.New(trellistype.CodeConflict, "%s already has a column %s", t.Target, col)
			}
			grouped := len(spec.GroupBy) > 0 || spec.Global
			if s.Column.HasAggregate && !grouped {
				return errs.New(trellistype.CodeValidation, "column %s uses an aggregate: aggregates need GROUP BY", col)
			}
			if grouped && !s.Column.HasAggregate {
				return errs.New(trellistype.CodeValidation, "column %s of an aggregating transform must be an aggregate: its key (the GROUP BY) cannot change", col)
			}
			if grouped && len(s.Bare) > 0 {
				return errs.New(trellistype.CodeValidation, "column %s: column %s must be inside an aggregate (the key of a GROUP BY transform cannot change)", col, s.Bare[0].String())
			}
			if err := e.checkFunctions(ctx, tx, s.Functions, grouped); err != nil {
				return err
			}
			pl := t.Plan()
			// The column's expression is the user's, not qualified yet.
			var fd []pgconn.FieldDescription
			err := e.asDefiner(ctx, tx, func() error {
				rows, err := tx.Query(ctx, pl.ProbeColumn(s.Column.Expr))
				if err != nil {
					return err
				}
				fd = slices.Clone(rows.FieldDescriptions())
				rows.Close()
				return rows.Err()
			})
			if err != nil {
				return pgValidation(err, "adding column %s to %s", col, t.Target)
			}
			var typ string
			if err := tx.QueryRow(ctx, sqlFormatType, fd[0].DataTypeOID, fd[0].TypeModifier).Scan(&typ); err != nil {
				return err
			}
			if typ == "unknown" {
				typ = "text"
			}
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlAddColumn, t.Target.Quoted(), ident.Quote(col), typ)); err != nil {
				return pgValidation(err, "adding column %s to %s", col, t.Target)
			}
			sides, err := e.specSides(ctx, tx, spec)
			if err != nil {
				return err
			}
			if spec, err = plan.AddColumn(spec, s.Column, tables(sides)); err != nil {
				return err
			}
			// The type as the target has it, like a defined column's: a
			// paused (quarantined) column evaluates to a typed NULL.
			spec.Columns[len(spec.Columns)-1].Type = typ
			// Its names qualified as a define's are.
			if err := e.qualify(ctx, tx, t.Target, &spec); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlColumnBuild), t.ID, col); err != nil {
				return err
			}
			if t.State != trellistype.StatePaused {
				if _, err := tx.Exec(ctx, e.Cat.SQL(sqlSetRebuild), t.ID, trellistype.StateBackfilling); err != nil {
					return err
				}
			}
		case grammar.AlterDropColumn:
			if slices.Contains(t.Plan().KeyNames(), col) {
				return errs.New(trellistype.CodeValidation, "column %s is the key of %s and cannot be dropped", col, t.Target)
			}
			if !exists {
				return errs.New(trellistype.CodeNotFound, "%s has no column %s", t.Target, col)
			}
			readers, specs, err := e.readers(ctx, tx, t)
			if err != nil {
				return err
			}
			for i, sp := range specs {
				if slices.Contains(sp.Reads, col) {
					return errs.New(trellistype.CodeConflict, "transform %s reads %s.%s: alter or drop it first", readers[i], t.Target, col)
				}
			}
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlDropColumn, t.Target.Quoted(), ident.Quote(col))); err != nil {
				return fmt.Errorf("dropping column %s of %s: %w", col, t.Target, err)
			}
			spec = plan.DropColumn(spec, col)
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlColumnUnquarantine), t.ID, col); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlDropColumnBuild), t.ID, col); err != nil {
				return err
			}
		default:
			return errs.New(trellistype.CodeValidation, "unknown ALTER TRANSFORM action")
		}
		if err := e.fitPartials(ctx, tx, t.Target, &spec); err != nil {
			return err
		}
		if spec.Functions, err = funcwatch.Probe(ctx, tx, (&plan.Plan{Target: t.Target, Spec: spec}).Query()); err != nil {
			return err
		}
		if clock, err := funcwatch.ReadsClock(ctx, tx, spec.Functions); err != nil {
			return err
		} else if clock != "" {
			return errs.New(trellistype.CodeValidation, "%s", clock)
		}
		raw, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, e.Cat.SQL(sqlSetSpec), t.ID, raw); err != nil {
			return err
		}
		res.Target = t.Target.String()
		if err := e.Cat.BumpGen(ctx, tx); err != nil {
			return err
		}
		return e.notifyStaging(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// setColumnPaused marks one column of a transform paused or not.
func (e *Engine) setColumnPaused(ctx context.Context, tx pgx.Tx, t *catalog.Transform, col string, paused bool) error {
	spec := t.Spec
	i := slices.IndexFunc(spec.Columns, func(c plan.Column) bool { return c.Name == col })
	if i < 0 {
		if slices.Contains(t.Plan().KeyNames(), col) {
			return errs.New(trellistype.CodeValidation, "column %s is the key of %s: pause the whole transform instead", col, t.Target)
		}
		return errs.New(trellistype.CodeNotFound, "%s has no column %s", t.Target, col)
	}
	spec.Columns = slices.Clone(spec.Columns)
	spec.Columns[i].Paused = paused
	raw, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, e.Cat.SQL(sqlSetSpec), t.ID, raw)
	return err
}

// RequestBackfill re-derives every transform reading a captured source.
func (e *Engine) RequestBackfill(ctx context.Context, table string) error {
	return e.inTx(ctx, func(tx pgx.Tx) error {
		n := grammar.Name{Name: table}
		if s, t, ok := strings.Cut(table, "."); ok {
			n = grammar.Name{Schema: s, Name: t}
		}
		rel, err := e.resolve(ctx, tx, n, e.TargetSchema)
		if err != nil {
			return err
		}
		if rel == nil {
			return errs.New(trellistype.CodeNotFound, "table %s does not exist", table)
		}
		tag, err := tx.Exec(ctx, e.Cat.SQL(sqlRequestBackfill), rel.schema, rel.name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var captured bool
			if err := tx.QueryRow(ctx, e.Cat.SQL(sqlIsCaptured), rel.schema, rel.name).Scan(&captured); err != nil {
				return err
			}
			if !captured {
				return errs.New(trellistype.CodeValidation, "table %s.%s is not captured by Trellis: only a table a transform reads can be re-read", rel.schema, rel.name)
			}
		}
		if err := e.Cat.BumpGen(ctx, tx); err != nil {
			return err
		}
		return e.notifyStaging(ctx, tx)
	})
}

// Status reads one transform's state; nil when no transform writes target.
func (e *Engine) Status(ctx context.Context, target string) (*trellistype.Status, error) {
	// One snapshot for every part, so the parts agree with each other.
	tx, err := e.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t, err := e.Lookup(ctx, tx, target, false)
	if err != nil || t == nil {
		return nil, err
	}
	st := &trellistype.Status{
		Target:       t.Target.String(),
		State:        t.State,
		Since:        t.StateSince,
		Statement:    t.Statement,
		Sources:      t.Spec.Tables(),
		Views:        t.Spec.ViewNames(),
		PausedReason: t.PausedReason,
		BuildRows:    t.BuildRows,
	}
	if st.State == trellistype.StateWaitingToBackfill || st.State == trellistype.StateBackfilling {
		// What PostgreSQL's statistics estimate the FROM table holds
		// (with its partitions), for progress; 0 when it has no estimate.
		src := ident.Qualified(t.Spec.Source.Schema, t.Spec.Source.Table)
		if err := tx.QueryRow(ctx, sqlRowEstimate, src).Scan(&st.BuildTotal); err != nil {
			return nil, err
		}
	}
	if t.FailureKind != "" {
		cols := t.FailureColumns
		if cols == nil {
			cols = []string{}
		}
		st.CaptureFailure = &trellistype.CaptureFailure{Kind: t.FailureKind,
			SourceTable: t.FailureTable, Error: t.FailureError, Columns: cols, DetectedAt: t.FailureAt}
	}
	if t.BuildAttempts > 0 {
		st.BackfillFailure = &trellistype.BackfillFailure{Attempts: t.BuildAttempts, LastError: t.BuildError,
			NextAttemptAt: t.BuildNextAt}
	}
	rows, err := tx.Query(ctx, e.Cat.SQL(sqlColumnBuilds), t.ID)
	if err != nil {
		return nil, err
	}
	if st.BackfillingColumns, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, err
	}
	failing, err := e.Ledger.Failing(ctx, tx, []string{t.Spec.Source.Schema + "." + t.Spec.Source.Table}, 1)
	if err != nil {
		return nil, err
	}
	if len(failing) > 0 {
		st.DrainFailure = &failing[0]
	}
	var cw trellistype.CaptureWait
	err = tx.QueryRow(ctx, e.Cat.SQL(sqlCaptureWait), t.ID).Scan(&cw.Operation, &cw.Table, &cw.LockMode, &cw.Blockers, &cw.Since)
	switch {
	case err == nil:
		st.CaptureWait = &cw
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	if st.SourceIndexGaps, err = e.IndexGaps(ctx, tx, t.Spec); err != nil {
		return nil, err
	}
	if st.Correcting, err = e.Corrections(ctx, tx, t.ID); err != nil {
		return nil, err
	}
	if st.PausedUpstreamColumns, err = e.PausedUpstream(ctx, tx, t); err != nil {
		return nil, err
	}
	if st.HeldKeys, err = e.heldKeys(ctx, tx, t.ID); err != nil {
		return nil, err
	}
	pending, err := ledger.PendingWork(ctx, tx, e.Cat, t.ID)
	if err != nil {
		return nil, err
	}
	if len(pending) == 1 {
		st.PendingChanges, st.Lag = pending[0].Changes, pending[0].Lag
	}
	if st.State == trellistype.StateLive && len(st.PausedUpstreamColumns) > 0 {
		st.State = trellistype.StateCatchingUp
	}
	return st, nil
}

// Snapshot is the current snapshot of committed transactions, as text.
func (e *Engine) Snapshot(ctx context.Context) (string, error) {
	return ledger.Snapshot(ctx, e.Pool)
}

// chainDepth is the longest chain of transforms reading other transforms'
// targets (1 when none does).
func chainDepth(ts []*catalog.Transform) int {
	byTarget := map[string]*catalog.Transform{}
	for _, t := range ts {
		byTarget[t.Target.String()] = t
	}
	memo := map[int]int{}
	var depth func(t *catalog.Transform, seen int) int
	depth = func(t *catalog.Transform, seen int) int {
		if d, ok := memo[t.ID]; ok {
			return d
		}
		d := 1
		for _, s := range t.Spec.Sources() {
			if up, ok := byTarget[s.Schema+"."+s.Table]; ok && seen < len(ts) {
				d = max(d, 1+depth(up, seen+1))
			}
		}
		memo[t.ID] = d
		return d
	}
	best := 1
	for _, t := range ts {
		best = max(best, depth(t, 0))
	}
	return best
}

// AwaitConverged waits until every change committed in token has reached
// the targets, including targets further down chains of transforms.
func (e *Engine) AwaitConverged(ctx context.Context, token string, wake <-chan struct{}) error {
	ts, _, err := e.Cat.Transforms(ctx, e.Pool)
	if err != nil {
		return err
	}
	return e.Ledger.Converged(ctx, token, chainDepth(ts), nil, wake)
}
