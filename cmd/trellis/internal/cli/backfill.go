package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
)

func newBackfillCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "backfill TABLE",
		Short: "Re-read a captured source table and re-derive every target that reads it",
		Long: `backfill re-reads TABLE (a bare table name or schema.table), a source a
transform reads, and re-derives every target of a transform that reads it:
each reports backfilling until its target agrees with the source again,
and target rows nothing in the source backs any more are deleted. Use it
after rows changed without capture seeing them (triggers disabled, a
restore). It returns once the rebuild is queued; a staging worker
(trellis worker) does the work. A table no transform reads is refused.`,
		Example: `  trellis backfill orders
  trellis status order_totals`,
		Args: exactArgs(1, "one TABLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.RequestBackfill(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backfill queued for %s: its readers re-derive their targets (watch with trellis status)\n", args[0])
			return nil
		},
	}
}
