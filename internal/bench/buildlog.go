package bench

import (
	"context"
	"log/slog"
	"sync"
	"time"
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
}

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
			b.mu.Unlock()
		}
		return false
	})
	return nil
}

// WithAttrs implements slog.Handler; the attributes are not needed.
func (b *buildLog) WithAttrs([]slog.Attr) slog.Handler { return b }

// WithGroup implements slog.Handler.
func (b *buildLog) WithGroup(string) slog.Handler { return b }

// lastBuild is the duration of the last build logged as finished, 0 when
// none was.
func (b *buildLog) lastBuild() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}
