// Package logq puts a queue in front of a slog.Handler, so that logging
// never blocks the engine: records go to a bounded buffer that one goroutine
// writes out, and when the buffer is full they are dropped and counted, and
// a warning says how many.
package logq

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/trellis-pg/trellis/internal/safe"
)

// Queue is the shared state of a queued handler and its derivatives.
type Queue struct {
	ch      chan item
	dropped atomic.Int64
	done    chan struct{}
	once    sync.Once
	mu      sync.RWMutex
	closed  bool
}

type item struct {
	h slog.Handler
	r slog.Record
}

// New starts a queue of size records.
func New(size int) *Queue {
	q := &Queue{ch: make(chan item, size), done: make(chan struct{})}
	go q.run()
	return q
}

func (q *Queue) run() {
	defer close(q.done)
	for it := range q.ch {
		// The handler is the application's: a panic in it loses the
		// record, never the host process.
		_ = safe.Do(func() error { return it.h.Handle(context.Background(), it.r) })
		if n := q.dropped.Swap(0); n > 0 {
			r := slog.NewRecord(it.r.Time, slog.LevelWarn, "log records dropped: the log output fell behind", 0)
			r.AddAttrs(slog.Int64("dropped", n))
			_ = safe.Do(func() error { return it.h.Handle(context.Background(), r) })
		}
	}
}

// Close flushes what is queued and stops the writer. Records logged after
// Close are written synchronously.
func (q *Queue) Close() {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		close(q.ch)
		q.mu.Unlock()
		<-q.done
	})
}

// Dropped is how many records were dropped since the last warning.
func (q *Queue) Dropped() int64 { return q.dropped.Load() }

// Handler wraps h so its records go through q.
func (q *Queue) Handler(h slog.Handler) slog.Handler { return &handler{q: q, h: h} }

type handler struct {
	q *Queue
	h slog.Handler
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	h.q.mu.RLock()
	defer h.q.mu.RUnlock()
	if h.q.closed {
		return h.h.Handle(ctx, r)
	}
	select {
	case h.q.ch <- item{h: h.h, r: r.Clone()}:
	default:
		h.q.dropped.Add(1)
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{q: h.q, h: h.h.WithAttrs(as)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{q: h.q, h: h.h.WithGroup(name)}
}
