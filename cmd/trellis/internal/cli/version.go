package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of trellis and the revision it was built from",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionLine(debug.ReadBuildInfo()))
			return nil
		},
	}
}

// versionLine describes a build: the module's version ("(devel)" for a
// build from a checkout), the VCS revision and time when the build
// recorded them (go build in a clone, without -buildvcs=false), and the
// Go version.
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "trellis (no build information)"
	}
	line := "trellis " + info.Main.Version
	var rev, at, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" {
		line += fmt.Sprintf(" (revision %s, %s%s)", rev, at, dirty)
	}
	return line + " " + info.GoVersion
}
