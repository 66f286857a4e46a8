package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis/internal/bench"
)

// The bench command registers itself, so that this file alone can be left
// out of the build (a //go:build ignore line) while package bench changes.
func init() {
	extraCommands = append(extraCommands, newBenchCmd)
}

func newBenchCmd(g *globals) *cobra.Command {
	var (
		o          bench.Options
		quiet      bool
		sideBySide bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure write overhead, freshness, drain throughput and backfill speed",
		Long: `bench runs Trellis's benchmarks (` + strings.Join(bench.All, ", ") + `), each against a
baseline measured in the same run, and prints the figures as ratios, each with
the CPU time per change over every process (the server's and the benchmark's
own, which runs the Trellis workers): on a shared machine that figure stays
comparable where rates do not. --shape picks the transform they maintain
(` + strings.Join(bench.Shapes, ", ") + `).

--side-by-side runs the compare benchmark instead: plain writes, an empty
trigger with transition tables (the floor of trigger capture) and Trellis
(capture plus 2 drain workers, counted until the drain caught up),
interleaved in one run, with the ratios against plain. --durable runs the
throwaway server with fsync on.

Without --url or DATABASE_URL it runs on a throwaway PostgreSQL server. With
a database, each benchmark creates and drops schemas of its own in it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, n := range o.Only {
				if !slices.Contains(bench.Known, n) {
					return usageErrorf("--only: unknown benchmark %q (known: %s)", n, strings.Join(bench.Known, ", "))
				}
			}
			if sideBySide {
				if len(o.Only) > 0 {
					return usageErrorf("--side-by-side runs the compare benchmark alone: leave out --only")
				}
				o.Only = []string{bench.Compare}
			}
			if !slices.Contains(bench.Shapes, o.Shape) {
				return usageErrorf("--shape: unknown shape %q (known: %s)", o.Shape, strings.Join(bench.Shapes, ", "))
			}
			if o.Rows < 1 || o.Changes < 1 || o.Duration <= 0 {
				return usageErrorf("--rows, --changes and --duration must be positive")
			}
			o.URL = g.databaseURL()
			for _, axis := range [][]int{o.ScaleWriters, o.ScaleTransforms, o.ScaleWorkers} {
				for _, n := range axis {
					if n < 1 {
						return usageErrorf("--scale-writers, --scale-transforms and --scale-workers take positive numbers")
					}
				}
			}
			if o.Rate < 0 {
				return usageErrorf("--rate must not be negative")
			}
			if o.Load < 0 || o.Load > 1 {
				return usageErrorf("--load is a fraction of the plain write rate, between 0 and 1")
			}
			if o.Statements && o.URL != "" {
				return usageErrorf("--statements loads pg_stat_statements into the throwaway server: leave out --url and DATABASE_URL")
			}
			if o.Durable && o.URL != "" {
				return usageErrorf("--durable starts the throwaway server with fsync on: leave out --url and DATABASE_URL (a server of your own runs with its own settings)")
			}
			if !quiet {
				o.Logf = func(format string, args ...any) {
					fmt.Fprintf(g.env.Stderr, format+"\n", args...)
				}
			}
			return bench.Run(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Only, "only", nil, "run only these benchmarks (comma-separated: "+strings.Join(bench.Known, ", ")+"; default: "+strings.Join(bench.All, ", ")+")")
	f.IntVar(&o.Rows, "rows", bench.DefaultRows, "source rows of the write, latency, drain and backfill benchmarks")
	f.DurationVar(&o.Duration, "duration", bench.DefaultDuration, "length of each measured phase")
	f.IntVar(&o.Changes, "changes", bench.DefaultChanges, "backlog of the drain benchmark, in changed rows of the --rows source")
	f.StringVar(&o.Shape, "shape", bench.Projection, "the transform benchmarked: "+strings.Join(bench.Shapes, ", ")+
		" (a projection of bench_src, a GROUP BY of it into 10,000 groups, or its JOIN with 10,000 customers)")
	f.BoolVar(&quiet, "quiet", false, "do not print progress on stderr")
	f.BoolVar(&o.Durable, "durable", false, "run the throwaway server with fsync, synchronous_commit and full_page_writes on")
	f.Float64Var(&o.Load, "load", 0, "with --side-by-side: pace the writers at this fraction of the plain rate measured first (0.5: half load; 0: flat out)")
	f.Float64Var(&o.Rate, "rate", 0, "with --side-by-side: pace the writers at this many writes per second in all (overrides --load; for A/B runs)")
	f.BoolVar(&o.Statements, "statements", false, "load pg_stat_statements into the throwaway server and print what the Trellis phases ran (side-by-side, sustain)")
	f.IntSliceVar(&o.ScaleWriters, "scale-writers", bench.DefaultScaleWriters, "the scale benchmark's writer connections")
	f.IntSliceVar(&o.ScaleTransforms, "scale-transforms", bench.DefaultScaleTransforms, "the scale benchmark's numbers of transforms on the one source")
	f.IntSliceVar(&o.ScaleWorkers, "scale-workers", bench.DefaultScaleWorkers, "the scale benchmark's numbers of drain workers")
	f.BoolVar(&sideBySide, "side-by-side", false, "run plain writes, an empty-trigger floor and Trellis interleaved in one run, and print their ratios")
	return cmd
}
