package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
)

// selfCheckPoll is how often self-check reads its job back.
const selfCheckPoll = 200 * time.Millisecond

func newSelfCheckCmd(g *globals) *cobra.Command {
	var (
		asJSON  bool
		timeout time.Duration
		mode    string
	)
	cmd := &cobra.Command{
		Use:   "self-check TARGET [--timeout D] [--mode M] [--json]",
		Short: "Compare a target with a fresh recompute of its definition",
		Long: `self-check starts a background check of TARGET (a bare table name or
schema.table) against a fresh recompute of its definition, waits for it to
finish, and prints its report: the keys compared, how many rows are
missing from the target, extra in it, or differ, with examples, and what
was left out (held keys, paused columns) and why it may be behind (drain
failures). A drain worker of the fleet (trellis worker) runs the check;
with none, it stays queued. If a check of TARGET is already running, this
waits for that one. It exits with status 3 when the target diverged, 1 when it could not check.

--timeout is how long each page of the check waits for the target to
catch up with its sources. --mode standard (the default) looks again at
whatever differs once the target caught up anew, so changes still being
applied are not reported: safe while the sources are written. --mode
strict does not: use it once writes have stopped.`,
		Example: `  trellis self-check order_totals
  trellis self-check public.order_totals --mode strict --json`,
		Args: exactArgs(1, "one TARGET"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageErrorf("--timeout must be positive, not %s", timeout)
			}
			m := trellis.SelfCheckMode(mode)
			if m != trellis.SelfCheckStandard && m != trellis.SelfCheckStrict {
				return usageErrorf("--mode is standard or strict, not %q", mode)
			}
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			job, err := c.SelfCheck(ctx, args[0], trellis.SelfCheckOptions{Timeout: timeout, Mode: m})
			if err != nil {
				return err
			}
			if live, err := c.HasLiveDrainWorkers(ctx); err == nil && !live {
				fmt.Fprintf(cmd.ErrOrStderr(), "no drain worker is live: check %d stays queued until one runs (trellis worker)\n", job.ID)
			}
			done, err := awaitSelfCheck(ctx, c, job)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(w, done); err != nil {
					return err
				}
			} else {
				writeSelfCheck(w, g, done)
			}
			switch {
			case done.State != trellis.SelfCheckDone:
				reason := ""
				if done.Error != nil {
					reason = ": " + *done.Error
				}
				return fmt.Errorf("the check of %s %s%s", g.bareTarget(done.Target), done.State, reason)
			case done.Report.Outcome == trellis.SelfCheckDiverged:
				r := done.Report
				return &foundError{msg: fmt.Sprintf("%s diverged from a fresh recompute: %d missing, %d extra, %d differing",
					g.bareTarget(done.Target), r.Missing, r.Extra, r.Differing)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the finished job as JSON")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "how long each page waits for the target to catch up")
	f.StringVar(&mode, "mode", string(trellis.SelfCheckStandard), "standard, or strict once writes have stopped")
	return cmd
}

// awaitSelfCheck polls a job until it is finished. A job that goes away
// (its transform dropped) is an error.
func awaitSelfCheck(ctx context.Context, c *trellis.Client, job trellis.SelfCheckJob) (trellis.SelfCheckJob, error) {
	for !job.Finished() {
		if !backoff.Sleep(ctx, selfCheckPoll) {
			return job, fmt.Errorf("stopped waiting for check %d (%s, %d rows compared); it goes on in the background", job.ID, job.State, job.RowsCompared)
		}
		j, err := c.SelfCheckJob(ctx, job.ID)
		if err != nil {
			return job, err
		}
		if j == nil {
			return job, fmt.Errorf("check %d of %s is gone: its transform was dropped, or a newer check replaced it", job.ID, job.Target)
		}
		job = *j
	}
	return job, nil
}

// writeSelfCheck prints a finished job: the verdict and counts, examples,
// and what was left out.
func writeSelfCheck(w io.Writer, g *globals, j trellis.SelfCheckJob) {
	target := g.bareTarget(j.Target)
	r := j.Report
	if r == nil {
		reason := ""
		if j.Error != nil {
			reason = ": " + oneLine(*j.Error, 0)
		}
		fmt.Fprintf(w, "%s: check %s%s\n", target, j.State, reason)
		return
	}
	fmt.Fprintf(w, "%s: %s  %s compared (%s mode)", target, r.Outcome, plural(r.RowsCompared, "key"), j.Mode)
	if r.Outcome == trellis.SelfCheckDiverged {
		fmt.Fprintf(w, ": %d missing, %d extra, %d differing", r.Missing, r.Extra, r.Differing)
	}
	fmt.Fprintln(w)
	for _, d := range r.Divergences {
		switch d.Kind {
		case trellis.DivergenceMissing:
			fmt.Fprintf(w, "  missing    %s  recomputed %s\n", d.Key, rowText(d.Recomputed))
		case trellis.DivergenceExtra:
			fmt.Fprintf(w, "  extra      %s  in the target %s\n", d.Key, rowText(d.Target))
		default:
			var parts []string
			for _, col := range d.Columns {
				parts = append(parts, fmt.Sprintf("%s: %s in the target, %s recomputed", col, valueText(d.Target[col]), valueText(d.Recomputed[col])))
			}
			fmt.Fprintf(w, "  differing  %s  %s\n", d.Key, strings.Join(parts, "; "))
		}
	}
	if r.Truncated {
		fmt.Fprintf(w, "  ... and %d more\n", r.Missing+r.Extra+r.Differing-int64(len(r.Divergences)))
	}
	if r.InFlight > 0 {
		fmt.Fprintf(w, "%s still being applied when looked at again: not reported\n", plural(r.InFlight, "key"))
	}
	if h := r.HeldKeys; h != nil {
		fmt.Fprintf(w, "%s held in quarantine, left out (oldest poisoned %s): trellis sample %s\n", plural(h.Count, "key"), rfc3339(h.OldestPoisonedAt), target)
	}
	if len(r.PausedColumns) > 0 {
		fmt.Fprintf(w, "paused columns left out: %s\n", strings.Join(r.PausedColumns, ", "))
	}
	for _, d := range r.DrainFailures {
		fmt.Fprintf(w, "drain failure: page %d of %s keeps failing (%d attempts since %s): %s\n",
			d.SegSeq, strings.Join(d.Tables, ", "), d.Attempts, rfc3339(d.Since), oneLine(d.Error, 0))
	}
}

// rowText renders compared columns as {a=1, b=NULL}, by column name.
func rowText(row map[string]*string) string {
	cols := make([]string, 0, len(row))
	for c := range row {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + "=" + valueText(row[c])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func valueText(v *string) string {
	if v == nil {
		return "NULL"
	}
	return *v
}
