// Package staging is the staging worker: exactly one per instance. It
// installs and removes capture on source tables, runs the key-ordered builds
// (backfills) of new and rebuilt transforms, and has the ledger rotate and
// reclaim its ring of segments (package ledger).
package staging

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/funcwatch"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/metrics"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/internal/recompute"
	"github.com/trellis-pg/trellis/trellistype"
)

// How a build wrote its rows, as its "build finished" log record says.
const (
	// BuildInOneStatement: one INSERT ... SELECT, the target's key index
	// created after the rows.
	BuildInOneStatement = "one statement"
	// BuildThroughScratch: an aggregate's query run in parallel into a
	// scratch table, its rows copied into the target, the key index
	// created after them.
	BuildThroughScratch = "scratch table"
	// BuildQuarantining: one INSERT ... SELECT with the columns that
	// failed on some rows paused (and quarantined), the key index created
	// after the rows.
	BuildQuarantining = "one statement, columns quarantined"
	// BuildInPages: key-ordered pages, or statements under the target's
	// index, a failing row diagnosed key by key.
	BuildInPages = "pages"
)

// Defaults for the worker's cadence.
const (
	BuildPageRows = 50000
	MaintainEvery = 500 * time.Millisecond
	// InstallWait bounds how long one pass waits for a source table's lock
	// to install capture on it.
	InstallWait = 2 * time.Second
	// WakeDebounce is the least time between the starts of two passes.
	WakeDebounce = 25 * time.Millisecond
)

// Worker is the staging worker of one instance.
type Worker struct {
	Pool   *pgxpool.Pool
	Cat    *catalog.Catalog
	Names  capture.Names
	Logger *slog.Logger
	Wake   <-chan struct{}
	// PollInterval is how often the worker looks for work without a wake-up.
	PollInterval time.Duration
	// Ledger is the ring the worker keeps turning.
	Ledger *ledger.Ledger
	// Recompute re-derives, key by key, a build page on which a row failed.
	Recompute *recompute.Recomputer
	// Metrics counts builds and disruptions and samples the instance's
	// gauges (nil: neither).
	Metrics *metrics.Instance

	lastMaintain time.Time
	// repairFailure is the last error repairing the ledger's segments,
	// logged once ("" when they are whole).
	repairFailure string
	built         int64 // rows the build page being run wrote (metrics)
	// method is how the build page being run wrote its rows (buildFinished
	// logs it): one of the Build* method names.
	method string
	// buildStarts are when the builds this worker started began, for the
	// duration its "build finished" record gives.
	buildStarts map[int]time.Time
}

// buildStarted records and logs the start of a build.
func (w *Worker) buildStarted(t *catalog.Transform) {
	if w.buildStarts == nil {
		w.buildStarts = map[int]time.Time{}
	}
	if _, ok := w.buildStarts[t.ID]; ok {
		return
	}
	w.buildStarts[t.ID] = time.Now()
	w.Logger.Info("build started", "target", t.Target.String(), "build", t.BuildKind)
}

// buildFinished logs a finished build: its rows and, when this worker
// started it, how long it took.
func (w *Worker) buildFinished(ctx context.Context, id int, target plan.Target) {
	var rows int64
	if err := w.Pool.QueryRow(ctx, w.Cat.SQL(sqlBuildRows), id).Scan(&rows); err != nil {
		rows = -1
	}
	attrs := []any{"target", target.String(), "rows", rows, "method", w.method}
	if began, ok := w.buildStarts[id]; ok {
		attrs = append(attrs, "duration", time.Since(began).Round(time.Millisecond).String())
		delete(w.buildStarts, id)
	}
	w.Logger.Info("build finished; transform is live", attrs...)
}

// repairLedger has every ledger segment dropped or detached outside
// Trellis made a segment again, and the transforms re-derived (the
// changes a dropped one held are gone, and what capture appended to a
// detached one was in no cut). Each loss is logged once; a
// segment that cannot be repaired is logged when its error changes, and
// the ledger's upkeep waits for it without failing the pass, so the rest
// of staging goes on. It reports whether every segment is usable.
func (w *Worker) repairLedger(ctx context.Context) bool {
	created, attached, err := w.Ledger.RepairSegments(ctx)
	var n int64
	if len(created) > 0 || len(attached) > 0 {
		// Capture appends to a segment by its name: what it appended to one
		// while it was detached is in no cut, and a dropped one took its
		// changes along. A transaction that wrote while its segment was
		// gone recorded nothing, and may commit after the re-derive read
		// its table: the repair is noted for a second re-derive.
		var rerr error
		n, rerr = w.rederiveAll(ctx)
		if rerr != nil && err == nil {
			err = fmt.Errorf("re-deriving the transforms after a repair of the ledger: %w", rerr)
		}
		if nerr := w.Ledger.NoteRepair(ctx); nerr != nil && err == nil {
			err = fmt.Errorf("noting the repair: %w", nerr)
		}
	}
	if len(attached) > 0 {
		w.Logger.Warn("a ledger segment was detached outside Trellis; it is attached back with its rows", "segment", strings.Join(attached, ","),
			"transforms", n, "reason", "what capture appended to it while it was detached was in no cut: every transform is re-derived from its sources")
	}
	if len(created) > 0 {
		w.Logger.Error("a ledger segment was missing; it is recreated, and every transform is re-derived from its sources",
			"segment", strings.Join(created, ","), "transforms", n,
			"reason", "the segment was dropped outside Trellis, and the changes it held are lost")
	}
	if rerr := w.rederiveSettled(ctx); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		if ctx.Err() == nil && err.Error() != w.repairFailure {
			w.Logger.Error("a ledger segment cannot be repaired; the ledger is not reclaimed until it is", "error", err)
		}
		w.repairFailure = err.Error()
		return false
	}
	w.repairFailure = ""
	return true
}

// rederiveSettled re-derives every transform once more when the
// transactions that were running as the ledger was last repaired have all
// ended (Ledger.RepairSettled): one of them may have written, recording
// nothing, and committed after the first re-derive read its table.
func (w *Worker) rederiveSettled(ctx context.Context) error {
	var n int64
	var due bool
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		if due, err = w.Ledger.RepairSettled(ctx, tx); err != nil || !due {
			return err
		}
		n, err = w.rederiveIn(ctx, tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("re-deriving the transforms after a ledger repair: %w", err)
	}
	if due {
		w.Logger.Warn("the transactions running when the ledger was repaired have ended; every transform is re-derived once more, with what they wrote", "transforms", n)
	}
	return nil
}

// rederiveAll has every transform that is live or building rebuilt from
// its sources, and reports how many.
func (w *Worker) rederiveAll(ctx context.Context) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		n, err = w.rederiveIn(ctx, tx)
		return err
	})
	return n, err
}

// rederiveIn is rederiveAll in tx.
func (w *Worker) rederiveIn(ctx context.Context, tx pgx.Tx) (int64, error) {
	if err := locks.DDL(ctx, tx, w.Cat.Schema); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, w.Cat.SQL(sqlRederiveAll))
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), w.Cat.BumpGen(ctx, tx)
}

// Run works until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	defer w.Metrics.ForgetSample()
	retry := backoff.Exponential{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	var last time.Time
	for ctx.Err() == nil {
		// Wake-ups are debounced: any role may NOTIFY the staging channel,
		// and a flood of them makes at most one pass per WakeDebounce.
		if wait := WakeDebounce - time.Since(last); wait > 0 {
			backoff.Sleep(ctx, wait)
		}
		last = time.Now()
		w.Metrics.StagingPass()
		busy, err := w.Pass(ctx)
		// Sampled whatever the pass did, so a database that fails every
		// pass shows as failed samples (trellis_up 0), not as silence.
		if serr := w.Metrics.Sample(ctx, w.Pool, w.Cat); serr != nil && ctx.Err() == nil {
			w.Logger.Warn("sampling the metrics failed", "error", serr)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.Logger.Warn("staging pass failed", "error", err)
			backoff.Sleep(ctx, retry.Next())
			continue
		}
		retry.Reset()
		if busy {
			continue
		}
		backoff.Wait(ctx, w.PollInterval, w.Wake)
	}
}

// Pass does one round of the worker's duties and reports whether there is
// more to do right away.
func (w *Worker) Pass(ctx context.Context) (bool, error) {
	if err := w.installPending(ctx); err != nil {
		return false, err
	}
	// The checks below report their own failures: one that fails must not
	// hold up builds and upkeep.
	if err := w.checkPartitions(ctx); err != nil && ctx.Err() == nil {
		w.Logger.Warn("checking partitions failed", "error", err)
	}
	if err := w.detectDisruptions(ctx); err != nil && ctx.Err() == nil {
		w.Logger.Warn("checking capture for disruptions failed", "error", err)
	}
	busy, err := w.buildStep(ctx)
	if err != nil {
		return false, err
	}
	if err := w.removeOrphans(ctx); err != nil {
		return false, err
	}
	if time.Since(w.lastMaintain) >= MaintainEvery && w.repairLedger(ctx) {
		if err := w.Ledger.Maintain(ctx); err != nil {
			return busy, err
		}
		w.lastMaintain = time.Now()
		// A cut at least every SampleEvery, so that how long a pending
		// change has waited is known that finely (Status.Lag).
		if _, err := w.Ledger.Tick(ctx, metrics.SampleEvery); err != nil {
			return busy, fmt.Errorf("cutting the ledger: %w", err)
		}
	}
	return busy, nil
}

func (w *Worker) sources(ctx context.Context, sql string) ([]catalog.Source, error) {
	rows, err := w.Pool.Query(ctx, w.Cat.SQL(sql))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalog.Source, error) {
		var s catalog.Source
		err := r.Scan(&s.ID, &s.Schema, &s.Table, &s.KeyCols, &s.KeyTypes, &s.CapCols, &s.CapTypes, &s.Partitioned)
		return s, err
	})
}

func leafPartitions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, s catalog.Source) ([]string, error) {
	if !s.Partitioned {
		return []string{}, nil
	}
	rows, err := q.Query(ctx, sqlLeafPartitions, ident.Qualified(s.Schema, s.Table))
	if err != nil {
		return nil, err
	}
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if parts == nil {
		parts = []string{}
	}
	return parts, err
}

// leafIdentities lists a partitioned source's leaves: their quoted names,
// "name|identity" for each (see sqlLeafIdentities), and whether each one's
// storage was replaced since it was created.
func (w *Worker) leafIdentities(ctx context.Context, s catalog.Source) (names, ids []string, rewritten []bool, err error) {
	rows, err := w.Pool.Query(ctx, sqlLeafIdentities, ident.Qualified(s.Schema, s.Table))
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	names, ids = []string{}, []string{}
	for rows.Next() {
		var n, id string
		var rw bool
		if err := rows.Scan(&n, &id, &rw); err != nil {
			return nil, nil, nil, err
		}
		names, ids, rewritten = append(names, n), append(ids, n+"|"+id), append(rewritten, rw)
	}
	return names, ids, rewritten, rows.Err()
}

func (w *Worker) installPending(ctx context.Context) error {
	srcs, err := w.sources(ctx, sqlPendingSources)
	if err != nil {
		return fmt.Errorf("listing sources to capture: %w", err)
	}
	// One source that cannot be captured does not hold up the others, nor
	// the rest of the pass: a table whose lock is not granted within
	// InstallWait is tried again on the next pass (its wait stays recorded).
	for _, s := range srcs {
		ictx, cancel := context.WithTimeout(ctx, InstallWait)
		err := capture.WithLock(ictx, w.Pool, func(attempt int, err error) {
			w.recordWait(ctx, s, attempt)
		}, func(tx pgx.Tx) error {
			parts, err := leafPartitions(ctx, tx, s)
			if err != nil {
				return err
			}
			s.Partitions = parts
			if err := w.Names.Install(ctx, tx, s); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlMarkInstalled), s.ID, parts, s.CapCols); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlSetFingerprint, w.Names.FingerprintSQL()), s.ID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlWaitDone), s.ID); err != nil {
				return err
			}
			// The drain reads capture layouts with the definitions.
			_, err = tx.Exec(ctx, w.Cat.SQL(sqlBumpGen))
			return err
		})
		waited := ictx.Err() != nil
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			if waited {
				continue
			}
			// One source that cannot be captured stops only its readers,
			// with the cause in their status; the rest of the pass goes on.
			w.installFailed(ctx, s, err)
			continue
		}
		w.Logger.Info("capture installed", "table", s.Schema+"."+s.Table)
	}
	return nil
}

// installFailed pauses the readers of a source whose capture cannot be
// installed (Trellis's role does not own the table, say) with a capture
// failure that names the cause and the fix. The source stays pending: a
// RESUME of a reader tries again.
func (w *Worker) installFailed(ctx context.Context, s catalog.Source, cause error) {
	table := s.Schema + "." + s.Table
	msg := fmt.Sprintf("capture of %s cannot be installed: %v; Trellis's role must be able to create triggers on it "+
		"(own the table, or be a member of its owner's role): fix that, then RESUME the transforms reading it", table, cause)
	var n int64
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, w.Cat.SQL(sqlInstallFailure), s.ID, table, msg)
		if err != nil {
			return err
		}
		if n = tag.RowsAffected(); n > 0 {
			return w.Cat.BumpGen(ctx, tx)
		}
		return nil
	})
	if err != nil {
		w.Logger.Error("recording that capture cannot be installed", "table", table, "error", err, "cause", cause)
		return
	}
	w.Metrics.CaptureFailures("capture", int(n))
	w.Logger.Error("capture cannot be installed; the transforms reading the table are paused until RESUME", "table", table, "error", cause)
}

func (w *Worker) removeOrphans(ctx context.Context) error {
	srcs, err := w.sources(ctx, sqlOrphanSources)
	if err != nil {
		return fmt.Errorf("listing sources no transform reads: %w", err)
	}
	for _, s := range srcs {
		err := capture.WithLock(ctx, w.Pool, nil, func(tx pgx.Tx) error {
			// Under the DDL lock, so a define cannot adopt the source meanwhile.
			if err := locks.DDL(ctx, tx, w.Cat.Schema); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, w.Cat.SQL(sqlDeleteSource), s.ID)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			return w.Names.Uninstall(ctx, tx, s)
		})
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			// Tried again on the next pass; the rest of this one goes on.
			w.Logger.Warn("removing capture from a table no transform reads failed", "table", s.Schema+"."+s.Table, "error", err)
			continue
		}
		w.Logger.Info("capture removed", "table", s.Schema+"."+s.Table)
	}
	return nil
}

// buildStep runs one build page of each transform that has a build to run.
func (w *Worker) buildStep(ctx context.Context) (bool, error) {
	rows, err := w.Pool.Query(ctx, w.Cat.SQL(sqlBuildable), capture.UnrecordedMark())
	if err != nil {
		return false, fmt.Errorf("listing builds: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return false, err
	}
	for _, id := range ids {
		w.built, w.method = 0, BuildInPages
		done, err := w.buildPage(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return false, err
			}
			// One failing build does not hold up the others: it is retried
			// with backoff, and pauses after a few attempts.
			w.buildFailed(ctx, id, err)
			continue
		}
		if _, err := w.Pool.Exec(ctx, w.Cat.SQL(sqlBuildOK), id); err != nil {
			return false, err
		}
		w.Metrics.BuildPage(w.built, done != nil)
		if done != nil {
			w.buildFinished(ctx, id, *done)
			// Fresh statistics, so the drain's plans over the new target
			// use its indexes from the start.
			if _, err := w.Pool.Exec(ctx, w.Cat.SQL(sqlAnalyze, done.Quoted())); err != nil {
				w.Logger.Warn("analyzing a built target", "target", done.String(), "error", err)
			}
		}
	}
	return len(ids) > 0, nil
}

// buildPage runs one page of a build; it returns the target when the build
// finished.
func (w *Worker) buildPage(ctx context.Context, id int) (*plan.Target, error) {
	var finished *plan.Target
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		if err := locks.DDLShared(ctx, tx, w.Cat.Schema); err != nil {
			return err
		}
		// Key locks before the transform's row, in the drain's order: a
		// page that quarantines a column updates that row under its key locks.
		if err := recompute.LockAll(ctx, tx, w.Cat.Schema, id); err != nil {
			return err
		}
		t, err := w.Cat.TransformByID(ctx, tx, id, true)
		if err != nil || t == nil {
			return err
		}
		if t.State != trellistype.StateWaitingToBackfill && t.State != trellistype.StateBackfilling {
			return nil
		}
		pl := t.Plan()
		if pl.Kind() != plan.KindProjection {
			w.buildStarted(t)
			finished = &t.Target
			return w.buildShape(ctx, tx, t, pl)
		}
		first := t.State == trellistype.StateWaitingToBackfill || t.BuildCursor == nil
		if first {
			w.buildStarted(t)
		}
		var lowerArgs []any
		if !first {
			for _, v := range t.BuildCursor {
				lowerArgs = append(lowerArgs, v)
			}
		}
		// An initial build inserts a page and learns its end in one
		// statement; a page on which a row fails, and a rebuild, find the
		// page's end first.
		var upper []string
		var upserted int64
		last, fast := false, false
		if t.BuildKind == "initial" && first {
			// A source of moderate size is built in one statement, its
			// primary key added after the rows (an index built by sorting).
			upserted, fast, err = w.buildAllAtOnce(ctx, tx, t)
			if err != nil {
				return fmt.Errorf("building %s: %w", t.Target, err)
			}
			last = fast
		}
		if t.BuildKind == "initial" && !fast {
			upper, upserted, last, fast, err = w.nextInitialPage(ctx, tx, t, !first, lowerArgs)
			if err != nil {
				return fmt.Errorf("building %s: %w", t.Target, err)
			}
		}
		if !fast {
			upper = make([]string, len(t.Spec.Source.KeyCols))
			scan := make([]any, len(upper))
			for i := range upper {
				scan[i] = &upper[i]
			}
			err = tx.QueryRow(ctx, pl.BuildBound(first, BuildPageRows), lowerArgs...).Scan(scan...)
			if errors.Is(err, pgx.ErrNoRows) {
				last = true
			} else if err != nil {
				return fmt.Errorf("finding the next build page of %s: %w", t.Target, err)
			}
			args := append([]any(nil), lowerArgs...)
			if !last {
				for _, v := range upper {
					args = append(args, v)
				}
			}
			upserted, err = w.buildRange(ctx, tx, t, !first, !last, args)
			if err != nil {
				return fmt.Errorf("building %s: %w", t.Target, err)
			}
		}
		if last {
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlBuildDone), t.ID, upserted); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlColumnBuildsDone), t.ID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlCorrectionsDone), t.ID); err != nil {
				return err
			}
			w.built = upserted
			finished = &t.Target
			return nil
		}
		w.built = upserted
		_, err = tx.Exec(ctx, w.Cat.SQL(sqlBuildProgress), t.ID, upper, upserted)
		return err
	})
	if err != nil {
		return nil, err
	}
	return finished, nil
}

// BuildAttempts is how many times a failing build is tried before its
// transform pauses.
const BuildAttempts = 5

func (w *Worker) buildFailed(ctx context.Context, id int, cause error) {
	var attempts int
	var state trellistype.State
	defer func() { w.Metrics.BuildPageFailed(state == trellistype.StatePaused) }()
	err := w.Pool.QueryRow(ctx, w.Cat.SQL(sqlBuildFailed), id, cause.Error(), BuildAttempts).Scan(&attempts, &state)
	if err != nil {
		w.Logger.Error("recording a build failure", "transform_id", id, "error", err, "cause", cause)
		return
	}
	if state == trellistype.StatePaused {
		w.Logger.Error("a build kept failing; its transform is paused until RESUME", "transform_id", id, "attempts", attempts, "error", cause)
		_, _ = w.Pool.Exec(ctx, w.Cat.SQL(sqlBumpGen))
		return
	}
	w.Logger.Warn("a build page failed; it will be retried", "transform_id", id, "attempts", attempts, "error", cause)
}

// buildShape builds a join or aggregate target in one statement pair
// under all of its key locks (taken by buildPage): its rows are not ordered
// by a source key.
func (w *Worker) buildShape(ctx context.Context, tx pgx.Tx, t *catalog.Transform, pl *plan.Plan) error {
	n, err := w.buildWhole(ctx, tx, t)
	if err != nil {
		return fmt.Errorf("building %s: %w", t.Target, err)
	}
	w.built = n
	if _, err := tx.Exec(ctx, w.Cat.SQL(sqlBuildDone), t.ID, n); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, w.Cat.SQL(sqlColumnBuildsDone), t.ID); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, w.Cat.SQL(sqlCorrectionsDone), t.ID)
	return err
}

// checkPartitions notices partitions attached to or detached from a
// partitioned source since capture last looked, gives new leaves their
// TRUNCATE trigger (row triggers are cloned by PostgreSQL), and queues the
// correction of every transform reading the source.
func (w *Worker) checkPartitions(ctx context.Context) error {
	rows, err := w.Pool.Query(ctx, w.Cat.SQL(sqlPartitionedSources))
	if err != nil {
		return err
	}
	type src struct {
		s       catalog.Source
		known   []string
		knownID []string // "name|identity", as sqlLeafIdentities gives them
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (src, error) {
		var x src
		err := r.Scan(&x.s.ID, &x.s.Schema, &x.s.Table, &x.s.KeyCols, &x.s.KeyTypes, &x.s.CapCols, &x.s.CapTypes, &x.s.Partitioned, &x.known, &x.knownID)
		return x, err
	})
	if err != nil {
		return err
	}
	for _, x := range list {
		now, ids, rewritten, err := w.leafIdentities(ctx, x.s)
		if err != nil {
			return err
		}
		was := map[string]string{}
		for _, k := range x.knownID {
			name, id, _ := strings.Cut(k, "|")
			was[name] = id
		}
		var added, changed []string
		for i, p := range now {
			_, id, _ := strings.Cut(ids[i], "|")
			switch {
			case !slices.Contains(x.known, p):
				added = append(added, p)
				// A new partition that is empty (created, not attached with
				// rows) needs no correction: its row triggers came with it.
				// Unless it was truncated before it got its TRUNCATE
				// trigger: rows applied from it may be gone.
				var has bool
				if err := w.Pool.QueryRow(ctx, w.Cat.SQL(sqlHasRows, p)).Scan(&has); err != nil {
					return err
				}
				if has || rewritten[i] {
					changed = append(changed, p)
				}
			case was[p] != "" && was[p] != id:
				// The same name, attached again (detached, maybe changed,
				// then attached) or replaced: what it holds may differ
				// from what was applied.
				added = append(added, p)
				changed = append(changed, p)
			}
		}
		for _, p := range x.known {
			if !slices.Contains(now, p) {
				changed = append(changed, p)
			}
		}
		if len(added) == 0 && len(changed) == 0 {
			if !slices.Equal(ids, x.knownID) {
				if _, err := w.Pool.Exec(ctx, w.Cat.SQL(sqlSetPartitions), x.s.ID, now, ids); err != nil {
					return err
				}
			}
			continue
		}
		err = capture.WithLock(ctx, w.Pool, nil, func(tx pgx.Tx) error {
			for _, p := range added {
				for _, q := range w.Names.PartitionTruncateSQL(x.s, p) {
					if _, err := tx.Exec(ctx, q); err != nil {
						return err
					}
				}
			}
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlSetPartitions), x.s.ID, now, ids); err != nil {
				return err
			}
			if len(changed) == 0 {
				return nil
			}
			_, err := tx.Exec(ctx, w.Cat.SQL(sqlCorrect), x.s.ID, changed)
			return err
		})
		if err != nil {
			return fmt.Errorf("correcting %s.%s after a partition change: %w", x.s.Schema, x.s.Table, err)
		}
		w.Logger.Info("partitions changed; correcting the transforms reading the table", "table", x.s.Schema+"."+x.s.Table, "partitions", strings.Join(changed, ","))
	}
	return nil
}

// recordWait records that installing capture on s waits for a lock, and
// who holds or queues for one, for the status of its readers.
func (w *Worker) recordWait(ctx context.Context, s catalog.Source, attempt int) {
	table := ident.Qualified(s.Schema, s.Table)
	blockers, err := capture.Blockers(ctx, w.Pool, table)
	if err != nil {
		w.Logger.Warn("listing the sessions blocking capture", "table", table, "error", err)
	}
	if blockers == nil {
		blockers = []string{}
	}
	op := "install"
	if len(s.CapCols) > 0 {
		op = "widen"
	}
	if _, err := w.Pool.Exec(ctx, w.Cat.SQL(sqlWait), s.ID, op, s.Schema+"."+s.Table, capture.LockMode, blockers); err != nil {
		w.Logger.Warn("recording a capture wait", "table", table, "error", err)
	}
	if attempt == 1 || attempt%20 == 0 {
		w.Logger.Info("capture waits for a lock on the source table", "table", s.Schema+"."+s.Table, "attempt", attempt, "blockers", len(blockers))
	}
}

// detectDisruptions pauses the readers of sources whose capture was
// changed outside Trellis, and (checkReads) those reading a source column
// that was dropped or a source that lost its primary key; then it fits
// capture to the columns its tables still have (fixCapture),
// re-derives the targets whose functions were replaced (rederive), and
// pauses the readers of a type that gained a user's cast to or from text
// (funcwatch.CastReaders, decision 0034).
func (w *Worker) detectDisruptions(ctx context.Context) error {
	// Both checks run first without the DDL lock, which waits for every
	// drain page in flight and holds new ones back: almost every pass finds
	// nothing, and then takes no lock at all.
	disrupted, err := w.Names.AnyDisrupted(ctx, w.Pool)
	if err != nil {
		return err
	}
	var suspects int
	if err := w.Pool.QueryRow(ctx, w.Cat.SQL(sqlCountReads, w.Cat.SQL(sqlReadsCheck)), capture.UnrecordedMark()).Scan(&suspects); err != nil {
		return err
	}
	fnsChanged, err := funcwatch.AnyChanged(ctx, w.Pool, w.Cat)
	if err != nil {
		return err
	}
	casts, err := funcwatch.CastReaders(ctx, w.Pool, w.Cat)
	if err != nil {
		return err
	}
	if !disrupted && suspects == 0 && !fnsChanged && len(casts) == 0 {
		return nil
	}
	var fix []int
	err = pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		if err := locks.DDL(ctx, tx, w.Cat.Schema); err != nil {
			return err
		}
		found, err := w.Names.Detect(ctx, tx)
		if err != nil {
			return err
		}
		for _, d := range found {
			w.Logger.Error("capture was changed outside Trellis; its readers are paused until RESUME", "table", d.Table, "reason", d.Reason)
		}
		w.Metrics.CaptureFailures(trellistype.CaptureFailureDisruption, len(found))
		if len(found) > 0 {
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlBumpGen)); err != nil {
				return err
			}
		}
		if len(casts) > 0 {
			paused, err := funcwatch.PauseCastReaders(ctx, tx, w.Cat)
			if err != nil {
				return err
			}
			for id, reason := range paused {
				w.Logger.Error("a cast on a source column's type would run inside Trellis's statements; its reader is paused", "transform_id", id, "reason", reason)
			}
			if len(paused) > 0 {
				if _, err := tx.Exec(ctx, w.Cat.SQL(sqlBumpGen)); err != nil {
					return err
				}
			}
		}
		if fnsChanged {
			// A failing re-derive does not undo the disruptions found.
			if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return w.rederive(ctx, sp) }); err != nil {
				if ctx.Err() != nil {
					return err
				}
				w.Logger.Warn("re-deriving the transforms whose functions changed failed; it is tried again on the next pass", "error", err)
			}
		}
		// A failing column check does not undo the disruptions found.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		fix, _, err = w.checkReads(ctx, sp)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			w.Logger.Warn("checking the source columns definitions read failed", "error", err)
			fix = nil
			return sp.Rollback(ctx)
		}
		return sp.Commit(ctx)
	})
	if err != nil {
		return err
	}
	var firstErr error
	for _, id := range fix {
		err := w.fixCapture(ctx, id)
		if capture.IsLockTimeout(err) {
			w.Logger.Info("fitting capture to a table's columns waits for a lock on it; it is tried again on the next pass", "source_id", id)
			continue
		}
		firstErr = cmp.Or(firstErr, err)
	}
	return firstErr
}

// rederive rebuilds the transforms a replaced function changed, and
// pauses those whose definition no longer runs (funcwatch.Rederive).
func (w *Worker) rederive(ctx context.Context, tx pgx.Tx) error {
	changes, err := funcwatch.Rederive(ctx, tx, w.Cat)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		if len(ch.Views) > 0 {
			w.Logger.Error("a view a transform reads was replaced or dropped; it is paused", "target", ch.Target.String(), "views", ch.Views, "reason", ch.Reason)
			continue
		}
		if ch.Paused {
			w.Logger.Error("a function a transform calls changed and its definition no longer runs; it is paused", "target", ch.Target.String(), "functions", ch.Functions, "reason", ch.Reason)
			continue
		}
		w.Logger.Warn("a function a transform calls was replaced; its target is rebuilt", "target", ch.Target.String(), "functions", ch.Functions)
	}
	if len(changes) == 0 {
		return nil
	}
	_, err = tx.Exec(ctx, w.Cat.SQL(sqlBumpGen))
	return err
}
