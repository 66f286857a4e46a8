package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
)

func newMigrateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the Trellis catalog (idempotent)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.Migrate(ctx); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "catalog migrated (schema %s)\n", g.schema)
			return nil
		},
	}
}

// migrateHint adds the command to run to an error saying the catalog is
// missing or behind.
func migrateHint(g *globals, err error) error {
	if trellis.CodeOf(err) != trellis.CodeNotFound {
		return err
	}
	cmd := "trellis migrate"
	if g.schema != "trellis" {
		cmd += " --schema " + g.schema
	}
	return &wrappedError{msg: message(err) + " (`" + cmd + "` does that)", err: err}
}

func newWorkerCmd(g *globals) *cobra.Command {
	var (
		staging     bool
		drain       int
		logLevel    string
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run background workers (staging and drain) until interrupted",
		Long: `worker runs Trellis's background work for one instance until it receives
SIGINT or SIGTERM, then stops cleanly and exits 0.

Exactly one process per instance runs the staging worker (--staging, the
default); any number may run drain workers. Run it as a sidecar next to a
service written in any language. The catalog must be migrated first
(trellis migrate).

With --metrics-addr, it serves Prometheus metrics at http://ADDR/metrics:
every series of the instance (labelled trellis_instance) and the process's
own; /healthz answers 200 while the process runs, /readyz 200 once it is
connected, the database answers and its workers are alive (503 otherwise).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if drain < 0 {
				return usageErrorf("--drain must not be negative")
			}
			if !staging && drain == 0 {
				return usageErrorf("nothing to run: pass --staging or --drain N with N > 0")
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usageErrorf("--log-level %q: use debug, info, warn or error", logLevel)
			}
			logger := g.logger(level)
			ctx := cmd.Context()
			var client atomic.Pointer[trellis.Client]
			stopMetrics, err := serveMetrics(metricsAddr, logger, func(ctx context.Context) error {
				return workerReady(ctx, client.Load(), staging, drain)
			})
			if err != nil {
				return err
			}
			defer stopMetrics()
			c, err := g.connect(ctx, trellis.Options{Staging: staging, DrainWorkers: drain, Logger: logger})
			if err != nil {
				return migrateHint(g, err)
			}
			client.Store(c)
			logger.Info("worker started", "schema", g.schema, "staging", staging, "drain_workers", drain)
			<-ctx.Done()
			logger.Info("worker stopping")
			err = c.Close()
			logger.Info("worker stopped")
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&staging, "staging", true, "run the instance's staging worker (exactly one process per instance)")
	f.IntVar(&drain, "drain", 2, "number of drain workers")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, and /healthz and /readyz (e.g. :9187, which binds 127.0.0.1 only; 0.0.0.0:9187 for every interface; port 0 picks a free one); off when empty")
	return cmd
}

// workerReady is the worker's readiness: connected, the database
// answering, and the workers it runs alive (as the database sees them).
func workerReady(ctx context.Context, c *trellis.Client, staging bool, drain int) error {
	if c == nil {
		return errors.New("not connected to the database yet")
	}
	if staging {
		ok, err := c.HasLiveStagingWorker(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("the staging worker is not running")
		}
	}
	if drain > 0 {
		ok, err := c.HasLiveDrainWorkers(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("no drain worker is running")
		}
	}
	return nil
}

// oneLine collapses a statement's whitespace for a table or a message.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if max > 0 && len([]rune(s)) > max {
		s = string([]rune(s)[:max-1]) + "…"
	}
	return s
}
