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
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/catalog"
)

// PageTarget is about how many ledger rows a page holds: a cut larger than
// this is split by bucket into several pages that workers take in parallel.
const PageTarget = 5000

// Engine is the state drain workers of one client share.
type Engine struct {
	Pool   *pgxpool.Pool
	Cat    *catalog.Catalog
	Logger *slog.Logger
	// PollInterval is how often an idle worker looks for work without a wake-up.
	PollInterval time.Duration
}

// KeyLock is the advisory-lock key that serialises recomputes of one
// bucket of one transform's keys (shared with the staging worker's builds).
func KeyLock(schema string, transformID, bucket int) int64 {
	h := fnv.New32a()
	h.Write([]byte(schema))
	return int64(h.Sum32()&0x7fffffff)<<32 | int64(transformID)<<8 | int64(bucket)
}

// Worker is one drain worker.
type Worker struct {
	e    *Engine
	id   int
	wake <-chan struct{}

	gen    int64
	loaded bool
	bySrc  map[int][]*catalog.Transform
}

// NewWorker returns a worker; wake delivers wake-ups (may be nil).
func (e *Engine) NewWorker(id int, wake <-chan struct{}) *Worker {
	return &Worker{e: e, id: id, wake: wake}
}

// Run drains until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	log := w.e.Logger.With("drain_worker", w.id)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		did, err := w.DrainOne(ctx)
		if err == nil && !did {
			var n int
			n, err = w.e.Cut(ctx, false)
			did = n > 0
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("drain pass failed", "error", err)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if did {
			continue
		}
		poll := w.e.PollInterval
		jitter := time.Duration(rand.Int64N(int64(poll/4) + 1))
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-time.After(poll + jitter):
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

type page struct {
	id       int64
	lo, hi   string
	buckets  []int32
	attempts int
}

type srcKeys struct {
	keys     [][]string // each key's column values as text
	buckets  map[int]bool
	truncate bool
}

// DrainOne claims and applies one page. It reports whether it found one.
func (w *Worker) DrainOne(ctx context.Context) (bool, error) {
	tx, err := w.e.Pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	c := w.e.Cat
	if _, err := tx.Exec(ctx, sqlLockShared, catalog.LockKey(c.Schema, "ddl")); err != nil {
		return false, err
	}
	var p page
	err = tx.QueryRow(ctx, c.SQL(sqlClaim)).Scan(&p.id, &p.lo, &p.hi, &p.buckets, &p.attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claiming a page: %w", err)
	}
	srcs, applyErr := w.applyPage(ctx, tx, &p)
	if applyErr == nil {
		if _, err := tx.Exec(ctx, c.SQL(sqlPageDone), p.id); err != nil {
			applyErr = err
		} else if err := tx.Commit(ctx); err != nil {
			applyErr = err
		} else {
			return true, nil
		}
	}
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	_ = tx.Rollback(context.WithoutCancel(ctx))
	w.recordFailure(ctx, &p, srcs, applyErr)
	return true, nil
}

func (w *Worker) recordFailure(ctx context.Context, p *page, srcs []int, cause error) {
	var sqlstate *string
	var pe *pgconn.PgError
	if errors.As(cause, &pe) {
		sqlstate = &pe.Code
	}
	tables := w.sourceNames(ctx, srcs)
	delay := min(100*time.Millisecond<<min(p.attempts, 10), 30*time.Second)
	_, err := w.e.Pool.Exec(ctx, w.e.Cat.SQL(sqlPageFailed), p.id, cause.Error(), sqlstate, tables, delay.Milliseconds())
	w.e.Logger.Warn("drain page failed; it will be retried", "drain_worker", w.id, "page", p.id,
		"attempts", p.attempts+1, "error", cause, "tables", strings.Join(tables, ","))
	if err != nil {
		w.e.Logger.Error("recording a drain failure", "page", p.id, "error", err)
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

// reload refreshes the definitions when the catalog generation moved.
func (w *Worker) reload(ctx context.Context, tx pgx.Tx) error {
	var gen int64
	if err := tx.QueryRow(ctx, w.e.Cat.SQL("SELECT gen FROM %s.trellis_instance")).Scan(&gen); err != nil {
		return err
	}
	if w.loaded && gen == w.gen {
		return nil
	}
	ts, gen, err := w.e.Cat.Transforms(ctx, tx)
	if err != nil {
		return err
	}
	w.bySrc = map[int][]*catalog.Transform{}
	for _, t := range ts {
		w.bySrc[t.Spec.Source.ID] = append(w.bySrc[t.Spec.Source.ID], t)
	}
	w.gen, w.loaded = gen, true
	return nil
}

// applyPage recomputes every key of the page for every transform reading
// its sources. It returns the page's source ids (for failure reports).
func (w *Worker) applyPage(ctx context.Context, tx pgx.Tx, p *page) ([]int, error) {
	if err := w.reload(ctx, tx); err != nil {
		return nil, fmt.Errorf("loading definitions: %w", err)
	}
	rows, err := tx.Query(ctx, w.e.Cat.SQL(sqlPageKeys), p.lo, p.hi, p.buckets)
	if err != nil {
		return nil, fmt.Errorf("reading page %d: %w", p.id, err)
	}
	bySrc := map[int]*srcKeys{}
	for rows.Next() {
		var src, bucket int
		var key []string
		if err := rows.Scan(&src, &key, &bucket); err != nil {
			rows.Close()
			return nil, err
		}
		sk := bySrc[src]
		if sk == nil {
			sk = &srcKeys{buckets: map[int]bool{}}
			bySrc[src] = sk
		}
		if key == nil {
			sk.truncate = true
			continue
		}
		sk.keys = append(sk.keys, key)
		sk.buckets[bucket] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading page %d: %w", p.id, err)
	}
	srcs := make([]int, 0, len(bySrc))
	for s := range bySrc {
		srcs = append(srcs, s)
	}
	sort.Ints(srcs)

	type task struct {
		t  *catalog.Transform
		sk *srcKeys
	}
	var tasks []task
	var locks []int64
	for _, s := range srcs {
		sk := bySrc[s]
		for _, t := range w.bySrc[s] {
			if t.State == catalog.StatePaused {
				continue
			}
			tasks = append(tasks, task{t, sk})
			if sk.truncate {
				for b := 0; b < capture.Buckets; b++ {
					locks = append(locks, KeyLock(w.e.Cat.Schema, t.ID, b))
				}
				continue
			}
			for b := range sk.buckets {
				locks = append(locks, KeyLock(w.e.Cat.Schema, t.ID, b))
			}
		}
	}
	if len(tasks) == 0 {
		return srcs, nil
	}
	if _, err := tx.Exec(ctx, sqlKeyLocks, locks); err != nil {
		return srcs, fmt.Errorf("taking key locks: %w", err)
	}
	for _, tk := range tasks {
		pl := tk.t.Plan()
		if tk.sk.truncate {
			if _, err := tx.Exec(ctx, pl.Resync()); err != nil {
				return srcs, fmt.Errorf("resyncing %s after a truncate: %w", tk.t.Target, err)
			}
			continue
		}
		args := keyColumns(tk.sk.keys, len(tk.t.Spec.Source.KeyCols))
		if _, err := tx.Exec(ctx, pl.Recompute(), args...); err != nil {
			return srcs, fmt.Errorf("applying %d keys to %s: %w", len(tk.sk.keys), tk.t.Target, err)
		}
	}
	return srcs, nil
}

// keyColumns turns keys (each a list of column values) into one []string
// per key column, the Recompute statement's parameters.
func keyColumns(keys [][]string, n int) []any {
	cols := make([][]string, n)
	for i := range cols {
		cols[i] = make([]string, 0, len(keys))
	}
	for _, k := range keys {
		for i := 0; i < n && i < len(k); i++ {
			cols[i] = append(cols[i], k[i])
		}
	}
	args := make([]any, n)
	for i := range cols {
		args[i] = cols[i]
	}
	return args
}

// Cut closes the ledger rows committed since the last cut into pages. With
// force it records a cut even when there are no new rows (a watermark wait
// needs one covering its snapshot) and waits for a concurrent cutter. It
// returns the number of pages created.
func (e *Engine) Cut(ctx context.Context, force bool) (int, error) {
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	key := catalog.LockKey(e.Cat.Schema, "cut")
	if force {
		if _, err := tx.Exec(ctx, sqlCutLock, key); err != nil {
			return 0, err
		}
	} else {
		var ok bool
		if err := tx.QueryRow(ctx, sqlCutTry, key).Scan(&ok); err != nil || !ok {
			return 0, err
		}
	}
	var lo, hi string
	if err := tx.QueryRow(ctx, e.Cat.SQL(sqlLastCut)).Scan(&lo); err != nil {
		return 0, fmt.Errorf("reading the last cut: %w", err)
	}
	if err := tx.QueryRow(ctx, sqlNowSnap).Scan(&hi); err != nil {
		return 0, err
	}
	all := make([]int32, capture.Buckets)
	for i := range all {
		all[i] = int32(i)
	}
	rows, err := tx.Query(ctx, e.Cat.SQL(sqlCutCounts), lo, hi, all)
	if err != nil {
		return 0, fmt.Errorf("counting new ledger rows: %w", err)
	}
	type bc struct {
		bucket int32
		n      int64
	}
	var counts []bc
	var total int64
	for rows.Next() {
		var c bc
		if err := rows.Scan(&c.bucket, &c.n); err != nil {
			rows.Close()
			return 0, err
		}
		counts = append(counts, c)
		total += c.n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if total == 0 && !force {
		return 0, nil
	}
	var n int64
	if err := tx.QueryRow(ctx, e.Cat.SQL(sqlInsertCut), hi).Scan(&n); err != nil {
		return 0, fmt.Errorf("recording a cut: %w", err)
	}
	// Group buckets, in order, into pages of about PageTarget rows.
	pages := 0
	var cur []int32
	var size int64
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, e.Cat.SQL(sqlInsertPage), n, lo, hi, cur); err != nil {
			return fmt.Errorf("recording a page: %w", err)
		}
		pages++
		cur, size = nil, 0
		return nil
	}
	for _, c := range counts {
		if size > 0 && size+c.n > PageTarget {
			if err := flush(); err != nil {
				return 0, err
			}
		}
		cur = append(cur, c.bucket)
		size += c.n
	}
	if err := flush(); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return pages, nil
}
