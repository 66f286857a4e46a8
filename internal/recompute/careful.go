package recompute

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/plan"
)

// Bad data never stops a page. When a transform's part of a page fails
// with an error a row can explain, the page is applied again "carefully":
// each transform under a savepoint, and a transform that fails is
// diagnosed key by key (catalog function probe, one subtransaction per
// key):
//
//   - a key whose write violates a constraint of the target, or that fails
//     with no column evaluated (its WHERE raised), is poisoned: held for that
//     transform only, its changes skipped until it is released;
//   - a key that fails only when one column is evaluated quarantines that
//     column (paused for the transform, the row kept as a sample), and the
//     key is applied with the column paused;
//   - every other key is applied as usual.

// Failure is one key that failed: its values, SQLSTATE and message.
type Failure struct {
	Key   []*string
	State string
	Msg   string
}

// WithPaused is pl with the columns paused that paused says (a paused
// column is not evaluated).
func WithPaused(pl *plan.Plan, paused func(c plan.Column) bool) *plan.Plan {
	out := *pl
	out.Spec.Columns = slices.Clone(pl.Spec.Columns)
	for i, c := range out.Spec.Columns {
		out.Spec.Columns[i].Paused = paused(c)
	}
	return &out
}

// probeMode says what a probe does for each key.
type probeMode int

const (
	// probeEval only evaluates the plan's columns; nothing is written.
	probeEval probeMode = iota
	// probeTry writes each key and undoes it: a write's own failures (a
	// constraint) show, and no subtransaction outlives its key.
	probeTry
	// probeApply writes each key and keeps the keys that succeed.
	probeApply
)

// probe runs the keyed statements of pl once per key, each key in a
// subtransaction, and returns the keys that failed with a row error; mode
// says whether the statements only evaluate, write and undo, or write.
func (ap *applier) probe(ctx context.Context, tx pgx.Tx, wk *Set, pl *plan.Plan, keys [][]*string, mode probeMode) ([]Failure, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	n := wk.nKeyParams()
	stmts := wk.keyedStatements(pl, keys)
	if mode == probeEval {
		stmts = []string{pl.EvalKeys(wk.upTo != nil, hasNull(keys))}
	}
	dry := mode != probeApply
	if pl.KeyParamsTyped() {
		return ap.probeEach(ctx, tx, wk, stmts, keys, n, dry)
	}
	var qs []string
	for _, s := range stmts {
		q, err := grammar.Rebind(s, func(i int) string {
			if i <= n {
				return fmt.Sprintf("(ARRAY[$1[%d]])", i)
			}
			if i-n-1 < len(wk.upTo) {
				// The bound is a parameter of the probe too, never a literal.
				return fmt.Sprintf("($2[%d])", i-n)
			}
			return "NULL"
		})
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	// The keys as one two-dimensional text[], its shape given: encoding a
	// [][]*string by reflection failed on drain connections (seen with
	// enum keys, "unable to encode ... into binary format for _text").
	arg := pgtype.Array[*string]{Valid: true,
		Dims: []pgtype.ArrayDimension{{Length: int32(len(keys)), LowerBound: 1}, {Length: int32(n), LowerBound: 1}}}
	for _, k := range keys {
		arg.Elements = append(arg.Elements, k[:n]...)
	}
	bound := wk.upTo
	if bound == nil {
		bound = []string{}
	}
	rows, err := tx.Query(ctx, ap.r.Cat.SQL(sqlProbe), qs, arg, dry, bound)
	if err != nil {
		return nil, fmt.Errorf("probing %d keys of %s: %w", len(keys), wk.T.Target, err)
	}
	defer rows.Close()
	var out []Failure
	for rows.Next() {
		var f Failure
		if err := rows.Scan(&f.Key, &f.State, &f.Msg); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("probing %d keys of %s: %w", len(keys), wk.T.Target, err)
	}
	return out, nil
}

// probeEach is probe for a plan whose key parameters have their key
// columns' own types: each key's statements run from here, in a
// subtransaction of their own, the key passed as parameters of its type
// (the catalog's probe passes text, which would be cast to it, running a
// cast the type's owner may have created: decision 0037). It costs a
// round trip per statement and key, on a page being diagnosed only.
func (ap *applier) probeEach(ctx context.Context, tx pgx.Tx, wk *Set, stmts []string, keys [][]*string, n int, dry bool) ([]Failure, error) {
	var out []Failure
	for _, k := range keys {
		args := wk.keyedArgs([][]*string{k})
		run := func() error {
			for _, q := range stmts {
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return err
				}
			}
			return nil
		}
		var err error
		if dry {
			err = Undone(ctx, tx, run)
		} else {
			err = Savepoint(ctx, tx, run)
		}
		if err == nil {
			continue
		}
		if !RowError(err) {
			return nil, fmt.Errorf("probing a key of %s: %w", wk.T.Target, err)
		}
		f := Failure{Key: k[:n], State: pgerr.Code(err), Msg: err.Error()}
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			f.Msg = pe.Message
		}
		out = append(out, f)
	}
	return out, nil
}

// applyCareful applies a work under a savepoint; a row error is diagnosed
// key by key instead of failing the page.
func (ap *applier) applyCareful(ctx context.Context, tx pgx.Tx, wk *Set) error {
	err := Savepoint(ctx, tx, func() error { return wk.apply(ctx, tx) })
	if err == nil || !RowError(err) || wk.Resync || wk.skip {
		return err
	}
	// A work of one key that stays the one key (a released key, a held
	// `all` of a global aggregate, whose recompute fills the partials from
	// the whole source) failed as that key: the diagnosis starts from the
	// failure instead of running the key again.
	var known *Failure
	if keys := wk.keyList(); len(keys) == 1 {
		known = failureOf(keys[0][:wk.nKeyParams()], err)
	}
	before := wk.keyList()
	wk.whole()
	if after := wk.keyList(); len(before) != 1 || len(after) != 1 || RenderKey(after[0]) != RenderKey(before[0]) {
		known = nil
	}
	return ap.diagnose(ctx, tx, wk, known)
}

// failureOf is the failure of key that err, a row error, is.
func failureOf(key []*string, err error) *Failure {
	f := &Failure{Key: key, State: pgerr.Code(err), Msg: err.Error()}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		f.Msg = pe.Message
	}
	return f
}

// diagnoseRounds bounds how often diagnose re-tries keys that a concurrent
// change made fail, then succeed: after that many, such a key is poisoned.
const diagnoseRounds = 3

// diagnose applies a work's keys one by one, poisoning the keys that fail as
// a whole and quarantining the columns that fail on a row. known, when not
// nil, is how the work's one key failed as it was applied: the first round
// takes it instead of trying the key again.
func (ap *applier) diagnose(ctx context.Context, tx pgx.Tx, wk *Set, known *Failure) error {
	// What fails with no key at all (a trigger on the target that refuses
	// every statement, say) is no row's doing: the page fails as a whole.
	if err := ap.emptyRun(ctx, tx, wk); err != nil {
		if RowError(err) && ap.evalFailsWithNoKey(ctx, tx, wk) {
			// Reading the source fails whatever the keys: a row the
			// definition scans (not one of the page's) makes every recompute
			// fail. Applying stops on this transform alone.
			return &StopError{err: err}
		}
		return err
	}
	poison := map[string]Failure{}
	keys := wk.keyList()
	for round := 0; len(keys) > 0; round++ {
		var fails []Failure
		var err error
		if round == 0 && known != nil {
			fails = []Failure{*known}
		} else if fails, err = ap.applyGood(ctx, tx, wk, keys); err != nil {
			return err
		}
		if round == diagnoseRounds {
			for _, f := range fails {
				poison[RenderKey(f.Key)] = f
			}
			break
		}
		keys, err = ap.classify(ctx, tx, wk, fails, poison)
		if err != nil {
			return err
		}
	}
	if len(poison) == 0 {
		return nil
	}
	var held []Failure
	for _, f := range poison {
		held = append(held, f)
	}
	return ap.recordRows(ctx, tx, wk, "", held, true)
}

// applyGood applies the keys that succeed under the work's plan and
// returns those that fail. The keys are first tried one by one with the
// work undone, then the ones that passed are applied in one statement: a
// subtransaction per key that wrote and committed would overflow
// PostgreSQL's subtransaction cache, slowing every session's snapshots.
// If the bulk write fails all the same (a concurrent change), the keys are
// applied one by one instead.
func (ap *applier) applyGood(ctx context.Context, tx pgx.Tx, wk *Set, keys [][]*string) ([]Failure, error) {
	fails, err := ap.probe(ctx, tx, wk, wk.Plan, keys, probeTry)
	if err != nil {
		return nil, err
	}
	bad := make(map[string]bool, len(fails))
	for _, f := range fails {
		bad[RenderKey(f.Key)] = true
	}
	good := slices.DeleteFunc(slices.Clone(keys), func(k []*string) bool { return bad[RenderKey(k[:wk.nKeyParams()])] })
	if len(good) == 0 {
		return fails, nil
	}
	bulkErr := Savepoint(ctx, tx, func() error { return wk.execKeyed(ctx, tx, wk.Plan, good) })
	if bulkErr == nil {
		// A key that failed only against the page's starting state (a
		// unique index of the target another key of the page moved away
		// from, say) is tried again now, and kept if it passes.
		var failed [][]*string
		for _, f := range fails {
			failed = append(failed, f.Key)
		}
		return ap.probe(ctx, tx, wk, wk.Plan, failed, probeApply)
	}
	if !RowError(bulkErr) {
		return nil, bulkErr
	}
	more, err := ap.probe(ctx, tx, wk, wk.Plan, good, probeApply)
	if err != nil {
		return nil, err
	}
	return append(fails, more...), nil
}

// classify sorts the keys that failed under the work's plan: a constraint
// violation, or a failure with no column evaluated (the WHERE raised),
// poisons the key; a failure with only one column evaluated quarantines
// that column (the work's plan then has it paused). It returns the keys to
// apply again: those whose failure a quarantined column explains, and those
// that no longer fail (a concurrent change fixed the row).
func (ap *applier) classify(ctx context.Context, tx pgx.Tx, wk *Set, fails []Failure, poison map[string]Failure) ([][]*string, error) {
	pl := wk.Plan
	var open [][]*string
	first := map[string]Failure{}
	for _, f := range fails {
		k := RenderKey(f.Key)
		first[k] = f
		if constraintState(f.State) {
			poison[k] = f
		} else {
			open = append(open, f.Key)
		}
	}
	none := WithPaused(pl, func(plan.Column) bool { return true })
	whole, err := ap.probe(ctx, tx, wk, none, open, probeEval)
	if err != nil {
		return nil, err
	}
	for _, f := range whole {
		poison[RenderKey(f.Key)] = first[RenderKey(f.Key)]
	}
	open = slices.DeleteFunc(open, func(k []*string) bool { _, ok := poison[RenderKey(k)]; return ok })
	quarantined := map[string][]Failure{}
	for _, c := range pl.Spec.Columns {
		if c.Paused || len(open) == 0 {
			continue
		}
		only := WithPaused(pl, func(x plan.Column) bool { return x.Name != c.Name })
		fs, err := ap.probe(ctx, tx, wk, only, open, probeEval)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			if !constraintState(f.State) {
				quarantined[c.Name] = append(quarantined[c.Name], f)
			}
		}
	}
	if len(quarantined) > 0 {
		if err := ap.quarantineColumns(ctx, tx, wk, quarantined); err != nil {
			return nil, err
		}
		wk.Plan = WithPaused(pl, func(c plan.Column) bool { return c.Paused || quarantined[c.Name] != nil })
	}
	return open, nil
}

// StopError is a failure that stops applying to one transform (it is
// paused, with a capture failure of kind halt) while its page goes on.
type StopError struct{ err error }

func (e *StopError) Error() string { return e.err.Error() }
func (e *StopError) Unwrap() error { return e.err }

// evalFailsWithNoKey reports whether only evaluating the work's definition
// for no key fails with a row error: the failure is in reading the source,
// not in writing the target.
func (ap *applier) evalFailsWithNoKey(ctx context.Context, tx pgx.Tx, wk *Set) bool {
	return RowError(Undone(ctx, tx, func() error { return wk.evalKeys(ctx, tx, wk.Plan, nil) }))
}

// emptyRun runs the work's statements for no key, and undoes them.
func (ap *applier) emptyRun(ctx context.Context, tx pgx.Tx, wk *Set) error {
	if err := Undone(ctx, tx, func() error { return wk.execKeyed(ctx, tx, wk.Plan, nil) }); err != nil {
		return fmt.Errorf("applying changes to %s: %w", wk.T.Target, err)
	}
	return nil
}

// execKeyed runs the keyed statements of pl for keys.
func (wk *Set) execKeyed(ctx context.Context, tx pgx.Tx, pl *plan.Plan, keys [][]*string) error {
	for _, q := range wk.keyedStatements(pl, keys) {
		if _, err := tx.Exec(ctx, q, wk.keyedArgs(keys)...); err != nil {
			return err
		}
	}
	return nil
}

// evalKeys evaluates pl's columns for keys, writing nothing.
func (wk *Set) evalKeys(ctx context.Context, tx pgx.Tx, pl *plan.Plan, keys [][]*string) error {
	_, err := tx.Exec(ctx, pl.EvalKeys(wk.upTo != nil, hasNull(keys)), wk.keyedArgs(keys)...)
	return err
}

// quarantineColumns pauses columns of a transform that failed on rows and
// keeps the rows as samples.
func (ap *applier) quarantineColumns(ctx context.Context, tx pgx.Tx, wk *Set, cols map[string][]Failure) error {
	for name, fs := range cols {
		i := slices.IndexFunc(wk.T.Spec.Columns, func(c plan.Column) bool { return c.Name == name })
		if i < 0 {
			continue
		}
		tag, err := tx.Exec(ctx, ap.r.Cat.SQL(sqlQuarantineColumn), wk.T.ID, fmt.Sprint(i), name, fs[0].Msg, fs[0].State)
		if err != nil {
			return fmt.Errorf("quarantining %s.%s: %w", wk.T.Target.Name, name, err)
		}
		ap.tally.Columns += int(tag.RowsAffected())
		if err := ap.recordRows(ctx, tx, wk, name, fs, false); err != nil {
			return err
		}
		ap.r.Logger.Warn("a column failed on some rows and is quarantined; the other columns keep applying",
			"target", wk.T.Target.String(), "column", name, "rows", len(fs), "error", fs[0].Msg)
	}
	return ap.r.Cat.BumpGen(ctx, tx)
}

// recordRows keeps quarantined rows: samples of a column, or (column "")
// poisoned keys, which the transform holds from now on.
func (ap *applier) recordRows(ctx context.Context, tx pgx.Tx, wk *Set, column string, fs []Failure, held bool) error {
	return ap.recordRowsOf(ctx, tx, wk, column, wk.T.Spec.Source.Schema+"."+wk.T.Spec.Source.Table, false, fs, held)
}

// recordRowsOf is recordRows for rows of src; sourceRow says the keys are
// src's own (changed rows an aggregate could not place), not target keys.
func (ap *applier) recordRowsOf(ctx context.Context, tx pgx.Tx, wk *Set, column, src string, sourceRow bool, fs []Failure, held bool) error {
	b := &pgx.Batch{}
	for _, f := range fs {
		b.Queue(ap.r.Cat.SQL(sqlQuarantineRow), wk.T.ID, column, src, RenderKey(f.Key), f.Key, f.Msg, f.State, sourceRow)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("recording quarantined rows of %s: %w", wk.T.Target, err)
	}
	if !held {
		return nil
	}
	ap.tally.Keys += len(fs)
	ap.r.Logger.Warn("keys poisoned: their changes are held for this transform until released",
		"target", wk.T.Target.String(), "keys", len(fs), "error", fs[0].Msg)
	// No generation bump: pages read which keys are held under their key
	// locks, and bumping here (before a page's key locks, for a source row)
	// would take the instance row out of the lock order.
	return nil
}

// dropAllHeld removes from each work the keys its transform holds. The
// caller holds the works' key locks.
func (ap *applier) dropAllHeld(ctx context.Context, tx pgx.Tx, order []int, works map[int]*Set) error {
	rows, err := tx.Query(ctx, ap.r.Cat.SQL(sqlHolding), order)
	if err != nil {
		return fmt.Errorf("reading which transforms hold keys: %w", err)
	}
	holding, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("reading which transforms hold keys: %w", err)
	}
	for _, id := range holding {
		if err := ap.dropHeld(ctx, tx, works[int(id)]); err != nil {
			return err
		}
	}
	return nil
}

// dropHeld removes from the work the keys its transform holds.
func (ap *applier) dropHeld(ctx context.Context, tx pgx.Tx, wk *Set) error {
	if len(wk.keys) == 0 {
		return nil
	}
	byText := make(map[string]string, len(wk.keys))
	texts := make([]string, 0, len(wk.keys))
	for id, k := range wk.keys {
		t := RenderKey(k)
		byText[t] = id
		texts = append(texts, t)
	}
	whole := wk.Plan.Partial()
	if whole {
		// The ranges of a global aggregate's partials are held as one.
		texts = append(texts, RenderKey(wholeKey()))
	}
	rows, err := tx.Query(ctx, ap.r.Cat.SQL(sqlHeldAmong), wk.T.ID, texts)
	if err != nil {
		return fmt.Errorf("reading the keys %s holds: %w", wk.T.Target, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return err
		}
		wk.own()
		if whole && t == RenderKey(wholeKey()) {
			clear(wk.keys)
		}
		delete(wk.keys, byText[t])
	}
	return rows.Err()
}

// refreshSamples re-evaluates a transform's quarantined columns on the
// page's keys: a fixed row leaves the samples, a row that now fails joins
// them. The work is done and undone under a savepoint.
func (ap *applier) refreshSamples(ctx context.Context, tx pgx.Tx, wk *Set, quarantined []string) error {
	if wk.skip || wk.Resync || len(wk.keys) == 0 {
		return nil
	}
	var cols []string
	for _, c := range wk.Plan.Spec.Columns {
		if c.Paused && slices.Contains(quarantined, c.Name) {
			cols = append(cols, c.Name)
		}
	}
	if len(cols) == 0 {
		return nil
	}
	keys := wk.keyList()
	if wk.Plan.Partial() {
		keys = [][]*string{wholeKey()} // samples are the one group's
	}
	texts := make([]string, len(keys))
	for i, k := range keys {
		texts[i] = RenderKey(k)
	}
	// Fast path: every row evaluates every quarantined column.
	only := WithPaused(wk.Plan, func(c plan.Column) bool { return !slices.Contains(cols, c.Name) })
	err := Undone(ctx, tx, func() error { return wk.evalKeys(ctx, tx, only, keys) })
	if err != nil && !RowError(err) {
		return err
	}
	failed := err != nil
	if _, err := tx.Exec(ctx, ap.r.Cat.SQL(sqlClearSamples), wk.T.ID, cols, texts); err != nil {
		return err
	}
	if !failed {
		return nil
	}
	for _, name := range cols {
		one := WithPaused(wk.Plan, func(c plan.Column) bool { return c.Name != name })
		fs, err := ap.evalBisect(ctx, tx, wk, one, keys)
		if err != nil {
			return err
		}
		fs = slices.DeleteFunc(fs, func(f Failure) bool { return constraintState(f.State) })
		if err := ap.recordRows(ctx, tx, wk, name, fs, false); err != nil {
			return err
		}
	}
	return nil
}

// bisectProbe is the size under which evalBisect probes key by key (one
// statement) instead of splitting further.
const bisectProbe = 64

// evalBisect finds the keys on which evaluating pl fails: halves that
// evaluate cleanly are done in one statement, so a page with a few bad
// rows costs a few dozen statements rather than a subtransaction per key.
func (ap *applier) evalBisect(ctx context.Context, tx pgx.Tx, wk *Set, pl *plan.Plan, keys [][]*string) ([]Failure, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if len(keys) <= bisectProbe {
		return ap.probe(ctx, tx, wk, pl, keys, probeEval)
	}
	err := Undone(ctx, tx, func() error { return wk.evalKeys(ctx, tx, pl, keys) })
	if err == nil {
		return nil, nil
	}
	if !RowError(err) {
		return nil, err
	}
	mid := len(keys) / 2
	a, err := ap.evalBisect(ctx, tx, wk, pl, keys[:mid])
	if err != nil {
		return nil, err
	}
	b, err := ap.evalBisect(ctx, tx, wk, pl, keys[mid:])
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}
