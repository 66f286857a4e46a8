// Package leadership keeps exactly one staging worker per instance: the
// worker runs only while its own connection holds the instance's staging
// lock. If that connection is lost, the lock is gone with it: the worker
// is stopped and the lock taken again on a new connection, so two never
// run at once.
package leadership

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/locks"
)

// Timings of the lock connection.
const (
	pingEvery      = time.Second
	pingTimeout    = 5 * time.Second
	retakeEvery    = 2 * time.Second
	connectTimeout = 10 * time.Second
	releaseTimeout = 5 * time.Second
)

// Elector holds the staging lock of the instance in Schema on a
// connection of its own.
type Elector struct {
	Config *pgx.ConnConfig // for the lock connection
	Schema string          // the catalog schema naming the instance
	Logger *slog.Logger
	// Unreachable, if non-nil, is called when an attempt to take the lock
	// again could not ask the database (the metrics say trellis_up 0).
	Unreachable func()

	conn *pgx.Conn
}

// Acquire connects and takes the lock: false when another session holds
// it. Call it once, before Run.
func (e *Elector) Acquire(ctx context.Context) (bool, error) {
	conn, err := pgx.ConnectConfig(ctx, e.Config)
	if err != nil {
		return false, err
	}
	e.conn = conn // closed by Close, whatever happens
	return locks.TryStaging(ctx, conn, e.Schema)
}

// Run runs work while the lock is held, until ctx ends. When the lock
// connection stops answering, work's context is cancelled and Run waits
// for it to return, then takes the lock again and runs work anew.
func (e *Elector) Run(ctx context.Context, work func(context.Context)) {
	for ctx.Err() == nil {
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); work(wctx) }()
		// Watch the lock connection.
		for backoff.Sleep(wctx, pingEvery) {
			pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
			err := e.conn.Ping(pctx)
			pcancel()
			if err != nil && ctx.Err() == nil {
				e.Logger.Error("the staging worker lost its lock connection; stopping until it holds the lock again", "error", err)
				stop()
			}
		}
		stop()
		<-done
		if ctx.Err() != nil {
			return
		}
		for ctx.Err() == nil {
			ok, err := e.retake(ctx)
			if ok {
				break
			}
			if err != nil && ctx.Err() == nil && e.Unreachable != nil {
				e.Unreachable()
			}
			backoff.Sleep(ctx, retakeEvery)
		}
	}
}

// retake tries to take the lock on a new connection: false with an error
// when the database could not be asked, false alone when another staging
// worker holds the lock.
func (e *Elector) retake(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	_ = e.conn.Close(ctx)
	conn, err := pgx.ConnectConfig(ctx, e.Config)
	if err != nil {
		return false, err
	}
	if ok, err := locks.TryStaging(ctx, conn, e.Schema); err != nil || !ok {
		_ = conn.Close(ctx)
		return false, err
	}
	e.conn = conn
	e.Logger.Info("the staging worker holds its lock again")
	return true, nil
}

// Close releases the lock and closes its connection; call it after Run
// returned. Safe without Acquire and twice.
func (e *Elector) Close() {
	if e.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = locks.ReleaseAll(ctx, e.conn)
	_ = e.conn.Close(ctx)
	e.conn = nil
}
