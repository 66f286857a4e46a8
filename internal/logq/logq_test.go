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
