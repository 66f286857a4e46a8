package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNilInstance(t *testing.T) {
	var in *Instance
	in.DrainPage(time.Millisecond, 3, 4)
	in.DrainPageFailed()
	in.ColumnsQuarantined(1)
	in.KeysPoisoned(1)
	in.BuildPage(10, true)
	in.BuildPageFailed(true)
	in.CaptureFailures("halt", 1)
	in.ForgetSample()
	in.Close()
	require.NoError(t, in.Sample(t.Context(), nil, nil))
	require.Empty(t, in.Label())
}

func TestInstances(t *testing.T) {
	a := Open("db/unit_a")
	a2 := Open("db/unit_a")
	b := Open("db/unit_b")
	require.Same(t, a, a2, "the clients of one instance share its series")

	a.DrainPage(20*time.Millisecond, 7, 8)
	a2.DrainPage(30*time.Millisecond, 5, 6)
	a.DrainPageFailed()
	a.ColumnsQuarantined(1)
	a.KeysPoisoned(3)
	a.BuildPage(100, false)
	a.BuildPage(50, true)
	a.BuildPageFailed(true)
	a.CaptureFailures("disruption", 2)
	a.CaptureFailures("nonsense", 1)

	text := Render()
	require.Contains(t, text, `trellis_drain_pages_total{result="ok",trellis_instance="db/unit_a"} 2`+"\n")
	require.Contains(t, text, `trellis_drain_keys_applied_total{trellis_instance="db/unit_a"} 12`+"\n")
	require.Contains(t, text, `trellis_build_rows_total{trellis_instance="db/unit_a"} 150`+"\n")
	require.Contains(t, text, `trellis_drain_keys_applied_total{trellis_instance="db/unit_b"} 0`+"\n")
	require.Contains(t, text, `trellis_drain_pages_total{result="failed",trellis_instance="db/unit_a"} 1`+"\n")
	require.Contains(t, text, `trellis_quarantine_events_total{kind="key",trellis_instance="db/unit_a"} 3`+"\n")
	require.Contains(t, text, `trellis_builds_total{result="paused",trellis_instance="db/unit_a"} 1`+"\n")
	require.Contains(t, text, `trellis_capture_failures_total{kind="disruption",trellis_instance="db/unit_a"} 2`+"\n")
	require.Contains(t, text, `trellis_drain_page_seconds_count{trellis_instance="db/unit_a"} 2`+"\n")
	require.Contains(t, text, `trellis_drain_pages_total{result="ok",trellis_instance="db/unit_b"} 0`+"\n")
	require.NotContains(t, text, "trellis_drain_lag_seconds", "gauges show once sampled")

	// The last client of an instance takes its series along.
	a.Close()
	require.Contains(t, Render(), `trellis_instance="db/unit_a"`)
	a2.Close()
	require.NotContains(t, Render(), `trellis_instance="db/unit_a"`)
	require.Contains(t, Render(), `trellis_instance="db/unit_b"`)
	b.Close()
	require.False(t, strings.Contains(Render(), "db/unit_b"))

	// Opened again, it starts from zero.
	a = Open("db/unit_a")
	defer a.Close()
	require.Contains(t, Render(), `trellis_drain_keys_applied_total{trellis_instance="db/unit_a"} 0`+"\n")
}

// TestCostlySamplesComeLessOften: after a sample that took a second (a
// large backlog to count), the next waits twenty seconds, not SampleEvery;
// a cheap one is repeated every SampleEvery.
func TestCostlySamplesComeLessOften(t *testing.T) {
	require.Equal(t, SampleEvery, sampleGap(10*time.Millisecond))
	require.Equal(t, 20*time.Second, sampleGap(time.Second))

	in := Open("db/unit_costly")
	defer in.Close()
	in.lastSample = time.Now().Add(-3 * time.Second)
	in.lastTook = time.Second
	// Not due: it returns before reading anything (a nil querier would
	// panic).
	require.NoError(t, in.Sample(t.Context(), nil, nil))
}
