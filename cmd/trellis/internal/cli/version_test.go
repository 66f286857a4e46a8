package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionLine(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	require.Equal(t, "trellis v0.3.0 (revision 0123abcd, 2026-12-01T10:00:00Z, modified) go1.26.8", versionLine(info, true))
	info.Settings = nil
	info.Main.Version = "(devel)"
	require.Equal(t, "trellis (devel) go1.26.8", versionLine(info, true))
	require.Equal(t, "trellis (no build information)", versionLine(nil, false))
}
