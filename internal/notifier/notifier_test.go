package notifier

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

func woken(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("no wake-up %s", what)
	}
}

// TestWakesAndReconnects checks that a NOTIFY wakes every subscriber, and
// that after its connection is killed the notifier reconnects, takes its
// connection's lock again, wakes the subscribers (they may have missed
// something) and hears notifications again.
func TestWakesAndReconnects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, db := testsupport.Pool(t)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "notifier under test"

	n := New(cfg, "a channel", func(ctx context.Context, conn *pgx.Conn) error {
		return locks.DrainLive(ctx, conn, "trellis")
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, b := n.Subscribe(), n.Subscribe()
	require.NoError(t, n.Connect(ctx))
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(rctx) }()

	_, err = db.Exec(ctx, `NOTIFY "a channel"`)
	require.NoError(t, err)
	woken(t, a, "on a notification")
	woken(t, b, "on a notification")

	// The kill waits for the backend to exit: the lock it held is gone
	// before the checks below, which are then about the new connection.
	var killed bool
	require.NoError(t, db.QueryRow(ctx,
		"SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity WHERE application_name = 'notifier under test'").Scan(&killed))
	require.True(t, killed)
	woken(t, a, "after the reconnect")
	held, err := locks.Held(ctx, db, locks.DrainKey("trellis"))
	require.NoError(t, err)
	assert.True(t, held, "the reconnected listener does not hold its lock")

	_, err = db.Exec(ctx, `NOTIFY "a channel"`)
	require.NoError(t, err)
	woken(t, b, "on a notification after the reconnect")

	stop()
	<-done
	// Run closes its connection on the way out; the server ends that session,
	// and with it the lock, once it has read the close, so wait for that.
	require.Eventually(t, func() bool {
		held, err := locks.Held(ctx, db, locks.DrainKey("trellis"))
		return err == nil && !held
	}, 10*time.Second, 10*time.Millisecond, "the lock outlived Run")
}
