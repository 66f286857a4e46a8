package trellis

import (
	"context"
	"strings"
	"time"

	"github.com/trellis-pg/trellis/internal/drain"
	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/selfcheck"
)

// SelfCheckMode says how a self-check treats rows that differ.
type SelfCheckMode string

// Self-check modes.
const (
	// SelfCheckStandard looks again at every key that differs, once the
	// target has caught up anew, and sets apart what is still being
	// applied then: sound while the source is being written.
	SelfCheckStandard SelfCheckMode = "standard"
	// SelfCheckStrict reports what differs after one wait per page: only
	// sound once writes to the tables the target depends on have stopped.
	SelfCheckStrict SelfCheckMode = "strict"
)

// SelfCheckState is where a self-check job is.
type SelfCheckState string

// Self-check job states. Queued and running are in progress; done carries
// a report; failed and cancelled carry an error.
const (
	SelfCheckQueued    SelfCheckState = "queued"
	SelfCheckRunning   SelfCheckState = "running"
	SelfCheckDone      SelfCheckState = "done"
	SelfCheckFailed    SelfCheckState = "failed"
	SelfCheckCancelled SelfCheckState = "cancelled"
)

// SelfCheckOutcome is a finished self-check's verdict.
type SelfCheckOutcome string

// Self-check outcomes.
const (
	// SelfCheckConsistent: every key compared agrees with a fresh recompute.
	SelfCheckConsistent SelfCheckOutcome = "consistent"
	// SelfCheckDiverged: some keys do not; the report counts them by kind.
	SelfCheckDiverged SelfCheckOutcome = "diverged"
)

// DivergenceKind says how a target row is out of step.
type DivergenceKind string

// Divergence kinds.
const (
	// DivergenceMissing: the definition yields a row the target lacks.
	DivergenceMissing DivergenceKind = "missing"
	// DivergenceExtra: the target has a row the definition does not yield.
	DivergenceExtra DivergenceKind = "extra"
	// DivergenceDiffering: both have the key, with different values.
	DivergenceDiffering DivergenceKind = "differing"
)

// SelfCheckOptions configure SelfCheck.
type SelfCheckOptions struct {
	// Timeout is how long each page of the check waits for the target to
	// catch up with its sources, per wait (a standard check waits up to
	// twice per page, a strict one once), and how long the job waits for
	// a transform that is not live yet to become live. Required.
	Timeout time.Duration
	// Mode is SelfCheckStandard (the default) or SelfCheckStrict.
	Mode SelfCheckMode
}

// SelfCheckJob is a background check of a target, as SelfCheck starts it
// and Client.SelfCheckJob reads it back.
type SelfCheckJob struct {
	ID int64
	// Target is the qualified target, "schema.table".
	Target string
	Mode   SelfCheckMode
	State  SelfCheckState
	// RowsCompared is how many keys the job has compared so far.
	RowsCompared int64
	// Report is the verdict; nil until State is SelfCheckDone.
	Report *SelfCheckReport
	// Error says why a failed or cancelled job ended; nil otherwise.
	Error *string
	// Timeout is the job's SelfCheckOptions.Timeout (to the millisecond).
	Timeout    time.Duration
	QueuedAt   time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
}

// Finished reports whether the job has ended: done, failed or cancelled.
func (j SelfCheckJob) Finished() bool {
	return j.State == SelfCheckDone || j.State == SelfCheckFailed || j.State == SelfCheckCancelled
}

// SelfCheckReport is what a finished self-check found, auditing the whole
// of a target against a fresh recompute of its definition.
type SelfCheckReport struct {
	Outcome SelfCheckOutcome
	// Divergences are examples, at most ten, in key order.
	Divergences []Divergence
	// Truncated says there are more divergences than Divergences lists.
	Truncated bool
	// RowsCompared is how many keys were compared.
	RowsCompared int64
	// Missing, Extra and Differing count the divergences by kind.
	Missing   int64
	Extra     int64
	Differing int64
	// InFlight counts keys that differed and were still being applied
	// when looked at again (a standard check does not report them).
	InFlight int64
	// HeldKeys are the keys the transform holds in quarantine: left out
	// of the comparison; nil when none.
	HeldKeys *HeldKeys
	// DrainFailures are the pages that keep failing on the transform's
	// sources; nil when none.
	DrainFailures []DrainFailure
	// PausedColumns are the columns left out of the comparison because
	// they are paused; nil when none.
	PausedColumns []string
	StartedAt     time.Time
	FinishedAt    time.Time
}

// Divergence is one key a self-check found out of step.
type Divergence struct {
	Kind DivergenceKind
	// Key is the target's key as Trellis renders keys: the value, or
	// "(a,b)" for a key of several columns.
	Key string
	// Columns are the columns that differ (DivergenceDiffering only).
	Columns []string
	// Target and Recomputed are the compared columns' values as text, in
	// the target and in a fresh recompute (nil for a NULL value); Target is
	// nil for a missing row, Recomputed for an extra one.
	Target     map[string]*string
	Recomputed map[string]*string
}

// SelfCheck starts a background check of target ("order_totals" or
// "public.order_totals") against a fresh recompute of its definition, and
// returns the job at once; poll Client.SelfCheckJob with its ID until it
// is Finished. A process with drain workers runs it (with none anywhere in
// the fleet the job stays queued). A target whose job is still queued or
// running gets that job back, whatever opts say; a finished job is
// replaced. An unknown target is CodeNotFound. A GROUP BY or JOIN target
// whose sources lack the indexes it needs (Status lists them) is refused
// with CodeValidation, unless it was defined WITHOUT SOURCE INDEX.
func (c *Client) SelfCheck(ctx context.Context, target string, opts SelfCheckOptions) (SelfCheckJob, error) {
	mode := opts.Mode
	if mode == "" {
		mode = SelfCheckStandard
	}
	switch {
	case opts.Timeout <= 0:
		return SelfCheckJob{}, newError(CodeValidation, "SelfCheckOptions.Timeout is required: how long each page waits for the target to catch up")
	case mode != SelfCheckStandard && mode != SelfCheckStrict:
		return SelfCheckJob{}, newError(CodeValidation, "unknown self-check mode %q: it is %q or %q", mode, SelfCheckStandard, SelfCheckStrict)
	}
	var out SelfCheckJob
	err := c.call(ctx, "starting a self-check", func(ctx context.Context) error {
		t, err := c.eng.Lookup(ctx, c.pool, target, false)
		if err != nil {
			return err
		}
		if t == nil {
			return errs.New(errs.NotFound, "no transform writes %s", target)
		}
		if !t.Spec.WithoutSourceIndex {
			gaps, err := c.eng.IndexGaps(ctx, c.pool, t.Spec)
			if err != nil {
				return err
			}
			if len(gaps) > 0 {
				var fixes []string
				for _, g := range gaps {
					fixes = append(fixes, g.Fix)
				}
				return errs.New(errs.Validation, "cannot self-check %s: its sources lack indexes it needs (%s); create them, or define it WITHOUT SOURCE INDEX",
					t.Target, strings.Join(fixes, " "))
			}
		}
		j, err := selfcheck.Start(ctx, c.pool, c.cat, t.ID, string(mode), opts.Timeout)
		if err != nil {
			return err
		}
		out = selfCheckJob(j)
		return nil
	})
	return out, err
}

// SelfCheckJob reads back the job SelfCheck returned with id, as it
// stands now; nil, nil when there is none: a newer SelfCheck of its target
// replaced it, or its transform was dropped.
func (c *Client) SelfCheckJob(ctx context.Context, id int64) (*SelfCheckJob, error) {
	var out *SelfCheckJob
	err := c.call(ctx, "reading a self-check", func(ctx context.Context) error {
		j, err := selfcheck.Get(ctx, c.pool, c.cat, id)
		if err != nil || j == nil {
			return err
		}
		job := selfCheckJob(j)
		out = &job
		return nil
	})
	return out, err
}

// startSelfCheckRunner runs self-check jobs in a client with drain workers.
func (c *Client) startSelfCheckRunner() {
	if c.opts.DrainWorkers == 0 {
		return
	}
	r := &selfcheck.Runner{Pool: c.work, Cat: c.cat, Logger: c.logger.With("service", "self_check"),
		Drain:        &drain.Engine{Pool: c.work, Cat: c.cat, Logger: c.logger.With("service", "self_check")},
		PollInterval: max(c.opts.PollInterval, 100*time.Millisecond)}
	c.wg.Add(1)
	go func() { defer c.wg.Done(); r.Run(c.closeCtx) }()
}

func utcMicro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func utcMicroPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := utcMicro(*t)
	return &u
}

func selfCheckJob(j *selfcheck.Job) SelfCheckJob {
	out := SelfCheckJob{ID: j.ID, Target: j.Target, Mode: SelfCheckMode(j.Mode), State: SelfCheckState(j.State),
		RowsCompared: j.RowsCompared, Error: j.Error, Timeout: j.Timeout, QueuedAt: utcMicro(j.QueuedAt),
		StartedAt: utcMicroPtr(j.StartedAt), FinishedAt: utcMicroPtr(j.FinishedAt)}
	if r := j.Report; r != nil {
		rep := &SelfCheckReport{Outcome: SelfCheckOutcome(r.Outcome), Truncated: r.Truncated, RowsCompared: r.RowsCompared,
			Missing: r.Missing, Extra: r.Extra, Differing: r.Differing, InFlight: r.InFlight,
			PausedColumns: r.PausedColumns, StartedAt: utcMicro(r.StartedAt), FinishedAt: utcMicro(r.FinishedAt)}
		for _, d := range r.Divergences {
			rep.Divergences = append(rep.Divergences, Divergence{Kind: DivergenceKind(d.Kind), Key: d.Key,
				Columns: d.Columns, Target: d.Target, Recomputed: d.Recomputed})
		}
		if h := r.HeldKeys; h != nil {
			rep.HeldKeys = &HeldKeys{Count: h.Count, OldestPoisonedAt: utcMicro(h.OldestPoisonedAt)}
		}
		for _, d := range r.DrainFailures {
			rep.DrainFailures = append(rep.DrainFailures, DrainFailure{SegSeq: d.SegSeq, Tables: d.Tables, Error: d.Error,
				SQLState: d.SQLState, Since: utcMicro(d.Since), LastSeen: utcMicro(d.LastSeen), Attempts: d.Attempts})
		}
		out.Report = rep
	}
	return out
}
