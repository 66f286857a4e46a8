package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
)

func newQuarantinedCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "quarantined [--json]",
		Short: "List every quarantined or paused column, paused transform and transform holding keys",
		Long: `quarantined lists, by address, every column whose expression failed on
some rows (or that PAUSE TRANSFORM paused), every paused transform, and
every transform holding poisoned keys: one line each with its state, how
many rows or keys, and since when, then the reason and what to do.
--json prints the same as a JSON array.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			entries, err := c.Quarantined(ctx)
			if err != nil {
				return err
			}
			w := safeWriter{cmd.OutOrStdout()}
			if asJSON {
				return writeJSON(w, list(entries))
			}
			if len(entries) == 0 {
				fmt.Fprintln(w, "nothing is quarantined")
				return nil
			}
			for _, q := range entries {
				writeQuarantineEntry(w, q)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the entries as a JSON array")
	return cmd
}

// isColumnAddress reports whether a quarantine address names a column
// ("t.col") rather than a transform ("t").
func isColumnAddress(address string) bool { return strings.Contains(address, ".") }

// writeQuarantineEntry prints one entry of quarantined: a line with what
// and since when, its reason, and the command that lists its rows.
func writeQuarantineEntry(w io.Writer, q trellis.QuarantineEntry) {
	count := ""
	switch {
	case q.HeldKeys != nil:
		count = "  " + plural(q.HeldKeys.Count, "key") + " held"
	case isColumnAddress(q.Target) && q.Rows > 0:
		count = "  " + plural(q.Rows, "row") + " failed"
	}
	since := ""
	if !q.Since.IsZero() {
		since = "  since " + rfc3339(q.Since)
	}
	fmt.Fprintf(w, "%s  %s%s%s\n", q.Target, q.State, count, since)
	if q.Reason != "" {
		fmt.Fprintf(w, "    %s\n", oneLine(q.Reason, 0))
	}
	switch {
	case q.HeldKeys != nil:
		fmt.Fprintf(w, "    list them: trellis sample %s; release one: trellis release-key %s TABLE KEY\n", q.Target, q.Target)
	case q.Rows > 0:
		fmt.Fprintf(w, "    list them: trellis sample %s\n", q.Target)
	}
}

// plural is "1 row", "2 rows".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func newSampleCmd(g *globals) *cobra.Command {
	var (
		asJSON bool
		limit  int
		after  string
	)
	cmd := &cobra.Command{
		Use:   "sample ADDRESS [--limit N] [--after CURSOR] [--json]",
		Short: "Page the rows quarantined under a column or the keys a transform holds",
		Long: `sample prints one page of the rows quarantined under ADDRESS, ordered by
source table and key: for a column (transform.column), the source rows its
expression failed on (a row leaves the sample once its fix is applied);
for a transform, the keys it holds. When there is more, it prints the
command for the next page, with the cursor to pass to --after.`,
		Example: `  trellis sample order_totals.total
  trellis sample order_totals --limit 20`,
		Args: exactArgs(1, "one ADDRESS (transform or transform.column)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 10000 {
				return usageErrorf("--limit must be between 1 and 10000, not %d", limit)
			}
			opts := trellis.SampleOptions{Limit: limit}
			if after != "" {
				cur, err := trellis.ParseCursor(after)
				if err != nil {
					return usageErrorf("--after: %s (pass the cursor a previous page printed)", message(err))
				}
				opts.After = cur
			}
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			address := args[0]
			page, err := c.SampleQuarantined(ctx, address, opts)
			if err != nil {
				return err
			}
			w := safeWriter{cmd.OutOrStdout()}
			if asJSON {
				return writeJSON(w, page)
			}
			if len(page.Samples) == 0 {
				if after != "" {
					fmt.Fprintf(w, "no more rows are quarantined under %s\n", address)
				} else {
					fmt.Fprintf(w, "no rows are quarantined under %s\n", address)
				}
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SRC_TABLE\tKEY\tERROR")
			for _, s := range page.Samples {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.SrcTable, printable(s.Key), oneLine(s.Error, 0))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextCursor != nil {
				lim := ""
				if cmd.Flags().Changed("limit") {
					lim = fmt.Sprintf(" --limit %d", limit)
				}
				fmt.Fprintf(w, "next page: trellis sample %s%s --after %s\n", address, lim, page.NextCursor.String())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the page as JSON")
	f.IntVar(&limit, "limit", 100, "most rows to print (1 to 10000)")
	f.StringVar(&after, "after", "", "continue after the page that printed `CURSOR`")
	return cmd
}

func newPoisonedCmd(g *globals) *cobra.Command {
	var (
		asJSON bool
		since  string
	)
	cmd := &cobra.Command{
		Use:   "poisoned --since TIME [--json]",
		Short: "List the keys poisoned after a time, oldest first",
		Long: `poisoned lists every key a transform gave up on (and holds) after TIME,
oldest first: the transform, the source table, the key and the error.
TIME is an RFC 3339 time (2024-05-01T12:00:00Z) or a duration meaning
that long ago (15m, 2h). To poll, pass the time it prints after "next:"
to the next call.`,
		Example: `  trellis poisoned --since 1h
  trellis poisoned --since 2024-05-01T12:00:00.123456Z --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("since") {
				return usageErrorf("--since is required (an RFC 3339 time, or a duration such as 15m meaning that long ago)")
			}
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			entries, err := c.PoisonedSince(ctx, from)
			if err != nil {
				return err
			}
			w := safeWriter{cmd.OutOrStdout()}
			if asJSON {
				return writeJSON(w, list(entries))
			}
			if len(entries) == 0 {
				fmt.Fprintf(w, "no keys poisoned since %s\n", from.UTC().Format(time.RFC3339Nano))
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "POISONED_AT\tTRANSFORM\tSRC_TABLE\tKEY\tERROR")
			for _, p := range entries {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.PoisonedAt.Format(time.RFC3339Nano), p.Transform, p.SrcTable, printable(p.Key), oneLine(p.Error, 0))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			last := entries[len(entries)-1].PoisonedAt
			fmt.Fprintf(w, "next: trellis poisoned --since %s\n", last.Format(time.RFC3339Nano))
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the entries as a JSON array")
	f.StringVar(&since, "since", "", "list keys poisoned after `TIME`: RFC 3339, or a duration ago such as 15m (required)")
	return cmd
}

// parseSince reads --since: an RFC 3339 time (fractional seconds allowed),
// or a positive duration meaning that long before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, usageErrorf("--since %q: give an RFC 3339 time (2024-05-01T12:00:00Z) or a duration ago (15m, 2h)", s)
	}
	if d <= 0 {
		return time.Time{}, usageErrorf("--since %q: a duration ago must be positive", s)
	}
	return now.Add(-d), nil
}

func newReleaseKeyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "release-key TRANSFORM TABLE KEY",
		Short: "Release one key a transform holds, once its row is fixed",
		Long: `release-key releases KEY of source TABLE (bare or schema.table), which
TRANSFORM holds, as trellis sample and trellis poisoned print them: the
key is re-derived from its current row (the changes held meanwhile are not
replayed). If the cause remains, the key is poisoned and held again, and
release-key says so and exits 1. A key the transform does not hold is an
error and changes nothing. To release every key a transform holds, run
trellis apply 'RESUME TRANSFORM TRANSFORM'.`,
		Example: `  trellis release-key order_totals orders 42
  trellis release-key order_totals public.orders '(1,2)'`,
		Args: exactArgs(3, "TRANSFORM TABLE KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			transform, table, key := args[0], args[1], args[2]
			ctx := cmd.Context()
			// Quiet: the library warns when the key is poisoned again,
			// which this command reports itself.
			logger, err := g.logger(slog.LevelError)
			if err != nil {
				return err
			}
			c, err := g.connect(ctx, trellis.Options{Logger: logger})
			if err != nil {
				return err
			}
			defer c.Close()
			start := time.Now()
			if err := c.ReleaseKey(ctx, transform, table, key); err != nil {
				return err
			}
			// The release re-derives the key at once: an entry for it now
			// is the key poisoned again (its old entry went with the
			// release). The window allows for clock skew with the server.
			again, err := c.PoisonedSince(ctx, start.Add(-10*time.Minute))
			if err != nil {
				return fmt.Errorf("released key %s of %s held by %s, but checking whether it failed again failed: %w", key, table, transform, err)
			}
			for _, p := range again {
				if p.Key == key && sameTable(p.SrcTable, table) && sameTable(p.Transform, transform) {
					return fmt.Errorf("released key %s of %s held by %s, but re-deriving it failed again, so it is held again: %s; fix the row and run release-key again",
						key, p.SrcTable, p.Transform, oneLine(p.Error, 0))
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released key %s of %s held by %s: it was re-derived from its current row\n", key, table, transform)
			return nil
		},
	}
}

// sameTable reports whether a qualified name ("public.orders") is the
// name the user gave, qualified or bare.
func sameTable(qualified, given string) bool {
	if qualified == given {
		return true
	}
	_, name, ok := strings.Cut(qualified, ".")
	return ok && name == given
}
