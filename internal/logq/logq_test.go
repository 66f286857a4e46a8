package logq

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blockingWriter blocks every write until released.
type blockingWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	release chan struct{}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func TestLoggingNeverBlocksAndCountsDrops(t *testing.T) {
	t.Parallel()
	w := &blockingWriter{release: make(chan struct{})}
	q := New(4)
	log := slog.New(q.Handler(slog.NewTextHandler(w, nil))).With("trellis_instance", "db/trellis")

	done := make(chan struct{})
	go func() {
		for i := 0; i < 100; i++ {
			log.Info("message", "i", i)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("logging blocked on a stuck writer")
	}
	close(w.release)
	q.Close()
	out := w.buf.String()
	require.Contains(t, out, "trellis_instance=db/trellis")
	require.Contains(t, out, "log records dropped")
	require.Less(t, strings.Count(out, "msg=message"), 100)

	// After Close, records are written synchronously.
	log.Info("late")
	require.Contains(t, w.buf.String(), "msg=late")
	require.NoError(t, q.Handler(slog.NewTextHandler(w, nil)).Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelInfo, "x", 0)))
}

// panicky is a handler that panics on records with message "boom" and
// keeps the others.
type panicky struct {
	mu   sync.Mutex
	msgs []string
}

func (p *panicky) Enabled(context.Context, slog.Level) bool { return true }
func (p *panicky) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "boom" {
		panic("the application's handler failed")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, r.Message)
	return nil
}
func (p *panicky) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *panicky) WithGroup(string) slog.Handler      { return p }

// A handler (the application's Options.Logger) that panics on a record
// never takes the host process down from the queue's goroutine: the
// record is lost, and the records after it are written.
func TestPanickingHandlerNeverReachesTheHost(t *testing.T) {
	t.Parallel()
	h := &panicky{}
	q := New(8)
	log := slog.New(q.Handler(h))
	log.Info("before")
	log.Info("boom")
	log.Info("after")
	q.Close()
	require.Equal(t, []string{"before", "after"}, h.msgs)
}
