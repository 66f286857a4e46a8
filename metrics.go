package trellis

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellis-pg/trellis/internal/metrics"
)

// MetricsCollector returns the process-wide collector of Trellis's metrics,
// for the host's registry:
//
//	prometheus.MustRegister(trellis.MetricsCollector())
//
// It covers every Client in the process; each series carries the label
// trellis_instance="<database>/<catalog schema>" (the value the logs
// carry), so clients of different instances stay apart, and the clients
// of one instance share their series. A closed Client's series leave once
// no Client of its instance remains. Register it once per registry.
//
// Counters and histograms come from the work this process does (drain
// pages, builds, quarantines); the gauges of the instance's state (lag,
// pending pages, ledger rows, quarantined columns, held keys, transforms
// by state) are sampled by the process running the staging worker. The
// README lists the series.
func MetricsCollector() prometheus.Collector {
	return metrics.Collector()
}

// RenderPrometheus returns every Trellis series of the process in the
// Prometheus text exposition format, for a /metrics route the host serves
// itself. It needs no Client, and covers all of them.
func RenderPrometheus() string {
	return metrics.Render()
}
