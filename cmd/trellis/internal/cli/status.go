package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
)

func newStatusCmd(g *globals) *cobra.Command {
	var (
		asJSON, watching bool
		interval         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status [TARGET] [--json] [--watch]",
		Short: "Show every transform in one table, or one transform in full",
		Long: `status with no TARGET prints every transform in one table: its state and
since when (with a build's rows done of the estimated total), the changes
still to apply and how long the oldest has waited, the keys it holds, and
its problems in short.

status TARGET shows the transform that writes TARGET (a bare table name or
schema.table): its state and since when, and every problem it has, each
with what it means and how to fix it.

--json prints the same as JSON (for no TARGET, an array of statuses).
--watch prints it again every --interval until interrupted.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("expected at most one TARGET, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return usageErrorf("--interval must be positive, not %s", interval)
			}
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			show := func(w io.Writer) error {
				if len(args) == 0 {
					return showOverview(ctx, c, g, w, asJSON)
				}
				return showStatus(ctx, c, g, w, args[0], asJSON)
			}
			if !watching {
				return show(cmd.OutOrStdout())
			}
			return watch(ctx, cmd.OutOrStdout(), interval, show)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the status as JSON")
	f.BoolVar(&watching, "watch", false, "print it again every --interval until interrupted")
	f.DurationVar(&interval, "interval", 2*time.Second, "how often --watch prints")
	return cmd
}

// showOverview prints every transform's status, in a table or as JSON.
func showOverview(ctx context.Context, c *trellis.Client, g *globals, w io.Writer, asJSON bool) error {
	sts, err := statuses(ctx, c)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, sts)
	}
	drainAlive, err := c.HasLiveDrainWorkers(ctx)
	if err != nil {
		return err
	}
	writeOverview(safeWriter{w}, g, sts, drainAlive, time.Now())
	return nil
}

// showStatus prints one transform's status in full, or as JSON.
func showStatus(ctx context.Context, c *trellis.Client, g *globals, w io.Writer, target string, asJSON bool) error {
	st, err := c.Status(ctx, target)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("no transform writes %s (trellis status lists them all)", target)
	}
	cols, err := quarantinedColumns(ctx, c, st.Target)
	if err != nil {
		return err
	}
	var held []trellis.PoisonSample
	if st.HeldKeys != nil && st.HeldKeys.Count > 0 {
		page, err := c.SampleQuarantined(ctx, st.Target, trellis.SampleOptions{Limit: heldExamples})
		if err != nil {
			return err
		}
		held = page.Samples
	}
	drainAlive, err := c.HasLiveDrainWorkers(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, statusJSON{st, cols, drainAlive})
	}
	writeStatus(safeWriter{w}, g, st, cols, held, drainAlive, time.Now())
	return nil
}

func newDefinitionsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "definitions [--json]",
		Short: "List every registered transform, oldest first",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			defs, err := c.Definitions(ctx)
			if err != nil {
				return err
			}
			w := safeWriter{cmd.OutOrStdout()}
			if asJSON {
				return writeJSON(w, list(defs))
			}
			if len(defs) == 0 {
				fmt.Fprintf(w, "no transforms are defined (schema %s)\n", g.schema)
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TARGET\tSTATE\tSINCE\tSTATEMENT")
			for _, d := range defs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Target, d.State, rfc3339(d.Since), oneLine(d.Statement, 0))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the definitions as a JSON array")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func rfc3339(t time.Time) string { return t.Format(time.RFC3339) }

// ago renders how long before now t was, to the second.
func ago(t, now time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}

// heldExamples is how many held keys status shows, each with the command
// that releases it.
const heldExamples = 3

// quarantinedColumns are the paused columns of the transform writing target
// ("schema.table"). Quarantined names a column by its transform's bare name,
// as a transform of the same name in another schema would be named too, so
// each is confirmed through its qualified address.
func quarantinedColumns(ctx context.Context, c *trellis.Client, target string) ([]trellis.QuarantineEntry, error) {
	_, name, _ := strings.Cut(target, ".")
	all, err := c.Quarantined(ctx)
	if err != nil {
		return nil, err
	}
	var out []trellis.QuarantineEntry
	for _, q := range all {
		col, ok := strings.CutPrefix(q.Target, name+".")
		if !ok || q.State != trellis.StatePaused {
			continue
		}
		mine, err := c.QuarantineStatus(ctx, target+"."+col)
		switch trellis.CodeOf(err) {
		case "":
			if err != nil {
				return nil, err
			}
			if mine.State == trellis.StatePaused {
				out = append(out, mine)
			}
		case trellis.CodeNotFound: // another schema's transform
		case trellis.CodeValidation: // a name the address cannot spell: keep it
			out = append(out, q)
		default:
			return nil, err
		}
	}
	return out, nil
}

// resumeCmd is the command line that resumes an address.
func resumeCmd(address string) string {
	return "`trellis apply 'RESUME TRANSFORM " + address + "'`"
}

// writeStatus prints a status for people: what it is, then each problem
// with what it means and what to do. cols are its quarantined columns, held
// the first keys it holds; drainAlive whether any drain worker of the
// instance is alive.
func writeStatus(w io.Writer, g *globals, st *trellis.Status, cols []trellis.QuarantineEntry, held []trellis.PoisonSample, drainAlive bool, now time.Time) {
	name := g.bareTarget(st.Target)
	resume := resumeCmd(name)
	fmt.Fprintf(w, "target:     %s\n", st.Target)
	fmt.Fprintf(w, "state:      %s\n", st.State)
	fmt.Fprintf(w, "since:      %s (%s)\n", rfc3339(st.Since), ago(st.Since, now))
	fmt.Fprintf(w, "statement:  %s\n", oneLine(st.Statement, 0))
	fmt.Fprintf(w, "pending:    %s\n", pendingLine(st))
	holding := st.HeldKeys != nil && st.HeldKeys.Count > 0
	switch st.State {
	case trellis.StateWaitingToBackfill:
		fmt.Fprintln(w, "  defined, not built yet: the build starts when a staging worker runs (trellis worker)")
	case trellis.StateBackfilling:
		fmt.Fprintf(w, "  being filled from its source: %d rows written so far\n", st.BuildRows)
	case trellis.StateLive:
		switch {
		case st.PendingChanges > 0:
			fmt.Fprintf(w, "  live, behind by %s of its sources not applied yet\n", plural(st.PendingChanges, "committed change"))
		case holding || len(cols) > 0:
			fmt.Fprintln(w, "  every committed change of its source is applied, except what is quarantined below")
		default:
			fmt.Fprintln(w, "  every committed change of its source is applied")
		}
	case trellis.StateCatchingUp:
		fmt.Fprintln(w, "  live, but an upstream column it reads is paused: its rows may lag until that column resumes")
	}

	problem := func(title, explain string, args ...any) {
		fmt.Fprintf(w, "\n%s\n", title)
		fmt.Fprintf(w, "  "+explain+"\n", args...)
	}
	if !drainAlive {
		problem("no drain worker is alive",
			"nothing applies committed changes to any target until one runs: start `trellis worker --drain N`, or a client with DrainWorkers, in some process of the instance")
	}
	if st.PausedReason != "" {
		fix := "fix the cause, then run " + resume + " to resume (it rebuilds the target from its source)"
		if st.CaptureFailure != nil || st.BackfillFailure != nil {
			fix = "what to fix is below; then run " + resume + " to resume (it rebuilds the target from its source)"
		}
		reason := oneLine(st.PausedReason, 0)
		if f := st.CaptureFailure; f != nil && st.PausedReason == f.Error {
			reason = "by the capture failure below"
		}
		problem("paused: "+reason, "nothing is applied to %s until it is resumed: %s", st.Target, fix)
	}
	if len(st.BackfillingColumns) > 0 {
		problem("backfilling columns: "+strings.Join(st.BackfillingColumns, ", "),
			"columns added by ALTER TRANSFORM are still being filled from the source; they read NULL until the build reaches their rows (nothing to do)")
	}
	if d := st.DrainFailure; d != nil {
		code := ""
		if d.SQLState != nil {
			code = " (SQLSTATE " + *d.SQLState + ")"
		}
		problem("drain failure: "+oneLine(d.Error, 0)+code,
			"a page of changes to %s (segment %d) has failed %d times since %s, last at %s; it is retried with backoff and clears once a retry succeeds: fix what the error names, nothing else is needed",
			strings.Join(d.Tables, ", "), d.SegSeq, d.Attempts, rfc3339(d.Since), rfc3339(d.LastSeen))
	}
	if holding {
		h := st.HeldKeys
		problem(fmt.Sprintf("held keys: %s held since %s", plural(h.Count, "key"), rfc3339(h.OldestPoisonedAt)),
			"changes of these source keys failed as a whole, so the keys are held and their later changes wait (every other key keeps applying): "+
				"list them with `trellis sample %s`, fix the rows, then `trellis release-key %s TABLE KEY` for each, or %s to release them all",
			name, name, resume)
		for _, s := range held {
			fmt.Fprintf(w, "  trellis release-key %s %s %s   # %s\n", name, s.SrcTable, shellWord(s.Key), oneLine(s.Error, 100))
		}
		if int64(len(held)) < h.Count && len(held) > 0 {
			fmt.Fprintf(w, "  ... and %d more\n", h.Count-int64(len(held)))
		}
	}
	for _, q := range cols {
		_, col, _ := strings.Cut(q.Target, ".")
		addr := name + "." + col
		if q.Error == "" {
			problem(fmt.Sprintf("paused column: %s since %s (PAUSE TRANSFORM)", addr, rfc3339(q.Since)),
				"the column is not updated while the others keep applying: %s re-derives it", resumeCmd(addr))
			continue
		}
		problem(fmt.Sprintf("quarantined column: %s since %s: its expression failed on %s: %s", addr, rfc3339(q.Since), plural(q.Rows, "row"), oneLine(q.Error, 0)),
			"the column is not updated while the others keep applying: list the rows with `trellis sample %s`, fix them (each leaves the sample once its change applies), then %s re-derives the column",
			addr, resumeCmd(addr))
	}
	if len(st.PausedUpstreamColumns) > 0 {
		problem("paused upstream columns: "+strings.Join(st.PausedUpstreamColumns, ", "),
			"columns this transform reads from another transform's target are paused, so it is catching_up: the rows it derives from them lag until they resume, then it is live again")
		for _, addr := range st.PausedUpstreamColumns {
			fmt.Fprintf(w, "  %s: `trellis sample %s` lists the rows it failed on, if any; once its cause is fixed, %s\n", addr, addr, resumeCmd(addr))
		}
	}
	for i, gap := range st.SourceIndexGaps {
		if i == 0 {
			fmt.Fprintf(w, "\nmissing source indexes: without one, every change of its table scans the table to find the rows it affects; Trellis never creates indexes itself\n")
		}
		opted := ""
		if gap.OptedOut {
			opted = ", opted out (WITHOUT SOURCE INDEX)"
		}
		if gap.Fix == "" {
			fmt.Fprintf(w, "  %s (%s) for %s%s: %s\n", gap.Table, strings.Join(gap.Columns, ", "), gap.Role, opted, gap.NoFix)
			continue
		}
		fmt.Fprintf(w, "  %s (%s) for %s%s: run: %s\n", gap.Table, strings.Join(gap.Columns, ", "), gap.Role, opted, gap.Fix)
	}
	for _, n := range st.Correcting {
		left := ""
		if n.KeysRemaining != nil {
			left = fmt.Sprintf(" (%d keys left)", *n.KeysRemaining)
		}
		problem(fmt.Sprintf("correcting: %s since %s", n.Node, rfc3339(n.Since)),
			"the target is being re-derived after partition %s was attached to or detached from the source%s; nothing to do, it clears when the correction finishes", n.Node, left)
	}
	if f := st.CaptureFailure; f != nil {
		cols := ""
		if len(f.Columns) > 0 {
			cols = " (columns " + strings.Join(f.Columns, ", ") + ")"
		}
		var fix string
		switch f.Kind {
		case trellis.CaptureFailureDisruption:
			fix = fmt.Sprintf("capture on %s was disabled, dropped or replaced outside Trellis, so rows written meanwhile never reached the target: %s reinstalls capture and rebuilds the target",
				f.SourceTable, resume)
		case trellis.CaptureFailureHalt:
			fix = fmt.Sprintf("applying to %s stopped on the error above, which says what failed (a change made to the target outside Trellis, or a source column, function or type the definition uses): fix that, or DROP TRANSFORM %s and define it again; then %s (it rebuilds the target)",
				st.Target, name, resume)
		default:
			what := "columns it reads"
			if len(f.Columns) > 0 {
				what = strings.Join(f.Columns, ", ")
			}
			fix = fmt.Sprintf("%s lost %s, which the definition reads (a column dropped, or its primary key): add it back on %s, then %s; or DROP TRANSFORM %s and define it again without it",
				f.SourceTable, what, f.SourceTable, resume, name)
		}
		problem(fmt.Sprintf("capture failure (%s) on %s%s since %s: %s", f.Kind, f.SourceTable, cols, rfc3339(f.DetectedAt), oneLine(f.Error, 0)), "%s", fix)
	}
	if cw := st.CaptureWait; cw != nil {
		problem(fmt.Sprintf("capture waits for a lock: %s on %s needs %s since %s", cw.Operation, cw.Table, cw.LockMode, rfc3339(cw.Since)),
			"the sessions below hold or queue for a conflicting lock; Trellis retries with a short lock_timeout (the table's writers do not wait on it) and never cancels them: "+
				"the wait ends when they finish, or when you cancel them (SELECT pg_cancel_backend(pid); pg_terminate_backend(pid) for one idle in transaction)")
		if len(cw.Blockers) == 0 {
			fmt.Fprintln(w, "  blocking: none right now (the next retry should succeed)")
		}
		for _, b := range cw.Blockers {
			fmt.Fprintf(w, "  blocking: %s\n", oneLine(b, 0))
		}
	}
	if b := st.BackfillFailure; b != nil {
		title := fmt.Sprintf("backfill failure: %d attempts, last error: %s", b.Attempts, oneLine(b.LastError, 0))
		if st.State == trellis.StatePaused {
			problem(title, "the build kept failing, so the transform paused: fix the cause the error names, then %s builds it again", resume)
		} else {
			problem(title, "the build keeps failing; the next attempt is at %s, and repeated failures pause the transform: fix the cause the error names (if it paused, then %s)",
				rfc3339(b.NextAttemptAt), resume)
		}
	}
}

// pendingLine says what is pending for a transform, and for how long.
func pendingLine(st *trellis.Status) string {
	if st.PendingChanges == 0 {
		return "none"
	}
	return fmt.Sprintf("%s, the oldest waiting up to %s", plural(st.PendingChanges, "change"), st.Lag.Round(time.Millisecond))
}

// shellWord quotes s for a shell command line when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+=,") == "" {
		return s
	}
	if p := printable(s); p != s {
		// Control characters: a $'...' word (bash, zsh, ksh) spells them
		// with the same escapes, so the command still names the key.
		var b strings.Builder
		for _, r := range s {
			switch {
			case r == '\\' || r == '\'':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r == '\n' || r == '\t' || unsafeRune(r):
				b.WriteString(escapeRune(r))
			default:
				b.WriteRune(r)
			}
		}
		return "$'" + b.String() + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// statusJSON is what status --json prints: the status as the shared type
// prints it, with the transform's quarantined columns and whether any
// drain worker is alive added.
type statusJSON struct {
	status     *trellis.Status
	cols       []trellis.QuarantineEntry
	drainAlive bool
}

func (s statusJSON) MarshalJSON() ([]byte, error) {
	st, err := json.Marshal(s.status)
	if err != nil {
		return nil, err
	}
	cols, err := json.Marshal(list(s.cols))
	if err != nil {
		return nil, err
	}
	out := append(st[:len(st)-1:len(st)-1], `,"quarantined_columns":`...)
	out = append(out, cols...)
	out = append(out, `,"drain_workers_alive":`...)
	out = strconv.AppendBool(out, s.drainAlive)
	return append(out, '}'), nil
}

// list is s, or an empty list for nil (JSON [] rather than null).
func list[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
