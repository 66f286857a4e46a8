package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/ledger"
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

// RowError reports whether err is one a row can explain: bad data, a
// constraint, a function that raised. Anything else (a lock timeout, a
// missing object, a lost connection) is the page's, not a row's.
func RowError(err error) bool {
	// The same classes as the catalog's apply function (migration 0001).
	return pgerr.InClass(pgerr.Code(err), pgerrcode.CardinalityViolation, pgerrcode.DataException,
		pgerrcode.IntegrityConstraintViolation, pgerrcode.SQLRoutineException, pgerrcode.ExternalRoutineException,
		pgerrcode.ExternalRoutineInvocationException, pgerrcode.WithCheckOptionViolation, pgerrcode.PLpgSQLError) ||
		pgerr.Is(err, pgerrcode.ProgramLimitExceeded)
}

// constraintState reports whether a SQLSTATE is an integrity constraint
// violation: the write's fault, never a column expression's.
func constraintState(state string) bool {
	return pgerr.InClass(state, pgerrcode.IntegrityConstraintViolation)
}

// RenderKey renders a key's values the way the quarantine reports them,
// one rendering per key: one value as itself, several as a row ("(a,b)");
// a NULL is NULL alone and nothing inside a row. A value that could be
// read as something else (empty, "NULL", or with quotes, commas,
// parentheses, backslashes or spaces in a row) is double-quoted.
func RenderKey(key []*string) string {
	if len(key) == 1 {
		switch v := key[0]; {
		case v == nil:
			return "NULL"
		case *v == "" || *v == "NULL" || strings.HasPrefix(*v, `"`):
			return quoteKeyValue(*v)
		default:
			return *v
		}
	}
	var b strings.Builder
	b.WriteByte('(')
	for i, v := range key {
		if i > 0 {
			b.WriteByte(',')
		}
		if v == nil {
			continue
		}
		if *v == "" || strings.ContainsAny(*v, `,()"\ `) {
			b.WriteString(quoteKeyValue(*v))
		} else {
			b.WriteString(*v)
		}
	}
	b.WriteByte(')')
	return b.String()
}

func quoteKeyValue(v string) string {
	return `"` + strings.NewReplacer(`"`, `""`, `\`, `\\`).Replace(v) + `"`
}

// failure is one key a probe found failing.
type failure struct {
	key   []*string
	state string
	msg   string
}

// withPaused is pl with the columns paused that paused says (a paused
// column is not evaluated).
func withPaused(pl *plan.Plan, paused func(c plan.Column) bool) *plan.Plan {
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
func (w *Worker) probe(ctx context.Context, tx pgx.Tx, wk *work, pl *plan.Plan, keys [][]*string, mode probeMode) ([]failure, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	n := wk.nKeyParams()
	stmts := wk.keyedStatements(pl, keys)
	if mode == probeEval {
		stmts = []string{pl.EvalKeys(wk.upTo != nil, hasNull(keys))}
	}
	dry := mode != probeApply
	var qs []string
	for _, s := range stmts {
		q, err := grammar.Rebind(s, func(i int) string {
			if i <= n {
				return fmt.Sprintf("(ARRAY[$1[%d]])", i)
			}
			if i-n-1 < len(wk.upTo) {
				return ident.Literal(wk.upTo[i-n-1])
			}
			return "NULL"
		})
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	arg := make([][]*string, len(keys))
	for i, k := range keys {
		arg[i] = k[:n]
	}
	rows, err := tx.Query(ctx, w.e.Cat.SQL(sqlProbe), qs, arg, dry)
	if err != nil {
		return nil, fmt.Errorf("probing %d keys of %s: %w", len(keys), wk.t.Target, err)
	}
	defer rows.Close()
	var out []failure
	for rows.Next() {
		var f failure
		if err := rows.Scan(&f.key, &f.state, &f.msg); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("probing %d keys of %s: %w", len(keys), wk.t.Target, err)
	}
	return out, nil
}

// Savepoint runs fn in a savepoint of tx (a pgx nested transaction): what
// it did stays when it succeeds and is rolled back when it fails. fn's
// error is returned.
func Savepoint(ctx context.Context, tx pgx.Tx, fn func() error) error {
	return pgx.BeginFunc(ctx, tx, func(pgx.Tx) error { return fn() })
}

// Undone runs fn in a savepoint that is always rolled back: only whether
// its statements succeed remains. fn's error is returned.
func Undone(ctx context.Context, tx pgx.Tx, fn func() error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	ferr := fn()
	if err := sp.Rollback(ctx); err != nil {
		return err
	}
	return ferr
}

// applyCareful applies a work under a savepoint; a row error is diagnosed
// key by key instead of failing the page.
func (w *Worker) applyCareful(ctx context.Context, tx pgx.Tx, wk *work) error {
	err := Savepoint(ctx, tx, func() error { return wk.apply(ctx, tx) })
	if err == nil || !RowError(err) || wk.resync || wk.skip {
		return err
	}
	return w.diagnose(ctx, tx, wk)
}

// diagnoseRounds bounds how often diagnose re-tries keys that a concurrent
// change made fail, then succeed: after that many, such a key is poisoned.
const diagnoseRounds = 3

// diagnose applies a work's keys one by one, poisoning the keys that fail as
// a whole and quarantining the columns that fail on a row.
func (w *Worker) diagnose(ctx context.Context, tx pgx.Tx, wk *work) error {
	// What fails with no key at all (a trigger on the target that refuses
	// every statement, say) is no row's doing: the page fails as a whole.
	if err := w.emptyRun(ctx, tx, wk); err != nil {
		if RowError(err) && w.evalFailsWithNoKey(ctx, tx, wk) {
			// Reading the source fails whatever the keys: a row the
			// definition scans (not one of the page's) makes every recompute
			// fail. Applying stops on this transform alone.
			return &stopError{err: err}
		}
		return err
	}
	poison := map[string]failure{}
	keys := wk.keyList()
	for round := 0; len(keys) > 0; round++ {
		fails, err := w.applyGood(ctx, tx, wk, keys)
		if err != nil {
			return err
		}
		if round == diagnoseRounds {
			for _, f := range fails {
				poison[RenderKey(f.key)] = f
			}
			break
		}
		keys, err = w.classify(ctx, tx, wk, fails, poison)
		if err != nil {
			return err
		}
	}
	if len(poison) == 0 {
		return nil
	}
	var held []failure
	for _, f := range poison {
		held = append(held, f)
	}
	return w.recordRows(ctx, tx, wk, "", held, true)
}

// applyGood applies the keys that succeed under the work's plan and
// returns those that fail. The keys are first tried one by one with the
// work undone, then the ones that passed are applied in one statement: a
// subtransaction per key that wrote and committed would overflow
// PostgreSQL's subtransaction cache, slowing every session's snapshots.
// If the bulk write fails all the same (a concurrent change), the keys are
// applied one by one instead.
func (w *Worker) applyGood(ctx context.Context, tx pgx.Tx, wk *work, keys [][]*string) ([]failure, error) {
	fails, err := w.probe(ctx, tx, wk, wk.plan, keys, probeTry)
	if err != nil {
		return nil, err
	}
	bad := make(map[string]bool, len(fails))
	for _, f := range fails {
		bad[RenderKey(f.key)] = true
	}
	good := slices.DeleteFunc(slices.Clone(keys), func(k []*string) bool { return bad[RenderKey(k[:wk.nKeyParams()])] })
	if len(good) == 0 {
		return fails, nil
	}
	bulkErr := Savepoint(ctx, tx, func() error { return wk.execKeyed(ctx, tx, wk.plan, good) })
	if bulkErr == nil {
		// A key that failed only against the page's starting state (a
		// unique index of the target another key of the page moved away
		// from, say) is tried again now, and kept if it passes.
		var failed [][]*string
		for _, f := range fails {
			failed = append(failed, f.key)
		}
		return w.probe(ctx, tx, wk, wk.plan, failed, probeApply)
	}
	if !RowError(bulkErr) {
		return nil, bulkErr
	}
	more, err := w.probe(ctx, tx, wk, wk.plan, good, probeApply)
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
func (w *Worker) classify(ctx context.Context, tx pgx.Tx, wk *work, fails []failure, poison map[string]failure) ([][]*string, error) {
	pl := wk.plan
	var open [][]*string
	first := map[string]failure{}
	for _, f := range fails {
		k := RenderKey(f.key)
		first[k] = f
		if constraintState(f.state) {
			poison[k] = f
		} else {
			open = append(open, f.key)
		}
	}
	none := withPaused(pl, func(plan.Column) bool { return true })
	whole, err := w.probe(ctx, tx, wk, none, open, probeEval)
	if err != nil {
		return nil, err
	}
	for _, f := range whole {
		poison[RenderKey(f.key)] = first[RenderKey(f.key)]
	}
	open = slices.DeleteFunc(open, func(k []*string) bool { _, ok := poison[RenderKey(k)]; return ok })
	quarantined := map[string][]failure{}
	for _, c := range pl.Spec.Columns {
		if c.Paused || len(open) == 0 {
			continue
		}
		only := withPaused(pl, func(x plan.Column) bool { return x.Name != c.Name })
		fs, err := w.probe(ctx, tx, wk, only, open, probeEval)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			if !constraintState(f.state) {
				quarantined[c.Name] = append(quarantined[c.Name], f)
			}
		}
	}
	if len(quarantined) > 0 {
		if err := w.quarantineColumns(ctx, tx, wk, quarantined); err != nil {
			return nil, err
		}
		wk.plan = withPaused(pl, func(c plan.Column) bool { return c.Paused || quarantined[c.Name] != nil })
	}
	return open, nil
}

// stopError is a failure that stops applying to one transform (it is
// paused, with a capture failure of kind halt) while its page goes on.
type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }
func (e *stopError) Unwrap() error { return e.err }

// evalFailsWithNoKey reports whether only evaluating the work's definition
// for no key fails with a row error: the failure is in reading the source,
// not in writing the target.
func (w *Worker) evalFailsWithNoKey(ctx context.Context, tx pgx.Tx, wk *work) bool {
	return RowError(Undone(ctx, tx, func() error { return wk.evalKeys(ctx, tx, wk.plan, nil) }))
}

// emptyRun runs the work's statements for no key, and undoes them.
func (w *Worker) emptyRun(ctx context.Context, tx pgx.Tx, wk *work) error {
	if err := Undone(ctx, tx, func() error { return wk.execKeyed(ctx, tx, wk.plan, nil) }); err != nil {
		return fmt.Errorf("applying changes to %s: %w", wk.t.Target, err)
	}
	return nil
}

// execKeyed runs the keyed statements of pl for keys.
func (wk *work) execKeyed(ctx context.Context, tx pgx.Tx, pl *plan.Plan, keys [][]*string) error {
	for _, q := range wk.keyedStatements(pl, keys) {
		if _, err := tx.Exec(ctx, q, wk.keyedArgs(keys)...); err != nil {
			return err
		}
	}
	return nil
}

// evalKeys evaluates pl's columns for keys, writing nothing.
func (wk *work) evalKeys(ctx context.Context, tx pgx.Tx, pl *plan.Plan, keys [][]*string) error {
	_, err := tx.Exec(ctx, pl.EvalKeys(wk.upTo != nil, hasNull(keys)), wk.keyedArgs(keys)...)
	return err
}

// quarantineColumns pauses columns of a transform that failed on rows and
// keeps the rows as samples.
func (w *Worker) quarantineColumns(ctx context.Context, tx pgx.Tx, wk *work, cols map[string][]failure) error {
	for name, fs := range cols {
		i := slices.IndexFunc(wk.t.Spec.Columns, func(c plan.Column) bool { return c.Name == name })
		if i < 0 {
			continue
		}
		tag, err := tx.Exec(ctx, w.e.Cat.SQL(sqlQuarantineColumn), wk.t.ID, fmt.Sprint(i), name, fs[0].msg, fs[0].state)
		if err != nil {
			return fmt.Errorf("quarantining %s.%s: %w", wk.t.Target.Name, name, err)
		}
		w.quarantinedCols += int(tag.RowsAffected())
		if err := w.recordRows(ctx, tx, wk, name, fs, false); err != nil {
			return err
		}
		w.e.Logger.Warn("a column failed on some rows and is quarantined; the other columns keep applying",
			"target", wk.t.Target.String(), "column", name, "rows", len(fs), "error", fs[0].msg)
	}
	return w.e.Cat.BumpGen(ctx, tx)
}

// recordRows keeps quarantined rows: samples of a column, or (column "")
// poisoned keys, which the transform holds from now on.
func (w *Worker) recordRows(ctx context.Context, tx pgx.Tx, wk *work, column string, fs []failure, held bool) error {
	return w.recordRowsOf(ctx, tx, wk, column, wk.t.Spec.Source.Schema+"."+wk.t.Spec.Source.Table, false, fs, held)
}

// recordRowsOf is recordRows for rows of src; sourceRow says the keys are
// src's own (changed rows an aggregate could not place), not target keys.
func (w *Worker) recordRowsOf(ctx context.Context, tx pgx.Tx, wk *work, column, src string, sourceRow bool, fs []failure, held bool) error {
	b := &pgx.Batch{}
	for _, f := range fs {
		b.Queue(w.e.Cat.SQL(sqlQuarantineRow), wk.t.ID, column, src, RenderKey(f.key), f.key, f.msg, f.state, sourceRow)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("recording quarantined rows of %s: %w", wk.t.Target, err)
	}
	if !held {
		return nil
	}
	w.poisonedKeys += len(fs)
	w.e.Logger.Warn("keys poisoned: their changes are held for this transform until released",
		"target", wk.t.Target.String(), "keys", len(fs), "error", fs[0].msg)
	// No generation bump: pages read which keys are held under their key
	// locks, and bumping here (before a page's key locks, for a source row)
	// would take the instance row out of the lock order.
	return nil
}

// dropAllHeld removes from each work the keys its transform holds. The
// caller holds the works' key locks.
func (w *Worker) dropAllHeld(ctx context.Context, tx pgx.Tx, order []int, works map[int]*work) error {
	rows, err := tx.Query(ctx, w.e.Cat.SQL(sqlHolding), order)
	if err != nil {
		return fmt.Errorf("reading which transforms hold keys: %w", err)
	}
	holding, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("reading which transforms hold keys: %w", err)
	}
	for _, id := range holding {
		if err := w.dropHeld(ctx, tx, works[int(id)]); err != nil {
			return err
		}
	}
	return nil
}

// dropHeld removes from the work the keys its transform holds.
func (w *Worker) dropHeld(ctx context.Context, tx pgx.Tx, wk *work) error {
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
	rows, err := tx.Query(ctx, w.e.Cat.SQL(sqlHeldAmong), wk.t.ID, texts)
	if err != nil {
		return fmt.Errorf("reading the keys %s holds: %w", wk.t.Target, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return err
		}
		delete(wk.keys, byText[t])
	}
	return rows.Err()
}

// refreshSamples re-evaluates a transform's quarantined columns on the
// page's keys: a fixed row leaves the samples, a row that now fails joins
// them. The work is done and undone under a savepoint.
func (w *Worker) refreshSamples(ctx context.Context, tx pgx.Tx, wk *work, quarantined []string) error {
	if wk.skip || wk.resync || len(wk.keys) == 0 {
		return nil
	}
	var cols []string
	for _, c := range wk.plan.Spec.Columns {
		if c.Paused && slices.Contains(quarantined, c.Name) {
			cols = append(cols, c.Name)
		}
	}
	if len(cols) == 0 {
		return nil
	}
	keys := wk.keyList()
	texts := make([]string, len(keys))
	for i, k := range keys {
		texts[i] = RenderKey(k)
	}
	// Fast path: every row evaluates every quarantined column.
	only := withPaused(wk.plan, func(c plan.Column) bool { return !slices.Contains(cols, c.Name) })
	err := Undone(ctx, tx, func() error { return wk.evalKeys(ctx, tx, only, keys) })
	if err != nil && !RowError(err) {
		return err
	}
	failed := err != nil
	if _, err := tx.Exec(ctx, w.e.Cat.SQL(sqlClearSamples), wk.t.ID, cols, texts); err != nil {
		return err
	}
	if !failed {
		return nil
	}
	for _, name := range cols {
		one := withPaused(wk.plan, func(c plan.Column) bool { return c.Name != name })
		fs, err := w.evalBisect(ctx, tx, wk, one, keys)
		if err != nil {
			return err
		}
		fs = slices.DeleteFunc(fs, func(f failure) bool { return constraintState(f.state) })
		if err := w.recordRows(ctx, tx, wk, name, fs, false); err != nil {
			return err
		}
	}
	return nil
}

// Release re-derives keys a transform held (their quarantine rows already
// deleted by the caller) from their current rows, in the caller's
// transaction: it takes every key lock of the transform, so it waits for
// the pages in flight on it, then applies the keys carefully. A key whose
// cause remains is poisoned again.
func (e *Engine) Release(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string) error {
	locks := make([]int64, 0, ledger.Buckets)
	for b := 0; b < ledger.Buckets; b++ {
		locks = append(locks, KeyLock(e.Cat.Schema, t.ID, b))
	}
	if err := LockKeys(ctx, tx, locks); err != nil {
		return fmt.Errorf("waiting for the pages in flight on %s: %w", t.Target, err)
	}
	return e.applyKeys(ctx, tx, t, keys, true)
}

// BuildKeys re-derives a build's keys carefully, for a build page on which
// a row failed: the caller holds every key lock of the transform. A column
// failing on a row is quarantined and a key failing as a whole poisoned,
// as in the drain.
func (e *Engine) BuildKeys(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string) error {
	return e.applyKeys(ctx, tx, t, keys, false)
}

func (e *Engine) applyKeys(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string, drained bool) error {
	w := e.NewWorker(-1, nil)
	wk := &work{t: t, plan: t.Plan(), keys: map[string][]*string{}, buckets: map[int]bool{}}
	if drained {
		// Keys past an initial build's cursor are the build's.
		if err := w.buildBound(ctx, tx, wk); err != nil {
			return err
		}
	}
	for start := 0; start < len(keys); start += ledger.PageTarget {
		clear(wk.keys)
		for _, k := range keys[start:min(start+ledger.PageTarget, len(keys))] {
			wk.add(k, 0)
		}
		if err := w.applyCareful(ctx, tx, wk); err != nil {
			return err
		}
		e.Metrics.ColumnsQuarantined(w.quarantinedCols)
		e.Metrics.KeysPoisoned(w.poisonedKeys)
		w.quarantinedCols, w.poisonedKeys = 0, 0
		// A column quarantined by an earlier chunk still samples this one.
		cols, err := e.QuarantinedColumns(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		if err := w.refreshSamples(ctx, tx, wk, cols); err != nil {
			return err
		}
	}
	return nil
}

// QuarantinedColumns are the columns of a transform quarantined on bad
// rows (not those paused by PAUSE TRANSFORM).
func (e *Engine) QuarantinedColumns(ctx context.Context, q pgx.Tx, id int) ([]string, error) {
	var cols []string
	err := q.QueryRow(ctx, e.Cat.SQL(sqlQuarantinedOf), id).Scan(&cols)
	return cols, err
}

// SampleKeys re-evaluates quarantined columns of a transform on keys and
// keeps the rows on which they fail as samples (dry: nothing is applied).
// A build calls it for a page on which a quarantined column fails.
func (e *Engine) SampleKeys(ctx context.Context, tx pgx.Tx, t *catalog.Transform, keys [][]*string, cols []string) error {
	w := e.NewWorker(-1, nil)
	wk := &work{t: t, plan: t.Plan(), keys: map[string][]*string{}, buckets: map[int]bool{}}
	for start := 0; start < len(keys); start += ledger.PageTarget {
		clear(wk.keys)
		for _, k := range keys[start:min(start+ledger.PageTarget, len(keys))] {
			wk.add(k, 0)
		}
		if err := w.refreshSamples(ctx, tx, wk, cols); err != nil {
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
func (w *Worker) evalBisect(ctx context.Context, tx pgx.Tx, wk *work, pl *plan.Plan, keys [][]*string) ([]failure, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if len(keys) <= bisectProbe {
		return w.probe(ctx, tx, wk, pl, keys, probeEval)
	}
	err := Undone(ctx, tx, func() error { return wk.evalKeys(ctx, tx, pl, keys) })
	if err == nil {
		return nil, nil
	}
	if !RowError(err) {
		return nil, err
	}
	mid := len(keys) / 2
	a, err := w.evalBisect(ctx, tx, wk, pl, keys[:mid])
	if err != nil {
		return nil, err
	}
	b, err := w.evalBisect(ctx, tx, wk, pl, keys[mid:])
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// WithPaused is pl with every column paused that paused says.
func WithPaused(pl *plan.Plan, paused func(c plan.Column) bool) *plan.Plan {
	return withPaused(pl, paused)
}

// hasNull reports whether some key has a NULL value (a NULL group).
func hasNull(keys [][]*string) bool {
	for _, k := range keys {
		for _, v := range k {
			if v == nil {
				return true
			}
		}
	}
	return false
}

// affectedCareful is affected for a careful page: changes of a source whose
// place in the transform cannot be computed (a GROUP BY expression raises
// on the row) are found by bisection, skipped and held as source rows of
// the transform, so the page goes on for every other change and transform.
func (w *Worker) affectedCareful(ctx context.Context, tx pgx.Tx, wk *work, src int, sc *srcChanges) error {
	bad, err := w.affectedBisect(ctx, tx, wk, src, sc.truncate, sc.rows)
	if err != nil || len(bad) == 0 {
		return err
	}
	s := w.sources[src]
	if s == nil {
		return fmt.Errorf("source %d of %s is not in the catalog", src, wk.t.Target)
	}
	return w.recordRowsOf(ctx, tx, wk, "", s.Name(), true, bad, true)
}

func (w *Worker) affectedBisect(ctx context.Context, tx pgx.Tx, wk *work, src int, truncate bool, rows []ledger.Change) ([]failure, error) {
	if len(rows) == 0 && !truncate {
		return nil, nil
	}
	err := Savepoint(ctx, tx, func() error {
		return w.affected(ctx, tx, wk, src, &srcChanges{rows: rows, truncate: truncate})
	})
	if err == nil || !RowError(err) {
		return nil, err
	}
	if len(rows) == 1 {
		// The row is held; the groups its old values or its current row
		// do give are still recomputed, so a row leaving a group for a bad
		// value leaves that group right.
		for _, part := range []string{"old", "current"} {
			perr := Savepoint(ctx, tx, func() error {
				return w.affected(ctx, tx, wk, src, &srcChanges{rows: rows, part: part})
			})
			if perr != nil && !RowError(perr) {
				return nil, perr
			}
		}
		f := failure{key: Ptrs(rows[0].Key), msg: err.Error()}
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			f.state, f.msg = pe.Code, pe.Message
		}
		return []failure{f}, nil
	}
	mid := len(rows) / 2
	a, err := w.affectedBisect(ctx, tx, wk, src, truncate, rows[:mid])
	if err != nil {
		return nil, err
	}
	b, err := w.affectedBisect(ctx, tx, wk, src, false, rows[mid:])
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}
