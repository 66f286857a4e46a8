package trellis

import (
	"context"
	"strings"
	"time"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/selfcheck"
)

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
			return errs.New(CodeNotFound, "no transform writes %s", target)
		}
		if !t.Spec.WithoutSourceIndex {
			gaps, err := c.eng.IndexGaps(ctx, c.pool, t.Spec)
			if err != nil {
				return err
			}
			if len(gaps) > 0 {
				var fixes []string
				for _, g := range gaps {
					// A global top-k's ORDER BY index speeds its drain;
					// the check reads its k rows in one sort either way.
					if g.Role != RoleOrderBy {
						fixes = append(fixes, g.Fix)
					}
				}
				if len(fixes) > 0 {
					return errs.New(CodeValidation, "cannot self-check %s: its sources lack indexes it needs (%s); create them, or define it WITHOUT SOURCE INDEX",
						t.Target, strings.Join(fixes, " "))
				}
			}
		}
		j, err := selfcheck.Start(ctx, c.pool, c.cat, t.ID, mode, opts.Timeout)
		if err != nil {
			return err
		}
		out = j.SelfCheckJob
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
		out = &j.SelfCheckJob
		return nil
	})
	return out, err
}

// startSelfCheckRunner runs self-check jobs in a client with drain workers.
func (c *Client) startSelfCheckRunner(l *ledger.Ledger) {
	if c.opts.DrainWorkers == 0 {
		return
	}
	r := &selfcheck.Runner{Pool: c.work, Cat: c.cat, Logger: c.logger.With("service", "self_check"),
		Ledger:       l,
		PollInterval: max(c.opts.PollInterval, 100*time.Millisecond)}
	c.background("self_check", r.Run)
}
