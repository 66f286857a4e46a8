package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i))
	}
	require.EqualValues(t, 50, percentile(sorted, 50))
	require.EqualValues(t, 99, percentile(sorted, 99))
	require.EqualValues(t, 1, percentile(sorted[:1], 99))
	require.EqualValues(t, 0, percentile(nil, 50))
}
