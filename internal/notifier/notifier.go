// Package notifier owns a client's listening connection: it LISTENs on the
// instance's channel and wakes its subscribers on every notification.
// Notifications are only wake-ups: the workers also poll, so a lost one
// costs latency, not data. The connection reconnects with backoff, and is
// pinged in quiet periods so a dead one is noticed.
package notifier

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/locks"
)

// Timings of the listening connection.
const (
	connectTimeout = 10 * time.Second
	quietPeriod    = 30 * time.Second // a wait this long without a notification pings
	pingTimeout    = 5 * time.Second
	releaseTimeout = 5 * time.Second
)

// Notifier is the listening connection and its subscribers. Create it with
// New, call Connect once, then Run on a goroutine.
type Notifier struct {
	cfg       *pgx.ConnConfig
	channel   string
	onConnect func(ctx context.Context, conn *pgx.Conn) error
	logger    *slog.Logger

	mu   sync.Mutex
	subs []chan struct{}
	conn *pgx.Conn // owned by Run once it started
}

// New returns a notifier that LISTENs on channel over connections made
// from cfg. onConnect, if non-nil, runs on every new connection after the
// LISTEN: a session-level advisory lock it takes lives as long as the
// connection, and is released before the connection closes.
func New(cfg *pgx.ConnConfig, channel string, onConnect func(ctx context.Context, conn *pgx.Conn) error, logger *slog.Logger) *Notifier {
	return &Notifier{cfg: cfg, channel: channel, onConnect: onConnect, logger: logger}
}

// Subscribe returns a channel that receives a wake-up on every
// notification and after every reconnect (anything may have been missed).
// Wake-ups do not queue: one pending wake-up stands for any number.
func (n *Notifier) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	n.subs = append(n.subs, ch)
	n.mu.Unlock()
	return ch
}

// Connect opens the listening connection, so a client's start fails when
// it cannot listen.
func (n *Notifier) Connect(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, n.cfg)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+ident.Quote(n.channel)); err != nil {
		_ = conn.Close(ctx)
		return err
	}
	if n.onConnect != nil {
		if err := n.onConnect(ctx, conn); err != nil {
			_ = conn.Close(ctx)
			return err
		}
	}
	n.conn = conn
	return nil
}

// Run waits for notifications until ctx ends, reconnecting when the
// connection is lost; then it releases the connection's advisory locks
// (so the fleet sees them gone as soon as Run returns) and closes it.
func (n *Notifier) Run(ctx context.Context) {
	defer func() {
		if n.conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			_ = locks.ReleaseAll(cctx, n.conn)
			_ = n.conn.Close(cctx)
			cancel()
			n.conn = nil
		}
	}()
	retry := backoff.Exponential{Min: 100 * time.Millisecond, Max: 10 * time.Second}
	for ctx.Err() == nil {
		if n.conn == nil {
			cctx, cancel := context.WithTimeout(ctx, connectTimeout)
			err := n.Connect(cctx)
			cancel()
			if err != nil {
				n.logger.Warn("listener cannot reconnect; retrying", "error", err)
				backoff.Sleep(ctx, retry.Next())
				continue
			}
			retry.Reset()
			n.wakeAll() // anything missed while down
		}
		wctx, cancel := context.WithTimeout(ctx, quietPeriod)
		_, err := n.conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if wctx.Err() != nil {
				// Quiet period: check the connection is still alive.
				pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
				perr := n.conn.Ping(pctx)
				pcancel()
				if perr == nil {
					continue
				}
			}
			n.logger.Warn("listener connection lost; reconnecting", "error", err)
			cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
			_ = n.conn.Close(cctx)
			ccancel()
			n.conn = nil
			continue
		}
		n.wakeAll()
	}
}

func (n *Notifier) wakeAll() {
	n.mu.Lock()
	for _, ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	n.mu.Unlock()
}
