package trellis

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/locks"
)

// bus owns the client's listening connection: it LISTENs for the
// notifications that definitions changed and wakes the workers, and it
// holds the drain workers' shared liveness lock. Notifications are only
// wake-ups: the workers also poll, so a lost one costs latency, not data.
// Capture triggers notify nobody (a notifying commit serialises on a
// cluster-wide lock): drain workers find new changes by polling.
type bus struct {
	cfg    *pgx.ConnConfig
	names  capture.Names
	opts   Options
	logger *slog.Logger

	mu      sync.Mutex
	subs    []chan struct{}
	staging chan struct{}
	conn    *pgx.Conn
}

func newBus(cfg *pgx.ConnConfig, names capture.Names, opts Options, logger *slog.Logger) *bus {
	return &bus{cfg: cfg, names: names, opts: opts, logger: logger, staging: make(chan struct{}, 1)}
}

func (b *bus) subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs = append(b.subs, ch)
	b.mu.Unlock()
	return ch
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (b *bus) connect(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, b.cfg)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+ident.Quote(b.names.StagingChannel())); err != nil {
		_ = conn.Close(ctx)
		return err
	}
	if b.opts.DrainWorkers > 0 {
		if err := locks.DrainLive(ctx, conn, b.opts.Schema); err != nil {
			_ = conn.Close(ctx)
			return err
		}
	}
	b.conn = conn
	return nil
}

func (b *bus) run(ctx context.Context) {
	defer func() {
		if b.conn != nil {
			// Release the liveness lock before disconnecting, so the fleet
			// sees this worker gone as soon as Close returns.
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = locks.ReleaseAll(cctx, b.conn)
			_ = b.conn.Close(cctx)
			cancel()
		}
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if b.conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := b.connect(cctx)
			cancel()
			if err != nil {
				b.logger.Warn("listener cannot reconnect; retrying", "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 10*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			b.wakeAll() // anything missed while down
			poke(b.staging)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := b.conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if wctx.Err() != nil {
				// Quiet period: check the connection is still alive.
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				perr := b.conn.Ping(pctx)
				pcancel()
				if perr == nil {
					continue
				}
			}
			b.logger.Warn("listener connection lost; reconnecting", "error", err)
			cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
			_ = b.conn.Close(cctx)
			ccancel()
			b.conn = nil
			continue
		}
		b.wakeAll()
		poke(b.staging)
	}
}

func (b *bus) wakeAll() {
	b.mu.Lock()
	for _, ch := range b.subs {
		poke(ch)
	}
	b.mu.Unlock()
}
