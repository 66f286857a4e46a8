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
		o     bench.Options
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure write overhead, freshness, drain throughput and backfill speed",
		Long: `bench runs Trellis's benchmarks (` + strings.Join(bench.All, ", ") + `), each against a
baseline measured in the same run, and prints the figures as ratios. --shape
picks the transform they maintain (` + strings.Join(bench.Shapes, ", ") + `).

Without --url or DATABASE_URL it runs on a throwaway PostgreSQL server. With
a database, each benchmark creates and drops schemas of its own in it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, n := range o.Only {
				if !slices.Contains(bench.All, n) {
					return usageErrorf("--only: unknown benchmark %q (known: %s)", n, strings.Join(bench.All, ", "))
				}
			}
			if !slices.Contains(bench.Shapes, o.Shape) {
				return usageErrorf("--shape: unknown shape %q (known: %s)", o.Shape, strings.Join(bench.Shapes, ", "))
			}
			if o.Rows < 1 || o.Changes < 1 || o.Duration <= 0 {
				return usageErrorf("--rows, --changes and --duration must be positive")
			}
			o.URL = g.databaseURL()
			if !quiet {
				o.Logf = func(format string, args ...any) {
					fmt.Fprintf(g.env.Stderr, format+"\n", args...)
				}
			}
			return bench.Run(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Only, "only", nil, "run only these benchmarks (comma-separated: "+strings.Join(bench.All, ", ")+")")
	f.IntVar(&o.Rows, "rows", bench.DefaultRows, "source rows of the write and backfill benchmarks")
	f.DurationVar(&o.Duration, "duration", bench.DefaultDuration, "length of each measured phase")
	f.IntVar(&o.Changes, "changes", bench.DefaultChanges, "backlog of the drain benchmark, in changed rows")
	f.StringVar(&o.Shape, "shape", bench.Projection, "the transform benchmarked: "+strings.Join(bench.Shapes, ", ")+
		" (a projection of bench_src, a GROUP BY of it into 10,000 groups, or its JOIN with 10,000 customers)")
	f.BoolVar(&quiet, "quiet", false, "do not print progress on stderr")
	return cmd
}
