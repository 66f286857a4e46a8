package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
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
// missing or behind. Every command's error passes through it.
func migrateHint(g *globals, err error) error {
	var done *wrappedError
	if !errors.Is(err, trellis.ErrNotMigrated) || (errors.As(err, &done) && done.hinted) {
		return err
	}
	cmd := "trellis migrate"
	if g.schema != "trellis" {
		cmd += " --schema " + g.schema
	}
	return &wrappedError{msg: message(err) + " (`" + cmd + "` does that)", err: err, hinted: true}
}

// pacing is how the worker retries and watches the database.
type pacing struct {
	retryFirst, retryMax, healthTick time.Duration
}

// defaultPacing is the worker's pacing unless a test sets Env.pacing.
var defaultPacing = pacing{retryFirst: time.Second, retryMax: 30 * time.Second, healthTick: 10 * time.Second}

// pacing is the Env's, or the default.
func (g *globals) pacing() pacing {
	if g.env.pacing != nil {
		return *g.env.pacing
	}
	return defaultPacing
}

func newWorkerCmd(g *globals) *cobra.Command {
	var (
		staging     bool
		drain       int
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run background workers (staging and drain) until interrupted",
		Long: `worker runs Trellis's background work for one instance until it receives
SIGINT or SIGTERM, then stops cleanly and exits 0.

Exactly one process per instance runs the staging worker, which installs
capture and builds targets: pass --staging to that one (it is off by
default, so that any number of sidecars can run drain workers). Any number
may run drain workers (--drain, default 2). Run it as a sidecar next to a
service written in any language.

A sidecar must outlive the database's hiccups: when the database cannot be
reached, the catalog is not migrated yet (trellis migrate), or another
process still holds the staging worker (a rolling deploy), worker logs why
and tries again with backoff (1s doubling to 30s) instead of exiting; once
running, it logs when the database becomes unreachable and when it is back,
while the workers retry on their own.

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
			logger, err := g.logger(slog.LevelInfo)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var client atomic.Pointer[trellis.Client]
			stopMetrics, err := serveMetrics(metricsAddr, logger, func(ctx context.Context) error {
				return workerReady(ctx, client.Load(), staging, drain)
			})
			if err != nil {
				return err
			}
			defer stopMetrics()
			if !staging {
				logger.Info("this process runs no staging worker: exactly one process per instance runs it (trellis worker --staging)")
			}
			c, err := connectRetrying(ctx, g, logger, trellis.Options{Staging: staging, DrainWorkers: drain, Logger: logger})
			if err != nil {
				return err
			}
			if c == nil {
				logger.Info("worker stopped before it started")
				return nil
			}
			client.Store(c)
			logger.Info("worker started", "schema", g.schema, "staging", staging, "drain_workers", drain)
			if !staging {
				if ok, err := c.HasLiveStagingWorker(ctx); err == nil && !ok {
					logger.Warn("no staging worker is running for this instance: new and changed transforms are not built until one runs (trellis worker --staging)")
				}
			}
			watchDatabase(ctx, c, logger, g.pacing().healthTick)
			logger.Info("worker stopping")
			err = c.Close()
			logger.Info("worker stopped")
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&staging, "staging", false, "run the instance's staging worker (exactly one process per instance)")
	f.IntVar(&drain, "drain", 2, "number of drain workers")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, and /healthz and /readyz (e.g. :9187, which binds 127.0.0.1 only; 0.0.0.0:9187 for every interface; port 0 picks a free one); off when empty")
	return cmd
}

// connectRetrying connects the worker's client, retrying with backoff
// while the failure is one time may fix: nil, nil when ctx ended first.
func connectRetrying(ctx context.Context, g *globals, logger *slog.Logger, opts trellis.Options) (*trellis.Client, error) {
	retry := backoff.Exponential{Min: g.pacing().retryFirst, Max: g.pacing().retryMax}
	for {
		c, err := g.connect(ctx, opts)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		var why string
		switch trellis.CodeOf(err) {
		case trellis.CodeUnavailable, trellis.CodeTimeout:
			why = "the database cannot be reached"
		case trellis.CodeNotFound:
			why = "the catalog is not migrated yet (trellis migrate)"
		case trellis.CodeConflict:
			why = "another process runs the staging worker"
		default:
			return nil, err
		}
		wait := retry.Next()
		logger.Warn("cannot start the workers yet: "+why+"; retrying", "error", message(err), "retry_in", wait.String())
		if !backoff.Sleep(ctx, wait) {
			return nil, nil
		}
	}
}

// watchDatabase logs, until ctx ends, when the database stops answering
// and when it answers again; the workers themselves retry on their own.
func watchDatabase(ctx context.Context, c *trellis.Client, logger *slog.Logger, every time.Duration) {
	up := true
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_, err := c.HasLiveDrainWorkers(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && up:
			logger.Warn("the database does not answer; the workers keep retrying", "error", message(err))
			up = false
		case err == nil && !up:
			logger.Info("the database answers again")
			up = true
		}
	}
}

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
