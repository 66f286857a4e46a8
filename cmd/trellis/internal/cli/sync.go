package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
)

func newSyncCmd(g *globals) *cobra.Command {
	var (
		file          string
		dryRun, prune bool
		wait          bool
		waitTimeout   time.Duration
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "sync -f FILE",
		Short: "Make the instance's transforms match a file of TRANSFORM statements",
		Long: `sync compares the TRANSFORM statements of FILE (the format of apply -f;
- for standard input) with the instance's transforms, prints the plan, one
line per change, and carries it out:

  + create   a transform the instance lacks
  ~ alter    one that differs only by added (+col) or dropped (-col) output columns
  ! rebuild  any other difference: dropped and defined again, its target rebuilt
  - drop     with --prune, a transform the file does not define

A transform that is the same up to formatting is left alone, so running sync
with the same file on every deploy changes nothing the second time. A file
that does not parse, or that the engine would refuse, changes nothing.
With --dry-run it prints the plan and changes nothing. With --wait it waits
until every created, altered or rebuilt target is live.`,
		Example: `  trellis sync -f transforms.sql --dry-run
  trellis sync -f transforms.sql --prune --wait`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf("sync needs -f FILE")
			}
			ctx := cmd.Context()
			w := cmd.OutOrStdout()
			text, err := readStatements(file, g.env.Stdin)
			if err != nil {
				return err
			}
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			plan, err := c.Sync(ctx, text, trellis.SyncOptions{DryRun: dryRun, Prune: prune})
			if err != nil {
				if len(plan.Changes) > 0 && !asJSON {
					fmt.Fprintln(w, "planned:")
					printPlan(w, g, plan)
				}
				return err
			}
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(plan); err != nil {
					return err
				}
			} else {
				printPlan(w, g, plan)
				switch n := len(plan.Changes); {
				case n == 0:
					fmt.Fprintln(w, "nothing to change: the instance matches the file")
				case dryRun:
					fmt.Fprintf(w, "dry run: %s planned, nothing changed\n", plural(int64(n), "change"))
				default:
					fmt.Fprintf(w, "%s applied\n", plural(int64(n), "change"))
				}
			}
			if !wait || dryRun {
				return nil
			}
			var targets []string
			for _, ch := range plan.Changes {
				if ch.Action != trellis.SyncDrop {
					targets = append(targets, ch.Target)
				}
			}
			progress := cmd.ErrOrStderr()
			if asJSON {
				progress = io.Discard
			}
			return waitLive(ctx, c, g, targets, waitTimeout, progress)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "read the TRANSFORM statements from `FILE` (- for standard input)")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	f.BoolVar(&prune, "prune", false, "drop the transforms the file does not define")
	f.BoolVar(&wait, "wait", false, "wait until every created, altered or rebuilt target is live")
	f.DurationVar(&waitTimeout, "wait-timeout", 30*time.Minute, "give up waiting after this long (with --wait)")
	f.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	return cmd
}

// printPlan prints a sync plan like a diff, one line per change (and the
// statement of a create or rebuild under it).
func printPlan(w io.Writer, g *globals, p trellis.SyncPlan) {
	for _, ch := range p.Changes {
		name := g.bareTarget(ch.Target)
		switch ch.Action {
		case trellis.SyncCreate:
			fmt.Fprintf(w, "+ create  %s\n", name)
		case trellis.SyncAlter:
			var cols []string
			for _, c := range ch.AddColumns {
				cols = append(cols, "+"+c)
			}
			for _, c := range ch.DropColumns {
				cols = append(cols, "-"+c)
			}
			fmt.Fprintf(w, "~ alter   %s (%s)\n", name, strings.Join(cols, " "))
		case trellis.SyncRebuild:
			fmt.Fprintf(w, "! rebuild %s: %s\n", name, ch.Reason)
		case trellis.SyncDrop:
			fmt.Fprintf(w, "- drop    %s\n", name)
		}
		if ch.Action == trellis.SyncCreate || ch.Action == trellis.SyncRebuild {
			fmt.Fprintf(w, "    %s\n", oneLine(ch.Statement, 0))
		}
	}
}
