package trellis_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// ivmScenario is one file of testdata/pgivm (see its README).
type ivmScenario struct {
	setup, recompute string
	transforms       []string
	steps            []string
}

func readIVMScenario(t *testing.T, path string) ivmScenario {
	body, err := os.ReadFile(path)
	require.NoError(t, err)
	var sc ivmScenario
	var section string
	var cur []string
	flush := func() {
		text := strings.TrimSpace(strings.Join(cur, "\n"))
		cur = nil
		if text == "" {
			return
		}
		switch section {
		case "setup":
			sc.setup = text
		case "transform":
			sc.transforms = append(sc.transforms, text)
		case "recompute":
			sc.recompute = text
		case "step":
			sc.steps = append(sc.steps, text)
		default:
			t.Fatalf("%s: text outside a section: %q", path, text)
		}
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "-- "); ok && strings.IndexByte(name, ' ') < 0 {
			flush()
			section = name
			continue
		}
		cur = append(cur, line)
	}
	flush()
	require.NotEmpty(t, sc.transforms, path)
	require.NotEmpty(t, sc.recompute, path)
	return sc
}

// pg_ivm's regression scenarios that Trellis can express: after every
// step the last transform's target equals its recompute.
func TestPgIVMScenarios(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "pgivm", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".sql"), func(t *testing.T) {
			t.Parallel()
			sc := readIVMScenario(t, f)
			e := setup(t)
			c := e.engine()
			e.exec(sc.setup)
			var target string
			for _, tr := range sc.transforms {
				tgt, err := c.Define(e.ctx, tr)
				require.NoError(t, err, tr)
				e.waitState(c, tgt, trellis.StateLive)
				target = tgt
			}
			e.converge(c)
			e.assertMatches(target, sc.recompute)
			for _, step := range sc.steps {
				e.exec(step)
				e.converge(c)
				e.assertMatches(target, sc.recompute)
			}
		})
	}
}
