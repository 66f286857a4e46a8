package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
)

// statuses reads the status of every transform, oldest first.
func statuses(ctx context.Context, c *trellis.Client) ([]trellis.Status, error) {
	defs, err := c.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]trellis.Status, 0, len(defs))
	for _, d := range defs {
		st, err := c.Status(ctx, d.Target)
		if err != nil {
			return nil, err
		}
		if st != nil { // dropped meanwhile
			out = append(out, *st)
		}
	}
	return out, nil
}

// writeOverview prints every transform in one table: state, since, build
// progress, pending changes and lag, held keys, and its problems in short.
func writeOverview(w io.Writer, g *globals, sts []trellis.Status, drainAlive bool, now time.Time) {
	if len(sts) == 0 {
		fmt.Fprintln(w, "no transforms (trellis apply or trellis sync defines them)")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tSTATE\tSINCE\tPENDING\tLAG\tHELD\tPROBLEMS")
	for _, st := range sts {
		state := string(st.State)
		if st.State == trellis.StateBackfilling {
			state += " " + buildProgress(st)
		}
		held := "-"
		if st.HeldKeys != nil && st.HeldKeys.Count > 0 {
			held = fmt.Sprint(st.HeldKeys.Count)
		}
		pending, lag := "-", "-"
		if st.PendingChanges > 0 {
			pending = fmt.Sprint(st.PendingChanges)
			lag = st.Lag.Round(time.Millisecond).String()
		}
		problems := strings.Join(problemsOf(st), "; ")
		if problems == "" {
			problems = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.bareTarget(st.Target), state, ago(st.Since, now), pending, lag, held, problems)
	}
	_ = tw.Flush()
	if !drainAlive {
		fmt.Fprintln(w, "no drain worker is running: changes are not applied (trellis worker)")
	}
	fmt.Fprintln(w, "trellis status TARGET shows one in full, with what to do about each problem")
}

// buildProgress is "N rows" or "N of ~M rows" for a build.
func buildProgress(st trellis.Status) string {
	if st.BuildTotal > 0 {
		return fmt.Sprintf("%d of ~%d rows", st.BuildRows, st.BuildTotal)
	}
	return fmt.Sprintf("%d rows", st.BuildRows)
}

// problemsOf lists a status's problems in a few words each.
func problemsOf(st trellis.Status) []string {
	var out []string
	if st.State == trellis.StatePaused {
		out = append(out, "paused: "+oneLine(st.PausedReason, 60))
	}
	if f := st.CaptureFailure; f != nil && st.State != trellis.StatePaused {
		out = append(out, fmt.Sprintf("%s failure on %s", f.Kind, f.SourceTable))
	}
	if f := st.DrainFailure; f != nil {
		out = append(out, fmt.Sprintf("a page keeps failing (%d attempts)", f.Attempts))
	}
	if f := st.BackfillFailure; f != nil && st.State != trellis.StatePaused {
		out = append(out, fmt.Sprintf("build failing (%d attempts)", f.Attempts))
	}
	if w := st.CaptureWait; w != nil {
		out = append(out, "capture waits for a lock on "+w.Table)
	}
	if len(st.PausedUpstreamColumns) > 0 {
		out = append(out, "paused upstream: "+strings.Join(st.PausedUpstreamColumns, ", "))
	}
	if len(st.BackfillingColumns) > 0 {
		out = append(out, "filling columns: "+strings.Join(st.BackfillingColumns, ", "))
	}
	gaps := 0
	for _, gap := range st.SourceIndexGaps {
		if !gap.OptedOut {
			gaps++
		}
	}
	if gaps > 0 {
		out = append(out, plural(int64(gaps), "missing source index"))
	}
	return out
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// watch runs show now and then every interval until ctx ends; on a
// terminal each run replaces the screen, otherwise runs are separated by a
// line with the time.
func watch(ctx context.Context, w io.Writer, interval time.Duration, show func(io.Writer) error) error {
	tty := isTerminal(w)
	for first := true; ; first = false {
		var b strings.Builder
		if err := show(&b); err != nil {
			return err
		}
		switch {
		case tty:
			fmt.Fprint(w, "\x1b[H\x1b[2J")
		case !first:
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "-- %s\n%s", time.Now().UTC().Format(time.RFC3339), b.String())
		if !backoff.Sleep(ctx, interval) {
			return nil
		}
	}
}
