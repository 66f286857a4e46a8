// Package drain applies staged changes to target tables. A drain worker
// claims a page of committed ledger rows (FOR UPDATE SKIP LOCKED, so workers
// across a fleet share the work), reduces it to the changed keys of each
// source, and recomputes those keys from the current source rows for every
// transform reading the source, under key locks, in one transaction with the
// page's completion.
package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/metrics"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/internal/recompute"
	"github.com/trellis-pg/trellis/internal/safe"
	"github.com/trellis-pg/trellis/trellistype"
)

// Engine is the state drain workers of one client share.
type Engine struct {
	Pool   *pgxpool.Pool
	Cat    *catalog.Catalog
	Logger *slog.Logger
	// PollInterval is how often an idle worker looks for work without a wake-up.
	PollInterval time.Duration
	// Metrics counts pages, keys and quarantines (nil: not counted).
	Metrics *metrics.Instance
	// Ledger is cut by idle workers, and holds the pages.
	Ledger *ledger.Ledger
	// Recompute applies a page's keys.
	Recompute *recompute.Recomputer

	// applying counts the pages the engine's workers hold: an idle worker
	// does not try to claim a page another of them holds.
	applying atomic.Int64
}

// Worker is one drain worker.
type Worker struct {
	e    *Engine
	id   int
	wake <-chan struct{}

	gen     int64
	loaded  bool
	bySrc   map[int][]*catalog.Transform
	sources map[int]*catalog.Source
	// quarantined are the quarantined columns of each transform.
	quarantined map[int][]string
	applied     int // target keys the page being applied recomputes (metrics)
	// Columns quarantined and keys poisoned by the page being applied,
	// counted in the metrics once it commits.
	tally recompute.Tally
}

// NewWorker returns a worker; wake delivers wake-ups (may be nil).
func (e *Engine) NewWorker(id int, wake <-chan struct{}) *Worker {
	return &Worker{e: e, id: id, wake: wake}
}

// Run drains until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	log := w.e.Logger.With("drain_worker", w.id)
	retry := backoff.Exponential{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	claim := true
	for ctx.Err() == nil {
		var wait time.Duration
		var err error
		claim, wait, err = w.step(ctx, claim)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.e.Metrics.Up(false)
			log.Warn("drain pass failed", "error", err)
			backoff.Sleep(ctx, retry.Next())
			claim = true
			continue
		}
		w.e.Metrics.Up(true)
		retry.Reset()
		if wait > 0 {
			backoff.Wait(ctx, wait, w.wake)
		}
	}
}

// step is one step of the worker's loop: with claim, it first tries to
// claim and apply a page; without one, it looks (one statement), and cuts
// when a cut is due (ledger.Look paces cuts by the write rate). It returns
// whether the next step should claim, and how long to wait before it.
func (w *Worker) step(ctx context.Context, claim bool) (bool, time.Duration, error) {
	if claim {
		did, err := w.DrainOne(ctx)
		if err != nil || did {
			return true, 0, err
		}
	}
	o, err := w.e.Ledger.Look(ctx)
	if err != nil {
		return true, 0, err
	}
	if int64(o.PagesDue) > w.e.applying.Load() && !claim {
		return true, 0, nil // a page no worker of this engine holds
	}
	if o.NewRows && o.CutIn == 0 {
		n, err := w.e.Ledger.Cut(ctx, false)
		if err != nil || n > 0 {
			return true, 0, err
		}
	}
	wait := backoff.Jitter(w.e.PollInterval)
	if o.NewRows && w.e.Ledger.WaitForCut(w.id, o.CutIn) {
		// Changes are gathering: this worker wakes when their cut is due
		// (another may have just cut: then about one interval from now).
		wait = min(wait, max(o.CutIn, ledger.MinCutInterval))
	}
	return false, wait, nil
}

// srcChanges are a page's changes of one source.
type srcChanges struct {
	rows     []ledger.Change
	truncate bool
	part     string // plan.Changes.Part: only the old or the current groups
}

// DrainOne claims and applies one page. It reports whether it found one.
// A page on which a row fails is applied again carefully (package recompute
// diagnoses it key by key; careful.go holds the source rows it cannot place).
func (w *Worker) DrainOne(ctx context.Context) (bool, error) {
	return w.drainPage(ctx, 0)
}

// drainPage claims the next page, or with careful the page of that id, and
// applies it.
func (w *Worker) drainPage(ctx context.Context, careful int64) (bool, error) {
	start := time.Now()
	tx, err := w.e.Pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	c := w.e.Cat
	if err := locks.DDLShared(ctx, tx, c.Schema); err != nil {
		return false, err
	}
	p, err := w.e.Ledger.Claim(ctx, tx, careful)
	if err != nil {
		return false, err
	}
	if p == nil {
		// No page; or, carefully, another worker took this one: there may
		// be more work, so say a page was found.
		return careful != 0, nil
	}
	w.e.applying.Add(1)
	defer w.e.applying.Add(-1)
	// A panic applying the page fails the page (a DrainFailure, retried
	// with backoff), never the host process.
	var srcs []int
	applyErr := safe.Do(func() error {
		var err error
		srcs, err = w.applyPage(ctx, tx, p, careful != 0)
		return err
	})
	if pe, ok := applyErr.(*safe.PanicError); ok {
		w.e.Metrics.Panic("drain")
		w.e.Logger.Error("applying a page panicked; it is recorded as a drain failure and retried", "page", p.ID, "panic", fmt.Sprint(pe.Value), "stack", pe.Stack)
	}
	if applyErr == nil {
		if err := w.e.Ledger.Done(ctx, tx, p); err != nil {
			applyErr = err
		} else if err := tx.Commit(ctx); err != nil {
			applyErr = err
		} else {
			w.e.Metrics.DrainPage(time.Since(start), w.applied, p.Rows)
			w.e.Metrics.ColumnsQuarantined(w.tally.Columns)
			w.e.Metrics.KeysPoisoned(w.tally.Keys)
			return true, nil
		}
	}
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	_ = tx.Rollback(context.WithoutCancel(ctx))
	if careful == 0 && recompute.RowError(applyErr) {
		return w.drainPage(ctx, p.ID)
	}
	if w.halt(ctx, applyErr) || w.isolate(ctx, p, applyErr) {
		return true, nil // retried at once, without the halted transform
	}
	w.recordFailure(ctx, p, srcs, applyErr)
	return true, nil
}

// isolateAfter is how many times in a row a page may fail for one
// transform before that transform is paused, so that the page is applied
// for every other one. With the page's backoff (100 ms, doubling) that is
// about six seconds of failing: a lock held for a moment or a fix made at
// once stops nothing, while other tables' changes on the page are not held
// up for long.
const isolateAfter = 7

// isolate pauses the transform a page keeps failing for, once the page
// has failed isolateAfter times, with a capture failure of kind halt that
// names the cause: the page then goes on for every other transform, and
// RESUME re-derives the paused one. It reports whether it paused one.
func (w *Worker) isolate(ctx context.Context, p *ledger.Page, cause error) bool {
	var te *transformError
	if p.Attempts+1 < isolateAfter || !errors.As(cause, &te) {
		return false
	}
	detail := te.err.Error()
	if c := pgerr.Code(cause); c != "" {
		detail += " (SQLSTATE " + c + ")"
	}
	msg := fmt.Sprintf("applying changes to %s stopped: it failed %d times in a row: %s; no row of the source explains it, "+
		"and the other transforms on the same changes went on without it. Fix what the error names, then RESUME (which re-derives the target)",
		te.t.Target, p.Attempts+1, detail)
	return w.pause(ctx, te.t, msg)
}

// transformError is a failure applying one transform's part of a page.
type transformError struct {
	t   *catalog.Transform
	err error
}

func (e *transformError) Error() string { return e.err.Error() }
func (e *transformError) Unwrap() error { return e.err }

// targetMoved says the table under a target's name is not the one its
// transform created (renamed, dropped, or replaced).
type targetMoved struct{ target string }

func (e *targetMoved) Error() string {
	return fmt.Sprintf("the table %s is no longer the target Trellis created (it was renamed, dropped or replaced outside Trellis); "+
		"rename it back, or DROP TRANSFORM and define it again (which drops only a table Trellis created), then RESUME", e.target)
}

// halt stops applying to a transform whose target no longer fits its
// definition (dropped, a column dropped or retyped outside Trellis): it is
// paused with a capture failure of kind halt, so the page goes on for every
// other transform. It reports whether it halted one.
func (w *Worker) halt(ctx context.Context, cause error) bool {
	var te *transformError
	var pe *pgconn.PgError
	var se *recompute.StopError
	var moved *targetMoved
	if !errors.As(cause, &te) {
		return false
	}
	var msg string
	switch {
	case errors.As(cause, &moved):
		msg = fmt.Sprintf("applying changes to %s stopped: %s", te.t.Target, moved.Error())
	case !errors.As(cause, &pe):
		return false
	case errors.As(cause, &se):
		msg = fmt.Sprintf("applying changes to %s stopped: %s; reading its source fails on a row whatever the changed keys (a GROUP BY or JOIN expression raises on it). Fix the row, then RESUME", te.t.Target, pe.Message)
	case pgerr.InClass(pe.Code, pgerrcode.SyntaxErrorOrAccessRuleViolation):
		if drift := w.targetDrift(ctx, te.t); drift != "" {
			msg = fmt.Sprintf("applying changes to %s stopped: %s; the target was changed outside Trellis (%s): undo that, or DROP TRANSFORM and define it again, then RESUME", te.t.Target, pe.Message, drift)
		} else if retyped := w.sourceRetyped(ctx, te.t); retyped != "" {
			msg = fmt.Sprintf("applying changes to %s stopped: the statement Trellis runs for the definition failed: %s (SQLSTATE %s); %s since the definition: change it back (ALTER TABLE ... ALTER COLUMN ... TYPE), or DROP TRANSFORM and define it again, then RESUME", te.t.Target, pe.Message, pe.Code, retyped)
		} else {
			msg = fmt.Sprintf("applying changes to %s stopped: the statement Trellis runs for the definition failed: %s (SQLSTATE %s; the target is as Trellis made it). Fix what the error names (a source column, a function or type the definition uses), then RESUME", te.t.Target, pe.Message, pe.Code)
		}
	default:
		return false
	}
	return w.pause(ctx, te.t, msg)
}

// pause records a halt of t with msg: t is paused with a capture failure
// of kind halt. It reports whether that was recorded.
func (w *Worker) pause(ctx context.Context, t *catalog.Transform, msg string) bool {
	err := pgx.BeginFunc(ctx, w.e.Pool, func(tx pgx.Tx) error {
		if err := locks.DDL(ctx, tx, w.e.Cat.Schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, w.e.Cat.SQL(sqlHalt), t.ID, t.Target.String(), msg); err != nil {
			return err
		}
		return w.e.Cat.BumpGen(ctx, tx)
	})
	if err != nil {
		w.e.Logger.Error("recording a halt", "target", t.Target.String(), "error", err)
		return false
	}
	w.e.Logger.Error("applying halted on a transform; it is paused until RESUME", "target", t.Target.String(), "error", msg)
	w.e.Metrics.CaptureFailures(trellistype.CaptureFailureHalt, 1)
	return true
}

// sourceRetyped names the columns t's definition reads (its keys, GROUP
// BY and JOIN columns, which the source records with their types) that
// have another type now, or "" when none has (or they cannot be read).
func (w *Worker) sourceRetyped(ctx context.Context, t *catalog.Transform) string {
	reads := map[string]bool{}
	add := func(src plan.Source, cols ...[]string) {
		for _, cs := range cols {
			for _, c := range cs {
				reads[src.Schema+"."+src.Table+"\x1f"+c] = true
			}
		}
	}
	add(t.Spec.Source, t.Spec.Source.KeyCols, t.Spec.Source.Needs, t.Spec.Source.Reads, t.Spec.Reads)
	for _, j := range t.Spec.JoinList() {
		add(j.Source, j.Source.KeyCols, j.Source.Needs, j.Source.Reads)
	}
	for _, sj := range t.Spec.Semis {
		add(sj.Source, sj.Source.KeyCols, sj.Source.Needs, sj.Source.Reads)
	}
	rows, err := w.e.Pool.Query(ctx, w.e.Cat.SQL(sqlSourceRetyped), t.ID, capture.UnrecordedMark())
	if err != nil {
		return ""
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var table, col, now, was string
		if rows.Scan(&table, &col, &now, &was) != nil {
			return ""
		}
		if reads[table+"\x1f"+col] {
			out = append(out, fmt.Sprintf("column %s of %s is %s, not %s", col, table, now, was))
		}
	}
	if rows.Err() != nil {
		return ""
	}
	return strings.Join(out, ", ")
}

// targetDrift says how a transform's target differs from what its
// definition maintains (gone, a column missing or of another type), or ""
// when it does not, or cannot be read.
func (w *Worker) targetDrift(ctx context.Context, t *catalog.Transform) string {
	rows, err := w.e.Pool.Query(ctx, sqlTargetColumns, t.Target.Quoted())
	if err != nil {
		return ""
	}
	have := map[string]string{}
	for rows.Next() {
		var n, typ string
		if rows.Scan(&n, &typ) == nil {
			have[n] = typ
		}
	}
	rows.Close()
	if rows.Err() != nil {
		return ""
	}
	if len(have) == 0 {
		return "the table is gone"
	}
	want := map[string]string{}
	var order []string
	for i, k := range t.Spec.Source.KeyCols {
		if t.Plan().Kind() == plan.KindProjection {
			want[k], order = t.Spec.Source.KeyTypes[i], append(order, k)
		}
	}
	for _, c := range append(slices.Clone(t.Spec.Key), t.Spec.Columns...) {
		want[c.Name], order = c.Type, append(order, c.Name)
	}
	var diffs []string
	for _, n := range order {
		got, ok := have[n]
		switch {
		case !ok:
			diffs = append(diffs, "column "+n+" was dropped")
		case want[n] != "" && got != want[n]:
			diffs = append(diffs, fmt.Sprintf("column %s is %s, not %s", n, got, want[n]))
		}
	}
	return strings.Join(diffs, ", ")
}

// recordFailure records a failed page. A failure of one transform's part
// is reported on the tables of the page that transform reads, not on the
// page's other tables, whose readers are not failing.
func (w *Worker) recordFailure(ctx context.Context, p *ledger.Page, srcs []int, cause error) {
	w.e.Metrics.DrainPageFailed()
	var te *transformError
	if errors.As(cause, &te) {
		srcs = slices.DeleteFunc(slices.Clone(srcs), func(s int) bool { return !reads(te.t, s) })
	}
	tables := w.sourceNames(ctx, srcs)
	err := w.e.Ledger.Failed(ctx, p, cause, tables)
	w.e.Logger.Warn("drain page failed; it will be retried", "drain_worker", w.id, "page", p.ID,
		"attempts", p.Attempts+1, "error", cause, "tables", strings.Join(tables, ","))
	if err != nil {
		w.e.Logger.Error("recording a drain failure", "page", p.ID, "error", err)
	}
}

func (w *Worker) sourceNames(ctx context.Context, srcs []int) []string {
	if len(srcs) == 0 {
		return []string{}
	}
	rows, err := w.e.Pool.Query(ctx, w.e.Cat.SQL(sqlSourceNames), srcs)
	if err != nil {
		return []string{}
	}
	names := []string{}
	for rows.Next() {
		var id int
		var n string
		if rows.Scan(&id, &n) == nil {
			names = append(names, n)
		}
	}
	rows.Close()
	sort.Strings(names)
	return names
}

// reads says whether t reads the source src.
func reads(t *catalog.Transform, src int) bool {
	return slices.ContainsFunc(t.Spec.Sources(), func(s plan.Source) bool { return s.ID == src })
}

// reload refreshes the definitions when the catalog generation (gen,
// read with the page's claim) moved.
func (w *Worker) reload(ctx context.Context, tx pgx.Tx, gen int64) error {
	if w.loaded && gen == w.gen {
		return nil
	}
	ts, gen, err := w.e.Cat.Transforms(ctx, tx)
	if err != nil {
		return err
	}
	srcs, err := w.e.Cat.Sources(ctx, tx)
	if err != nil {
		return err
	}
	w.sources = map[int]*catalog.Source{}
	for _, s := range srcs {
		w.sources[s.ID] = s
	}
	w.quarantined = map[int][]string{}
	if err := collect(ctx, tx, w.e.Cat.SQL(sqlQuarantinedColumns), func(r pgx.Rows) error {
		var id int
		var cols []string
		err := r.Scan(&id, &cols)
		w.quarantined[id] = cols
		return err
	}); err != nil {
		return err
	}
	w.bySrc = map[int][]*catalog.Transform{}
	for _, t := range ts {
		var ids []int
		for _, src := range t.Spec.Sources() {
			if !slices.Contains(ids, src.ID) {
				ids = append(ids, src.ID)
				w.bySrc[src.ID] = append(w.bySrc[src.ID], t)
			}
		}
	}
	w.gen, w.loaded = gen, true
	return nil
}

// collect runs a query and hands each row to scan.
func collect(ctx context.Context, tx pgx.Tx, sql string, scan func(pgx.Rows) error) error {
	rows, err := tx.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// malformed says what is wrong with a keyed ledger row of src ("" if
// nothing): a key of another arity than the source's primary key, old
// values of another arity than its captured columns, a bucket that is not
// its key's.
func malformed(c ledger.Change, src *catalog.Source) string {
	switch {
	case len(c.Key) != len(src.KeyCols):
		return fmt.Sprintf("its key has %d values, the primary key of %s has %d columns", len(c.Key), src.Name(), len(src.KeyCols))
	case len(c.Vals) > len(src.CapCols):
		// Fewer is fine: a row captured before capture was widened.
		return fmt.Sprintf("it has %d old values, capture of %s records %d", len(c.Vals), src.Name(), len(src.CapCols))
	case c.Mislabeled:
		return "it was stored under another bucket than its key's"
	case c.Bucket < 0 || c.Bucket >= ledger.Buckets:
		return fmt.Sprintf("its bucket %d is out of range", c.Bucket)
	}
	return ""
}

// nullableKey reports whether src's key may have NULL parts by right: a
// transform reads it through a unique index NULLS NOT DISTINCT (decision
// 0049).
func (w *Worker) nullableKey(src int) bool {
	return slices.ContainsFunc(w.bySrc[src], func(t *catalog.Transform) bool { return t.Spec.NullableKeys(src) })
}

// applyPage recomputes every key of the page for every transform reading
// its sources. It returns the page's source ids (for failure reports).
// Carefully, a transform on which a row fails is diagnosed key by key.
func (w *Worker) applyPage(ctx context.Context, tx pgx.Tx, p *ledger.Page, careful bool) ([]int, error) {
	w.applied, w.tally = 0, recompute.Tally{}
	if err := w.reload(ctx, tx, p.Gen); err != nil {
		return nil, fmt.Errorf("loading definitions: %w", err)
	}
	changes, err := w.e.Ledger.Changes(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	bySrc := map[int]*srcChanges{}
	rejected := 0
	for _, c := range changes {
		src := w.sources[c.Src]
		if src == nil {
			// Its table is no longer captured (its last reader dropped).
			continue
		}
		sc := bySrc[c.Src]
		if sc == nil {
			sc = &srcChanges{}
			bySrc[c.Src] = sc
		}
		if c.Key == nil || c.NullPart() && !w.nullableKey(c.Src) {
			// A TRUNCATE, or a key column holding NULL while no key is
			// on it: the source is re-read.
			sc.truncate = true
			continue
		}
		if why := malformed(c, src); why != "" {
			// Only capture writes the ledger, so this is damage: whatever
			// the row meant, re-reading its source is always right.
			rejected++
			w.e.Logger.Error("a ledger row is malformed; its source is re-read for every reader instead",
				"page", p.ID, "source", src.Name(), "reason", why)
			sc.truncate = true
			continue
		}
		sc.rows = append(sc.rows, c)
	}
	w.e.Metrics.LedgerRowsRejected(rejected)
	srcs := make([]int, 0, len(bySrc))
	for s := range bySrc {
		srcs = append(srcs, s)
	}
	sort.Ints(srcs)

	// Work out, per transform, the target keys to recompute.
	var order []int
	works := map[int]*recompute.Set{}
	for _, s := range srcs {
		// The source's changed keys, made once for every transform that
		// recomputes exactly those (decision 0059).
		var shared *recompute.Keys
		for _, t := range w.bySrc[s] {
			if t.State == trellistype.StatePaused {
				continue
			}
			wk := works[t.ID]
			if wk == nil {
				wk = recompute.NewSet(t)
				works[t.ID] = wk
				order = append(order, t.ID)
			}
			sc := bySrc[s]
			if !careful && !sc.truncate && !wk.Resync && len(sc.rows) > 0 && recompute.ChangedKeysOnly(t, wk.Plan, s) {
				if shared == nil {
					shared = recompute.NewKeys(sc.rows)
				}
				wk.AddKeys(shared)
				continue
			}
			affected := w.affected
			if careful {
				affected = w.affectedCareful
			}
			if err := affected(ctx, tx, wk, s, sc); err != nil {
				return srcs, &transformError{t: t, err: err}
			}
		}
	}
	if len(works) == 0 {
		return srcs, nil
	}
	sort.Ints(order)
	// A target is the table its transform created, tracked by OID: one
	// renamed, or replaced by another table under its name, is not written.
	rows, err := tx.Query(ctx, w.e.Cat.SQL(sqlMovedTargets), order)
	if err != nil {
		return srcs, fmt.Errorf("checking the targets: %w", err)
	}
	moved, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return srcs, fmt.Errorf("checking the targets: %w", err)
	}
	if len(moved) > 0 {
		return srcs, &transformError{t: works[moved[0]].T, err: &targetMoved{target: works[moved[0]].T.Target.String()}}
	}
	var keys []int64
	for _, id := range order {
		keys = append(keys, works[id].Locks(w.e.Cat.Schema)...)
	}
	if err := recompute.LockKeys(ctx, tx, keys); err != nil {
		return srcs, fmt.Errorf("taking key locks: %w", err)
	}
	// Which keys a transform holds is read under the key locks: a release
	// or a poisoning of the same keys has committed, or waits for this page.
	rc := w.e.Recompute
	if err := rc.DropHeld(ctx, tx, order, works); err != nil {
		return srcs, err
	}
	for _, id := range order {
		wk := works[id]
		if err := w.applyWork(ctx, tx, wk, careful); err != nil {
			return srcs, err
		}
	}
	return srcs, nil
}

// applyWork applies one transform's part of a page.
func (w *Worker) applyWork(ctx context.Context, tx pgx.Tx, wk *recompute.Set, careful bool) error {
	rc := w.e.Recompute
	if err := rc.BuildBound(ctx, tx, wk); err != nil {
		return &transformError{t: wk.T, err: err}
	}
	if err := rc.Apply(ctx, tx, wk, careful, &w.tally); err != nil {
		return &transformError{t: wk.T, err: err}
	}
	w.applied += wk.Len()
	if q := w.quarantined[wk.T.ID]; len(q) > 0 {
		if err := rc.RefreshSamples(ctx, tx, wk, q, &w.tally); err != nil {
			return &transformError{t: wk.T, err: err}
		}
	}
	return nil
}

// affected adds to wk the target keys a source's changes touch.
func (w *Worker) affected(ctx context.Context, tx pgx.Tx, wk *recompute.Set, src int, sc *srcChanges) error {
	if sc.truncate {
		wk.Resync = true
	}
	if wk.Resync || len(sc.rows) == 0 {
		return nil
	}
	source := func(id int) (*catalog.Source, error) { return w.sources[id], nil }
	return recompute.Affected(ctx, tx, wk.T, wk.Plan, src, source, sc.rows, sc.part, wk.Add)
}
