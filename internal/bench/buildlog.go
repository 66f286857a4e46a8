package bench

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/trellis-pg/trellis/internal/backoff"
)

// buildFinishedMsg is the staging worker's log message when a build ends
// and its transform is live; its "duration" attribute is the build's time
// from its start (capture installed, the build's transaction holding its
// locks) to live.
const buildFinishedMsg = "build finished; transform is live"

// buildLog is the slog handler of the benchmarks' Trellis clients: it
// drops every record but keeps the duration of each build the staging
// worker logs as finished, so the backfill benchmark can tell the build
// from the Define call and the capture install before it.
type buildLog struct {
	mu   sync.Mutex
	last time.Duration
	seen chan struct{} // signalled when a build is logged
}

// buildLogWait bounds how long the backfill benchmark waits for the
// staging worker to log a build it has seen live: the worker logs it
// after the transaction that made it live.
const buildLogWait = 10 * time.Second

// Enabled implements slog.Handler: only Info records can be a build's.
func (b *buildLog) Enabled(_ context.Context, l slog.Level) bool { return l == slog.LevelInfo }

// Handle implements slog.Handler.
func (b *buildLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != buildFinishedMsg {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "duration" {
			return true
		}
		if d, err := time.ParseDuration(a.Value.String()); err == nil {
			b.mu.Lock()
			b.last = d
			ch := b.signal()
			b.mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		return false
	})
	return nil
}

// WithAttrs implements slog.Handler; the attributes are not needed.
func (b *buildLog) WithAttrs([]slog.Attr) slog.Handler { return b }

// WithGroup implements slog.Handler.
func (b *buildLog) WithGroup(string) slog.Handler { return b }

// signal is the channel Handle signals; b.mu must be held.
func (b *buildLog) signal() chan struct{} {
	if b.seen == nil {
		b.seen = make(chan struct{}, 1)
	}
	return b.seen
}

// lastBuild is the duration of the last build logged as finished, waiting
// up to buildLogWait for one to be logged; 0 when none was.
func (b *buildLog) lastBuild(ctx context.Context) time.Duration {
	deadline := time.Now().Add(buildLogWait)
	for {
		b.mu.Lock()
		last, ch := b.last, b.signal()
		b.mu.Unlock()
		wait := time.Until(deadline)
		if last > 0 || wait <= 0 || !backoff.Wait(ctx, wait, ch) {
			return last
		}
	}
}
