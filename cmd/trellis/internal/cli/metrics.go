package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trellis-pg/trellis"
)

// readyTimeout bounds a readiness check's round trip to the database.
const readyTimeout = 3 * time.Second

// serveMetrics serves the process's Trellis series, with the Go runtime's
// and the process's own, at http://addr/metrics (worker --metrics-addr),
// and health checks: /healthz answers 200 while the process serves, and
// /readyz 200 when ready returns nil (503 with its error otherwise).
// It listens before it returns, so an address in use fails the command at
// once; the address it logs is the one bound (port 0 picks a free one).
// stop shuts the server down and waits for it. An empty addr serves
// nothing.
func serveMetrics(addr string, logger *slog.Logger, ready func(context.Context) error) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	// An address without a host (":9187") binds the loopback interface
	// only; serving other hosts takes an explicit one ("0.0.0.0:9187").
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(trellis.MetricsCollector(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serving metrics stopped", "error", err)
		}
	}()
	logger.Info("serving metrics", "addr", ln.Addr().String(), "path", "/metrics", "health", "/healthz", "readiness", "/readyz")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}
