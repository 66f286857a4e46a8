package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
)

func newDetectDisruptionsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "detect-disruptions",
		Short: "Pause now the transforms whose source's capture was changed outside Trellis",
		Long: `detect-disruptions checks every captured table for capture changed outside
Trellis (a trigger disabled and re-enabled, dropped or replaced, the capture
function replaced, the table gone), pauses the transforms reading such a
table (their status shows a capture failure of kind disruption), and lists
the tables whose capture stands disrupted. RESUME TRANSFORM reinstalls
capture and re-derives the target. The staging worker runs the same check on
its own cadence. It exits with status 3 when capture stands disrupted.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			tables, err := c.DetectCaptureDisruptions(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if len(tables) == 0 {
				fmt.Fprintln(w, "no capture disruptions")
				return nil
			}
			for _, t := range tables {
				fmt.Fprintf(w, "disrupted: %s (its transforms are paused; RESUME TRANSFORM each to reinstall capture and rebuild)\n", t)
			}
			return &foundError{msg: fmt.Sprintf("capture of %s is disrupted: their readers are paused", plural(int64(len(tables)), "table"))}
		},
	}
}
