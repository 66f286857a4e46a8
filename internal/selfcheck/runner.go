package selfcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/internal/recompute"
	"github.com/trellis-pg/trellis/internal/safe"
	"github.com/trellis-pg/trellis/trellistype"
)

// Tuning of a check.
const (
	// PageSize is how many FROM keys a page of a projection or join covers.
	PageSize = 5000
	// MaxExamples is how many divergences a report lists.
	MaxExamples = 10
	// listLimit is how many differing units a first pass hands to its
	// re-check; past it, the re-check covers the whole page.
	listLimit = 10000
	// beatEvery and staleAfter: a running job's runner beats; another
	// runner takes over a job whose beat stopped.
	beatEvery  = 5 * time.Second
	staleAfter = 30 * time.Second
	// pageAttempts is how often a page whose query fails is tried.
	pageAttempts = 3
)

// Runner runs self-check jobs, one at a time, claimed from the catalog.
type Runner struct {
	Pool *pgxpool.Pool
	Cat  *catalog.Catalog
	// Ledger is waited on for a target to catch up.
	Ledger *ledger.Ledger
	Logger *slog.Logger
	// PollInterval is how often an idle runner looks for a queued job.
	PollInterval time.Duration
}

// Run claims and runs jobs until ctx ends. A job it is running then goes
// back to the queue for the next runner.
func (r *Runner) Run(ctx context.Context) {
	retry := backoff.Exponential{Min: time.Second, Max: 30 * time.Second}
	for ctx.Err() == nil {
		did, err := r.RunOne(ctx)
		if err != nil && ctx.Err() == nil {
			d := retry.Next()
			r.Logger.Error("the self-check runner failed to claim a job; retrying", "error", err, "retry_in", d)
			backoff.Sleep(ctx, d)
			continue
		}
		retry.Reset()
		if !did {
			backoff.Sleep(ctx, backoff.Jitter(r.PollInterval))
		}
	}
}

// claimed is a job a runner holds.
type claimed struct {
	id          int64
	claim       int64
	transformID int
	mode        trellistype.SelfCheckMode
	timeout     time.Duration
}

// RunOne claims one job and runs it to its end. It reports whether there
// was one.
func (r *Runner) RunOne(ctx context.Context) (bool, error) {
	j := claimed{claim: rand.Int64()}
	var timeoutMS int64
	err := r.Pool.QueryRow(ctx, r.Cat.SQL(sqlClaim), j.claim, staleAfter.Milliseconds()).
		Scan(&j.id, &j.transformID, &j.mode, &timeoutMS)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	j.timeout = time.Duration(timeoutMS) * time.Millisecond
	r.run(ctx, j)
	return true, nil
}

// jobError ends a job in state (failed or cancelled) with its message.
type jobError struct {
	state trellistype.SelfCheckState
	msg   string
}

func (e *jobError) Error() string { return e.msg }

// errGone: the job's row is gone (its transform was dropped).
var errGone = errors.New("the self-check job is gone")

// errNotLive: the page found the transform not live; it waits, then redoes the page.
var errNotLive = errors.New("the transform is not live")

func (r *Runner) run(ctx context.Context, j claimed) {
	log := r.Logger.With("self_check", j.id)
	log.Info("self-check started", "mode", j.mode)
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var gone atomic.Bool
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		// A panic here is reported and ends the job (it would run on
		// without its heartbeat); it never reaches the host process.
		err := safe.Do(func() error {
			t := time.NewTicker(beatEvery)
			defer t.Stop()
			for {
				select {
				case <-jctx.Done():
					return nil
				case <-t.C:
					tag, err := r.Pool.Exec(jctx, r.Cat.SQL(sqlBeat), j.id, j.claim)
					if err == nil && tag.RowsAffected() == 0 {
						gone.Store(true)
						cancel()
						return nil
					}
				}
			}
		})
		if err != nil {
			log.Error("self-check heartbeat panicked; the job stops", "error", err)
			cancel()
		}
	}()
	c := &check{r: r, job: j}
	rep, err := c.run(jctx)
	cancel()
	<-beat

	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	var ferr error
	switch {
	case gone.Load() || errors.Is(err, errGone):
		log.Info("self-check abandoned: its transform was dropped")
		return
	case ctx.Err() != nil:
		_, ferr = r.Pool.Exec(fctx, r.Cat.SQL(sqlRequeue), j.id, j.claim)
		log.Info("self-check queued again: its runner is stopping")
	case err != nil:
		state := trellistype.SelfCheckFailed
		var je *jobError
		if errors.As(err, &je) {
			state = je.state
		}
		msg := err.Error()
		_, ferr = r.Pool.Exec(fctx, r.Cat.SQL(sqlFinish), j.id, j.claim, state, nil, msg, nil)
		log.Warn("self-check "+string(state), "error", msg)
	default:
		raw, jerr := json.Marshal((*storedReport)(rep))
		if jerr != nil {
			ferr = jerr
			break
		}
		_, ferr = r.Pool.Exec(fctx, r.Cat.SQL(sqlFinish), j.id, j.claim, trellistype.SelfCheckDone, raw, nil, rep.RowsCompared)
		log.Info("self-check done", "outcome", rep.Outcome, "rows_compared", rep.RowsCompared,
			"missing", rep.Missing, "extra", rep.Extra, "differing", rep.Differing, "in_flight", rep.InFlight)
	}
	if ferr != nil {
		log.Error("recording the end of a self-check failed; another runner takes it over", "error", ferr)
	}
}

// check is one job's run.
type check struct {
	r   *Runner
	job claimed
	rep trellistype.SelfCheckReport
}

// pageReq is one pass over a page.
type pageReq struct {
	lower     []string // nil on the first page
	upper     []string // the page's end, when known
	findUpper bool     // find the page's end (the first pass)
	inFlight  bool     // mark the units in flight (a re-check)
	only      [][]*string
	restrict  bool
}

type countKey struct {
	kind     trellistype.DivergenceKind
	held     bool
	inFlight bool
}

type diffRow struct {
	kind     trellistype.DivergenceKind
	inFlight bool
	key      []*string
	cols     []string
	tgt, rec map[string]*string
}

type pageResult struct {
	t      *catalog.Transform
	upper  []string
	last   bool
	total  int64
	counts map[countKey]int64
	rows   []diffRow
}

// differing is how many rows differ that are not held.
func (p *pageResult) differing() int64 {
	var n int64
	for k, c := range p.counts {
		if !k.held {
			n += c
		}
	}
	return n
}

func (c *check) run(ctx context.Context) (*trellistype.SelfCheckReport, error) {
	c.rep.StartedAt = now()
	var lower []string
	var t *catalog.Transform
	attempts := 0
	for {
		var err error
		if t, err = c.awaitLive(ctx); err != nil {
			return nil, err
		}
		next, last, err := c.checkPage(ctx, t, lower)
		if errors.Is(err, errNotLive) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, errGone) {
				return nil, err
			}
			if attempts++; attempts >= pageAttempts {
				return nil, fmt.Errorf("checking %s: %w", t.Target, err)
			}
			// A statement may have changed the definition under the page.
			c.r.Logger.Warn("a self-check page failed; trying it again", "self_check", c.job.id, "error", err)
			backoff.Sleep(ctx, time.Duration(attempts)*200*time.Millisecond)
			continue
		}
		attempts = 0
		tag, err := c.r.Pool.Exec(ctx, c.r.Cat.SQL(sqlProgress), c.job.id, c.job.claim, c.rep.RowsCompared)
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() == 0 {
			return nil, errGone
		}
		if last {
			break
		}
		lower = next
	}
	return c.finish(ctx, t)
}

// checkPage checks the page after lower and returns its end (the next
// page's lower bound), or last.
func (c *check) checkPage(ctx context.Context, t *catalog.Transform, lower []string) ([]string, bool, error) {
	if _, err := c.awaitCaughtUp(ctx, t); err != nil {
		return nil, false, err
	}
	standard := c.job.mode == trellistype.SelfCheckStandard
	p1, err := c.page(ctx, pageReq{lower: lower, findUpper: true})
	if err != nil {
		return nil, false, err
	}
	result := p1
	if standard && p1.differing() > 0 {
		// Anything that differs is looked at again once the target caught
		// up anew, with what is still in flight then set apart.
		if _, err := c.awaitCaughtUp(ctx, t); err != nil {
			return nil, false, err
		}
		req := pageReq{lower: lower, upper: p1.upper, inFlight: true}
		if p1.differing() <= listLimit {
			req.restrict = true
			pl := p1.t.Plan()
			for _, row := range p1.rows {
				req.only = append(req.only, pl.UnitOf(row.key))
			}
		}
		if result, err = c.page(ctx, req); err != nil {
			return nil, false, err
		}
	}
	c.rep.RowsCompared += p1.total
	for k, n := range result.counts {
		switch {
		case k.held:
		case standard && k.inFlight:
			c.rep.InFlight += n
		case k.kind == trellistype.DivergenceMissing:
			c.rep.Missing += n
		case k.kind == trellistype.DivergenceExtra:
			c.rep.Extra += n
		default:
			c.rep.Differing += n
		}
	}
	for _, row := range result.rows {
		if standard && row.inFlight {
			continue
		}
		if len(c.rep.Divergences) < MaxExamples {
			c.rep.Divergences = append(c.rep.Divergences, trellistype.Divergence{Kind: row.kind, Key: recompute.RenderKey(row.key),
				Columns: row.cols, Target: row.tgt, Recomputed: row.rec})
		}
	}
	return p1.upper, p1.last, nil
}

// page runs one pass over a page in one repeatable-read snapshot.
func (c *check) page(ctx context.Context, req pageReq) (*pageResult, error) {
	tx, err := c.r.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t, err := c.r.Cat.TransformByID(ctx, tx, c.job.transformID, false)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errGone
	}
	if t.State != trellistype.StateLive {
		return nil, errNotLive
	}
	pl := t.Plan()
	res := &pageResult{t: t, counts: map[countKey]int64{}}
	unitNames, _ := pl.CheckUnit()
	nu := len(unitNames)
	var args []any
	hasLower, hasUpper := false, false
	if pl.CheckPaged() {
		upper := req.upper
		if req.findUpper {
			bargs := make([]any, len(req.lower))
			for i, v := range req.lower {
				bargs[i] = v
			}
			rows, err := tx.Query(ctx, pl.CheckBound(req.lower == nil, PageSize), bargs...)
			if err != nil {
				return nil, fmt.Errorf("finding the end of the page: %w", err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					rows.Close()
					return nil, err
				}
				upper = make([]string, len(vals))
				for i, v := range vals {
					upper[i], _ = v.(string)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, fmt.Errorf("finding the end of the page: %w", err)
			}
		}
		res.upper, res.last = upper, upper == nil
		if req.lower != nil {
			hasLower = true
			for _, v := range req.lower {
				args = append(args, v)
			}
		}
		if upper != nil {
			hasUpper = true
			for _, v := range upper {
				args = append(args, v)
			}
		}
	} else {
		res.last = true
	}

	var inflight, held [][]*string
	allInFlight := false
	if req.inFlight {
		if inflight, allInFlight, err = c.inFlight(ctx, tx, t, pl); err != nil {
			return nil, fmt.Errorf("reading the changes in flight: %w", err)
		}
	}
	rows, err := tx.Query(ctx, c.r.Cat.SQL(sqlHeldUnits), t.ID)
	if err != nil {
		return nil, err
	}
	if held, err = pgx.CollectRows(rows, pgx.RowTo[[]*string]); err != nil {
		return nil, fmt.Errorf("reading the keys %s holds: %w", t.Target, err)
	}
	args = append(args, columns(inflight, nu)...)
	args = append(args, columns(held, nu)...)
	args = append(args, columns(req.only, nu)...)
	args = append(args, allInFlight, req.restrict, listLimit)

	rows, err = tx.Query(ctx, pl.CheckPage(hasLower, hasUpper), args...)
	if err != nil {
		return nil, fmt.Errorf("comparing the target with a recompute: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var part int32
		var kind trellistype.DivergenceKind
		var isHeld, isInFlight bool
		var n *int64
		var key []*string
		var cols []string
		var tgt, rec map[string]*string
		if err := rows.Scan(&part, &kind, &isHeld, &isInFlight, &n, &key, &cols, &tgt, &rec); err != nil {
			return nil, err
		}
		switch part {
		case 0:
			res.counts[countKey{kind: kind, held: isHeld, inFlight: isInFlight}] += *n
		case 1:
			res.rows = append(res.rows, diffRow{kind: kind, inFlight: isInFlight, key: key, cols: cols, tgt: tgt, rec: rec})
		case 2:
			res.total = *n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("comparing the target with a recompute: %w", err)
	}
	return res, nil
}

// columns turns units into one text[] parameter per unit column.
func columns(units [][]*string, n int) []any {
	if n == 0 {
		// A global aggregate's one unit has no columns: the set holds it
		// or not.
		return []any{len(units) > 0}
	}
	cols := make([][]*string, n)
	for i := range cols {
		cols[i] = []*string{}
	}
	for _, u := range units {
		for i := 0; i < n && i < len(u); i++ {
			cols[i] = append(cols[i], u[i])
		}
	}
	out := make([]any, n)
	for i, c := range cols {
		out[i] = c
	}
	return out
}

// inFlight lists the units that changes committed in the snapshot and not
// yet applied will recompute: the units the drain will touch, found the
// way the drain finds them. all says every unit is (a TRUNCATE).
func (c *check) inFlight(ctx context.Context, tx pgx.Tx, t *catalog.Transform, pl *plan.Plan) ([][]*string, bool, error) {
	var frontier *string // nil: no cut yet
	f, err := c.r.Ledger.DrainedFrontier(ctx, tx)
	switch {
	case err == nil:
		frontier = &f.Snap
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, false, err
	}
	spec := t.Spec
	var ids []int
	for _, src := range spec.Sources() {
		if !slices.Contains(ids, src.ID) {
			ids = append(ids, src.ID)
		}
	}
	changes, err := c.r.Ledger.InFlight(ctx, tx, ids, frontier)
	if err != nil {
		return nil, false, err
	}
	bySrc := map[int][]ledger.Change{}
	var order []int
	for _, ch := range changes {
		if ch.Key == nil || ch.NullPart() && !t.Spec.NullableKeys(ch.Src) {
			return nil, true, nil
		}
		if _, ok := bySrc[ch.Src]; !ok {
			order = append(order, ch.Src)
		}
		bySrc[ch.Src] = append(bySrc[ch.Src], ch)
	}
	if len(bySrc) == 0 {
		return nil, false, nil
	}
	var units [][]*string
	var sources map[int]*catalog.Source
	source := func(id int) (*catalog.Source, error) {
		if sources == nil {
			all, err := c.r.Cat.Sources(ctx, tx)
			if err != nil {
				return nil, err
			}
			sources = map[int]*catalog.Source{}
			for _, s := range all {
				sources[s.ID] = s
			}
		}
		return sources[id], nil
	}
	add := func(key []*string, _ int) { units = append(units, key) }
	for _, src := range order {
		if err := recompute.Affected(ctx, tx, t, pl, src, source, bySrc[src], "", add); err != nil {
			return nil, false, err
		}
	}
	return units, false, nil
}

// awaitLive waits, up to the job's timeout, for the transform to be live.
// A paused transform cancels the job.
func (c *check) awaitLive(ctx context.Context) (*catalog.Transform, error) {
	deadline := time.Now().Add(c.job.timeout)
	for {
		t, err := c.r.Cat.TransformByID(ctx, c.r.Pool, c.job.transformID, false)
		if err != nil {
			return nil, err
		}
		if t == nil {
			return nil, errGone
		}
		switch t.State {
		case trellistype.StateLive:
			return t, nil
		case trellistype.StatePaused:
			reason := t.PausedReason
			if reason == "" {
				reason = "paused"
			}
			return nil, &jobError{state: trellistype.SelfCheckCancelled, msg: fmt.Sprintf(
				"%s is paused (%s): nothing keeps a paused target up to date, so there is nothing to check; RESUME TRANSFORM %s, then check again",
				t.Target, reason, t.Target.Name)}
		}
		if time.Now().After(deadline) {
			return nil, &jobError{state: trellistype.SelfCheckFailed, msg: fmt.Sprintf(
				"%s was still %s after %s: a check compares a live target; check again once it is live", t.Target, t.State, c.job.timeout)}
		}
		backoff.Sleep(ctx, 50*time.Millisecond)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// awaitCaughtUp waits, up to the job's timeout, until every change
// committed so far to the tables the target depends on (through chains of
// transforms too) has been applied. It reports whether it got there; not
// getting there is not an error (a change still in flight is set apart by
// the re-check).
func (c *check) awaitCaughtUp(ctx context.Context, t *catalog.Transform) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, c.job.timeout)
	defer cancel()
	ids, depth, err := c.dependencies(wctx, t)
	if err == nil {
		var token string
		if token, err = ledger.Snapshot(wctx, c.r.Pool); err == nil {
			err = c.r.Ledger.Converged(wctx, token, depth, ids, nil)
		}
	}
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return false, nil
	}
	return err == nil, err
}

// dependencies are the source ids whose changes reach the target, through
// the transforms whose targets it reads, and the longest such chain.
func (c *check) dependencies(ctx context.Context, t *catalog.Transform) ([]int, int, error) {
	all, _, err := c.r.Cat.Transforms(ctx, c.r.Pool)
	if err != nil {
		return nil, 0, err
	}
	byTarget := map[string]*catalog.Transform{}
	for _, u := range all {
		byTarget[u.Target.String()] = u
	}
	seen := map[int]bool{}
	var ids []int
	depth := 0
	var visit func(u *catalog.Transform, d int)
	visit = func(u *catalog.Transform, d int) {
		depth = max(depth, d)
		for _, s := range u.Spec.Sources() {
			if !seen[s.ID] {
				seen[s.ID] = true
				ids = append(ids, s.ID)
			}
			if up := byTarget[s.Schema+"."+s.Table]; up != nil && d <= len(all) {
				visit(up, d+1)
			}
		}
	}
	visit(t, 1)
	return ids, depth, nil
}

// finish completes the report: what the transform holds, the drain
// failures on its sources, its paused columns, the verdict.
func (c *check) finish(ctx context.Context, t *catalog.Transform) (*trellistype.SelfCheckReport, error) {
	rep := &c.rep
	var count int64
	var oldest *time.Time
	if err := c.r.Pool.QueryRow(ctx, c.r.Cat.SQL(sqlHeld), t.ID).Scan(&count, &oldest); err != nil {
		return nil, err
	}
	if count > 0 && oldest != nil {
		rep.HeldKeys = &trellistype.HeldKeys{Count: count, OldestPoisonedAt: *oldest}
	}
	names := t.Spec.Tables()
	var err error
	if rep.DrainFailures, err = c.r.Ledger.Failing(ctx, c.r.Pool, names, 0); err != nil {
		return nil, err
	}
	if len(rep.DrainFailures) == 0 {
		rep.DrainFailures = nil
	}
	for _, col := range t.Spec.Columns {
		if col.Paused {
			rep.PausedColumns = append(rep.PausedColumns, col.Name)
		}
	}
	rep.Outcome = trellistype.SelfCheckConsistent
	if n := rep.Missing + rep.Extra + rep.Differing; n > 0 {
		rep.Outcome = trellistype.SelfCheckDiverged
		rep.Truncated = n > int64(len(rep.Divergences))
	}
	rep.FinishedAt = now()
	return rep, nil
}

// now is the time a report records: what a timestamptz column would hold
// (UTC, to the microsecond), as the report is stored as JSON.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
