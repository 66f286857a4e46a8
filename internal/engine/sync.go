package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

// SyncItem is one TRANSFORM statement of a file Sync makes the instance
// match.
type SyncItem struct {
	Stmt *grammar.Transform
	Text string
	// Line is the file line the statement starts on, for messages.
	Line int
}

// SyncPlan is what Sync does: the changes, in order, and the statements
// that carry them out.
type SyncPlan struct {
	Changes []trellistype.SyncChange
	steps   []syncStep
}

// syncStep is one statement a plan runs, for the change it belongs to.
type syncStep struct {
	change int // index into Changes
	st     grammar.Statement
	text   string
}

// want is a transform of the file, with what planning found.
type want struct {
	item   SyncItem
	target string   // qualified
	reads  []string // qualified tables its FROM and JOIN name
	action trellistype.SyncAction
	reason string
	adds   []string
	drops  []string
}

// have is a transform of the instance.
type have struct {
	t     *catalog.Transform
	reads []string // qualified tables it reads
}

// PlanSync compares items, a file's TRANSFORM statements, with the
// instance's definitions and returns what makes them match: a transform
// the instance lacks is created; one whose compiled definition is the same
// (whatever the formatting) is left alone; one that differs only by added
// or dropped output columns is altered; any other difference rebuilds it
// (drop and define again), and with it every transform reading its target.
// With prune, transforms the file does not define are dropped. It reads
// and changes nothing, and refuses a plan it could not carry out (a
// transform that would lose a table it reads) before anything is applied.
func (e *Engine) PlanSync(ctx context.Context, items []SyncItem, prune bool) (*SyncPlan, error) {
	// Not read-only: checking a chain may make its upstream key NOT NULL
	// (keyTarget); the transaction is rolled back whatever happens.
	tx, err := e.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return e.planSync(ctx, tx, items, prune)
}

func (e *Engine) planSync(ctx context.Context, tx pgx.Tx, items []SyncItem, prune bool) (*SyncPlan, error) {
	ts, _, err := e.Cat.Transforms(ctx, tx)
	if err != nil {
		return nil, err
	}
	quoted := map[string]string{} // qualified target -> quoted for a statement
	haves := map[string]*have{}
	var haveOrder []string
	for _, t := range ts {
		h := &have{t: t}
		for _, src := range t.Spec.Sources() {
			h.reads = append(h.reads, src.Schema+"."+src.Table)
		}
		haves[t.Target.String()] = h
		quoted[t.Target.String()] = t.Target.Quoted()
		haveOrder = append(haveOrder, t.Target.String())
	}

	wants := map[string]*want{}
	var order []string
	for _, it := range items {
		tgt := e.target(it.Stmt.Target).String()
		quoted[tgt] = e.target(it.Stmt.Target).Quoted()
		if prev, dup := wants[tgt]; dup {
			return nil, errs.New(trellistype.CodeValidation, "%s is defined twice (lines %d and %d)", tgt, prev.item.Line, it.Line)
		}
		w := &want{item: it, target: tgt}
		for _, ref := range append([]grammar.TableRef{it.Stmt.From}, joinTables(it.Stmt)...) {
			q, err := e.qualifySource(ctx, tx, ref.Table)
			if err != nil {
				return nil, err
			}
			w.reads = append(w.reads, q)
		}
		wants[tgt] = w
		order = append(order, tgt)
	}
	order, err = readsFirst(order, func(t string) []string { return wants[t].reads })
	if err != nil {
		return nil, err
	}

	// What each transform of the file needs.
	for _, tgt := range order {
		w := wants[tgt]
		h := haves[tgt]
		// A transform reading another one the file creates cannot be
		// checked before that one exists.
		created := slices.IndexFunc(w.reads, func(r string) bool { return wants[r] != nil && haves[r] == nil })
		switch {
		case h == nil && created >= 0:
			w.action = trellistype.SyncCreate
			continue
		case h == nil:
			w.action = trellistype.SyncCreate
			if err := e.checkSync(ctx, tx, w, func() error { return e.checkTargetFree(ctx, tx, e.target(w.item.Stmt.Target)) }); err != nil {
				return nil, err
			}
			continue
		case created >= 0:
			w.action, w.reason = trellistype.SyncRebuild, "it reads "+w.reads[created]+", which the file creates"
			continue
		}
		var spec plan.Spec
		if err := e.checkSync(ctx, tx, w, func() error { return nil }, &spec); err != nil {
			return nil, err
		}
		w.action, w.reason, w.adds, w.drops = compareSpecs(h.t.Spec, spec)
	}

	// Pruned transforms, and the checks that nothing kept loses a table.
	pruned := map[string]bool{}
	if prune {
		for _, tgt := range haveOrder {
			if wants[tgt] == nil {
				pruned[tgt] = true
			}
		}
	}
	for _, tgt := range order {
		for _, r := range wants[tgt].reads {
			if pruned[r] {
				return nil, errs.New(trellistype.CodeConflict, "%s reads %s, which the file does not define: pruning would drop it (define %s in the file, or remove %s too)", tgt, r, r, tgt)
			}
		}
	}

	// A rebuilt target is dropped, and with it every transform reading it:
	// those must be in the file, to be defined again, or be pruned.
	for changed := true; changed; {
		changed = false
		for _, tgt := range haveOrder {
			h := haves[tgt]
			if pruned[tgt] {
				continue
			}
			for _, r := range h.reads {
				up := wants[r]
				if up == nil || up.action != trellistype.SyncRebuild {
					continue
				}
				w := wants[tgt]
				if w == nil {
					return nil, errs.New(trellistype.CodeConflict, "rebuilding %s drops %s, which reads it and which the file does not define: add %s to the file (or prune it)", r, tgt, tgt)
				}
				if w.action != trellistype.SyncRebuild {
					w.action, w.reason, w.adds, w.drops = trellistype.SyncRebuild, "it reads "+r+", which is rebuilt", nil, nil
					changed = true
				}
			}
		}
	}

	// The plan: drops first (readers before what they read), then the
	// file's transforms in order (what they read first); an alter's added
	// columns come with it, its dropped columns at the end (readers first).
	p := &SyncPlan{}
	var dropOrder []string
	for _, tgt := range haveOrder {
		if pruned[tgt] || (wants[tgt] != nil && wants[tgt].action == trellistype.SyncRebuild) {
			dropOrder = append(dropOrder, tgt)
		}
	}
	dropOrder, err = readsFirst(dropOrder, func(t string) []string { return haves[t].reads })
	if err != nil {
		return nil, err
	}
	slices.Reverse(dropOrder)
	changeOf := map[string]int{}
	for _, tgt := range dropOrder {
		if !pruned[tgt] {
			continue
		}
		h := haves[tgt]
		changeOf[tgt] = len(p.Changes)
		p.Changes = append(p.Changes, trellistype.SyncChange{Action: trellistype.SyncDrop, Target: tgt, Statement: h.t.Statement})
	}
	for _, tgt := range order {
		w := wants[tgt]
		if w.action == "" {
			continue
		}
		changeOf[tgt] = len(p.Changes)
		p.Changes = append(p.Changes, trellistype.SyncChange{Action: w.action, Target: tgt, Statement: w.item.Text,
			AddColumns: w.adds, DropColumns: w.drops, Reason: w.reason})
	}
	add := func(tgt, text string) error {
		st, err := Parse(text)
		if err != nil {
			return fmt.Errorf("sync: the statement for %s: %w", tgt, err)
		}
		p.steps = append(p.steps, syncStep{change: changeOf[tgt], st: st, text: text})
		return nil
	}
	for _, tgt := range dropOrder {
		if err := add(tgt, "DROP TRANSFORM "+quoted[tgt]); err != nil {
			return nil, err
		}
	}
	for _, tgt := range order {
		w := wants[tgt]
		switch w.action {
		case trellistype.SyncCreate, trellistype.SyncRebuild:
			p.steps = append(p.steps, syncStep{change: changeOf[tgt], st: w.item.Stmt, text: w.item.Text})
		case trellistype.SyncAlter:
			for _, col := range w.adds {
				i := slices.IndexFunc(w.item.Stmt.Select, func(it grammar.SelectItem) bool { return it.Name == col })
				if err := add(tgt, fmt.Sprintf("ALTER TRANSFORM %s ADD COLUMN %s AS %s", quoted[tgt], w.item.Stmt.Select[i].Expr, ident.Quote(col))); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, tgt := range slices.Backward(order) {
		w := wants[tgt]
		if w.action != trellistype.SyncAlter {
			continue
		}
		for _, col := range w.drops {
			if err := add(tgt, fmt.Sprintf("ALTER TRANSFORM %s DROP COLUMN %s", quoted[tgt], ident.Quote(col))); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// checkSync compiles a file's transform against the tables it reads, so a
// statement the engine would refuse stops the sync before anything is
// applied; extra runs a further check. With spec, the compiled spec is
// stored there.
func (e *Engine) checkSync(ctx context.Context, tx pgx.Tx, w *want, extra func() error, spec ...*plan.Spec) error {
	_, sp, _, err := e.compile(ctx, tx, w.item.Stmt, w.item.Text)
	if err == nil {
		err = extra()
	}
	if err != nil {
		return errs.Wrap(cmp.Or(errs.CodeOf(err), trellistype.CodeInternal), err, "%s (line %d)", w.target, w.item.Line)
	}
	if len(spec) > 0 {
		// Qualified as a define would store it, so that it compares with
		// the stored spec (a table the file creates first is not there to
		// resolve against yet: then it is compared as written).
		schema, name, _ := strings.Cut(w.target, ".")
		q := sp
		if e.qualify(ctx, tx, plan.Target{Schema: schema, Name: name}, &q) == nil {
			sp = q
		}
		*spec[0] = sp
	}
	return nil
}

// ApplySync carries a plan out, one statement after another. It stops at
// the first that fails: the changes before it stay applied, and the error
// says which.
func (e *Engine) ApplySync(ctx context.Context, p *SyncPlan) error {
	for i, s := range p.steps {
		if _, err := e.ApplyParsed(ctx, s.st, s.text, false); err != nil {
			c := p.Changes[s.change]
			done := map[int]bool{}
			for _, prev := range p.steps[:i] {
				if prev.change != s.change {
					done[prev.change] = true
				}
			}
			applied := "nothing was changed"
			if len(done) > 0 || i > 0 {
				names := make([]string, 0, len(done))
				for _, ci := range slices.Sorted(maps.Keys(done)) {
					names = append(names, string(p.Changes[ci].Action)+" "+p.Changes[ci].Target)
				}
				applied = "applied before it: " + strings.Join(names, ", ")
				if len(names) == 0 {
					applied = "part of this change was applied"
				}
			}
			return errs.Wrap(cmp.Or(errs.CodeOf(err), trellistype.CodeInternal), err, "sync stopped at %s %s (%s)", c.Action, c.Target, applied)
		}
	}
	return nil
}

// compareSpecs says what turns have into want: "" when nothing does.
func compareSpecs(have, want plan.Spec) (action trellistype.SyncAction, reason string, adds, drops []string) {
	if why := frameDiff(have, want); why != "" {
		return trellistype.SyncRebuild, why, nil, nil
	}
	exprs := map[string]string{}
	for _, c := range have.Columns {
		exprs[c.Name] = c.Expr
	}
	for _, c := range want.Columns {
		old, ok := exprs[c.Name]
		switch {
		case !ok:
			adds = append(adds, c.Name)
		case old != c.Expr:
			return trellistype.SyncRebuild, "the expression of column " + c.Name + " differs", nil, nil
		}
		delete(exprs, c.Name)
	}
	for _, c := range have.Columns {
		if _, gone := exprs[c.Name]; gone {
			drops = append(drops, c.Name)
		}
	}
	if len(adds) == 0 && len(drops) == 0 {
		return "", "", nil, nil
	}
	return trellistype.SyncAlter, "", adds, drops
}

// frameDiff says how two specs differ in anything but their non-key
// output columns ("" when they do not).
func frameDiff(a, b plan.Spec) string {
	sameSource := func(x, y plan.Source) bool {
		// No alias is the table's name.
		return x.Schema == y.Schema && x.Table == y.Table && cmp.Or(x.Alias, x.Table) == cmp.Or(y.Alias, y.Table) &&
			slices.Equal(x.KeyCols, y.KeyCols)
	}
	sameKey := func(x, y []plan.Column) bool {
		return slices.EqualFunc(x, y, func(p, q plan.Column) bool { return p.Name == q.Name && p.Expr == q.Expr })
	}
	switch {
	case !sameSource(a.Source, b.Source):
		return "it reads another FROM table"
	case (a.Join == nil) != (b.Join == nil),
		a.Join != nil && (a.Join.Left != b.Join.Left || a.Join.Full != b.Join.Full || !sameSource(a.Join.Source, b.Join.Source) || !slices.Equal(a.Join.On, b.Join.On)),
		!slices.EqualFunc(a.Joins, b.Joins, func(x, y plan.Join) bool {
			return x.Left == y.Left && x.Full == y.Full && x.Right == y.Right && x.To == y.To && sameSource(x.Source, y.Source) && slices.Equal(x.On, y.On)
		}):
		return "its JOIN differs"
	case !slices.EqualFunc(a.Semis, b.Semis, func(x, y plan.Semi) bool {
		return x.Anti == y.Anti && x.In == y.In && x.To == y.To && x.Where == y.Where && sameSource(x.Source, y.Source) && slices.Equal(x.On, y.On)
	}):
		return "its EXISTS or IN subqueries differ"
	case a.Where != b.Where:
		return "its WHERE differs"
	case !slices.Equal(a.GroupBy, b.GroupBy) || a.GroupPos() != b.GroupPos():
		return "its GROUP BY differs"
	case !sameKey(a.Key, b.Key):
		return "its key columns differ"
	case (a.Window == nil) != (b.Window == nil),
		a.Window != nil && (!slices.Equal(a.Window.Partition, b.Window.Partition) || a.Window.Rank != b.Window.Rank || a.Window.Limit != b.Window.Limit):
		return "its window (PARTITION BY, top-k, DISTINCT ON) differs"
	case a.WithoutSourceIndex != b.WithoutSourceIndex:
		return "WITHOUT SOURCE INDEX differs"
	}
	return ""
}

// qualifySource names the table a FROM or JOIN reads as "schema.table":
// the table it resolves to now, else (a target the file may create) the
// name in the target schema.
func (e *Engine) qualifySource(ctx context.Context, tx pgx.Tx, n grammar.Name) (string, error) {
	rel, err := e.resolve(ctx, tx, n, e.TargetSchema)
	if err != nil {
		return "", err
	}
	if rel != nil {
		return rel.schema + "." + rel.name, nil
	}
	return e.target(n).String(), nil
}

// readsFirst orders targets so that each comes after the ones among them
// it reads, keeping the given order otherwise; a cycle is an error.
func readsFirst(targets []string, reads func(string) []string) ([]string, error) {
	in := map[string]bool{}
	for _, t := range targets {
		in[t] = true
	}
	done := map[string]bool{}
	var out []string
	for len(out) < len(targets) {
		progressed := false
		for _, t := range targets {
			if done[t] {
				continue
			}
			ready := true
			for _, r := range reads(t) {
				if r != t && in[r] && !done[r] {
					ready = false
					break
				}
			}
			if ready {
				done[t] = true
				out = append(out, t)
				progressed = true
			}
		}
		if !progressed {
			var stuck []string
			for _, t := range targets {
				if !done[t] {
					stuck = append(stuck, t)
				}
			}
			return nil, errs.New(trellistype.CodeValidation, "transforms %s read each other in a cycle", strings.Join(stuck, ", "))
		}
	}
	return out, nil
}

func joinTables(s *grammar.Transform) []grammar.TableRef {
	out := make([]grammar.TableRef, 0, len(s.Joins))
	for _, j := range s.Joins {
		out = append(out, j.Table)
	}
	return out
}

// ParseSyncFile splits and parses a statements file (the format of trellis
// apply -f) for Sync. Every statement must be a TRANSFORM; a statement that
// does not parse is an error whose position is the file's line and column.
// It needs no database.
func ParseSyncFile(src string) ([]SyncItem, error) {
	stmts := grammar.Split(src)
	if len(stmts) == 0 {
		return nil, errs.New(trellistype.CodeValidation, "the statements hold no TRANSFORM statement (to drop every transform, use DROP TRANSFORM)")
	}
	items := make([]SyncItem, 0, len(stmts))
	for i, fs := range stmts {
		where := fmt.Sprintf("statement %d of %d (line %d)", i+1, len(stmts), fs.Line)
		st, err := Parse(fs.Text)
		if err != nil {
			var ge *grammar.Error
			var ee *errs.Error
			if errors.As(err, &ge) && errors.As(err, &ee) {
				shifted := *ge
				if shifted.Line > 0 {
					shifted.Line += fs.Line - 1
				}
				return nil, &errs.Error{Code: ee.Code, Msg: where + ": " + shifted.Error() + "; nothing was changed", Err: &shifted}
			}
			return nil, errs.Wrap(cmp.Or(errs.CodeOf(err), trellistype.CodeParse), err, "%s", where)
		}
		t, ok := st.(*grammar.Transform)
		if !ok {
			return nil, errs.New(trellistype.CodeValidation, "%s: %q is not a TRANSFORM statement: a sync file defines transforms only; nothing was changed", where, fs.FirstLine())
		}
		items = append(items, SyncItem{Stmt: t, Text: fs.Text, Line: fs.Line})
	}
	return items, nil
}

// WithSyncLock runs fn holding the instance's sync lock, so that two syncs
// never plan and apply at once.
func (e *Engine) WithSyncLock(ctx context.Context, fn func() error) error {
	conn, err := e.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	unlock, err := locks.Sync(ctx, conn, e.Cat.Schema)
	if err != nil {
		conn.Release()
		return err
	}
	defer func() {
		if err := unlock(); err != nil {
			// The session may still hold the lock: close it rather than pool it.
			_ = conn.Hijack().Close(context.WithoutCancel(ctx))
			return
		}
		conn.Release()
	}()
	return fn()
}
